"""Inputs the layers' first catalogue had not met (issue #18): empty batches
and sequences, token ids outside the vocabulary in compiled calls, NaN at
padded positions, numeric masks that are not 0/1, boolean token ids. The
same behaviour on every backend."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    MultiHeadAttention,
    PaddingMask,
    SequencePooling,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

DIM, HEADS, FF = 8, 2, 16
PADDING_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _outputs(result):
    return result if isinstance(result, (tuple, list)) else (result,)


ZERO_SIZE_CALLS = {
    "attention, fused": lambda x: MultiHeadAttention(HEADS, 4)(x, x),
    "attention, explicit, causal": lambda x: MultiHeadAttention(
        HEADS, 4, flash_attention=False
    )(x, x, use_causal_mask=True),
    "attention with scores": lambda x: MultiHeadAttention(HEADS, 4)(
        x, x, return_attention_scores=True
    ),
    "attention, per-head mask": lambda x: MultiHeadAttention(HEADS, 4)(
        x,
        x,
        attention_mask=np.ones((x.shape[0], HEADS, x.shape[1], x.shape[1]), bool),
    ),
    "encoder block": lambda x: TransformerEncoderBlock(HEADS, FF)(
        x, padding_mask=np.ones(x.shape[:2], bool)
    ),
    "decoder block": lambda x: TransformerDecoderBlock(HEADS, FF)(x, x),
}


@pytest.mark.parametrize("shape", [(0, 5, DIM), (2, 0, DIM)], ids=["batch", "length"])
@pytest.mark.parametrize("call", ZERO_SIZE_CALLS.values(), ids=ZERO_SIZE_CALLS.keys())
def test_zero_size_inputs_give_empty_results(call, shape):
    # JAX used to raise ZeroDivisionError (a `-1` reshape of nothing).
    for output in _outputs(call(np.zeros(shape, "float32"))):
        assert 0 in tuple(output.shape)
        assert tuple(output.shape)[0] == shape[0]


def test_zero_size_inputs_over_attention_axes():
    layer = MultiHeadAttention(HEADS, 4, attention_axes=(1, 2))
    x = np.zeros((2, 0, 3, DIM), "float32")
    assert tuple(layer(x, x).shape) == (2, 0, 3, DIM)


def test_cached_decoding_step_on_an_empty_batch():
    block = TransformerDecoderBlock(HEADS, FF)
    block.build((1, 3, DIM))
    cache = (np.zeros((0, 6, HEADS, 4), "float32"),) * 2
    outputs, (keys, values) = block.call_cached(
        np.zeros((0, 1, DIM), "float32"), cache, 0
    )
    assert tuple(outputs.shape) == (0, 1, DIM)
    assert tuple(keys.shape) == tuple(values.shape) == (0, 6, HEADS, 4)


def test_pooling_an_empty_sequence():
    empty = np.zeros((2, 0, DIM), "float32")
    pooled = ops.convert_to_numpy(SequencePooling("mean")(empty))
    np.testing.assert_array_equal(pooled, np.zeros((2, DIM)))
    with pytest.raises(ValueError, match=r"sequence\.shape=\(2, 0, 8\)"):
        SequencePooling("cls")(empty)


def test_out_of_vocabulary_ids_are_clamped_in_compiled_calls():
    embedding = TokenAndPositionEmbedding(10, 8, DIM, position="learned")
    ids = keras.Input((4,), dtype="int32")
    model = keras.Model(ids, embedding(ids))
    wild = np.array([[-3, 0, 9, 50], [12, 1, -1, 10]], "int32")
    # `predict` is a compiled call on every backend.
    out = model.predict(wild, verbose=0)
    assert np.isfinite(out).all()
    clamped = ops.convert_to_numpy(embedding(np.clip(wild, 0, 9)))
    np.testing.assert_allclose(out, clamped, atol=1e-6)


@pytest.mark.parametrize(
    "layer",
    [TokenAndPositionEmbedding(10, 8, DIM), PaddingMask(0)],
    ids=["embedding", "padding_mask"],
)
def test_boolean_token_ids_are_refused(layer):
    with pytest.raises(TypeError, match=r"dtype=bool"):
        layer(np.ones((2, 3), bool))


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "explicit"])
@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nan_at_padded_keys_does_not_reach_real_positions(bad, fused):
    layer = MultiHeadAttention(HEADS, 4, flash_attention=None if fused else False)
    query, value = normal(2, 5, DIM), normal(2, 5, DIM, seed=1)
    clean = ops.convert_to_numpy(layer(query, value, value_mask=PADDING_MASK))
    poisoned = value.copy()
    poisoned[~PADDING_MASK] = bad
    out = ops.convert_to_numpy(layer(query, poisoned, value_mask=PADDING_MASK))
    # Every query is real here; each must ignore what padding holds.
    np.testing.assert_allclose(out, clean, atol=1e-6)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_nan_at_padded_positions_stays_in_the_padding(normalize_first):
    block = TransformerEncoderBlock(HEADS, FF, normalize_first=normalize_first)
    x = normal(2, 5, DIM)
    clean = ops.convert_to_numpy(block(x, padding_mask=PADDING_MASK))
    poisoned = x.copy()
    poisoned[~PADDING_MASK] = np.nan
    out = ops.convert_to_numpy(block(poisoned, padding_mask=PADDING_MASK))
    np.testing.assert_allclose(out[PADDING_MASK], clean[PADDING_MASK], atol=1e-6)


@pytest.mark.parametrize("odd", [0.5, 2.0, -1.0])
@pytest.mark.parametrize(
    "argument", ["query_mask", "value_mask", "key_mask", "attention_mask"]
)
def test_numeric_masks_must_be_zero_or_one(argument, odd):
    layer = MultiHeadAttention(HEADS, 4)
    x = normal(2, 5, DIM)
    shape = (2, 5, 5) if argument == "attention_mask" else (2, 5)
    mask = np.ones(shape, "float32")
    mask[0, 1] = odd
    with pytest.raises(ValueError, match=f"`{argument}` must be boolean"):
        layer(x, x, **{argument: mask})
    # 0/1 numbers are accepted and read as booleans.
    mask[0, 1] = 0.0
    expected = layer(x, x, **{argument: mask.astype(bool)})
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x, x, **{argument: mask})),
        ops.convert_to_numpy(expected),
        atol=1e-6,
    )


def test_block_padding_masks_must_be_zero_or_one():
    block = TransformerEncoderBlock(HEADS, FF)
    with pytest.raises(ValueError, match="Received: padding_mask holding 2"):
        block(normal(2, 5, DIM), padding_mask=np.full((2, 5), 2, "int32"))
