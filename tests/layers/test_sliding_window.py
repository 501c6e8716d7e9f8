"""Sliding-window attention (`AttentionSettings(sliding_window=...)`): against
NumPy on the full and the key/value path (queries placed at `start_index`),
with padding and fully masked rows, under every `flash_attention`; cached
decoding through a stack of blocks equal to one full pass; a saved block."""

import keras
import numpy as np
import pytest
from keras import ops
from test_scaled_dot_product_attention import reference_attention

from keras_attn.layers import (
    AttentionSettings,
    MultiHeadAttention,
    TransformerDecoderBlock,
)

BATCH, LENGTH, DIM, HEADS, HEAD_DIM, WINDOW = 2, 6, 8, 2, 4, 3
# The second row is left-padded: its first queries' windows hold padded keys
# only (fully masked rows, which must give zeros, never NaN).
PADDING = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]], bool)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def numpy_window(query_length, key_length, window, causal, query_offset=0):
    """Mistral's window: key `j` visible to query `i` iff `|i - j| < window`
    (and `j <= i` when causal), `i` counted from `query_offset`."""
    i = np.arange(query_length)[:, None] + query_offset
    j = np.arange(key_length)[None, :]
    visible = np.abs(i - j) < window
    return visible & (j <= i) if causal else visible


def numpy_layer(layer, x, mask):
    """`layer`'s self-attention over `x` in NumPy from its weights, the heads
    attended by `reference_attention` under `mask` `(batch, T, S)`."""
    w = {
        "/".join(v.path.split("/")[-2:]): ops.convert_to_numpy(v) for v in layer.weights
    }
    q, k, v = (
        np.einsum("btm,mhd->bthd", x, w[f"{name}/kernel"]) + w[f"{name}/bias"]
        for name in ("query", "key", "value")
    )
    attended, weights = reference_attention(q, k, v, mask)
    output = np.einsum("bthd,hdm->btm", attended, w["attention_output/kernel"])
    return output + w["attention_output/bias"], weights


@pytest.fixture(scope="module")
def layers():
    """The same weights under each `flash_attention` value."""
    built = {}
    for flash in (None, True, False):
        layer = MultiHeadAttention(
            HEADS, HEAD_DIM, sliding_window=WINDOW, flash_attention=flash
        )
        layer.build((None, LENGTH, DIM), (None, LENGTH, DIM))
        built[flash] = layer
    rng = np.random.default_rng(1)
    weights = [0.5 * rng.normal(size=w.shape) for w in built[None].get_weights()]
    for layer in built.values():
        layer.set_weights(weights)
    return built


@pytest.mark.parametrize("causal", [True, False])
def test_call_matches_numpy_with_padding(layers, causal):
    x = normal(BATCH, LENGTH, DIM, seed=2)
    mask = PADDING[:, None, :] & numpy_window(LENGTH, LENGTH, WINDOW, causal)
    expected, expected_weights = numpy_layer(layers[None], x, mask)
    for flash, layer in layers.items():
        out = layer(x, x, value_mask=PADDING, use_causal_mask=causal)
        np.testing.assert_allclose(
            ops.convert_to_numpy(out), expected, atol=1e-5, err_msg=f"{flash=}"
        )
    out, weights = layers[False](
        x, x, value_mask=PADDING, use_causal_mask=causal, return_attention_scores=True
    )
    weights = ops.convert_to_numpy(weights)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    # Query 0 of the padded row sees padded keys only: zeros, not NaN.
    assert np.isfinite(ops.convert_to_numpy(out)).all()
    assert not weights[1, :, 0].any()
    # The window changes the numbers (this test can fail).
    no_window = PADDING[:, None, :] & numpy_window(LENGTH, LENGTH, LENGTH, causal)
    assert np.abs(numpy_layer(layers[None], x, no_window)[0] - expected).max() > 1e-2


def test_key_value_path_places_queries_at_start_index(layers):
    layer = layers[None]
    x = normal(BATCH, LENGTH, DIM, seed=3)
    keys, values = layer.compute_key_value(x)
    # Bidirectional, from 0: the blocks' full pass (the encoder's).
    both = layer.call_with_key_value(
        x, keys, values, attention_mask=np.repeat(PADDING[:, None, :], LENGTH, 1)
    )
    expected, _ = numpy_layer(
        layer, x, PADDING[:, None, :] & numpy_window(LENGTH, LENGTH, WINDOW, False)
    )
    np.testing.assert_allclose(ops.convert_to_numpy(both), expected, atol=1e-5)
    # The last two queries at positions 4 and 5 (a cached step), the caller
    # giving the causal mask; an int and a tensor index alike.
    expected, _ = numpy_layer(
        layer, x, PADDING[:, None, :] & numpy_window(LENGTH, LENGTH, WINDOW, True)
    )
    causal = PADDING[:, None, :] & numpy_window(2, LENGTH, LENGTH, True, 4)
    for start in (4, ops.convert_to_tensor(4, "int32")):
        step = layer.call_with_key_value(
            x[:, 4:], keys, values, attention_mask=causal, start_index=start
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(step), expected[:, 4:], atol=1e-5
        )


def test_cached_decoding_through_a_block_equals_the_full_pass():
    settings = AttentionSettings(sliding_window=2, num_key_value_heads=1)
    target, source = normal(BATCH, LENGTH, DIM, seed=4), normal(BATCH, 5, DIM, seed=5)
    block = TransformerDecoderBlock(HEADS, 16, attention=settings)
    full = ops.convert_to_numpy(block(target, source))
    # Cross-attention attends every encoder position.
    assert block.self_attention.sliding_window == 2
    assert block.cross_attention.sliding_window is None
    # A prefill, then steps of 2 positions past the window (each row of a
    # step has its own window) at a tensor index (the decoding loop's).
    slots = ops.zeros((BATCH, LENGTH, 1, DIM // HEADS))
    cache, cross = (slots, slots), block.compute_cross_attention_cache(source)
    outputs, index = [], 0
    for size in (2, 2, 2):
        position = ops.convert_to_tensor(index, "int32") if index else 0
        out, cache = block.call_cached(
            target[:, index : index + size],
            cache,
            position,
            cross_attention_cache=cross,
        )
        outputs.append(ops.convert_to_numpy(out))
        index += size
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=1e-5)
    # Without the window the same weights give other numbers past it.
    wide = TransformerDecoderBlock(
        HEADS, 16, attention=settings.replace(sliding_window=None)
    )
    wide.build(target.shape, source.shape)
    wide.set_weights(block.get_weights())
    difference = np.abs(ops.convert_to_numpy(wide(target, source)) - full)
    assert (
        difference[:, :2].max() < 1e-5
        and difference[:, 2:].max(axis=(0, 2)).min() > 1e-3
    )


def test_a_saved_block_keeps_its_window(tmp_path):
    inputs = keras.Input((LENGTH, DIM))
    block = TransformerDecoderBlock(
        HEADS, 16, attention=AttentionSettings(sliding_window=2)
    )
    model = keras.Model(inputs, block(inputs))
    path = str(tmp_path / "block.keras")
    model.save(path)
    restored = keras.saving.load_model(path).layers[1]
    assert restored.attention == AttentionSettings(sliding_window=2)
    assert restored.self_attention.sliding_window == 2
    x = normal(BATCH, LENGTH, DIM, seed=6)
    np.testing.assert_allclose(
        ops.convert_to_numpy(restored(x)), ops.convert_to_numpy(block(x)), atol=1e-6
    )
