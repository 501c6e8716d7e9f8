"""The blocks as drop-ins for keras-hub's `TransformerEncoder` and
`TransformerDecoder`: `bias_initializer`, `attention_dropout` following
`dropout`, the encoder's attention scores and the decoder's stacked cache
call, against keras-hub's layers with copied weights."""

import json

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    AttentionSettings,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

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
            num_heads=2,
            intermediate_dim=4,
            dropout=0.1,
            attention=AttentionSettings(dropout=0.0),
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


def _built_pair(cross):
    theirs = keras_hub.layers.TransformerDecoder(
        intermediate_dim=FF, num_heads=HEADS, layer_norm_epsilon=1e-6
    )
    ours = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    target = normal(BATCH, LENGTH, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=2) if cross else None
    theirs(target, source)
    ours(target, source)
    copy_from(theirs, ours)
    return theirs, ours, target, source


@pytest.mark.parametrize("use_causal_mask", [True, False])
@pytest.mark.parametrize("cross", [False, True])
def test_decoder_cache_call_with_masks_matches_keras_hub(cross, use_causal_mask):
    """Padding over the cache's slots, an explicit mask, encoder padding, a
    cache read without an update index: keras-hub's meanings, its numbers."""
    theirs, ours, target, source = _built_pair(cross)
    rng = np.random.default_rng(3)
    filled = ops.convert_to_tensor(
        rng.normal(size=(BATCH, 2, LENGTH, HEADS, DIM // HEADS)).astype("float32")
    )
    slot_padding = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 1, 1]], bool)
    explicit = rng.random((BATCH, 2, LENGTH)) > 0.3
    explicit[:, :, 0] = True  # No row fully masked: keras-hub would give NaN.
    kwargs = dict(
        decoder_padding_mask=slot_padding,
        decoder_attention_mask=explicit,
        use_causal_mask=use_causal_mask,
    )
    if cross:
        cross_cache = ops.zeros((BATCH, 2, SOURCE_LEN, HEADS, DIM // HEADS))
        kwargs.update(
            encoder_sequence=source,
            encoder_padding_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool),
            cross_attention_cache=cross_cache,
            cross_attention_cache_update_index=0,
        )
    for index in (1, None):  # Written at slots 1-2, or read only.
        step = dict(
            kwargs,
            self_attention_cache=filled,
            self_attention_cache_update_index=index,
        )
        expected = theirs(target[:, 1:3], **step)
        result = ours(target[:, 1:3], **step)
        assert len(result) == len(expected) == (3 if cross else 2)
        for mine, reference in zip(result, expected):
            np.testing.assert_allclose(
                ops.convert_to_numpy(mine), ops.convert_to_numpy(reference), atol=1e-5
            )


@pytest.mark.parametrize("cross", [False, True])
def test_decoder_cache_call_is_call_cached(cross):
    """keras-hub's stacked cache call and `call_cached` are one computation."""
    ours = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    target = normal(BATCH, LENGTH, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=2) if cross else None
    ours(target, source)
    slots = ops.zeros((BATCH, LENGTH, HEADS, DIM // HEADS))
    keys_values = (slots, slots)
    stacked = ops.stack(keys_values, axis=1)
    cross_kwargs, cross_keys_values = {}, None
    if cross:
        cross_keys_values = ours.compute_cross_attention_cache(source)
        cross_kwargs = dict(
            encoder_sequence=source,
            cross_attention_cache=ops.stack(cross_keys_values, axis=1),
        )
    for index, size in ((0, 2), (2, 1), (3, 2)):
        new = target[:, index : index + size]
        output, keys_values = ours.call_cached(
            new, keys_values, index, cross_attention_cache=cross_keys_values
        )
        result = ours(
            new,
            self_attention_cache=stacked,
            self_attention_cache_update_index=index,
            **cross_kwargs,
        )
        stacked = result[1]
        np.testing.assert_allclose(
            ops.convert_to_numpy(result[0]), ops.convert_to_numpy(output), atol=1e-6
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(stacked),
            ops.convert_to_numpy(ops.stack(keys_values, axis=1)),
            atol=1e-6,
        )


@pytest.mark.parametrize("cross", [False, True])
def test_decoder_symbolic_cache_call(cross):
    """`compute_output_spec` returns the cache call's structure, from its
    arguments, and a functional model of it gives the eager numbers."""
    layer = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    target = normal(BATCH, LENGTH, DIM)
    source = normal(BATCH, SOURCE_LEN, DIM, seed=2)
    layer(target, source if cross else None)
    cache_shape = (2, LENGTH, HEADS, DIM // HEADS)
    inputs = [keras.Input((1, DIM)), keras.Input(cache_shape)]
    kwargs = {}
    if cross:
        inputs += [
            keras.Input((SOURCE_LEN, DIM)),
            keras.Input(cache_shape[:1] + (SOURCE_LEN,) + cache_shape[2:]),
        ]
        kwargs = dict(encoder_sequence=inputs[2], cross_attention_cache=inputs[3])
    outputs = layer(
        inputs[0],
        self_attention_cache=inputs[1],
        self_attention_cache_update_index=2,
        **kwargs,
    )
    assert len(outputs) == (3 if cross else 2)
    assert tuple(outputs[0].shape) == (None, 1, DIM)
    assert tuple(outputs[1].shape) == (None, *cache_shape)
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(4)
    values = [target[:, 2:3], rng.normal(size=(BATCH, *cache_shape)).astype("float32")]
    if cross:
        values += [
            source,
            rng.normal(size=(BATCH, 2, SOURCE_LEN, HEADS, DIM // HEADS)).astype(
                "float32"
            ),
        ]
        eager = layer(
            values[0],
            self_attention_cache=values[1],
            self_attention_cache_update_index=2,
            encoder_sequence=values[2],
            cross_attention_cache=values[3],
        )
    else:
        eager = layer(
            values[0],
            self_attention_cache=values[1],
            self_attention_cache_update_index=2,
        )
    for symbolic, expected in zip(model(values), eager):
        np.testing.assert_allclose(
            ops.convert_to_numpy(symbolic), ops.convert_to_numpy(expected), atol=1e-6
        )


def test_decoder_cache_call_errors():
    cache = ops.zeros((BATCH, 2, LENGTH, HEADS, DIM // HEADS))
    target = normal(BATCH, 1, DIM)
    decoder_only = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    decoder_only(normal(BATCH, LENGTH, DIM))
    with pytest.raises(ValueError, match="return_attention_scores"):
        decoder_only(
            target,
            self_attention_cache=cache,
            self_attention_cache_update_index=0,
            return_attention_scores=True,
        )
    with pytest.raises(
        ValueError, match="without cross-attention.*cross_attention_cache=set"
    ):
        decoder_only(target, self_attention_cache=cache, cross_attention_cache=cache)
    with_cross = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    source = normal(BATCH, SOURCE_LEN, DIM)
    with_cross(normal(BATCH, LENGTH, DIM), source)
    with pytest.raises(ValueError, match="both be set.*self_attention_cache=set"):
        with_cross(target, source, self_attention_cache=cache)
    with pytest.raises(ValueError, match="need a `self_attention_cache`"):
        with_cross(target, source, cross_attention_cache=cache)
