"""Attention masks: one place where padding, causal and explicit masks meet.

Every mask in keras-attn is boolean and `True` means "may attend".

- a padding mask has shape `(batch, sequence_length)`;
- an attention mask has shape `(batch, query_length, key_length)` (or any
  shape that broadcasts to it), or `(batch, num_heads, query_length,
  key_length)` for a mask per head;
- the merged mask that attention consumes has shape
  `(batch, query_length, key_length)` (with a heads axis for a per-head
  mask).

`as_bool_mask` is the one conversion to boolean and `merge_attention_masks`
the one merge; the causal and sliding-window masks are the positional
masks it adds.
"""

import keras
import numpy as np
from keras import ops

from keras_attn.validation import eager_values


def relative_positions(query_length, key_length, query_offset=0):
    """`key_position - query_position` for every query and key, int32.

    The one place the position-dependent masks and biases (causal mask,
    sliding window, ALiBi, T5's relative bias) get their distances from.

    Args:
        query_length: int or scalar tensor, number of query positions.
        key_length: int or scalar tensor, number of key positions.
        query_offset: int or scalar tensor, the absolute position of the
            first query (cached decoding: the queries are the newest tokens
            of a longer sequence). Defaults to `0`.

    Returns:
        An int32 tensor `(query_length, key_length)`, `<= 0` for the keys
        a causal decoder may attend.
    """
    # int32 spelt out: with `floatx()` "float64" Keras's default int is
    # int64, which TensorFlow will not add to an int32 `query_offset`.
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
        query_offset, "int32"
    )
    key_positions = ops.arange(key_length, dtype="int32")
    # (query_length, key_length)
    return key_positions[None, :] - query_positions[:, None]


def causal_mask(query_length, key_length, query_offset=0):
    """Lower-triangular mask: query `i` may attend keys `j <= i + query_offset`.

    Args:
        query_length: int or scalar tensor, number of query positions.
        key_length: int or scalar tensor, number of key positions.
        query_offset: int or scalar tensor, the absolute position of the
            first query (used by cached decoding, where the queries are the
            newest tokens of a longer sequence). Defaults to `0`.

    Returns:
        A boolean tensor of shape `(1, query_length, key_length)`.
    """
    relative = relative_positions(query_length, key_length, query_offset)
    # (1, query_length, key_length)
    return ops.expand_dims(relative <= 0, axis=0)


def sliding_window_mask(query_length, key_length, sliding_window, query_offset=0):
    """Band mask: query `i` may attend keys `j` with `|i - j| < sliding_window`.

    Combined with `causal_mask`, the causal window of Mistral-style models
    (`i - sliding_window < j <= i`).

    Args:
        query_length: int or scalar tensor, number of query positions.
        key_length: int or scalar tensor, number of key positions.
        sliding_window: positive int, the width of the band.
        query_offset: int or scalar tensor, the absolute position of the
            first query (cached decoding: the cache index). Defaults to `0`.

    Returns:
        A boolean tensor of shape `(1, query_length, key_length)`.
    """
    relative = relative_positions(query_length, key_length, query_offset)
    # (1, query_length, key_length)
    return ops.expand_dims(ops.abs(relative) < sliding_window, axis=0)


def as_bool_mask(mask, argument_name):
    """A boolean mask from a boolean or 0/1 numeric one (`None` stays `None`).

    Numeric masks are checked when their values can be read (eager calls):
    `0.5` or `2` is refused rather than read as `True`. Inside a compiled
    call (`jit`, `tf.function`) the values cannot be read, and any nonzero
    value means "may attend", as in `keras.layers.MultiHeadAttention`.

    Args:
        mask: `None`, or a boolean, integer or float tensor (or array).
        argument_name: str, the argument's name for error messages.

    Returns:
        `None` for `None`, else a boolean tensor of `mask`'s shape (a
        boolean `mask` is returned as it is).

    Example:

    >>> mask = keras_attn.layers.attention.masking.as_bool_mask([[1, 1, 0]], "padding_mask")
    >>> keras.ops.convert_to_numpy(mask).tolist()
    [[True, True, False]]
    """
    if mask is None:
        return None
    if not hasattr(mask, "dtype"):
        mask = np.asarray(mask)
    dtype = keras.backend.standardize_dtype(mask.dtype)
    if dtype == "bool":
        return mask
    if "int" not in dtype and "float" not in dtype:
        raise TypeError(
            f"`{argument_name}` must be a boolean (or 0/1 numeric) tensor. "
            f"Received: {argument_name}.dtype={dtype}"
        )
    values = eager_values(mask)
    if values is not None and not np.all((values == 0) | (values == 1)):
        odd = values[(values != 0) & (values != 1)].ravel()[0]
        raise ValueError(
            f"`{argument_name}` must be boolean, or numeric with only the "
            f"values 0 and 1. Received: {argument_name} holding {odd}"
        )
    return ops.not_equal(mask, 0)


def _and(mask, other):
    """`mask & other`, where either may be `None` (no constraint)."""
    if mask is None:
        return other
    if other is None:
        return mask
    return ops.logical_and(mask, other)


def _check_rank(mask, expected_ranks, argument_name, expected_shape):
    if len(mask.shape) not in expected_ranks:
        raise ValueError(
            f"`{argument_name}` must have shape {expected_shape}. "
            f"Received: {argument_name}.shape={tuple(mask.shape)}"
        )


def _check_broadcastable(mask_shape, target_shape, argument_name, expected):
    """Raise if a static `mask_shape` cannot broadcast to `target_shape`."""
    for mask_dim, target_dim in zip(mask_shape[::-1], target_shape[::-1]):
        if mask_dim in (None, 1) or target_dim is None:
            continue
        if mask_dim != target_dim:
            raise ValueError(
                f"`{argument_name}` with shape {tuple(mask_shape)} cannot "
                f"broadcast to the attention scores' {expected} shape "
                f"{tuple(target_shape)}."
            )


def _padding_mask(mask, argument_name, expected_shape, description):
    """A `(batch, length)` padding mask, checked and boolean (or `None`)."""
    mask = as_bool_mask(mask, argument_name)
    if mask is None:
        return None
    _check_rank(mask, (2,), argument_name, description)
    _check_broadcastable(mask.shape, expected_shape, argument_name, description)
    return mask


def merge_attention_masks(
    query,
    key,
    query_mask=None,
    value_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    sliding_window=None,
    key_mask=None,
):
    """Merges padding, causal, sliding-window and explicit masks into one.

    The one place where masks meet: every mask is made boolean here (`0/1`
    numbers accepted, see `as_bool_mask`), checked against the shapes of
    `query` and `key`, and combined with a logical AND.

    Args:
        query: tensor of shape `(batch, query_length, ...)`.
        key: tensor of shape `(batch, key_length, ...)`.
        query_mask: optional boolean tensor `(batch, query_length)`;
            `False` marks padded queries, whose rows are fully masked.
        value_mask: optional boolean tensor `(batch, key_length)`; `False`
            marks padded keys/values.
        attention_mask: optional boolean tensor broadcastable to
            `(batch, query_length, key_length)`, or a per-head mask
            `(batch, num_heads, query_length, key_length)`.
        use_causal_mask: bool, whether query `i` may only attend keys
            `j <= i`. Defaults to `False`.
        sliding_window: optional positive int: query `i` may only attend
            keys `j` with `|i - j| < sliding_window`. Defaults to `None`.
        key_mask: optional boolean tensor `(batch, key_length)`, combined
            with `value_mask`. Defaults to `None`.

    Returns:
        A boolean tensor of shape `(batch, query_length, key_length)`
        (`(batch, num_heads, query_length, key_length)` for a per-head
        `attention_mask`), or `None` when no mask applies.

    Example:

    >>> x = keras.ops.zeros((2, 3, 8))
    >>> mask = keras_attn.layers.merge_attention_masks(
    ...     x, x, value_mask=[[1, 1, 0], [1, 1, 1]], use_causal_mask=True)
    >>> tuple(mask.shape)
    (2, 3, 3)
    """
    batch_size, query_length, key_length = (
        query.shape[0],
        query.shape[1],
        key.shape[1],
    )
    scores_shape = (batch_size, query_length, key_length)
    mask = None
    padded_queries = _padding_mask(
        query_mask, "query_mask", (batch_size, query_length), "(batch, query_length)"
    )
    if padded_queries is not None:
        mask = padded_queries[:, :, None]  # (batch, query_length, 1)
    for name, padding in (("value_mask", value_mask), ("key_mask", key_mask)):
        padding = _padding_mask(
            padding, name, (batch_size, key_length), "(batch, key_length)"
        )
        if padding is not None:
            mask = _and(mask, padding[:, None, :])  # (batch, 1, key_length)
    query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
    if use_causal_mask:
        mask = _and(mask, causal_mask(query_length, key_length))
    if sliding_window is not None:
        mask = _and(mask, sliding_window_mask(query_length, key_length, sliding_window))
    attention_mask = as_bool_mask(attention_mask, "attention_mask")
    if attention_mask is not None:
        _check_rank(
            attention_mask,
            (2, 3, 4),
            "attention_mask",
            "(batch, query_length, key_length) or (batch, num_heads, "
            "query_length, key_length)",
        )
        if len(attention_mask.shape) == 4:
            return _merge_per_head_mask(mask, attention_mask, query, key)
        _check_broadcastable(
            attention_mask.shape,
            scores_shape,
            "attention_mask",
            "(batch, query_length, key_length)",
        )
        mask = _and(mask, attention_mask)
    if mask is None:
        return None
    # (batch, query_length, key_length)
    return ops.broadcast_to(mask, (ops.shape(query)[0], query_length, key_length))


def _merge_per_head_mask(mask, attention_mask, query, key):
    """A per-head `attention_mask`, as `keras.layers.MultiHeadAttention`
    takes them, merged with the other masks."""
    _check_broadcastable(
        attention_mask.shape,
        (query.shape[0], None, query.shape[1], key.shape[1]),
        "attention_mask",
        "(batch, num_heads, query_length, key_length)",
    )
    if mask is not None:
        mask = mask[:, None]  # (batch, 1, query_length, key_length)
    mask = _and(mask, attention_mask)
    # (batch, num_heads or 1, query_length, key_length)
    return ops.broadcast_to(
        mask,
        (
            ops.shape(query)[0],
            ops.shape(attention_mask)[1],
            ops.shape(query)[1],
            ops.shape(key)[1],
        ),
    )
