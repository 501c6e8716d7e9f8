"""The blocks' additive attention bias: the encoder's `attention_bias`, the
decoder's `self_attention_bias` (in `call` and, over the cache's slots, in
`call_cached`), each equal to the same bias given to `MultiHeadAttention`,
and a bias of 0 / -1e9 equal to the boolean mask it spells."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    AttentionSettings,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

BATCH, LENGTH, SOURCE_LEN, DIM, HEADS, FF = 2, 5, 4, 8, 2, 16
PADDING = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def numpy(x):
    return ops.convert_to_numpy(x)


def per_head_mask(seed=5):
    """A random `(batch, heads, length, length)` mask, diagonal kept (no
    fully masked row), different per head and not symmetric."""
    mask = np.random.default_rng(seed).random((BATCH, HEADS, LENGTH, LENGTH)) > 0.4
    mask |= np.eye(LENGTH, dtype=bool)
    return mask


def as_bias(mask):
    return np.where(mask, 0.0, -1e9).astype("float32")


def self_attention_by_hand(block, x, mask, bias):
    """The block's first sub-layer, with the bias given to the attention
    layer itself; returns the block's output."""
    h = block.self_attention_norm(x) if block.normalize_first else x
    keys, values = block.self_attention.compute_key_value(h)
    attended = block.self_attention.call_with_key_value(
        h, keys, values, attention_mask=mask, attention_bias=bias
    )
    x = x + attended
    return x if block.normalize_first else block.self_attention_norm(x)


def feed_forward_by_hand(block, x):
    h = block.feed_forward_norm(x) if block.normalize_first else x
    x = x + block.feed_forward(h)
    return x if block.normalize_first else block.feed_forward_norm(x)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_encoder_bias_is_multi_head_attentions(normalize_first):
    block = TransformerEncoderBlock(
        num_heads=HEADS, intermediate_dim=FF, normalize_first=normalize_first
    )
    x = ops.convert_to_tensor(normal(BATCH, LENGTH, DIM))
    bias = normal(1, HEADS, LENGTH, LENGTH, seed=3)  # Broadcast over the batch.
    output = block(x, padding_mask=PADDING, attention_bias=bias)
    # (batch, query, key): padded keys masked.
    mask = np.broadcast_to(PADDING[:, None, :], (BATCH, LENGTH, LENGTH))
    expected = feed_forward_by_hand(block, self_attention_by_hand(block, x, mask, bias))
    np.testing.assert_allclose(numpy(output), numpy(expected), atol=1e-5)
    # The bias matters: without it the output differs.
    unbiased = numpy(block(x, padding_mask=PADDING))
    assert np.abs(unbiased - numpy(output)).max() > 1e-3


@pytest.mark.parametrize("flash_attention", [None, False])
def test_encoder_bias_of_minus_infinity_is_a_mask(flash_attention):
    block = TransformerEncoderBlock(
        num_heads=HEADS,
        intermediate_dim=FF,
        attention=AttentionSettings(flash_attention=flash_attention),
    )
    x = normal(BATCH, LENGTH, DIM)
    mask = per_head_mask()
    np.testing.assert_allclose(
        numpy(block(x, attention_bias=as_bias(mask))),
        numpy(block(x, attention_mask=mask)),
        atol=1e-5,
    )


def test_encoder_bias_in_a_functional_model():
    block = TransformerEncoderBlock(num_heads=HEADS, intermediate_dim=FF)
    inputs = keras.Input((LENGTH, DIM))
    bias = keras.Input((HEADS, LENGTH, LENGTH))
    output, scores = block(inputs, attention_bias=bias, return_attention_scores=True)
    assert tuple(scores.shape) == (None, HEADS, LENGTH, LENGTH)
    model = keras.Model([inputs, bias], [output, scores])
    x, b = normal(BATCH, LENGTH, DIM), normal(BATCH, HEADS, LENGTH, LENGTH, seed=2)
    for symbolic, eager in zip(
        model([x, b]), block(x, attention_bias=b, return_attention_scores=True)
    ):
        np.testing.assert_allclose(numpy(symbolic), numpy(eager), atol=1e-6)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_bias_is_multi_head_attentions(normalize_first):
    block = TransformerDecoderBlock(
        num_heads=HEADS, intermediate_dim=FF, normalize_first=normalize_first
    )
    x = ops.convert_to_tensor(normal(BATCH, LENGTH, DIM))
    bias = normal(BATCH, HEADS, LENGTH, LENGTH, seed=3)
    output = block(x, self_attention_bias=bias)
    causal = np.tril(np.ones((LENGTH, LENGTH), bool))
    mask = np.broadcast_to(causal, (BATCH, LENGTH, LENGTH))
    expected = feed_forward_by_hand(block, self_attention_by_hand(block, x, mask, bias))
    np.testing.assert_allclose(numpy(output), numpy(expected), atol=1e-5)
    assert np.abs(numpy(block(x)) - numpy(output)).max() > 1e-3


def test_decoder_bias_of_minus_infinity_is_a_mask():
    block = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    target, source = normal(BATCH, LENGTH, DIM), normal(BATCH, SOURCE_LEN, DIM)
    mask = per_head_mask()
    np.testing.assert_allclose(
        numpy(block(target, source, self_attention_bias=as_bias(mask))),
        numpy(block(target, source, decoder_attention_mask=mask)),
        atol=1e-5,
    )


@pytest.mark.parametrize("chunks", [(1, 1, 1, 1, 1), (2, 3)])
def test_cached_bias_equals_full_pass_bias(chunks):
    """`call_cached`'s bias is the new queries' rows over every cache slot:
    step by step, the full pass's bias gives the full pass's outputs."""
    block = TransformerDecoderBlock(num_heads=HEADS, intermediate_dim=FF)
    target, source = normal(BATCH, LENGTH, DIM), normal(BATCH, SOURCE_LEN, DIM, seed=1)
    bias = normal(BATCH, HEADS, LENGTH, LENGTH, seed=3)
    full = numpy(block(target, source, self_attention_bias=bias))
    slots = ops.zeros((BATCH, LENGTH, HEADS, DIM // HEADS))
    cache, cross_cache = (slots, slots), block.compute_cross_attention_cache(source)
    outputs, index = [], 0
    for size in chunks:
        # (batch, heads, new_length, max_length)
        step_bias = bias[:, :, index : index + size, :]
        out, cache = block.call_cached(
            target[:, index : index + size],
            cache,
            index,
            cross_attention_cache=cross_cache,
            self_attention_bias=step_bias,
        )
        outputs.append(numpy(out))
        index += size
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=1e-5)
