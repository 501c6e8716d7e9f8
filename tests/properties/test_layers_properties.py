"""Property tests of the layers (issue #18, "Method"): hostile argument values
for every public layer constructor, and hostile shapes, masks and ids for the
calls. Each either works (finite outputs of the documented shape) or raises
`TypeError`/`ValueError` naming the argument; never another exception, never
NaN."""

import math

import numpy as np
import pytest
from hostile_values import (
    NOT_A_BOOL,
    NOT_A_FINITE_NUMBER,
    NOT_A_POSITIVE_INT,
    NOT_A_RATE,
    PROPERTY_SETTINGS,
    assert_names_argument,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from keras import ops

from keras_attn import layers

# A valid set of arguments per constructor; each test replaces one.
VALID = {
    layers.MultiHeadAttention: dict(num_heads=2, key_dim=4),
    layers.TransformerEncoderBlock: dict(num_heads=2, intermediate_dim=8),
    layers.TransformerDecoderBlock: dict(num_heads=2, intermediate_dim=8),
    layers.FeedForward: dict(intermediate_dim=8),
    layers.FastDropout: dict(rate=0.1),
    layers.PositionEmbedding: dict(sequence_length=4),
    layers.SinusoidalPositionEncoding: dict(),
    layers.TokenAndPositionEmbedding: dict(
        vocabulary_size=10, sequence_length=4, embedding_dim=8
    ),
    layers.PaddingMask: dict(),
    layers.SequencePooling: dict(),
    layers.PositionwiseDense: dict(units=4),
    layers.VocabularyProjection: dict(units=4),
    layers.AttentionSettings: dict(),
}
BLOCKS = (layers.TransformerEncoderBlock, layers.TransformerDecoderBlock)

# (layer, argument) pairs by the kind of value the argument takes.
POSITIVE_INTS = [
    (layers.MultiHeadAttention, "num_heads"),
    (layers.MultiHeadAttention, "key_dim"),
    (layers.MultiHeadAttention, "value_dim"),
    (layers.MultiHeadAttention, "output_shape"),
    (layers.MultiHeadAttention, "sliding_window"),
    *[(block, name) for block in BLOCKS for name in ("num_heads", "intermediate_dim")],
    (layers.FeedForward, "intermediate_dim"),
    (layers.PositionEmbedding, "sequence_length"),
    (layers.TokenAndPositionEmbedding, "vocabulary_size"),
    (layers.TokenAndPositionEmbedding, "sequence_length"),
    (layers.TokenAndPositionEmbedding, "embedding_dim"),
    (layers.PositionwiseDense, "units"),
    (layers.VocabularyProjection, "units"),
    (layers.AttentionSettings, "num_key_value_heads"),
]
RATES = [
    (layers.MultiHeadAttention, "dropout"),
    *[(block, "dropout") for block in BLOCKS],
    (layers.AttentionSettings, "dropout"),
    (layers.FeedForward, "dropout"),
    (layers.FastDropout, "rate"),
]
BOOLS = [
    (layers.MultiHeadAttention, "use_bias"),
    (layers.MultiHeadAttention, "use_gate"),
    (layers.MultiHeadAttention, "flash_attention"),
    *[(block, "normalize_first") for block in BLOCKS],
    (layers.AttentionSettings, "flash_attention"),
    (layers.AttentionSettings, "qk_norm"),
    (layers.FeedForward, "use_bias"),
    (layers.TokenAndPositionEmbedding, "scale_by_sqrt_dim"),
    (layers.TokenAndPositionEmbedding, "mask_zero"),
]
POSITIVE_FLOATS = [
    *[(block, "layer_norm_epsilon") for block in BLOCKS],
    (layers.SinusoidalPositionEncoding, "max_wavelength"),
]
SEEDS = [(layers.MultiHeadAttention, "seed"), (layers.FastDropout, "seed")]
CHOICES = [
    (layers.TokenAndPositionEmbedding, "position"),
    (layers.SequencePooling, "pooling"),
]
NON_NEGATIVE_INTS = [(layers.PaddingMask, "pad_id")]


def _ids(pairs):
    return [f"{layer.__name__}-{name}" for layer, name in pairs]


def _construct(layer, name, value):
    """Builds `layer` with `name=value`; returns it, or the error it raised."""
    try:
        return layer(**{**VALID[layer], name: value})
    except Exception as error:  # noqa: BLE001 - the property inspects it.
        assert_names_argument(error, name)
        return None


def _stored(instance, name):
    """The value a constructed layer kept for `name` (Keras's own names)."""
    attribute = {"output_shape": "_output_shape"}.get(name, name)
    return getattr(instance, attribute)


@pytest.mark.parametrize("layer, name", POSITIVE_INTS, ids=_ids(POSITIVE_INTS))
@PROPERTY_SETTINGS
@given(value=NOT_A_POSITIVE_INT)
def test_positive_int_arguments(layer, name, value):
    instance = _construct(layer, name, value)
    if instance is not None:
        # Accepted: only `None` (and, as in Keras, an empty `output_shape`)
        # means "the default".
        default = value is None or (
            name == "output_shape"
            and isinstance(value, list)
            and all(isinstance(size, int) and size > 0 for size in value)
        )
        assert default, f"{layer.__name__}({name}={value!r}) was accepted"


@pytest.mark.parametrize("layer, name", RATES, ids=_ids(RATES))
@PROPERTY_SETTINGS
@given(value=NOT_A_RATE)
def test_rate_arguments(layer, name, value):
    instance = _construct(layer, name, value)
    assert instance is None


@pytest.mark.parametrize("layer, name", BOOLS, ids=_ids(BOOLS))
@PROPERTY_SETTINGS
@given(value=NOT_A_BOOL)
def test_bool_arguments(layer, name, value):
    assert _construct(layer, name, value) is None


@pytest.mark.parametrize("layer, name", POSITIVE_FLOATS, ids=_ids(POSITIVE_FLOATS))
@PROPERTY_SETTINGS
@given(value=st.one_of(NOT_A_FINITE_NUMBER, st.floats(max_value=0.0)))
def test_positive_float_arguments(layer, name, value):
    assert _construct(layer, name, value) is None


@pytest.mark.parametrize("layer, name", SEEDS, ids=_ids(SEEDS))
@PROPERTY_SETTINGS
@given(
    value=st.one_of(
        NOT_A_FINITE_NUMBER.filter(lambda v: v is not None),
        st.integers(max_value=-1),
        st.integers(min_value=2**32),
        st.just(1.5),
    )
)
def test_seed_arguments(layer, name, value):
    assert _construct(layer, name, value) is None


@pytest.mark.parametrize("layer, name", CHOICES, ids=_ids(CHOICES))
@PROPERTY_SETTINGS
@given(value=st.one_of(NOT_A_FINITE_NUMBER, st.text(max_size=4), st.just("CLS")))
def test_choice_arguments(layer, name, value):
    # A drawn string may be a valid choice ("cls"): that one must work.
    valid = {"position": ("sinusoidal", "learned"), "pooling": ("cls", "mean")}
    if value in valid[name]:
        assert _construct(layer, name, value) is not None
        return
    assert _construct(layer, name, value) is None


@pytest.mark.parametrize("layer, name", NON_NEGATIVE_INTS, ids=_ids(NON_NEGATIVE_INTS))
@PROPERTY_SETTINGS
@given(value=NOT_A_POSITIVE_INT.filter(lambda v: v != 0 or isinstance(v, float)))
def test_non_negative_int_arguments(layer, name, value):
    instance = _construct(layer, name, value)
    assert instance is None or _stored(instance, name) == 0


def _call(function, argument_names):
    """Calls `function()`; returns its outputs, or `None` if it raised a
    `TypeError`/`ValueError` naming one of `argument_names`."""
    try:
        return function()
    except Exception as error:  # noqa: BLE001 - the property inspects it.
        assert isinstance(error, (TypeError, ValueError)), repr(error)
        assert any(name in str(error) for name in argument_names), str(error)
        return None


def _assert_finite(outputs, shape):
    outputs = ops.convert_to_numpy(outputs)
    assert outputs.shape == shape
    assert np.isfinite(outputs).all()


# Calls run eagerly, and each new shape costs compilations on JAX: few
# sizes (0 and 2 or 3), fewer examples.
CALL_SETTINGS = settings(PROPERTY_SETTINGS, max_examples=12)
SIZES = st.sampled_from([0, 3])
ATTENTION = layers.MultiHeadAttention(num_heads=2, key_dim=4)
ENCODER = layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=8)
MASK_VALUES = st.sampled_from([0, 1, 0.5, 2, -1, True, False, math.nan])


@st.composite
def mask_draws(draw, shape):
    values = draw(st.lists(MASK_VALUES, min_size=1, max_size=3))
    dtype = draw(st.sampled_from(["bool", "int32", "float32"]))
    size = int(np.prod(shape))
    mask = np.resize(np.array(values, dtype="float64"), size).reshape(shape)
    if dtype == "bool":
        return mask.astype(bool)  # Any value, as a boolean, is fine.
    if dtype == "int32":
        mask = np.nan_to_num(mask)
    return mask.astype(dtype)


@CALL_SETTINGS
@given(
    data=st.data(),
    batch=st.sampled_from([0, 2]),
    query_length=SIZES,
    key_length=SIZES,
    mask_name=st.sampled_from(["query_mask", "value_mask", "attention_mask", None]),
    causal=st.booleans(),
)
def test_attention_calls(data, batch, query_length, key_length, mask_name, causal):
    query = np.ones((batch, query_length, 8), "float32")
    value = np.ones((batch, key_length, 8), "float32")
    kwargs = {"use_causal_mask": causal}
    if mask_name is not None:
        shape = {
            "query_mask": (batch, query_length),
            "value_mask": (batch, key_length),
            "attention_mask": (batch, query_length, key_length),
        }[mask_name]
        kwargs[mask_name] = data.draw(mask_draws(shape))
    outputs = _call(lambda: ATTENTION(query, value, **kwargs), [mask_name or ""])
    if outputs is not None:
        _assert_finite(outputs, (batch, query_length, 8))


@CALL_SETTINGS
@given(data=st.data(), batch=st.sampled_from([0, 2]), length=SIZES)
def test_encoder_block_calls(data, batch, length):
    inputs = np.ones((batch, length, 8), "float32")
    mask = data.draw(mask_draws((batch, length)))
    outputs = _call(lambda: ENCODER(inputs, padding_mask=mask), ["padding_mask"])
    if outputs is not None:
        _assert_finite(outputs, (batch, length, 8))


EMBEDDING = layers.TokenAndPositionEmbedding(
    vocabulary_size=10, sequence_length=4, embedding_dim=8, position="learned"
)


@CALL_SETTINGS
@given(
    ids=st.lists(st.integers(-20, 30), min_size=3, max_size=3),
    dtype=st.sampled_from(["int32", "int64", "bool", "float32"]),
)
def test_embedding_calls(ids, dtype):
    tokens = np.array([ids], dtype=dtype).reshape(1, len(ids))
    outputs = _call(lambda: EMBEDDING(tokens), ["inputs"])
    if outputs is None:
        assert dtype == "bool"
    else:
        _assert_finite(outputs, (1, len(ids), 8))
