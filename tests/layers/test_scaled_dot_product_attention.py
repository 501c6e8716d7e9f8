"""`scaled_dot_product_attention` against equation (1) of the paper in NumPy."""

import keras
import numpy as np
import pytest
from keras import ops
from layer_harness import gradient

from keras_attn.layers import scaled_dot_product_attention

BATCH, QUERY_LEN, KEY_LEN, HEADS, KEY_DIM = 2, 5, 4, 2, 4


def reference_attention(query, key, value, mask=None):
    """`softmax(Q K^T / sqrt(d_k)) V` per head, in float64.

    A query row with no key to attend has zero weights (the library's
    documented choice; the paper does not define this case).

    Returns:
        `(attended (B, T, H, Dv), weights (B, H, T, S))`.
    """
    query, key, value = (np.asarray(t, "float64") for t in (query, key, value))
    scores = np.einsum("bthd,bshd->bhts", query, key) / np.sqrt(query.shape[-1])
    if mask is None:
        mask = np.ones((scores.shape[0], scores.shape[2], scores.shape[3]), bool)
    head_mask = np.broadcast_to(np.asarray(mask)[:, None], scores.shape)
    scores = np.where(head_mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    exp = np.where(head_mask, np.exp(scores - row_max), 0.0)
    total = exp.sum(axis=-1, keepdims=True)
    weights = np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)
    attended = np.einsum("bhts,bshd->bthd", weights, value)
    return attended, weights


def random_qkv(seed=0, dtype="float32", value_dim=KEY_DIM):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(BATCH, QUERY_LEN, HEADS, KEY_DIM)).astype(dtype)
    key = rng.normal(size=(BATCH, KEY_LEN, HEADS, KEY_DIM)).astype(dtype)
    value = rng.normal(size=(BATCH, KEY_LEN, HEADS, value_dim)).astype(dtype)
    return query, key, value


def make_mask(kind):
    """Masks `(B, T, S)`, `True` = may attend, built in NumPy."""
    if kind == "none":
        return None
    causal = np.tril(np.ones((QUERY_LEN, KEY_LEN), bool))[None]
    key_padding = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)[:, None, :]
    query_padding = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)[:, :, None]
    masks = {
        "padding": np.broadcast_to(key_padding, (BATCH, QUERY_LEN, KEY_LEN)),
        "causal": np.broadcast_to(causal, (BATCH, QUERY_LEN, KEY_LEN)),
        # Padded queries give fully masked rows.
        "padding_and_causal": key_padding & query_padding & causal,
    }
    return masks[kind]


# (flash_attention, return_attention_scores): the fused kernel runs only
# for (None, False); the other three exercise the explicit path.
PATHS = [(None, False), (False, False), (False, True), (None, True)]


@pytest.mark.parametrize("value_dim", [KEY_DIM, 3])
@pytest.mark.parametrize("flash_attention, return_scores", PATHS)
@pytest.mark.parametrize(
    "mask_kind", ["none", "padding", "causal", "padding_and_causal"]
)
def test_matches_numpy_equation(flash_attention, return_scores, mask_kind, value_dim):
    query, key, value = random_qkv(value_dim=value_dim)
    mask = make_mask(mask_kind)
    expected, expected_weights = reference_attention(query, key, value, mask)
    result = scaled_dot_product_attention(
        query,
        key,
        value,
        mask=None if mask is None else ops.convert_to_tensor(mask),
        return_attention_scores=return_scores,
        flash_attention=flash_attention,
    )
    if return_scores:
        attended, weights = result
        assert tuple(weights.shape) == (BATCH, HEADS, QUERY_LEN, KEY_LEN)
        np.testing.assert_allclose(
            ops.convert_to_numpy(weights), expected_weights, atol=1e-5
        )
    else:
        attended = result
    assert tuple(attended.shape) == (BATCH, QUERY_LEN, HEADS, value_dim)
    np.testing.assert_allclose(ops.convert_to_numpy(attended), expected, atol=1e-5)


@pytest.mark.parametrize(
    "flash_attention, return_scores, training, value_dim, expect_fused",
    [
        (None, False, False, KEY_DIM, True),
        (None, False, True, KEY_DIM, False),  # Attention dropout.
        (None, True, False, KEY_DIM, False),  # Weights wanted.
        (None, False, False, 3, False),  # The fused kernels need d_v == d_k.
        (False, False, False, KEY_DIM, False),
    ],
)
def test_fused_kernel_is_used_exactly_when_possible(
    monkeypatch, flash_attention, return_scores, training, value_dim, expect_fused
):
    calls = []
    fused = ops.dot_product_attention

    def counting(*args, **kwargs):
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", counting)
    query, key, value = random_qkv(value_dim=value_dim)
    scaled_dot_product_attention(
        query,
        key,
        value,
        dropout_rate=0.5,
        training=training,
        seed_generator=keras.random.SeedGenerator(1),
        return_attention_scores=return_scores,
        flash_attention=flash_attention,
    )
    assert bool(calls) == expect_fused


def test_integer_mask_is_accepted_like_boolean():
    # merge_attention_masks accepts 0/1 masks; attention itself takes bool.
    from keras_attn.layers import merge_attention_masks

    query, key, value = random_qkv(seed=1)
    bool_mask = make_mask("padding")
    merged = merge_attention_masks(
        ops.zeros((BATCH, QUERY_LEN, 1)),
        ops.zeros((BATCH, KEY_LEN, 1)),
        attention_mask=ops.convert_to_tensor(bool_mask.astype("int32")),
    )
    out = scaled_dot_product_attention(query, key, value, mask=merged)
    expected, _ = reference_attention(query, key, value, bool_mask)
    np.testing.assert_allclose(ops.convert_to_numpy(out), expected, atol=1e-5)


# --- The worked "Hello World" example -------------------------------------

HELLO_X = np.array([[1, 0, 1, 0], [0, 1, 0, 1]], "float64")
HELLO_WQ = np.array(
    [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.7, 0.8, 0.9], [0.1, 0.2, 0.3]]
)
HELLO_WK = np.array(
    [[0.2, 0.3, 0.4], [0.5, 0.6, 0.7], [0.8, 0.9, 0.1], [0.2, 0.3, 0.4]]
)
HELLO_WV = np.array(
    [[0.3, 0.4, 0.5], [0.6, 0.7, 0.8], [0.9, 0.1, 0.2], [0.3, 0.4, 0.5]]
)
# The values the notes print, rounded to 3 decimals.
NOTES_QUERY = np.array([[0.8, 1.0, 1.2], [0.5, 0.7, 0.9]])
NOTES_WEIGHTS = np.array([[0.474, 0.526], [0.480, 0.520]])
NOTES_OUTPUT = np.array([[1.042, 0.785, 0.985], [1.044, 0.788, 0.988]])
# Which of the notes' numbers agree with the exact computation to +-0.002.
# Exact (NumPy, float64):
#   weights = [[0.474043, 0.525957], [0.474043, 0.525957]]
#   output  = [[1.042213, 0.815574, 1.015574], [1.042213, 0.815574, 1.015574]]
# The two rows are identical because q_i . (k_2 - k_1) = 0.18 for both
# queries, so both rows see the same score gap (0.18 / sqrt(3)). The notes'
# second row of weights (0.480, 0.520) is off by 0.006, and their output's
# second and third columns (0.785/0.985, 0.788/0.988) are off by about
# 0.03; only the first output column (1.042, 1.044) rounds correctly.
NOTES_WEIGHTS_MATCH = np.array([[True, True], [False, False]])
NOTES_OUTPUT_MATCH = np.array([[True, False, False], [True, False, False]])


def hello_world_reference():
    query, key, value = HELLO_X @ HELLO_WQ, HELLO_X @ HELLO_WK, HELLO_X @ HELLO_WV
    scores = query @ key.T / np.sqrt(3.0)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return query, key, value, weights, weights @ value


def test_hello_world_notes_values():
    query, _, _, weights, output = hello_world_reference()
    np.testing.assert_allclose(query, NOTES_QUERY, atol=1e-12)
    np.testing.assert_array_equal(
        np.abs(weights - NOTES_WEIGHTS) <= 0.002, NOTES_WEIGHTS_MATCH
    )
    np.testing.assert_array_equal(
        np.abs(output - NOTES_OUTPUT) <= 0.002, NOTES_OUTPUT_MATCH
    )


@pytest.mark.parametrize("use_fused", [True, False])
def test_hello_world_scaled_dot_product_attention(use_fused):
    query, key, value, weights, output = hello_world_reference()

    def heads(x):  # (length, 3) -> (1, length, 1, 3)
        return ops.convert_to_tensor(x[None, :, None, :].astype("float32"))

    attended = scaled_dot_product_attention(
        heads(query),
        heads(key),
        heads(value),
        flash_attention=None if use_fused else False,
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(attended)[0, :, 0], output, atol=1e-6
    )
    _, scores = scaled_dot_product_attention(
        heads(query), heads(key), heads(value), return_attention_scores=True
    )
    np.testing.assert_allclose(ops.convert_to_numpy(scores)[0, 0], weights, atol=1e-6)


# --- Fully masked rows ------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("use_fused, return_scores", [(True, False), (False, True)])
def test_fully_masked_row_is_zero_and_finite(dtype, use_fused, return_scores):
    query, key, value = (ops.convert_to_tensor(t, dtype) for t in random_qkv(seed=2))
    mask = np.ones((BATCH, QUERY_LEN, KEY_LEN), bool)
    mask[0, 1] = False  # Query 1 of sentence 0 may attend nothing.
    mask[1] = False  # Nor may any query of sentence 1.
    mask = ops.convert_to_tensor(mask)

    def attend(q):
        return scaled_dot_product_attention(
            q,
            key,
            value,
            mask=mask,
            return_attention_scores=return_scores,
            flash_attention=None if use_fused else False,
        )

    result = attend(query)
    attended, weights = result if return_scores else (result, None)
    assert keras.backend.standardize_dtype(attended.dtype) == dtype
    attended = ops.convert_to_numpy(ops.cast(attended, "float32"))
    assert np.all(np.isfinite(attended))
    np.testing.assert_array_equal(attended[0, 1], 0.0)
    np.testing.assert_array_equal(attended[1], 0.0)
    assert np.any(attended[0, 0] != 0.0)
    if return_scores:
        weights = ops.convert_to_numpy(ops.cast(weights, "float32"))
        np.testing.assert_array_equal(weights[0, :, 1], 0.0)
        np.testing.assert_array_equal(weights[1], 0.0)
        np.testing.assert_allclose(weights[0, :, 0].sum(-1), 1.0, atol=1e-2)

    def attended_only(q):
        out = attend(q)
        return out[0] if return_scores else out

    # XLA:CPU cannot compile the jitted float16 gradient of JAX's fused
    # attention ("precision F16_F16_F32 is not supported by dot_general on
    # CPU"), a JAX/XLA limitation; op by op it runs.
    grad = gradient(attended_only, query, jit=dtype != "float16")
    assert np.all(np.isfinite(grad))
    # The fully masked queries do not influence anything.
    np.testing.assert_array_equal(grad[1], 0.0)
    np.testing.assert_array_equal(grad[0, 1], 0.0)


# --- Arguments ---------------------------------------------------------------


def test_use_fused_attention_is_not_an_argument():
    query, key, value = random_qkv(seed=3)
    with pytest.raises(TypeError, match="use_fused_attention"):
        scaled_dot_product_attention(query, key, value, use_fused_attention=False)


def test_flash_attention_true_refuses_scores_and_dropout():
    query, key, value = random_qkv()
    with pytest.raises(ValueError, match="Returning attention scores is not"):
        scaled_dot_product_attention(
            query, key, value, flash_attention=True, return_attention_scores=True
        )
    with pytest.raises(ValueError, match="Dropout is not supported"):
        scaled_dot_product_attention(
            query, key, value, flash_attention=True, dropout_rate=0.1
        )
