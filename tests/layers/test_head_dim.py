"""`AttentionSettings(head_dim=...)`: heads of their own size in a block and
a model (T5's `d_kv`, a Llama-family config's `head_dim`).

A model dimension of 10 with 3 heads of 4 features (which 3 does not
divide): the blocks' attention equals `keras.layers.MultiHeadAttention(
key_dim=4)` and `keras.layers.GroupQueryAttention(head_dim=4)` with the
same weights, and a NumPy attention from the weights; a model's cached
decoding equals its full pass; the setting round-trips through `.keras`
files and leaves every config without it unchanged.
"""

import json

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    AttentionSettings,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_attn.layers.positions import position_schemes
from keras_attn.models import Transformer, TransformerLM

DIM, HEADS, HEAD_DIM, FF = 10, 3, 4, 12


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def randomize(layer, seed=0):
    """Random weights, biases and norm scales included."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.normal(size=weight.shape).astype("float32"))


def numpy_attention(weights, x):
    """Self-attention in NumPy from a layer's weights (path suffix -> array),
    key/value heads repeated for each query head's group."""
    q = np.einsum("btm,mhd->bthd", x, weights["query/kernel"]) + weights["query/bias"]
    k = np.einsum("bsm,mhd->bshd", x, weights["key/kernel"]) + weights["key/bias"]
    v = np.einsum("bsm,mhd->bshd", x, weights["value/kernel"]) + weights["value/bias"]
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    # (batch, heads, query, key)
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    attended = np.einsum("bhts,bshd->bthd", scores, v)
    output = np.einsum("bthd,hdm->btm", attended, weights["attention_output/kernel"])
    return output + weights["attention_output/bias"]


def layer_weights(layer):
    return {
        "/".join(v.path.split("/")[-2:]): keras.ops.convert_to_numpy(v)
        for v in layer.weights
    }


@pytest.mark.parametrize("num_key_value_heads", [None, 1])
def test_a_blocks_attention_equals_keras_with_the_same_weights(num_key_value_heads):
    settings = AttentionSettings(
        head_dim=HEAD_DIM, num_key_value_heads=num_key_value_heads
    )
    block = TransformerEncoderBlock(HEADS, FF, attention=settings)
    x = normal(2, 5, DIM)
    block(x)
    randomize(block)
    attention = block.self_attention
    key_heads = num_key_value_heads or HEADS
    # (hidden, heads, head_dim) in, (heads, head_dim, hidden) out.
    assert block.head_dim == attention.key_dim == HEAD_DIM
    assert tuple(attention.query_dense.kernel.shape) == (DIM, HEADS, HEAD_DIM)
    assert tuple(attention.key_dense.kernel.shape) == (DIM, key_heads, HEAD_DIM)
    assert tuple(attention.output_dense.kernel.shape) == (HEADS, HEAD_DIM, DIM)

    if num_key_value_heads is None:
        reference = keras.layers.MultiHeadAttention(HEADS, key_dim=HEAD_DIM)
    else:
        reference = keras.layers.GroupQueryAttention(
            HEAD_DIM, HEADS, num_key_value_heads
        )
    reference(x, x)
    reference.set_weights(attention.get_weights())
    ours = keras.ops.convert_to_numpy(attention(x, x))
    np.testing.assert_allclose(
        ours, keras.ops.convert_to_numpy(reference(x, x)), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        ours, numpy_attention(layer_weights(attention), x), rtol=1e-5, atol=1e-5
    )

    # The block: `Norm(h + FFN(h))`, `h = Norm(x + Attention(x))`, with
    # Keras's attention in place of ours.
    h = block.self_attention_norm(keras.ops.add(x, reference(x, x)))
    expected = block.feed_forward_norm(keras.ops.add(h, block.feed_forward(h)))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(block(x)),
        keras.ops.convert_to_numpy(expected),
        rtol=1e-5,
        atol=1e-5,
    )


def test_a_decoder_blocks_cross_attention_has_the_heads_size():
    block = TransformerDecoderBlock(HEADS, FF, attention={"head_dim": HEAD_DIM})
    outputs = block(normal(2, 5, DIM), normal(2, 7, DIM, seed=1))
    assert tuple(outputs.shape) == (2, 5, DIM)
    assert block.cross_attention.key_dim == HEAD_DIM
    assert tuple(block.cross_attention.output_dense.kernel.shape) == (
        HEADS,
        HEAD_DIM,
        DIM,
    )


def tiny_lm(**attention):
    return TransformerLM(
        vocabulary_size=30,
        num_layers=2,
        hidden_dim=DIM,
        num_heads=HEADS,
        intermediate_dim=FF,
        max_sequence_length=16,
        position="rotary",
        normalize_first=True,
        normalization="rms",
        attention={"head_dim": HEAD_DIM, **attention},
    )


@pytest.mark.parametrize("attention", [{}, {"num_key_value_heads": 1}])
def test_cached_decoding_equals_the_full_pass(attention):
    model = tiny_lm(**attention)
    randomize(model, seed=3)
    tokens = np.random.default_rng(0).integers(1, 30, size=(2, 9)).astype("int32")
    full = keras.ops.convert_to_numpy(model(tokens))
    # The check can fail: the logits are far from the tolerance.
    assert np.abs(full).max() > 0.1

    cache = model.initial_cache(2, 12)
    keys = cache["self_attention"][0][0]
    # (batch, max_length, key/value heads, head_dim)
    assert tuple(keys.shape) == (2, 12, attention.get("num_key_value_heads", HEADS), 4)
    logits, cache = model.decode_step(tokens[:, :4], cache, 0)  # the prompt
    steps = [keras.ops.convert_to_numpy(logits)]
    for index in range(4, 9):
        logits, cache = model.decode_step(tokens[:, index : index + 1], cache, index)
        steps.append(keras.ops.convert_to_numpy(logits))
    np.testing.assert_allclose(
        np.concatenate(steps, axis=1), full, rtol=1e-4, atol=1e-4
    )


def test_a_model_keras_file_round_trip(tmp_path):
    model = tiny_lm(num_key_value_heads=1)
    assert model.get_config()["attention"]["head_dim"] == HEAD_DIM
    assert model.position_scheme.head_dim == HEAD_DIM
    path = str(tmp_path / "lm.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.attention == model.attention
    assert restored.blocks[0].head_dim == HEAD_DIM
    tokens = np.array([[1, 2, 3, 4]], "int32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(restored(tokens)),
        keras.ops.convert_to_numpy(model(tokens)),
        rtol=1e-6,
        atol=1e-6,
    )


def test_without_it_every_config_is_as_before():
    """`head_dim=None` is written nowhere: the settings', a block's, a
    model's and a position scheme's configs are those saved before it."""
    assert "head_dim" not in AttentionSettings().get_config()
    assert "head_dim" not in AttentionSettings(scale=1.0).get_config()
    block = TransformerEncoderBlock(4, FF, attention={"qk_norm": True})
    block(normal(1, 3, 8))
    assert "head_dim" not in block.get_config()["attention"]
    assert block.head_dim == 2 and block.self_attention.key_dim == 2
    model = Transformer(
        vocabulary_size=20,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
        max_sequence_length=8,
    )
    assert "head_dim" not in json.dumps(model.get_config())
    scheme = position_schemes.get("rotary", num_heads=2)
    assert "head_dim" not in scheme.get_config()
    assert position_schemes.get(scheme.get_config()) == scheme


def test_a_model_refuses_heads_that_do_not_fit():
    with pytest.raises(ValueError, match="hidden_dim=10, num_heads=3"):
        TransformerLM(
            vocabulary_size=30,
            num_layers=1,
            hidden_dim=DIM,
            num_heads=HEADS,
            intermediate_dim=FF,
            max_sequence_length=16,
        )
    # Rotary positions turn pairs of a head's features.
    with pytest.raises(ValueError, match="head_dim=5"):
        tiny_lm(head_dim=5)
    # The scheme checks the heads' size, not hidden_dim / num_heads.
    scheme = position_schemes.get("rotary", num_heads=3, head_dim=4)
    assert scheme.check_embedding_dim(10, "hidden_dim") == 10
    with pytest.raises(ValueError, match="head_dim=3"):
        position_schemes.get("rotary", num_heads=3, head_dim=3)
