"""The blocks as drop-ins for keras-hub's `TransformerEncoder` and
`TransformerDecoder`: `bias_initializer`, `attention_dropout` following
`dropout`, the encoder's attention scores and the decoder's stacked cache
call, against keras-hub's layers with copied weights."""

import json

import numpy as np
import pytest
from keras import ops

from keras_attn.layers import TransformerDecoderBlock, TransformerEncoderBlock

keras_hub = pytest.importorskip("keras_hub")

BATCH, LENGTH, SOURCE_LEN, DIM, HEADS, FF = 2, 5, 4, 8, 2, 16

# Our sub-layer paths -> keras-hub's.
NAMES = {
    "self_attention": "self_attention",
    "self_attention_norm": "self_attention_layer_norm",
    "cross_attention": "cross_attention",
    "cross_attention_norm": "cross_attention_layer_norm",
    "feed_forward/intermediate_dense": "feedforward_intermediate_dense",
    "feed_forward/output_dense": "feedforward_output_dense",
    "feed_forward_norm": "feedforward_layer_norm",
}


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def copy_from(theirs, ours, **renames):
    rng = np.random.default_rng(1)
    for weight in theirs.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))
    by_name = {w.path.split("/", 1)[1]: w for w in theirs.weights}
    assert len(by_name) == len(ours.weights)
    names = NAMES | renames
    for weight in ours.weights:
        inner = weight.path.split("/", 1)[1]
        ours_name = next(
            name
            for name in sorted(names, key=len, reverse=True)
            if inner.startswith(name + "/")
        )
        weight.assign(by_name[names[ours_name] + inner[len(ours_name) :]])


@pytest.mark.parametrize("block", [TransformerEncoderBlock, TransformerDecoderBlock])
def test_bias_initializer_and_attention_dropout(block):
    layer = block(num_heads=HEADS, intermediate_dim=FF, bias_initializer="ones")
    layer(normal(BATCH, LENGTH, DIM))
    biases = [
        w for w in layer.weights if w.path.endswith("bias") and "norm" not in w.path
    ]
    assert len(biases) == 6
    for bias in biases:
        np.testing.assert_array_equal(ops.convert_to_numpy(bias), 1.0)
    config = json.loads(json.dumps(layer.get_config()))
    assert block.from_config(config).get_config() == layer.get_config()
    # As keras-hub: `dropout` is the attention dropout unless given apart.
    assert block(num_heads=2, intermediate_dim=4, dropout=0.1).attention_dropout == 0.1
    assert (
        block(
            num_heads=2, intermediate_dim=4, dropout=0.1, attention_dropout=0.0
        ).attention_dropout
        == 0.0
    )


def test_encoder_attention_scores_match_keras_hub():
    theirs = keras_hub.layers.TransformerEncoder(
        intermediate_dim=FF, num_heads=HEADS, layer_norm_epsilon=1e-6
    )
    ours = TransformerEncoderBlock(num_heads=HEADS, intermediate_dim=FF)
    x = normal(BATCH, LENGTH, DIM)
    theirs(x)
    ours(x)
    copy_from(theirs, ours, self_attention="self_attention_layer")
    padding = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
    expected, expected_scores = theirs(
        x, padding_mask=padding, return_attention_scores=True
    )
    output, scores = ours(x, padding_mask=padding, return_attention_scores=True)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(scores), expected_scores, atol=1e-5)


@pytest.mark.parametrize("cross", [False, True])
def test_decoder_cache_call_matches_keras_hub_and_full_pass(cross):
    theirs = keras_hub.layers.TransformerDecoder(
        intermediate_dim=FF, num_heads=HEADS, layer_norm_epsilon=1e-6
    )
    ours = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    target = normal(BATCH, LENGTH, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=2) if cross else None
    theirs(target, source)
    ours(target, source)
    copy_from(theirs, ours)
    full = ops.convert_to_numpy(ours(target, source))
    self_cache = ops.zeros((BATCH, 2, LENGTH, HEADS, DIM // HEADS))
    cross_cache = ops.zeros((BATCH, 2, SOURCE_LEN, HEADS, DIM // HEADS))

    def step(layer, index, self_cache, cross_cache):
        kwargs = dict(
            self_attention_cache=self_cache, self_attention_cache_update_index=index
        )
        if cross:
            kwargs.update(
                encoder_sequence=source,
                cross_attention_cache=cross_cache,
                # Computed at the first step, reused afterwards.
                cross_attention_cache_update_index=0 if index == 0 else None,
            )
        return layer(target[:, index : index + 1], **kwargs)

    caches = {"theirs": (self_cache, cross_cache), "ours": (self_cache, cross_cache)}
    for index in range(LENGTH):
        expected = step(theirs, index, *caches["theirs"])
        result = step(ours, index, *caches["ours"])
        assert len(result) == len(expected) == (3 if cross else 2)
        for mine, reference in zip(result, expected):
            np.testing.assert_allclose(
                ops.convert_to_numpy(mine), ops.convert_to_numpy(reference), atol=1e-5
            )
        np.testing.assert_allclose(
            ops.convert_to_numpy(result[0])[:, 0], full[:, index], atol=1e-5
        )
        caches["theirs"] = (expected[1], expected[2] if cross else cross_cache)
        caches["ours"] = (result[1], result[2] if cross else cross_cache)


def test_decoder_cache_index_without_cache_is_refused():
    layer = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        layer(normal(BATCH, LENGTH, DIM), self_attention_cache_update_index=0)
