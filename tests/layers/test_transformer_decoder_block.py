"""`TransformerDecoderBlock`: layer contract, keras-hub's `TransformerDecoder`
with copied weights, causality, cached calls, errors."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import run_layer_test

from keras_attn.layers import TransformerDecoderBlock

BATCH, TARGET_LEN, SOURCE_LEN, DIM, HEADS, FF = 2, 5, 4, 8, 2, 16
DECODER_MASK = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
ENCODER_MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def block(**kwargs):
    return TransformerDecoderBlock(
        **(dict(num_heads=HEADS, intermediate_dim=FF) | kwargs)
    )


@pytest.mark.parametrize("normalize_first", [False, True])
def test_layer_contract_with_encoder_sequence(normalize_first):
    run_layer_test(
        TransformerDecoderBlock,
        dict(
            num_heads=HEADS,
            intermediate_dim=FF,
            dropout=0.1,
            normalize_first=normalize_first,
        ),
        {
            "decoder_sequence": normal(BATCH, TARGET_LEN, DIM),
            "encoder_sequence": normal(BATCH, SOURCE_LEN, DIM, seed=1),
            "decoder_padding_mask": DECODER_MASK,
            "encoder_padding_mask": ENCODER_MASK,
        },
        expected_output_shape=(BATCH, TARGET_LEN, DIM),
        expected_num_trainable_weights=26,
        run_mixed_precision=not normalize_first,
        run_fit=not normalize_first,
    )


@pytest.mark.parametrize("normalize_first", [False, True])
def test_layer_contract_decoder_only(normalize_first):
    run_layer_test(
        TransformerDecoderBlock,
        dict(num_heads=HEADS, intermediate_dim=FF, normalize_first=normalize_first),
        normal(BATCH, TARGET_LEN, DIM),
        expected_output_shape=(BATCH, TARGET_LEN, DIM),
        expected_num_trainable_weights=16,
        run_mixed_precision=normalize_first,
        run_fit=normalize_first,
    )


def test_symbolic_call_returns_cross_attention_scores():
    target = keras.Input((TARGET_LEN, DIM))
    source = keras.Input((SOURCE_LEN, DIM))
    layer = block()
    output, scores = layer(target, source, return_attention_scores=True)
    assert tuple(output.shape) == (None, TARGET_LEN, DIM)
    assert tuple(scores.shape) == (None, HEADS, TARGET_LEN, SOURCE_LEN)
    model = keras.Model([target, source], [output, scores])
    t, s = normal(BATCH, TARGET_LEN, DIM), normal(BATCH, SOURCE_LEN, DIM, seed=1)
    eager_output, eager_scores = layer(
        t, s, encoder_padding_mask=ENCODER_MASK, return_attention_scores=True
    )
    eager_scores = ops.convert_to_numpy(eager_scores)
    model_output, model_scores = model([t, s])
    np.testing.assert_allclose(model_output, layer(t, s), atol=1e-6)
    # Padded source positions get no weight; the rest sums to one.
    np.testing.assert_array_equal(eager_scores.transpose(0, 3, 1, 2)[~ENCODER_MASK], 0)
    np.testing.assert_allclose(eager_scores.sum(-1), 1.0, atol=1e-5)


# --- Against keras-hub's TransformerDecoder ---------------------------------

KERAS_HUB_NAMES = {
    "self_attention": "self_attention",
    "self_attention_norm": "self_attention_layer_norm",
    "cross_attention": "cross_attention",
    "cross_attention_norm": "cross_attention_layer_norm",
    "feed_forward/intermediate_dense": "feedforward_intermediate_dense",
    "feed_forward/output_dense": "feedforward_output_dense",
    "feed_forward_norm": "feedforward_layer_norm",
}


def keras_hub_name(path):
    inner = path.split("/", 1)[1]
    for ours in sorted(KERAS_HUB_NAMES, key=len, reverse=True):
        if inner.startswith(ours + "/"):
            return KERAS_HUB_NAMES[ours] + inner[len(ours) :]
    raise KeyError(path)


@pytest.mark.parametrize("normalize_first", [False, True])
@pytest.mark.parametrize("cross", [True, False])
def test_matches_keras_hub_transformer_decoder(normalize_first, cross):
    keras_hub = pytest.importorskip("keras_hub")
    theirs = keras_hub.layers.TransformerDecoder(
        intermediate_dim=FF,
        num_heads=HEADS,
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        normalize_first=normalize_first,
    )
    ours = block(layer_norm_epsilon=1e-6, normalize_first=normalize_first)
    target = normal(BATCH, TARGET_LEN, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=1) if cross else None
    theirs(target, source)
    ours(target, source)
    rng = np.random.default_rng(2)
    for weight in theirs.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
    by_name = {w.path.split("/", 1)[1]: w for w in theirs.weights}
    assert len(by_name) == len(ours.weights) == (26 if cross else 16)
    for weight in ours.weights:
        weight.assign(by_name[keras_hub_name(weight.path)])

    masks = dict(decoder_padding_mask=DECODER_MASK)
    if cross:
        masks["encoder_padding_mask"] = ENCODER_MASK
    expected = np.asarray(theirs(target, source, **masks))
    output = ops.convert_to_numpy(ours(target, source, **masks))
    np.testing.assert_allclose(output, expected, atol=1e-5)


# --- Causality and cached calls ----------------------------------------------


@pytest.mark.parametrize("normalize_first", [False, True])
def test_position_t_ignores_later_positions(normalize_first):
    layer = block(normalize_first=normalize_first)
    target = normal(BATCH, TARGET_LEN, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=1)
    out = ops.convert_to_numpy(layer(target, source))
    for t in range(TARGET_LEN - 1):
        changed = target.copy()
        changed[:, t + 1 :] = normal(BATCH, TARGET_LEN - t - 1, DIM, seed=10 + t)
        out_changed = ops.convert_to_numpy(layer(changed, source))
        np.testing.assert_allclose(out_changed[:, : t + 1], out[:, : t + 1], atol=1e-6)
        assert np.abs(out_changed[:, t + 1 :] - out[:, t + 1 :]).max() > 1e-3
    # Without the causal mask the future leaks (the check above can fail).
    leaky = ops.convert_to_numpy(layer(changed, source, use_causal_mask=False))
    assert np.abs(leaky[:, :-1] - out[:, :-1]).max() > 1e-3


# One position per step (as in greedy decoding), or several at a nonzero
# offset (a prompt after a first token). Post-norm one position per step is
# covered by the model's cached-decoding test.
@pytest.mark.parametrize(
    "normalize_first, chunks", [(True, (1, 1, 1, 1, 1)), (False, (1, 4))]
)
def test_cached_calls_equal_full_pass(normalize_first, chunks):
    layer = block(normalize_first=normalize_first)
    target = normal(BATCH, TARGET_LEN, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=1)
    full = ops.convert_to_numpy(
        layer(target, source, encoder_padding_mask=ENCODER_MASK)
    )
    slots = ops.zeros((BATCH, TARGET_LEN, HEADS, DIM // HEADS))
    cache = (slots, slots)
    cross_cache = layer.compute_cross_attention_cache(source)
    outputs, index = [], 0
    for size in chunks:
        out, cache = layer.call_cached(
            target[:, index : index + size],
            cache,
            index,
            cross_attention_cache=cross_cache,
            encoder_padding_mask=ENCODER_MASK,
        )
        outputs.append(ops.convert_to_numpy(out))
        index += size
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=1e-5)


# --- Errors --------------------------------------------------------------------


def test_cross_attention_block_needs_encoder_sequence():
    layer = block()
    target = normal(BATCH, TARGET_LEN, DIM)
    layer(target, normal(BATCH, SOURCE_LEN, DIM))
    with pytest.raises(ValueError, match="encoder_sequence=None"):
        layer(target)


def test_decoder_only_block_rejects_encoder_sequence():
    layer = block()
    target = normal(BATCH, TARGET_LEN, DIM)
    layer(target)
    with pytest.raises(ValueError, match="encoder_sequence"):
        layer(target, normal(BATCH, SOURCE_LEN, DIM))


def test_hidden_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match=r"hidden_dim=8, num_heads=3"):
        block(num_heads=3)(normal(BATCH, TARGET_LEN, DIM))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dropout=1.0), "dropout=1.0"),
        (dict(attention=dict(dropout=-0.2)), "attention_dropout=-0.2"),
        (dict(num_heads=-1), "num_heads=-1"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        block(**kwargs)


def test_mask_that_cannot_broadcast():
    layer = block()
    target = normal(BATCH, TARGET_LEN, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM)
    with pytest.raises(ValueError, match=r"value_mask.*\(2, 5\)"):
        layer(target, source, encoder_padding_mask=np.ones((BATCH, 5), bool))
    with pytest.raises(ValueError, match=r"attention_mask.*\(2, 5, 4\)"):
        layer(target, source, decoder_attention_mask=np.ones((BATCH, 5, 4), bool))
