"""Logit soft-capping (`AttentionSettings(logit_soft_cap=...)`, Gemma 2's
`cap * tanh(scores / cap)`): against NumPy with grouped heads, padding and
the causal mask; `flash_attention=None` falling back to the explicit path
and `True` refused; cached decoding equal to one full pass; a saved block."""

import json

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    AttentionSettings,
    GroupedQueryAttention,
    MultiHeadAttention,
    TransformerDecoderBlock,
)

BATCH, LENGTH, DIM, HEADS, HEAD_DIM, CAP = 2, 5, 8, 2, 4, 2.0
PADDING = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def numpy_capped_layer(layer, x, mask, cap):
    """`layer`'s self-attention in NumPy (float64) from its weights:
    `softmax(cap * tanh(Q K^T / sqrt(d) / cap))` under `mask` `(batch, T, S)`,
    a row with no key to attend all zeros; `cap=None` for no cap."""
    w = {
        "/".join(v.path.split("/")[-2:]): ops.convert_to_numpy(v).astype("float64")
        for v in layer.weights
    }
    q, k, v = (
        np.einsum("btm,mhd->bthd", x, w[f"{name}/kernel"]) + w[f"{name}/bias"]
        for name in ("query", "key", "value")
    )
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    if cap is not None:
        scores = cap * np.tanh(scores / cap)
    visible = np.broadcast_to(mask[:, None], scores.shape)
    scores = np.where(visible, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    exp = np.where(visible, np.exp(scores - np.where(np.isfinite(top), top, 0)), 0)
    total = exp.sum(axis=-1, keepdims=True)
    weights = np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)
    attended = np.einsum("bhts,bshd->bthd", weights, v)
    output = np.einsum("bthd,hdm->btm", attended, w["attention_output/kernel"])
    return output + w["attention_output/bias"], weights


def test_layer_matches_numpy_and_falls_back_from_the_fused_path():
    x = normal(BATCH, LENGTH, DIM, seed=1)
    layers = {}
    for flash in (None, False):
        layer = MultiHeadAttention(
            HEADS, HEAD_DIM, num_key_value_heads=1, logit_soft_cap=CAP,
            flash_attention=flash,
        )  # fmt: skip
        layer.build(x.shape, x.shape)
        layers[flash] = layer
    # Large weights: scores well past the cap.
    rng = np.random.default_rng(2)
    weights = [2.0 * rng.normal(size=w.shape) for w in layers[None].get_weights()]
    for layer in layers.values():
        layer.set_weights(weights)
    mask = PADDING[:, None, :] & np.tril(np.ones((LENGTH, LENGTH), bool))
    expected, expected_weights = numpy_capped_layer(layers[None], x, mask, CAP)
    for flash, layer in layers.items():
        out = layer(x, x, value_mask=PADDING, use_causal_mask=True)
        np.testing.assert_allclose(
            ops.convert_to_numpy(out), expected, rtol=1e-4, atol=1e-4,
            err_msg=f"{flash=}",
        )  # fmt: skip
    _, scores = layers[None](
        x, x, value_mask=PADDING, use_causal_mask=True, return_attention_scores=True
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(scores), expected_weights, atol=1e-5
    )
    # The cap changes the numbers (this test can fail).
    uncapped, _ = numpy_capped_layer(layers[None], x, mask, None)
    assert np.abs(uncapped - expected).max() > 1e-2


def test_layer_refusals_and_config():
    with pytest.raises(ValueError, match="logit_soft_cap=0.0"):
        MultiHeadAttention(HEADS, HEAD_DIM, logit_soft_cap=0.0)
    with pytest.raises(ValueError, match="logit_soft_cap=5.0, flash_attention=True"):
        MultiHeadAttention(HEADS, HEAD_DIM, logit_soft_cap=5, flash_attention=True)
    # Written only when set: a default config stays Keras's.
    assert "logit_soft_cap" not in MultiHeadAttention(HEADS, HEAD_DIM).get_config()
    layer = GroupedQueryAttention(
        head_dim=HEAD_DIM, num_query_heads=HEADS, num_key_value_heads=1,
        logit_soft_cap=50,
    )  # fmt: skip
    config = json.loads(json.dumps(layer.get_config()))
    assert config["logit_soft_cap"] == 50.0
    assert GroupedQueryAttention.from_config(config).logit_soft_cap == 50.0


def test_cached_decoding_equals_the_full_pass():
    block = TransformerDecoderBlock(
        HEADS, 16, attention=AttentionSettings(logit_soft_cap=CAP)
    )
    target = 3.0 * normal(BATCH, LENGTH, DIM, seed=3)
    full = ops.convert_to_numpy(block(target))
    assert block.self_attention.logit_soft_cap == CAP
    slots = ops.zeros((BATCH, LENGTH, HEADS, DIM // HEADS))
    cache, outputs, index = (slots, slots), [], 0
    for size in (3, 1, 1):
        out, cache = block.call_cached(target[:, index : index + size], cache, index)
        outputs.append(ops.convert_to_numpy(out))
        index += size
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=1e-5)


def test_a_saved_block_keeps_its_cap(tmp_path):
    inputs = keras.Input((LENGTH, DIM))
    settings = AttentionSettings(logit_soft_cap=CAP)
    block = TransformerDecoderBlock(HEADS, 16, attention=settings)
    model = keras.Model(inputs, block(inputs))
    path = str(tmp_path / "block.keras")
    model.save(path)
    restored = keras.saving.load_model(path).layers[1]
    assert restored.attention == settings
    assert restored.self_attention.logit_soft_cap == CAP
    x = normal(BATCH, LENGTH, DIM, seed=4)
    np.testing.assert_allclose(
        ops.convert_to_numpy(restored(x)), ops.convert_to_numpy(block(x)), atol=1e-6
    )
