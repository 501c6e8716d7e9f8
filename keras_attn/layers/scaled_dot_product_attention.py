"""Scaled dot-product attention, section 3.2.1 of the paper."""

import math

import keras
from keras import ops

from keras_attn.layers.fused_attention import (
    fused_dot_product_attention,
    fused_path_runs,
)

# Added to masked scores before the softmax. Finite, so a fully masked row is
# a uniform softmax (then zeroed) rather than `exp(-inf - -inf) = NaN`.
_MASKED_SCORE = -1e9


def _row_has_any_key(mask):
    """`(batch, query_length, key_length)` -> `(batch, query_length, 1, 1)`."""
    return ops.any(mask, axis=-1)[:, :, None, None]


def _attended_keys(mask):
    """Whether some query may attend each key: `(batch, key_length, 1, 1)`.

    A masked key gets weight 0, but `0 * nan = nan`: the values (and, for
    kernels that mask by adding -inf, the keys) at keys no query attends
    are zeroed with this, so a NaN or infinity at a padded position never
    reaches a real one.
    """
    return ops.any(mask, axis=-2)[:, :, None, None]


def _fused_attention(query, key, value, mask, scale, attended_keys):
    """`keras.ops.dot_product_attention`, with fully masked rows zeroed."""
    if mask is not None:
        # Torch's kernel masks by adding -inf to the scores: `nan - inf`
        # is NaN, so the keys no query attends are zeroed too.
        key = ops.where(attended_keys, key, ops.zeros_like(key))
    # (batch, query_length, num_heads, value_dim)
    attended = fused_dot_product_attention(query, key, value, mask=mask, scale=scale)
    if mask is None:
        return attended
    return ops.where(_row_has_any_key(mask), attended, ops.zeros_like(attended))


def _scores(query, key, scale):
    """`Q K^T / sqrt(d_k)`, `(batch, num_heads, query_length, key_length)`.

    In float32 for half-precision inputs, in the inputs' dtype otherwise
    (no cast at all in float32 or float64). float16 tops out at 65504: with
    large activations a float16 `Q K^T` overflows to inf before any scale
    or softmax can help, and the softmax then gives NaN. So float16 query
    and key are cast up before the product (the product itself overflows,
    so casting the scores afterwards is too late). bfloat16 has float32's
    range: its product cannot overflow, and only the scores are cast.
    """
    dtype = keras.backend.standardize_dtype(query.dtype)
    if dtype == "float16":
        query, key = ops.cast(query, "float32"), ops.cast(key, "float32")
    # (batch, num_heads, query_length, key_length)
    scores = ops.einsum("bqhd,bkhd->bhqk", query, key)
    if dtype == "bfloat16":
        scores = ops.cast(scores, "float32")
    return scores * scale


def _attention_weights(query, key, mask, scale):
    """`softmax(Q K^T / sqrt(d_k))`, at least float32, zero where masked."""
    # (batch, num_heads, query_length, key_length)
    scores = _scores(query, key, scale)
    if mask is not None:
        head_mask = mask[:, None, :, :]  # (batch, 1, query_length, key_length)
        scores = ops.where(head_mask, scores, _MASKED_SCORE)
    if scores.shape[-1] == 1:
        # One key: every weight is 1 (`ops.softmax` would warn about it).
        weights = ops.ones_like(scores)
    else:
        weights = ops.softmax(scores, axis=-1)
    if mask is not None:
        weights = ops.where(head_mask, weights, 0.0)
    return weights


def scaled_dot_product_attention(
    query,
    key,
    value,
    mask=None,
    dropout_rate=0.0,
    training=False,
    seed_generator=None,
    return_attention_scores=False,
    use_fused_attention=True,
):
    """Computes `softmax(Q K^T / sqrt(d_k)) V` over several heads at once.

    This is Attention(Q, K, V) of equation (1) in the paper, applied per head.
    Masked positions get zero weight. A query row with no key to attend gets
    zero weight everywhere, so its output is zero (never NaN), in every dtype.

    The softmax runs in float32 even under a mixed-precision policy.

    When neither attention scores nor attention dropout are needed (and
    `use_fused_attention=True`, and values have the keys' head size), the
    work is handed to
    `keras.ops.dot_product_attention`, the backend's fused kernel, with the
    kernel chosen before the call (`keras_attn.layers.fused_attention`):
    cuDNN's flash attention on a GPU where it accepts the call (half
    precision, masks included), XLA's dot-product attention elsewhere, and
    never a failed try. Otherwise the explicit path below computes the same
    equation and can return the weights.

    Args:
        query: tensor `(batch, query_length, num_heads, key_dim)`.
        key: tensor `(batch, key_length, num_heads, key_dim)`.
        value: tensor `(batch, key_length, num_heads, value_dim)`.
        mask: optional boolean tensor `(batch, query_length, key_length)`,
            `True` where a query may attend a key. Defaults to `None`.
        dropout_rate: float, dropout on the attention weights during
            training (section 5.4 applies dropout to sub-layer outputs; this
            is the common extra). Defaults to `0.0`.
        training: bool, whether dropout is active. Defaults to `False`.
        seed_generator: `keras.random.SeedGenerator` for the dropout.
            Defaults to `None`.
        return_attention_scores: bool, whether to also return the attention
            weights. Defaults to `False`.
        use_fused_attention: bool, whether to use
            `keras.ops.dot_product_attention` when possible.
            Defaults to `True`.

    Returns:
        The attended values `(batch, query_length, num_heads, value_dim)`,
        and with `return_attention_scores=True` also the weights
        `(batch, num_heads, query_length, key_length)`.

    Example:

    >>> q = keras.random.normal((2, 5, 4, 8))
    >>> k = v = keras.random.normal((2, 7, 4, 8))
    >>> out = keras_attn.layers.scaled_dot_product_attention(q, k, v)
    >>> tuple(out.shape)
    (2, 5, 4, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.2.1.
    """
    scale = 1.0 / math.sqrt(query.shape[-1])
    attended_keys = None
    if mask is not None:
        attended_keys = _attended_keys(mask)
        value = ops.where(attended_keys, value, ops.zeros_like(value))
    use_dropout = training and dropout_rate > 0.0
    # The fused kernels need `value_dim == key_dim` (jax.nn checks it).
    same_head_dims = query.shape[-1] == value.shape[-1]
    if (
        use_fused_attention
        and same_head_dims
        and not (return_attention_scores or use_dropout)
        and fused_path_runs(query.dtype)
    ):
        return _fused_attention(query, key, value, mask, scale, attended_keys)
    weights = _attention_weights(query, key, mask, scale)
    if keras.backend.standardize_dtype(weights.dtype) != (
        keras.backend.standardize_dtype(value.dtype)
    ):
        # Half precision: the float32 weights back to the values' dtype.
        weights = ops.cast(weights, value.dtype)
    attention_weights = weights
    if use_dropout:
        weights = keras.random.dropout(weights, dropout_rate, seed=seed_generator)
    # (batch, query_length, num_heads, value_dim)
    attended = ops.einsum("bhqk,bkhd->bqhd", weights, value)
    if return_attention_scores:
        return attended, attention_weights
    return attended
