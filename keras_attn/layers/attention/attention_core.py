"""The attention core: the one place where keras-attn computes attention.

`compute_attention` takes projected heads `(batch, length, num_heads,
head_dim)` and computes

    softmax(cap(Q K^T * scale) + bias, masked) V

(equation (1) of the paper, with an optional additive bias for relative
positions, ALiBi or any other score modification, and Gemma 2's optional
soft cap of the logits, `cap(s) = c * tanh(s / c)`). Every caller goes
through it: `scaled_dot_product_attention`, and `MultiHeadAttention` on
each of its paths (explicit, fused, cached, `attention_axes`, sliding
window). Two ways to the same numbers:

- the fused path, `keras.ops.dot_product_attention` with its kernel chosen
  up front (`keras_attn.layers.attention.fused_attention`), when neither the weights
  nor attention dropout nor a soft cap are needed (Keras's kernels cap
  logits only with JAX on a TPU);
- the explicit path below, which can return the weights.

Keys and values may have fewer heads than the queries (grouped-query and
multi-query attention, `keras_attn.layers.attention.grouped_heads`).

Masks are boolean, `True` meaning "may attend". A query row with no key to
attend gets zero weights and a zero output, never NaN, in every dtype.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_attn.layers.attention.fused_attention import (
    fused_dot_product_attention,
    fused_path_runs,
)
from keras_attn.layers.attention.grouped_heads import (
    check_grouped_heads,
    grouped_scores,
    grouped_weighted_values,
    per_key_head,
)
from keras_attn.layers.attention.masking import causal_mask
from keras_attn.layers.fast_dropout import fast_dropout

# Added to masked scores before the softmax. Finite, so a fully masked row is
# a uniform softmax (then zeroed) rather than `exp(-inf - -inf) = NaN`.
_MASKED_SCORE = -1e9


def as_attention_bias(bias, argument_name="bias", scores_shape=None):
    """An additive attention bias, checked (`None` stays `None`).

    Args:
        bias: `None`, or a float tensor (any float dtype) broadcastable to
            `(batch, num_heads, query_length, key_length)`.
        argument_name: str, the argument's name for error messages.
            Defaults to `"bias"`.
        scores_shape: optional static shape the bias must broadcast to
            (`None` for an unknown size). Defaults to `None`, meaning any
            shape of rank 4 or less.

    Returns:
        `bias` (a NumPy array or list as an array), or `None`.
    """
    if bias is None:
        return None
    if not hasattr(bias, "dtype"):
        bias = np.asarray(bias, dtype=keras.config.floatx())
    dtype = keras.backend.standardize_dtype(bias.dtype)
    if "float" not in dtype:
        raise TypeError(
            f"`{argument_name}` must be a float tensor, added to the attention "
            f"scores. Received: {argument_name}.dtype={dtype}"
        )
    target = (None,) * 4 if scores_shape is None else tuple(scores_shape)
    shape = tuple(bias.shape)
    if len(shape) > len(target) or any(
        size not in (None, 1) and wanted is not None and size != wanted
        for size, wanted in zip(shape[::-1], target[::-1])
    ):
        expected = (
            "(batch, num_heads, query_length, key_length)"
            if scores_shape is None
            else f"the attention scores' shape {target}"
        )
        raise ValueError(
            f"`{argument_name}` must broadcast to {expected}. "
            f"Received: {argument_name}.shape={shape}"
        )
    return bias


def _heads_mask(mask):
    """A mask as boolean `(batch, heads, query_length, key_length)` (axes of
    1 broadcast): a 3-D `(batch, query_length, key_length)` mask gets a heads
    axis, lower ranks leading axes."""
    if mask is None:
        return None
    if keras.backend.standardize_dtype(mask.dtype) != "bool":
        # Not checked (the callers did): cast, as Keras's
        # `_compute_attention` casts a mask an override hands it.
        mask = ops.cast(mask, "bool")
    rank = len(mask.shape)
    if rank > 4:
        raise ValueError(
            "`mask` must broadcast to (batch, num_heads, query_length, "
            f"key_length). Received: mask.shape={tuple(mask.shape)}"
        )
    if rank == 3:
        return mask[:, None]  # (batch, 1, query_length, key_length)
    for _ in range(4 - rank):
        mask = mask[None]
    return mask


def _heads_last(per_head):
    """`(batch, heads, length)` -> `(batch, length, heads, 1)`, to select
    rows of `(batch, length, heads, dim)` tensors."""
    if per_head.shape[1] == 1:
        # One reshape, as the masks shared by every head always had.
        batch_size, _, length = ops.shape(per_head)
        return ops.reshape(per_head, (batch_size, length, 1, 1))
    return ops.transpose(per_head, (0, 2, 1))[..., None]


def _scores(query, key, scale):
    """`Q K^T * scale`, `(batch, num_heads, query_length, key_length)`.

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
    if key.shape[2] == query.shape[2]:
        # (batch, num_heads, query_length, key_length)
        scores = ops.einsum("bqhd,bkhd->bhqk", query, key)
    else:
        # (batch, num_heads, query_length, key_length), keys not repeated
        scores = grouped_scores(query, key)
    if dtype == "bfloat16":
        scores = ops.cast(scores, "float32")
    return scores * scale


def _attention_weights(query, key, mask, bias, scale, logit_soft_cap=None):
    """`softmax(cap(Q K^T * scale) + bias)`, at least float32, zero where
    masked."""
    # (batch, num_heads, query_length, key_length)
    scores = _scores(query, key, scale)
    if logit_soft_cap is not None:
        # Gemma 2's cap: every logit in (-cap, cap), smoothly.
        scores = ops.tanh(scores / logit_soft_cap) * logit_soft_cap
    if bias is not None:
        if keras.backend.standardize_dtype(bias.dtype) != scores.dtype:
            bias = ops.cast(bias, scores.dtype)
        scores = scores + bias
    if mask is not None:
        scores = ops.where(mask, scores, _MASKED_SCORE)
    if scores.shape[-1] == 1:
        # One key: every weight is 1 (`ops.softmax` would warn about it).
        weights = ops.ones_like(scores)
    else:
        weights = ops.softmax(scores, axis=-1)
    if mask is not None:
        weights = ops.where(mask, weights, 0.0)
    return weights


def _fused_attention(query, key, value, mask, bias, scale, is_causal):
    """The fused kernel, with fully masked rows zeroed."""
    # (batch, query_length, num_heads, value_dim)
    attended = fused_dot_product_attention(
        query, key, value, mask=mask, bias=bias, scale=scale, is_causal=is_causal
    )
    if mask is None:
        return attended
    # (batch, query_length, heads or 1, 1)
    row_has_a_key = _heads_last(ops.any(mask, axis=-1))
    return ops.where(row_has_a_key, attended, 0.0)


def compute_attention(
    query,
    key,
    value,
    mask=None,
    bias=None,
    is_causal=False,
    scale=None,
    dropout_rate=0.0,
    training=False,
    seed_generator=None,
    return_attention_scores=False,
    flash_attention=None,
    masked_keys_are_finite=False,
    logit_soft_cap=None,
):
    """Computes `softmax(cap(Q K^T * scale) + bias) V` over several heads at once.

    The mask and bias are used as given: the public entry points check
    them first (`MultiHeadAttention.call` and `call_with_key_value`,
    `scaled_dot_product_attention`; `as_bool_mask`, `as_attention_bias`).

    Args:
        query: tensor `(batch, query_length, num_heads, key_dim)`.
        key: tensor `(batch, key_length, key_heads, key_dim)`: `key_heads`
            is `num_heads`, or divides it (grouped-query attention: query
            head `h` attends with key head `h // (num_heads // key_heads)`;
            the keys and values are not repeated on the explicit path).
        value: tensor `(batch, key_length, key_heads, value_dim)`.
        mask: optional boolean tensor broadcastable to `(batch, num_heads,
            query_length, key_length)`, `True` where a query may attend a
            key; a 3-D `(batch, query_length, key_length)` mask applies to
            every head. Defaults to `None`.
        bias: optional float tensor (any float dtype) broadcastable to
            `(batch, num_heads, query_length, key_length)` (NumPy
            broadcasting: a 3-D bias is `(num_heads, query_length,
            key_length)`), added to the scaled scores before the mask and
            the softmax. Defaults to `None`.
        is_causal: bool, whether query `i` may only attend keys `j <= i`
            (the fused kernels apply it without a mask tensor). Defaults to
            `False`.
        scale: float, the scale of `Q K^T`. Defaults to `None`, meaning
            `1 / sqrt(key_dim)`.
        dropout_rate: float, dropout on the attention weights during
            training, through `keras_attn.layers.fast_dropout`. Defaults to
            `0.0`.
        training: bool, whether dropout is active. Defaults to `False`.
        seed_generator: `keras.random.SeedGenerator` for the dropout.
            Defaults to `None`.
        return_attention_scores: bool, whether to also compute the
            attention weights. Defaults to `False`.
        flash_attention: `None` runs the fused kernel whenever the weights
            and dropout are not needed; `False` always runs the explicit
            path; `True` is `None` that refuses `return_attention_scores`
            and dropout, as Keras does. Defaults to `None`.
        masked_keys_are_finite: bool, whether the keys and values at the
            positions no query attends are known to be finite, as in a
            key/value cache allocated with zeros and written in order
            (`TransformerDecoderBlock.call_cached`). Then they are used as
            they are; otherwise they are zeroed first (two passes over the
            keys and values), so a NaN or infinity there cannot reach an
            attended position (`0 * nan` is NaN). Defaults to `False`.
        logit_soft_cap: positive float, Gemma 2's soft cap: the scaled
            scores `s` become `logit_soft_cap * tanh(s / logit_soft_cap)`
            before the bias, the mask and the softmax. Always the explicit
            path. Defaults to `None` (no cap).

    Returns:
        `(attended, weights)`: the attended values `(batch, query_length,
        num_heads, value_dim)` and, with `return_attention_scores=True`,
        the weights `(batch, num_heads, query_length, key_length)` (else
        `None`).

    Example:

    >>> q = keras.random.normal((2, 5, 4, 8))
    >>> k = v = keras.random.normal((2, 7, 4, 8))
    >>> bias = keras.random.normal((4, 5, 7))  # one bias per head
    >>> out, _ = keras_attn.layers.attention.attention_core.compute_attention(
    ...     q, k, v, bias=bias)
    >>> tuple(out.shape)
    (2, 5, 4, 8)
    """
    if flash_attention and return_attention_scores:
        raise ValueError(
            "Returning attention scores is not supported when flash "
            "attention is enabled. Please disable flash attention to access"
            " attention scores."
        )
    check_grouped_heads(query, key, value)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    mask = _heads_mask(mask)
    if bias is not None and len(bias.shape) < 4:
        # (batch or 1, heads or 1, query_length, key_length): NumPy
        # broadcasting spelt out, so no kernel reads a 3-D bias its own way.
        bias = ops.reshape(bias, (1,) * (4 - len(bias.shape)) + tuple(ops.shape(bias)))
    use_dropout = bool(training) and dropout_rate > 0.0
    fused = (
        flash_attention is not False
        and not (return_attention_scores or use_dropout)
        and logit_soft_cap is None
        # The fused kernels need `value_dim == key_dim` (jax.nn checks it).
        and query.shape[-1] == value.shape[-1]
        and fused_path_runs(query.dtype)
    )
    if is_causal and not (fused and mask is None and bias is None):
        # The kernel's own causal mask only serves a call with no other.
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        causal = causal_mask(query_length, key_length)[:, None]  # (1, 1, T, S)
        mask = causal if mask is None else ops.logical_and(mask, causal)
        is_causal = False
    if mask is not None and not masked_keys_are_finite:
        # A masked key gets weight 0, but `0 * nan = nan`: the values at
        # keys no query attends are zeroed, so a NaN or infinity at a
        # padded position never reaches a real one.
        # (batch, key_length, key_heads or 1, 1)
        attended_keys = _heads_last(per_key_head(ops.any(mask, axis=-2), key.shape[2]))
        value = ops.where(attended_keys, value, 0.0)
        if fused:
            # Torch's kernel masks by adding -inf to the scores: `nan - inf`
            # is NaN, so the keys are zeroed too (the explicit path
            # replaces masked scores, NaN ones included).
            key = ops.where(attended_keys, key, 0.0)
    if fused:
        attended = _fused_attention(query, key, value, mask, bias, scale, is_causal)
        return attended, None
    weights = _attention_weights(query, key, mask, bias, scale, logit_soft_cap)
    if keras.backend.standardize_dtype(weights.dtype) != (
        keras.backend.standardize_dtype(value.dtype)
    ):
        # Half precision: the float32 weights back to the values' dtype.
        weights = ops.cast(weights, value.dtype)
    attention_weights = weights
    if use_dropout:
        # One uniform draw for two weights on JAX and TensorFlow; torch's
        # own dropout kernel on torch.
        weights = fast_dropout(weights, dropout_rate, seed=seed_generator)
    if value.shape[2] == weights.shape[1]:
        # (batch, query_length, num_heads, value_dim)
        attended = ops.einsum("bhqk,bkhd->bqhd", weights, value)
    else:
        # (batch, query_length, num_heads, value_dim), values not repeated
        attended = grouped_weighted_values(weights, value)
    return attended, attention_weights if return_attention_scores else None
