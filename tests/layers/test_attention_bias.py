"""An additive attention bias against NumPy, on every path of the core.

`softmax(Q K^T / sqrt(d_k) + bias)` with masks, written out in NumPy from
the equation, is compared with `scaled_dot_product_attention(bias=...)` and
with `MultiHeadAttention(attention_bias=...)` on the explicit path (scores
returned, or `flash_attention=False`), the fused path, the cached path
(`call_with_key_value`) and `attention_axes`; per-head and broadcast
biases, float16/bfloat16 biases, and fully masked rows (zero, never NaN).
"""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import gradient

from keras_attn.layers import MultiHeadAttention, scaled_dot_product_attention

BATCH, QUERY_LEN, KEY_LEN, HEADS, KEY_DIM, DIM = 2, 5, 4, 2, 4, 8


def normal(*shape, seed=0, scale=1.0):
    return (scale * np.random.default_rng(seed).normal(size=shape)).astype("float32")


def reference(query, key, value, bias=None, mask=None):
    """`softmax(Q K^T / sqrt(d_k) + bias) V` per head, in float64.

    Args:
        query: `(B, T, N, H)`; key `(B, S, N, H)`; value `(B, S, N, Hv)`.
        bias: broadcastable to `(B, N, T, S)`.
        mask: boolean `(B, T, S)` (every head) or `(B, N, T, S)`.

    Returns:
        `(attended (B, T, N, Hv), weights (B, N, T, S))`; a query with no
        key to attend has zero weights.
    """
    query, key, value = (np.asarray(t, "float64") for t in (query, key, value))
    scores = np.einsum("bthd,bshd->bhts", query, key) / np.sqrt(query.shape[-1])
    if bias is not None:
        scores = scores + np.asarray(bias, "float64")
    if mask is None:
        mask = np.ones(scores.shape, bool)
    mask = np.asarray(mask, bool)
    if mask.ndim == 3:
        mask = mask[:, None]
    mask = np.broadcast_to(mask, scores.shape)
    scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    exp = np.where(mask, np.exp(scores - np.where(np.isfinite(row_max), row_max, 0)), 0)
    total = exp.sum(axis=-1, keepdims=True)
    weights = np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)
    return np.einsum("bhts,bshd->bthd", weights, value), weights


def heads(seed=0, value_dim=KEY_DIM):
    return (
        normal(BATCH, QUERY_LEN, HEADS, KEY_DIM, seed=seed),
        normal(BATCH, KEY_LEN, HEADS, KEY_DIM, seed=seed + 1),
        normal(BATCH, KEY_LEN, HEADS, value_dim, seed=seed + 2),
    )


def bias_of(kind, seed=3):
    """Biases of several broadcast shapes, with values a float16 holds exactly."""
    shapes = {
        "per_head": (BATCH, HEADS, QUERY_LEN, KEY_LEN),
        "heads_only": (HEADS, QUERY_LEN, KEY_LEN),  # NumPy broadcasting
        "shared": (1, 1, QUERY_LEN, KEY_LEN),
        "per_key": (BATCH, 1, 1, KEY_LEN),
    }
    return np.round(normal(*shapes[kind], seed=seed, scale=2.0) * 8) / 8


def mask_of(kind):
    """Masks with fully masked rows: `(B, T, S)` or per head `(B, N, T, S)`."""
    if kind == "none":
        return None
    rng = np.random.default_rng(4)
    if kind == "rows":
        mask = rng.random((BATCH, QUERY_LEN, KEY_LEN)) < 0.7
        mask[:, :, 0] = True
        mask[0, 1] = False  # Query 1 of sentence 0 attends nothing.
        mask[1, 3:] = False  # Nor do the last queries of sentence 1.
        return mask
    mask = rng.random((BATCH, HEADS, QUERY_LEN, KEY_LEN)) < 0.7
    mask[..., 0] = True
    mask[0, 1, 2] = False  # Query 2, head 1, sentence 0 only.
    return mask


def fully_masked_rows(mask):
    """`(B, T, N)`: True where a query of a head has no key."""
    if mask is None:
        return np.zeros((BATCH, QUERY_LEN, HEADS), bool)
    mask = mask[:, None] if mask.ndim == 3 else mask
    mask = np.broadcast_to(mask, (BATCH, HEADS, QUERY_LEN, KEY_LEN))
    return ~mask.any(-1).transpose(0, 2, 1)


def numpy(x):
    return ops.convert_to_numpy(ops.cast(x, "float32"))


# (flash_attention, return_attention_scores): the fused kernel runs only for
# (None, False).
FUNCTION_PATHS = {
    "fused": (None, False),
    "explicit": (False, False),
    "scores": (None, True),
}


# 36 cases: side by side, each backend runs its share (`split_cases`). The
# bias varies fastest, so each backend gets every path, bias and mask.
@pytest.mark.split_cases
@pytest.mark.parametrize("bias_kind", ["per_head", "heads_only", "shared", "per_key"])
@pytest.mark.parametrize("mask_kind", ["none", "rows", "per_head"])
@pytest.mark.parametrize("path", FUNCTION_PATHS)
def test_function_matches_numpy(path, bias_kind, mask_kind):
    flash_attention, return_scores = FUNCTION_PATHS[path]
    query, key, value = heads()
    bias, mask = bias_of(bias_kind), mask_of(mask_kind)
    expected, expected_weights = reference(query, key, value, bias, mask)
    result = scaled_dot_product_attention(
        query,
        key,
        value,
        mask=mask,
        bias=bias,
        flash_attention=flash_attention,
        return_attention_scores=return_scores,
    )
    attended, weights = result if return_scores else (result, None)
    attended = numpy(attended)
    np.testing.assert_allclose(attended, expected, atol=1e-5)
    empty = fully_masked_rows(mask)
    np.testing.assert_array_equal(attended[empty], 0.0)
    if return_scores:
        np.testing.assert_allclose(numpy(weights), expected_weights, atol=1e-5)


def test_bias_moves_the_weights():
    # The check can fail: a bias that favours key 0 changes the output.
    query, key, value = heads()
    bias = np.zeros((1, 1, QUERY_LEN, KEY_LEN), "float32")
    bias[..., 0] = 50.0
    _, weights = scaled_dot_product_attention(
        query, key, value, bias=bias, return_attention_scores=True
    )
    np.testing.assert_allclose(numpy(weights)[..., 0], 1.0, atol=1e-6)


@pytest.mark.parametrize("bias_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", FUNCTION_PATHS)
def test_any_float_bias_dtype(bias_dtype, path):
    flash_attention, return_scores = FUNCTION_PATHS[path]
    query, key, value = heads(seed=5)
    bias, mask = bias_of("per_head"), mask_of("rows")
    expected, _ = reference(query, key, value, bias, mask)
    result = scaled_dot_product_attention(
        query,
        key,
        value,
        mask=mask,
        bias=ops.cast(bias, bias_dtype),  # The values are exact in every dtype.
        flash_attention=flash_attention,
        return_attention_scores=return_scores,
    )
    attended = numpy(result[0] if return_scores else result)
    assert keras.backend.standardize_dtype(
        (result[0] if return_scores else result).dtype
    ) == ("float32")
    np.testing.assert_allclose(attended, expected, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("path", FUNCTION_PATHS)
def test_half_precision_with_bias_is_finite_and_zero_on_empty_rows(dtype, path):
    flash_attention, return_scores = FUNCTION_PATHS[path]
    query, key, value = (ops.cast(3.0 * t, dtype) for t in heads(seed=6))
    bias, mask = bias_of("per_head"), mask_of("rows")
    expected, _ = reference(
        *(numpy(t) for t in (query, key, value)), bias=bias, mask=mask
    )

    def attend(q, b):
        result = scaled_dot_product_attention(
            q,
            key,
            value,
            mask=mask,
            bias=b,
            flash_attention=flash_attention,
            return_attention_scores=return_scores,
        )
        return result[0] if return_scores else result

    attended = numpy(attend(query, ops.cast(bias, dtype)))
    assert np.isfinite(attended).all()
    np.testing.assert_array_equal(attended[fully_masked_rows(mask)], 0.0)
    # Inputs rounded to 8 (bfloat16) or 11 (float16) mantissa bits.
    tolerance = 0.1 if dtype == "bfloat16" else 0.02
    np.testing.assert_allclose(
        attended, expected, atol=tolerance * np.abs(expected).max()
    )
    grad = gradient(lambda b: attend(query, b), ops.cast(bias, dtype), jit=False)
    assert np.isfinite(grad).all()


@pytest.mark.parametrize("path", ["fused", "scores"])
def test_bias_gradient_is_finite_and_zero_where_masked(path):
    _, return_scores = FUNCTION_PATHS[path]
    query, key, value = heads(seed=7)
    mask = mask_of("rows")

    def attend(bias):
        result = scaled_dot_product_attention(
            query,
            key,
            value,
            mask=mask,
            bias=bias,
            return_attention_scores=return_scores,
        )
        return result[0] if return_scores else result

    grad = gradient(attend, ops.convert_to_tensor(bias_of("per_head")))
    assert np.isfinite(grad).all()
    np.testing.assert_array_equal(grad[np.broadcast_to(~mask[:, None], grad.shape)], 0)
    assert np.abs(grad).max() > 0


def test_fused_kernel_gets_the_bias(monkeypatch):
    calls = []
    original = ops.dot_product_attention

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", recording)
    query, key, value = heads()
    scaled_dot_product_attention(
        query, key, value, mask=mask_of("rows"), bias=bias_of("per_head")
    )
    (kwargs,) = calls
    assert kwargs["bias"] is not None
    if keras.backend.backend() == "torch":
        # Keras's torch kernel takes one of them: the mask is in the bias.
        assert kwargs["mask"] is None
    else:
        assert kwargs["mask"] is not None


@pytest.mark.parametrize(
    "bias, error, match",
    [
        (np.ones((QUERY_LEN, KEY_LEN), "int32"), TypeError, r"bias\.dtype=int32"),
        (np.ones((BATCH, HEADS, QUERY_LEN, 3), "float32"), ValueError, r"bias\.shape"),
        (np.ones((1, BATCH, HEADS, QUERY_LEN, KEY_LEN), "float32"), ValueError, "bias"),
    ],
)
def test_bad_bias_is_refused(bias, error, match):
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    query, value = normal(BATCH, QUERY_LEN, DIM), normal(BATCH, KEY_LEN, DIM)
    with pytest.raises(error, match=f"attention_{match}"):
        layer(query, value, attention_bias=bias)


# --- MultiHeadAttention ------------------------------------------------------


def layer_reference(layer, query, value, bias=None, mask=None):
    """The layer in NumPy from its weights: projections, `reference`, output."""
    wq, bq = (numpy(w) for w in layer.query_dense.weights)
    wk, bk = (numpy(w) for w in layer.key_dense.weights)
    wv, bv = (numpy(w) for w in layer.value_dense.weights)
    wo, bo = (numpy(w) for w in layer.output_dense.weights)
    q = np.einsum("btd,dnh->btnh", query, wq) + bq
    k = np.einsum("bsd,dnh->bsnh", value, wk) + bk
    v = np.einsum("bsd,dnh->bsnh", value, wv) + bv
    attended, weights = reference(q, k, v, bias, mask)
    return np.einsum("btnh,nhd->btd", attended, wo) + bo, weights


def built_layer(**kwargs):
    layer = MultiHeadAttention(
        num_heads=HEADS, key_dim=KEY_DIM, bias_initializer="random_normal", **kwargs
    )
    # Built, not called: an eager call compiles every op again on JAX.
    layer.build((1, QUERY_LEN, DIM), (1, KEY_LEN, DIM))
    return layer


LAYER_PATHS = ["fused", "flash_attention_false", "scores", "cached", "cached_scores"]


def call_layer(layer, path, query, value, bias, mask):
    """`(output, scores or None)` of the layer on one of its paths."""
    scores = path in ("scores", "cached_scores")
    if path.startswith("cached"):
        keys, values = layer.compute_key_value(value)
        result = layer.call_with_key_value(
            query,
            keys,
            values,
            attention_mask=mask,
            attention_bias=bias,
            return_attention_scores=scores,
        )
    else:
        result = layer(
            query,
            value,
            attention_mask=mask,
            attention_bias=bias,
            return_attention_scores=scores,
        )
    return result if scores else (result, None)


# Thirty cases: side by side, each backend runs its share (`split_cases`),
# every path, bias and mask among them.
@pytest.mark.split_cases
@pytest.mark.parametrize("path", LAYER_PATHS)
@pytest.mark.parametrize("bias_kind", ["per_head", "heads_only", "per_key"])
@pytest.mark.parametrize("mask_kind", ["rows", "per_head"])
def test_layer_matches_numpy(path, bias_kind, mask_kind):
    flash_attention = False if path == "flash_attention_false" else None
    layer = built_layer(flash_attention=flash_attention)
    query, value = normal(BATCH, QUERY_LEN, DIM, seed=8), normal(BATCH, KEY_LEN, DIM)
    bias, mask = bias_of(bias_kind), mask_of(mask_kind)
    expected, expected_weights = layer_reference(layer, query, value, bias, mask)
    output, scores = call_layer(layer, path, query, value, bias, mask)
    output = numpy(output)
    np.testing.assert_allclose(output, expected, atol=1e-4)
    if scores is not None:
        np.testing.assert_allclose(numpy(scores), expected_weights, atol=1e-5)
    if mask_kind == "rows":
        # No key to attend: the attended values are zero, the output is the
        # output projection's bias, whatever the attention bias says.
        empty = ~mask.any(-1)
        bias_out = numpy(layer.output_dense.bias)
        np.testing.assert_allclose(
            output[empty], np.broadcast_to(bias_out, output[empty].shape), atol=1e-6
        )


@pytest.mark.parametrize("path", LAYER_PATHS)
def test_zero_bias_equals_no_bias(path):
    layer = built_layer()
    query, value = normal(BATCH, QUERY_LEN, DIM, seed=9), normal(BATCH, KEY_LEN, DIM)
    mask = mask_of("rows")
    without, without_scores = call_layer(layer, path, query, value, None, mask)
    zero = np.zeros((BATCH, HEADS, QUERY_LEN, KEY_LEN), "float32")
    with_zero, zero_scores = call_layer(layer, path, query, value, zero, mask)
    np.testing.assert_allclose(numpy(with_zero), numpy(without), atol=1e-6)
    if without_scores is not None:
        np.testing.assert_allclose(numpy(zero_scores), numpy(without_scores), atol=1e-6)


@pytest.mark.parametrize("use_causal_mask", [False, True])
def test_layer_bias_with_causal_mask_and_keras_masks(use_causal_mask):
    layer = built_layer()
    x = normal(BATCH, QUERY_LEN, DIM, seed=10)
    padding = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
    bias = np.round(normal(HEADS, QUERY_LEN, QUERY_LEN, seed=11) * 8) / 8
    mask = padding[:, :, None] & padding[:, None, :]
    if use_causal_mask:
        mask = mask & np.tril(np.ones((QUERY_LEN, QUERY_LEN), bool))
    expected, _ = layer_reference(layer, x, x, bias, mask)
    for flash_attention_path in (False, True):
        output = layer(
            x,
            x,
            query_mask=padding,
            value_mask=padding,
            use_causal_mask=use_causal_mask,
            attention_bias=bias,
            return_attention_scores=flash_attention_path,
        )
        output = output[0] if flash_attention_path else output
        np.testing.assert_allclose(numpy(output), expected, atol=1e-4)


def axes_reference(layer, query, value, bias, attention_axes):
    """`layer_reference` for rank-4 inputs: the axis not attended over joins
    the batch, the attended ones are flattened (row-major)."""
    batch, a, b, dim = query.shape
    if attention_axes == (1, 2):
        flat_query, flat_value = (
            query.reshape(batch, a * b, dim),
            value.reshape(batch, a * b, dim),
        )
        # (batch, heads, a, b, a, b) -> (batch, heads, a * b, a * b)
        flat_bias = np.broadcast_to(bias, (batch, HEADS, a, b, a, b)).reshape(
            batch, HEADS, a * b, a * b
        )
        output, _ = layer_reference(layer, flat_query, flat_value, flat_bias)
        return output.reshape(batch, a, b, -1)
    # attention_axes=(2,): (batch, a, heads, b, b) -> (batch * a, heads, b, b)
    flat_bias = np.broadcast_to(bias, (batch, a, HEADS, b, b)).reshape(
        batch * a, HEADS, b, b
    )
    output, _ = layer_reference(
        layer,
        query.reshape(batch * a, b, dim),
        value.reshape(batch * a, b, dim),
        flat_bias,
    )
    return output.reshape(batch, a, b, -1)


# Eight cases: side by side, each backend runs its share (`split_cases`).
@pytest.mark.split_cases
@pytest.mark.parametrize("return_scores", [False, True])
@pytest.mark.parametrize(
    "attention_axes, bias_shape",
    [
        ((2,), (2, 3, HEADS, 4, 4)),  # Keras's scores layout
        ((2,), (HEADS, 4, 4)),  # broadcast over batch and the other axis
        ((1, 2), (2, HEADS, 3, 4, 3, 4)),
        ((1, 2), (1, HEADS, 1, 4, 1, 4)),
    ],
)
def test_attention_axes_bias_matches_numpy(attention_axes, bias_shape, return_scores):
    query, value = normal(2, 3, 4, DIM, seed=12), normal(2, 3, 4, DIM, seed=13)
    layer = MultiHeadAttention(
        num_heads=HEADS,
        key_dim=KEY_DIM,
        attention_axes=attention_axes,
        bias_initializer="random_normal",
    )
    layer(query, value)
    bias = np.round(normal(*bias_shape, seed=14) * 8) / 8
    expected = axes_reference(layer, query, value, bias, attention_axes)
    result = layer(
        query, value, attention_bias=bias, return_attention_scores=return_scores
    )
    output = result[0] if return_scores else result
    np.testing.assert_allclose(numpy(output), expected, atol=1e-4)
    if return_scores:
        assert (
            tuple(result[1].shape)
            == layer.compute_output_spec(
                keras.KerasTensor(query.shape),
                keras.KerasTensor(value.shape),
                return_attention_scores=True,
            )[1].shape
        )


@pytest.mark.parametrize("dtype", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("bias_dtype", ["float16", "bfloat16", "float32"])
def test_mixed_precision_layer_takes_any_float_bias(dtype, bias_dtype):
    layer = built_layer(dtype=dtype)
    query, value = normal(BATCH, QUERY_LEN, DIM, seed=15), normal(BATCH, KEY_LEN, DIM)
    bias, mask = bias_of("per_head"), mask_of("rows")
    expected, _ = layer_reference(layer, query, value, bias, mask)
    for path in ("fused", "scores", "cached"):
        output, _ = call_layer(
            layer, path, query, value, ops.cast(bias, bias_dtype), mask
        )
        output = numpy(output)
        assert np.isfinite(output).all()
        np.testing.assert_allclose(output, expected, atol=0.05 * np.abs(expected).max())


def test_symbolic_call_with_bias():
    query = keras.Input((QUERY_LEN, DIM))
    value = keras.Input((KEY_LEN, DIM))
    bias = keras.Input((HEADS, QUERY_LEN, KEY_LEN))
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM)
    model = keras.Model([query, value, bias], layer(query, value, attention_bias=bias))
    q, v = normal(BATCH, QUERY_LEN, DIM), normal(BATCH, KEY_LEN, DIM)
    b = bias_of("per_head")
    np.testing.assert_allclose(
        numpy(model([q, v, b])), layer_reference(layer, q, v, b)[0], atol=1e-4
    )
