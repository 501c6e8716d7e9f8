"""The masked-key guard and the cache's shortcut past it (issue #37).

`compute_attention` zeroes the keys and values no query attends, so a NaN
there cannot reach a real output (`0 * nan` is NaN). A decoding step over a
cache allocated with zeros skips those two passes over the cache
(`masked_keys_are_finite=True`): the same numbers when the hidden slots
are finite, and nothing else changes.
"""

import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    GroupedQueryAttention,
    MultiHeadAttention,
    TransformerDecoderBlock,
)
from keras_attn.layers.attention.attention_core import compute_attention

BATCH, QUERIES, KEYS, HEADS, HEAD_DIM = 2, 3, 6, 2, 4
# (batch, query_length, key_length): the last two keys hidden from every
# query of the first sequence, as a cache's unwritten slots.
MASK = np.ones((BATCH, QUERIES, KEYS), bool)
MASK[0, :, 4:] = False


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def numpy_attention(query, key, value, mask):
    """softmax(Q K^T / sqrt(d)) V, masked scores at -inf (the paper's eq. 1)."""
    scores = np.einsum("bqhd,bkhd->bhqk", query, key) / np.sqrt(query.shape[-1])
    scores = np.where(mask[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", weights, value)


@pytest.mark.parametrize("flash_attention", [None, False], ids=["fused", "explicit"])
def test_finite_hidden_keys_give_the_guarded_result(flash_attention):
    query = normal(BATCH, QUERIES, HEADS, HEAD_DIM)
    key = normal(BATCH, KEYS, HEADS, HEAD_DIM, seed=1)
    value = normal(BATCH, KEYS, HEADS, HEAD_DIM, seed=2)
    expected = numpy_attention(query, key, value, MASK)
    for finite in (False, True):
        attended, _ = compute_attention(
            query,
            key,
            value,
            mask=MASK,
            flash_attention=flash_attention,
            masked_keys_are_finite=finite,
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(attended), expected, rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("flash_attention", [None, False], ids=["fused", "explicit"])
def test_the_shortcut_skips_the_guard_and_nothing_else(flash_attention):
    query = normal(BATCH, QUERIES, HEADS, HEAD_DIM)
    key = normal(BATCH, KEYS, HEADS, HEAD_DIM, seed=1)
    value = normal(BATCH, KEYS, HEADS, HEAD_DIM, seed=2)
    value[0, 4:] = np.nan  # where the mask hides them
    guarded, _ = compute_attention(
        query, key, value, mask=MASK, flash_attention=flash_attention
    )
    unguarded, _ = compute_attention(
        query,
        key,
        value,
        mask=MASK,
        flash_attention=flash_attention,
        masked_keys_are_finite=True,
    )
    guarded, unguarded = ops.convert_to_numpy(guarded), ops.convert_to_numpy(unguarded)
    clean = value.copy()
    clean[0, 4:] = 0.0
    np.testing.assert_allclose(
        guarded, numpy_attention(query, key, clean, MASK), rtol=1e-5, atol=1e-5
    )
    # Without the guard the hidden NaN reaches the first sequence (so the
    # two passes are really gone); the second, which holds none, is intact.
    assert np.isnan(unguarded[0]).all()
    np.testing.assert_allclose(unguarded[1], guarded[1], rtol=1e-6, atol=1e-6)


class KerasSignatureAttention(MultiHeadAttention):
    """An override written for Keras's layer: it knows no shortcut."""

    calls = 0

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        type(self).calls += 1
        return super()._compute_attention(
            query, key, value, attention_mask, training, return_attention_scores
        )


@pytest.mark.parametrize(
    "layer_class", [KerasSignatureAttention, GroupedQueryAttention], ids=str
)
def test_an_override_of_kerass_signature_is_not_handed_the_shortcut(layer_class):
    KerasSignatureAttention.calls = 0  # (this test's calls only)
    if layer_class is GroupedQueryAttention:
        layer = GroupedQueryAttention(HEAD_DIM, HEADS, 1)
    else:
        layer = layer_class(HEADS, HEAD_DIM)
    x = normal(BATCH, KEYS, HEADS * HEAD_DIM)
    layer(x, x)  # builds
    keys, values = layer.compute_key_value(x)
    query = x[:, :QUERIES]
    outputs = [
        ops.convert_to_numpy(
            layer.call_with_key_value(
                query,
                keys,
                values,
                attention_mask=MASK,
                masked_keys_are_finite=finite,
            )
        )
        for finite in (False, True)
    ]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-6, atol=1e-6)
    if layer_class is KerasSignatureAttention:
        assert KerasSignatureAttention.calls == 3  # the build's call and ours


def test_cached_steps_over_a_zeroed_cache_match_the_full_pass():
    block = TransformerDecoderBlock(HEADS, 16, normalize_first=True)
    x = normal(BATCH, KEYS, HEADS * HEAD_DIM)
    full = ops.convert_to_numpy(block(x))
    slots = np.zeros((BATCH, KEYS, HEADS, HEAD_DIM), "float32")
    cache = (slots, slots)
    steps = []
    for index in range(KEYS):
        out, cache = block.call_cached(x[:, index : index + 1], cache, index)
        steps.append(ops.convert_to_numpy(out))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
