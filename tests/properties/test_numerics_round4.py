"""Round 4 of the robustness pass (issue #49), numerics and the cache index.

- Numeric arguments that reach float32 math (the wavelength base and the
  scaling factor of sinusoidal and rotary positions, every normalization
  epsilon) are bounded to what float32 carries there: every accepted value
  gives finite outputs, at positions up to `2**24`, on every backend;
  every other value is a `ValueError` naming the argument (`1e-45`,
  `1e-300` and `1e300` gave NaN on JAX and TensorFlow, `epsilon=0` NaN for
  an all-zero position everywhere).
- `cache_index` (and keras-hub's update indices): a Python or NumPy integer
  outside `[0, max_length - new_length]` is refused at every entry; a
  tensor index is clipped into that range, and the step then equals the
  step at the clipped index, on every backend, eager, in a `while_loop`
  or compiled.
- `activation="glu"` and `rotary_dim` (or `rotary_scaling_factor`) without
  `rotary_max_wavelength` are refused at the constructor.
"""

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from keras import ops

from keras_attn import validation
from keras_attn.layers import (
    AttentionSettings,
    FeedForward,
    GroupedQueryAttention,
    LayerNorm,
    MultiHeadAttention,
    RMSNormalization,
    RotaryEmbedding,
    SinusoidalPositionEncoding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
    apply_rotary,
)
from keras_attn.layers.positions.position_schemes import (
    RotaryPositions,
    SinusoidalPositions,
)
from keras_attn.models import Transformer, TransformerLM

BACKEND = keras.backend.backend()
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)

TINY = validation.FLOAT32_SMALLEST_NORMAL  # 2**-126
FLOAT32_MAX = validation.FLOAT32_MAX
WAVELENGTHS = validation.MAX_WAVELENGTH_RANGE  # (1, 2**60)
SCALES = validation.SCALING_FACTOR_RANGE  # (2**-32, 2**32)
EPSILONS = (TINY, FLOAT32_MAX)
LAST_POSITION = validation.MAX_POSITION - 1

# Around float32's limits, the bounds, and the values of issue #49.
EDGES = [
    5e-324, 1e-300, 1e-45, 1e-39, 2.0**-127, TINY, 1e-30, 2.0**-33, 2.0**-32,
    1e-9, 0.5, 1.0, 1e4, 2.0**32, 2.0**33, 2.0**60, 2.0**61, 1e30,
    FLOAT32_MAX, 3.5e38, 1e300, 1.7e308,
]  # fmt: skip
POSITIVE = st.one_of(
    st.sampled_from(EDGES),
    st.floats(min_value=5e-324, max_value=1.7e308),
)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def with_zero_position(x):
    """`x` with its first position all zeros: a norm's hardest input."""
    x = np.array(x)
    x[:, 0] = 0.0
    return x


def finite(*tensors):
    return all(
        np.isfinite(ops.convert_to_numpy(ops.cast(t, "float32"))).all() for t in tensors
    )


# --- Every numeric argument: finite when accepted, named when refused --------

HEADS = normal(1, 3, 2, 8)  # (batch, length, heads, head_dim)
SEQUENCE = with_zero_position(normal(1, 3, 8))  # (batch, length, features)


def rotary_embedding(**arguments):
    outputs = []
    for rope_type in ("linear", "dynamic", "yarn"):
        layer = RotaryEmbedding(rope_type=rope_type, **arguments)
        outputs += [layer(HEADS), layer(HEADS, start_index=LAST_POSITION - 2)]
    return outputs


def attention(**arguments):
    layer = MultiHeadAttention(num_heads=2, key_dim=4, **arguments)
    outputs = layer(SEQUENCE, SEQUENCE)
    keys, values = layer.compute_key_value(SEQUENCE, start_index=LAST_POSITION - 2)
    return [outputs, keys, values]


def rotary_scheme(**arguments):
    scheme = RotaryPositions(2, **arguments)
    return attention(**scheme.block_arguments())


def sinusoids(layer):
    return [layer(SEQUENCE), layer(SEQUENCE, start_index=LAST_POSITION - 2)]


# (case id, argument name, (low, high), run(value) -> output tensors)
NUMERIC_ARGUMENTS = [
    (
        "RotaryEmbedding-max_wavelength",
        "max_wavelength",
        WAVELENGTHS,
        lambda v: rotary_embedding(max_wavelength=v, scaling_factor=4.0),
    ),
    (
        "RotaryEmbedding-scaling_factor",
        "scaling_factor",
        SCALES,
        lambda v: rotary_embedding(scaling_factor=v),
    ),
    (
        "apply_rotary-max_wavelength",
        "max_wavelength",
        WAVELENGTHS,
        lambda v: [apply_rotary(HEADS, [0, 1, LAST_POSITION], max_wavelength=v)],
    ),
    (
        "apply_rotary-scaling_factor",
        "scaling_factor",
        SCALES,
        lambda v: [apply_rotary(HEADS, [0, 1, LAST_POSITION], scaling_factor=v)],
    ),
    (
        "MultiHeadAttention-rotary_max_wavelength",
        "rotary_max_wavelength",
        WAVELENGTHS,
        lambda v: attention(rotary_max_wavelength=v),
    ),
    (
        "MultiHeadAttention-rotary_scaling_factor",
        "rotary_scaling_factor",
        SCALES,
        lambda v: attention(rotary_max_wavelength=1e4, rotary_scaling_factor=v),
    ),
    (
        "MultiHeadAttention-qk_norm_epsilon",
        "qk_norm_epsilon",
        EPSILONS,
        lambda v: attention(qk_norm=True, qk_norm_epsilon=v),
    ),
    (
        "RotaryPositions-max_wavelength",
        "max_wavelength",
        WAVELENGTHS,
        lambda v: rotary_scheme(max_wavelength=v),
    ),
    (
        "RotaryPositions-scaling_factor",
        "scaling_factor",
        SCALES,
        lambda v: rotary_scheme(scaling_factor=v),
    ),
    (
        "SinusoidalPositionEncoding-max_wavelength",
        "max_wavelength",
        WAVELENGTHS,
        lambda v: sinusoids(SinusoidalPositionEncoding(max_wavelength=v)),
    ),
    (
        "SinusoidalPositions-max_wavelength",
        "max_wavelength",
        WAVELENGTHS,
        lambda v: sinusoids(SinusoidalPositions(max_wavelength=v).position_layer()),
    ),
    (
        "RMSNormalization-epsilon",
        "epsilon",
        EPSILONS,
        lambda v: [RMSNormalization(epsilon=v)(SEQUENCE)],
    ),
    (
        "LayerNorm-epsilon",
        "epsilon",
        EPSILONS,
        lambda v: [LayerNorm(epsilon=v)(SEQUENCE)],
    ),
    (
        "TransformerEncoderBlock-layer_norm_epsilon",
        "layer_norm_epsilon",
        EPSILONS,
        lambda v: [
            TransformerEncoderBlock(
                2, 8, layer_norm_epsilon=v, attention=AttentionSettings(qk_norm=True)
            )(SEQUENCE)
        ],
    ),
]
CASE_IDS = [case[0] for case in NUMERIC_ARGUMENTS]


def check_value(name, bounds, run, value):
    low, high = bounds
    if low <= value <= high:
        outputs = run(value)
        assert outputs and finite(*outputs), f"{name}={value!r} gave non-finite outputs"
        return
    with pytest.raises(ValueError) as info:
        run(value)
    assert f"Received: {name}={value!r}" in str(info.value), str(info.value)


@pytest.mark.parametrize("case, name, bounds, run", NUMERIC_ARGUMENTS, ids=CASE_IDS)
@SETTINGS
@given(value=POSITIVE)
def test_every_positive_value_is_finite_or_refused_by_name(
    case, name, bounds, run, value
):
    check_value(name, bounds, run, value)


def next_float32(value, toward):
    """The float32 number next to `value` toward `toward`, as a Python float."""
    with np.errstate(over="ignore"):
        return float(np.nextafter(np.float32(value), np.float32(toward)))


@pytest.mark.parametrize("case, name, bounds, run", NUMERIC_ARGUMENTS, ids=CASE_IDS)
def test_the_bounds_are_exact(case, name, bounds, run):
    """The bounds themselves give finite outputs; the next float32-distinct
    numbers beyond them (and 0, and the values of issue #49) are refused."""
    low, high = bounds
    for value in (low, high):
        check_value(name, bounds, run, value)
    for value in (
        next_float32(low, 0.0),
        next_float32(high, np.inf),  # Past float32's largest: infinity.
        0.0,
        -1.0,
        1e-45,
        1e-300,
        1e300,
    ):
        with pytest.raises(ValueError, match=f"Received: {name}="):
            run(value)


# --- A refusal table: one row per argument and entry point --------------------

MODEL = dict(
    vocabulary_size=20, num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=16
)
RANGE = r"must be a finite number in \["

REFUSALS = [
    # Class 8: values that passed the checks and gave NaN.
    (
        lambda: MultiHeadAttention(
            2, 4, rotary_max_wavelength=1e4, rotary_scaling_factor=1e-45
        ),
        ValueError,
        rf"`rotary_scaling_factor` {RANGE}.*Received: rotary_scaling_factor=1e-45",
    ),
    (
        lambda: MultiHeadAttention(2, 4, rotary_max_wavelength=1e-300),
        ValueError,
        rf"`rotary_max_wavelength` {RANGE}.*Received: rotary_max_wavelength=1e-300",
    ),
    (
        lambda: MultiHeadAttention(2, 4, rotary_max_wavelength=1e300),
        ValueError,
        r"Received: rotary_max_wavelength=1e\+300",
    ),
    (
        lambda: MultiHeadAttention(2, 4, qk_norm=True, qk_norm_epsilon=0.0),
        ValueError,
        rf"`qk_norm_epsilon` {RANGE}.*normal float32.*Received: qk_norm_epsilon=0.0",
    ),
    (
        lambda: AttentionSettings(rotary_max_wavelength=0.5),
        ValueError,
        r"Received: rotary_max_wavelength=0.5",
    ),
    (
        lambda: AttentionSettings(
            rotary_max_wavelength=1e4, rotary_scaling_factor=1e300
        ),
        ValueError,
        r"Received: rotary_scaling_factor=1e\+300",
    ),  # fmt: skip
    (
        lambda: TransformerEncoderBlock(2, 8, layer_norm_epsilon=1e-39),
        ValueError,
        r"Received: layer_norm_epsilon=1e-39",
    ),
    (
        lambda: GroupedQueryAttention(2, 4, 1, rotary_max_wavelength=1e-45),
        ValueError,
        r"Received: rotary_max_wavelength=1e-45",
    ),
    (
        lambda: RotaryEmbedding(scaling_factor=1e300),
        ValueError,
        r"Received: scaling_factor=1e\+300",
    ),
    (
        lambda: RotaryEmbedding(max_wavelength=1e-300),
        ValueError,
        r"Received: max_wavelength=1e-300",
    ),
    (
        lambda: apply_rotary(HEADS, [0, 1, 2], scaling_factor=1e-45),
        ValueError,
        r"Received: scaling_factor=1e-45",
    ),
    (
        lambda: RotaryPositions(2, scaling_factor=1e40),
        ValueError,
        r"Received: scaling_factor=1e\+40",
    ),
    (
        lambda: SinusoidalPositionEncoding(max_wavelength=1e300),
        ValueError,
        r"Received: max_wavelength=1e\+300",
    ),
    (
        lambda: RMSNormalization(epsilon=0.0),
        ValueError,
        r"Received: epsilon=0.0",
    ),
    (lambda: LayerNorm(epsilon=0.0), ValueError, r"Received: epsilon=0.0"),
    (
        lambda: TransformerLM(**MODEL, layer_norm_epsilon=1e-45),
        ValueError,
        r"Received: layer_norm_epsilon=1e-45",
    ),
    (
        lambda: Transformer(**MODEL, layer_norm_epsilon=1e300),
        ValueError,
        r"Received: layer_norm_epsilon=1e\+300",
    ),
    # Class 12: arguments that built a model that could not run, or were
    # ignored and kept in the config.
    (
        lambda: FeedForward(16, activation="glu"),
        ValueError,
        r"`activation='glu'` splits.*'swiglu'.*Received: activation='glu'",
    ),
    (
        lambda: FeedForward(16, activation=keras.activations.glu),
        ValueError,
        r"'swiglu'.*Received: activation=<function glu",
    ),
    (
        lambda: TransformerDecoderBlock(2, 8, activation="glu"),
        ValueError,
        r"Received: activation='glu'",
    ),
    (
        lambda: TransformerLM(**MODEL, activation="glu"),
        ValueError,
        r"`activation='glu'`.*Received: activation='glu'",
    ),
    (
        lambda: MultiHeadAttention(2, 4, rotary_dim=2),
        ValueError,
        r"`rotary_dim` shapes rotary positions.*`rotary_max_wavelength`.*"
        r"Received: rotary_dim=2, rotary_max_wavelength=None",
    ),
    (
        lambda: TransformerEncoderBlock(2, 8, attention={"rotary_dim": 2}),
        ValueError,
        r"Received: rotary_dim=2, rotary_max_wavelength=None",
    ),
    (
        lambda: AttentionSettings(rotary_scaling_factor=2.0),
        ValueError,
        r"`rotary_scaling_factor` shapes.*Received: rotary_scaling_factor=2.0, "
        r"rotary_max_wavelength=None",
    ),
    (
        lambda: GroupedQueryAttention(2, 4, 1, rotary_dim=2, rotary_scaling_factor=4),
        ValueError,
        r"`rotary_dim` and `rotary_scaling_factor` shape rotary.*Received: rotary_dim=2, "
        r"rotary_scaling_factor=4.0, rotary_max_wavelength=None",
    ),
]


@pytest.mark.parametrize(
    "make, error, match", REFUSALS, ids=[f"row{i}" for i in range(len(REFUSALS))]
)
def test_refusal_table(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_rotary_dim_with_rotary_positions_is_still_taken():
    layer = MultiHeadAttention(2, 4, rotary_max_wavelength=1e4, rotary_dim=2)
    assert layer.get_config()["rotary_dim"] == 2
    assert finite(layer(SEQUENCE, SEQUENCE))


# --- cache_index --------------------------------------------------------------

MAX_LENGTH, NEW, DIM = 6, 2, 8  # cache slots, new positions, features
LAST = MAX_LENGTH - NEW


@pytest.fixture(scope="module")
def decoding():
    """Built blocks and models with a cache of `MAX_LENGTH` slots."""
    keras.utils.set_random_seed(0)
    block = TransformerDecoderBlock(
        2, 16, attention=AttentionSettings(rotary_max_wavelength=1e4)
    )
    # Built, not called: an eager call compiles every op again on JAX.
    block.build((1, 3, DIM))
    cross_block = TransformerDecoderBlock(2, 16)
    cross_block.build((1, 3, DIM), (1, 4, DIM))
    lm = TransformerLM(**MODEL, max_sequence_length=MAX_LENGTH, position="rotary")
    transformer = Transformer(**MODEL, max_sequence_length=MAX_LENGTH)
    source = np.array([[3, 4, 5, 6]], "int32")
    encoder_output, encoder_padding_mask = transformer.encode(source)
    return dict(
        block=block,
        cross_block=cross_block,
        lm=lm,
        transformer=transformer,
        transformer_cache=transformer.initial_cache(
            encoder_output, encoder_padding_mask, MAX_LENGTH
        ),
        encoder_sequence=normal(1, 4, DIM, seed=3),
    )


def zeros_cache(block, stacked=False):
    # (batch, max_length, kv_heads, head_dim), keras-hub's stacked on axis 1
    slots = np.zeros((1, MAX_LENGTH, 2, 4), "float32")
    return np.stack([slots, slots], axis=1) if stacked else (slots, slots)


def entry(decoding, name):
    """`(argument name, step(index) -> tensors)` of one cached entry point."""
    x = normal(1, NEW, DIM, seed=1)
    tokens = np.array([[7, 8]], "int32")
    block, cross_block = decoding["block"], decoding["cross_block"]
    if name == "call_cached":
        return "cache_index", lambda i: block.call_cached(x, zeros_cache(block), i)
    if name == "keras_hub_self":
        return "self_attention_cache_update_index", lambda i: block(
            x,
            self_attention_cache=zeros_cache(block, stacked=True),
            self_attention_cache_update_index=i,
        )
    if name == "keras_hub_cross":
        return "cross_attention_cache_update_index", lambda i: cross_block(
            x,
            decoding["encoder_sequence"],
            self_attention_cache=zeros_cache(cross_block, stacked=True),
            self_attention_cache_update_index=0,
            cross_attention_cache=np.zeros((1, 2, 5, 2, 4), "float32"),
            cross_attention_cache_update_index=i,
        )
    if name == "TransformerLM.decode_step":
        lm = decoding["lm"]
        return "cache_index", lambda i: lm.decode_step(
            tokens, lm.initial_cache(1, MAX_LENGTH), i
        )
    transformer = decoding["transformer"]
    return "cache_index", lambda i: transformer.decode_step(
        tokens, decoding["transformer_cache"], i
    )


ENTRIES = [
    "call_cached",
    "keras_hub_self",
    "keras_hub_cross",
    "TransformerLM.decode_step",
    "Transformer.decode_step",
]


# Thirty cases of a check made before any computation: side by side, each
# backend runs its share (`split_cases`), every entry point among them.
@pytest.mark.split_cases
@pytest.mark.parametrize("entry_name", ENTRIES)
@pytest.mark.parametrize(
    "index", [-1, LAST + 1, MAX_LENGTH, 10**9, np.int64(-1), np.array(LAST + 1)]
)
def test_an_integer_index_out_of_range_is_refused(decoding, entry_name, index):
    if entry_name.startswith("keras_hub") and isinstance(
        index, np.generic | np.ndarray
    ):
        # Keras's `__call__` turns NumPy arguments into tensors, which are
        # clipped (`test_a_tensor_index_is_clipped_the_same_on_every_backend`).
        index = int(index)
    name, step = entry(decoding, entry_name)
    # The cross-attention cache has 5 slots for 4 source positions.
    last = 1 if entry_name == "keras_hub_cross" else LAST
    expected = rf"`{name}` must be an integer in \[0, {last}\].*Received: {name}="
    with pytest.raises(ValueError, match=expected):
        step(index)


# Five entry points: side by side, each backend runs its share
# (`split_cases`); the tensor indices below run on every backend.
@pytest.mark.split_cases
@pytest.mark.parametrize("entry_name", ENTRIES)
def test_the_first_and_last_slots_are_taken(decoding, entry_name):
    _, step = entry(decoding, entry_name)
    last = 1 if entry_name == "keras_hub_cross" else LAST
    for index in (0, last):
        assert finite(*keras.tree.flatten(step(index)))


@pytest.mark.parametrize(
    "index, error, match",
    [
        (1.0, TypeError, r"Received: cache_index=1.0 of type float"),
        (True, TypeError, r"Received: cache_index=True of type bool"),
        ("1", TypeError, r"Received: cache_index='1' of type str"),
        (np.float32(1), TypeError, r"Received: cache_index with dtype=float32"),
        (np.array([1]), ValueError, r"Received: cache_index.shape=\(1,\)"),
    ],
)
def test_an_index_that_is_not_an_integer_is_refused(decoding, index, error, match):
    _, step = entry(decoding, "call_cached")
    with pytest.raises(error, match=match):
        step(index)


def test_new_positions_longer_than_the_cache_are_refused(decoding):
    block = decoding["block"]
    x = normal(1, MAX_LENGTH + 1, DIM)
    with pytest.raises(ValueError, match=r"7 new positions do not fit.*max_length=6"):
        block.call_cached(x, zeros_cache(block), 0)


def compiled(function):
    """`function` compiled by the backend (nothing is compiled on torch)."""
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(function)
    pytest.skip("Keras's torch backend runs eagerly: no compiled function")


def in_while_loop(step, index, example):
    """`step(index)` run in the body of a one-iteration `keras.ops.while_loop`
    (traced on JAX, eager on torch and eager TensorFlow)."""
    flat_example = keras.tree.flatten(example)

    def cond(count, index, *outputs):
        return count < 1

    def body(count, index, *outputs):
        return (count + 1, index, *keras.tree.flatten(step(index)))

    loop_vars = (
        ops.convert_to_tensor(0, "int32"),
        index,
        *[ops.zeros_like(t) for t in flat_example],
    )
    _, _, *outputs = ops.while_loop(cond, body, loop_vars)
    return outputs


@pytest.mark.parametrize("mode", ["eager", "while_loop", "compiled"])
@pytest.mark.parametrize("entry_name", ["call_cached", "TransformerLM.decode_step"])
@pytest.mark.parametrize("index", [-3, LAST + 1, 100])
def test_a_tensor_index_is_clipped_the_same_on_every_backend(
    decoding, mode, entry_name, index
):
    """A tensor index out of range: the step at the clipped index, the new
    keys written at the clipped slots and nowhere else."""
    _, step = entry(decoding, entry_name)
    clipped = min(max(index, 0), LAST)
    expected = keras.tree.flatten(step(clipped))
    tensor_index = ops.convert_to_tensor(index, "int32")
    if mode == "eager":
        actual = keras.tree.flatten(step(tensor_index))
    elif mode == "while_loop":
        actual = in_while_loop(step, tensor_index, expected)
    else:
        actual = keras.tree.flatten(compiled(step)(tensor_index))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(
            ops.convert_to_numpy(got), ops.convert_to_numpy(want), rtol=1e-5, atol=1e-6
        )
    keys = ops.convert_to_numpy(actual[1])  # (batch, max_length, heads, dim)
    written = np.any(keys != 0, axis=(0, 2, 3))
    np.testing.assert_array_equal(
        written, [clipped <= slot < clipped + NEW for slot in range(MAX_LENGTH)]
    )
