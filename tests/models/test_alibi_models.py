"""`position="alibi"`: ALiBi as a position scheme of the zoo models (#38).

ALiBi is one registered `PositionScheme` (`keras_attn.layers.positions.position_schemes`):
the models, blocks and attention layers are those of every other scheme.
References: the paper's equation and reference code in NumPy (the bias each
block receives), the same model's full pass (cached decoding, with and
without the generation loop), its `.keras` file, and the sinusoidal model
(training on the copy task of `zoo_cases`).
"""

import math

import keras
import numpy as np
import pytest
from zoo_cases import copy_task, decode_in_steps, make_inputs, make_model, to_numpy

from keras_attn.generation import generate_lm, generate_seq2seq
from keras_attn.layers import (
    TokenAndPositionEmbedding,
    position_schemes,
)
from keras_attn.layers.positions.position_schemes import AlibiPositions


def paper_slopes(num_heads):
    """`get_slopes` of the paper's reference code (ofirpress/attention_with_
    linear_biases): a geometric sequence from `2 ** (-8 / n)`; for a head
    count that is no power of two, the closest power's slopes, then every
    other slope of twice that power."""

    def power_of_two_slopes(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two_slopes(num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    return (
        power_of_two_slopes(closest)
        + paper_slopes(2 * closest)[0::2][: num_heads - closest]
    )


def paper_bias(
    num_heads, query_length, key_length, query_offset=0, bidirectional=False
):
    """`-m_h * (i - j)` (section 3), `|i - j|` for an encoder; query `i` at
    `query_offset + i`. `(1, heads, query, key)`."""
    i = np.arange(query_length)[:, None] + query_offset
    j = np.arange(key_length)[None, :]
    distance = np.abs(i - j) if bidirectional else i - j
    slopes = np.array(paper_slopes(num_heads))
    return -slopes[None, :, None, None] * distance[None, None]


# --- The scheme ----------------------------------------------------------------


def test_alibi_is_a_registered_scheme_that_only_biases_scores():
    assert "alibi" in position_schemes.names()
    scheme = position_schemes.get("alibi", sequence_length=64, num_heads=3)
    assert scheme == AlibiPositions(num_heads=3)
    assert scheme.biases_attention_scores and not scheme.adds_to_embeddings
    assert scheme.block_arguments() == {}  # no rotation
    assert scheme.max_length is None  # no length limit: it extrapolates
    assert scheme.position_layer() is None
    assert scheme.check_embedding_dim(9, "hidden_dim") == 9  # any dimension


def test_slopes_are_the_papers_for_eight_heads():
    # Section 3: "for a model with 8 heads, the slopes are 1/2^1, ..., 1/2^8".
    bias = to_numpy(AlibiPositions(8).attention_bias(2, 2))
    np.testing.assert_allclose(-bias[0, :, 1, 0], 2.0 ** -np.arange(1, 9), rtol=1e-6)


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 6, 8, 12])
@pytest.mark.parametrize(
    "query_length, key_length, query_offset", [(5, 5, 0), (1, 9, 6), (3, 8, 2)]
)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_the_scheme_bias_is_the_papers(
    num_heads, query_length, key_length, query_offset, bidirectional
):
    bias = AlibiPositions(num_heads).attention_bias(
        query_length, key_length, query_offset=query_offset, bidirectional=bidirectional
    )
    np.testing.assert_allclose(
        to_numpy(bias),
        paper_bias(num_heads, query_length, key_length, query_offset, bidirectional),
        rtol=1e-6,
        atol=1e-7,
    )


def test_bad_head_counts_are_refused_by_name():
    with pytest.raises(ValueError, match="num_heads=0"):
        AlibiPositions(0)
    with pytest.raises(TypeError, match="num_heads='2'"):
        AlibiPositions("2")
    with pytest.raises(ValueError, match="alibi_bias_max=-1"):
        AlibiPositions(2, alibi_bias_max=-1)
    # One slope per head: the scheme is not made without them.
    with pytest.raises(TypeError, match="num_heads=None"):
        position_schemes.get("alibi", sequence_length=6)


@pytest.mark.parametrize("kind", ["transformer", "lm", "classifier"])
def test_the_model_hands_its_scheme_to_its_embeddings(kind):
    # Built once, with the model's heads; never again from the name.
    model = make_model(kind, position="alibi")
    embeddings = [
        getattr(model, name)
        for name in ("token_embedding", "encoder_embedding", "decoder_embedding")
        if hasattr(model, name)
    ]
    assert embeddings
    assert all(layer.position_scheme is model.position_scheme for layer in embeddings)


def test_the_embedding_adds_no_positions():
    layer = TokenAndPositionEmbedding(11, 6, 8, position=AlibiPositions(2))
    assert layer.position_encoding is None
    ids = np.array([[3, 1, 4], [4, 1, 3]], "int32")
    outputs = to_numpy(layer(ids))
    # The same token at positions 0 and 2 gets the same vector.
    np.testing.assert_array_equal(outputs[0, 0], outputs[1, 2])


# --- What the models' blocks receive ---------------------------------------------


# Three heads: the slopes of a head count that is not a power of two.
THREE_HEADS = dict(hidden_dim=24, num_heads=3, intermediate_dim=48)
# Each stack's blocks, and whether its queries see later keys.
STACKS = {
    "transformer": {"encoder_block": True, "decoder_block": False},
    "lm": {"decoder_block": False},
    "classifier": {"encoder_block": True},
}


# The cases of the tests below that take a `kind` are dealt out among the
# backends run side by side (`split_cases`: the i-th case on the i-th of
# jax, tensorflow, torch): the scheme's bias is checked against the paper
# on every backend above; here, what each model does with it.
@pytest.mark.split_cases
@pytest.mark.parametrize("kind", sorted(STACKS))
def test_every_block_receives_the_papers_bias(received_biases, kind):
    model = make_model(kind, position="alibi", **THREE_HEADS)
    assert model.position_scheme == AlibiPositions(3)
    inputs = make_inputs(kind, batch_size=2)
    model(inputs)
    lengths = (
        {
            "encoder_block": inputs["encoder_tokens"].shape[1],
            "decoder_block": inputs["decoder_tokens"].shape[1],
        }
        if kind == "transformer"
        else {name: inputs.shape[1] for name in STACKS[kind]}
    )
    names = [name for name, _ in received_biases]
    assert sorted(names) == sorted(
        f"{stack}_{i}" for stack in STACKS[kind] for i in range(model.num_layers)
    )
    for name, bias in received_biases:
        stack = name.rsplit("_", 1)[0]
        length = lengths[stack]
        expected = paper_bias(3, length, length, bidirectional=STACKS[kind][stack])
        np.testing.assert_allclose(to_numpy(bias), expected, rtol=1e-6, err_msg=name)


def test_a_cached_step_receives_the_bias_at_its_cache_index(received_biases):
    model = make_model("lm", position="alibi", **THREE_HEADS)
    tokens = make_inputs("lm", batch_size=2)
    cache = model.initial_cache(2, max_length=9)
    _, cache = model.decode_step(tokens[:, :4], cache, 0)
    del received_biases[:]
    model.decode_step(tokens[:, 4:5], cache, 4)
    assert len(received_biases) == model.num_layers
    for name, bias in received_biases:
        # The new position (4) against every slot of the cache (9 keys).
        expected = paper_bias(3, 1, 9, query_offset=4)
        np.testing.assert_allclose(to_numpy(bias), expected, rtol=1e-6, err_msg=name)


# --- Cached decoding, saving, length -------------------------------------------------


def test_lm_cached_decoding_equals_the_full_pass():
    model = make_model("lm", position="alibi", **THREE_HEADS)
    tokens = make_inputs("lm", batch_size=2, length=8)
    full = to_numpy(model(tokens))
    # The cache and prefill of the test above (JAX compiles each op once
    # for each shape it meets).
    cache = model.initial_cache(2, max_length=9)
    cached = decode_in_steps(model, tokens, cache, prefill=4)
    np.testing.assert_allclose(cached, full, atol=1e-5)
    # The generation loop, with and without its cache.
    prompts = tokens[:, :3]
    with_cache = generate_lm(model, prompts, max_length=10)["tokens"]
    without = generate_lm(model, prompts, max_length=10, use_cache=False)["tokens"]
    np.testing.assert_array_equal(to_numpy(with_cache), to_numpy(without))


def test_transformer_cached_decoding_equals_the_full_pass():
    model = make_model("transformer", position="alibi", **THREE_HEADS)
    inputs = make_inputs("transformer", batch_size=2, length=7)
    full = to_numpy(model(inputs))
    encoded = model.encode(inputs["encoder_tokens"])
    cache = model.initial_cache(*encoded, max_length=9)
    cached = decode_in_steps(model, inputs["decoder_tokens"], cache)
    np.testing.assert_allclose(cached, full, atol=1e-5)
    source = inputs["encoder_tokens"]
    with_cache = generate_seq2seq(model, source, 1, 2, max_length=9)["tokens"]
    without = generate_seq2seq(model, source, 1, 2, max_length=9, use_cache=False)
    np.testing.assert_array_equal(to_numpy(with_cache), to_numpy(without["tokens"]))


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", sorted(STACKS))
def test_keras_file_round_trip_gives_identical_outputs(kind, tmp_path):
    model = make_model(kind, position="alibi")
    inputs = make_inputs(kind, batch_size=2)
    path = tmp_path / f"{kind}_alibi.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config()["position"] == "alibi"
    assert loaded.position_scheme == model.position_scheme
    np.testing.assert_array_equal(to_numpy(loaded(inputs)), to_numpy(model(inputs)))


@pytest.mark.split_cases
@pytest.mark.parametrize("kind", sorted(STACKS))
def test_sequences_longer_than_max_sequence_length_run(kind):
    # Learned positions end at max_sequence_length; ALiBi has no end.
    short = dict(max_sequence_length=8)
    inputs = make_inputs(kind, batch_size=2, length=12)
    with pytest.raises(ValueError, match="longer than max_sequence_length=8"):
        make_model(kind, position="learned", **short)(inputs)
    model = make_model(kind, position="alibi", **short)
    outputs = to_numpy(model(inputs))
    assert np.isfinite(outputs).all()
    if kind == "lm":
        # Causal: the first 8 positions are those of the 8-token sequence.
        np.testing.assert_allclose(
            outputs[:, :8], to_numpy(model(inputs[:, :8])), atol=1e-5
        )
        cache = model.initial_cache(2, max_length=12)
        np.testing.assert_allclose(
            decode_in_steps(model, inputs, cache, prefill=5), outputs, atol=1e-5
        )


# --- Training ------------------------------------------------------------------------


def train_on_copy_task(position, steps=60):
    """The loss on the copy task's batch before and after `steps` Adam
    updates on it (as tests/models/test_lora.py trains)."""
    keras.utils.set_random_seed(0)
    model = make_model("lm", position=position)
    inputs, targets = copy_task("lm")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    before = float(to_numpy(loss(targets, model(inputs))))
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=loss)
    repeat = lambda x: np.concatenate([x] * steps)  # noqa: E731
    model.fit(repeat(inputs), repeat(targets), batch_size=len(targets), verbose=0)
    return before, float(to_numpy(loss(targets, model(inputs))))


@pytest.mark.slow
def test_alibi_lm_trains_on_the_copy_task_as_well_as_sinusoids():
    alibi_before, alibi_after = train_on_copy_task("alibi")
    sinusoidal_before, sinusoidal_after = train_on_copy_task("sinusoidal")
    assert alibi_after < alibi_before / 3, (alibi_before, alibi_after)
    # No worse than the paper's sinusoids, with 10% to spare.
    assert alibi_after < 1.1 * sinusoidal_after, (alibi_after, sinusoidal_after)
