"""The attention kernel on projected heads: per-head masks, windows.

`MultiHeadAttention`'s call paths project their inputs into heads
`(batch, length, num_heads, dim)` and hand them here.
"""

from keras import ops

from keras_attn.layers.scaled_dot_product_attention import (
    scaled_dot_product_attention,
)


def combine_masks(*masks):
    """The logical AND of the masks that are not `None` (`None` if none are)."""
    combined = None
    for mask in masks:
        if mask is not None:
            combined = mask if combined is None else ops.logical_and(combined, mask)
    return combined


def window_mask(query_length, key_length, sliding_window):
    """`(1, query_length, key_length)`: `True` where `|i - j| < sliding_window`."""
    queries = ops.arange(query_length, dtype="int32")[:, None]
    keys = ops.arange(key_length, dtype="int32")[None, :]
    return ops.expand_dims(ops.abs(queries - keys) < sliding_window, 0)


def _heads_into_batch(x):
    """`(batch, length, heads, dim)` -> `(batch * heads, length, 1, dim)`."""
    x = ops.transpose(x, (0, 2, 1, 3))  # (batch, heads, length, dim)
    size = ops.shape(x)
    # Sizes spelt out, not `-1`, which cannot be inferred when one is 0.
    return ops.reshape(x, (size[0] * size[1], size[2], 1, size[3]))


def _attend_each_head_alone(queries, keys, values, mask, num_heads, **kwargs):
    """The kernel with a mask per head: heads join the batch, one head each."""
    batch_size, query_length = ops.shape(queries)[0], ops.shape(queries)[1]
    key_length = ops.shape(keys)[1]
    mask = ops.broadcast_to(mask, (batch_size, num_heads, query_length, key_length))
    # (batch * heads, query_length, key_length)
    mask = ops.reshape(mask, (batch_size * num_heads, query_length, key_length))
    attended, scores = _attend(
        _heads_into_batch(queries),
        _heads_into_batch(keys),
        _heads_into_batch(values),
        mask,
        **kwargs,
    )
    value_dim = ops.shape(values)[-1]
    # (batch * heads, query_length, 1, value_dim) -> (batch, heads, query_length, value_dim)
    attended = ops.reshape(attended, (batch_size, num_heads, query_length, value_dim))
    # (batch, query_length, heads, value_dim)
    attended = ops.transpose(attended, (0, 2, 1, 3))
    if scores is not None:
        # (batch, heads, query_length, key_length)
        scores = ops.reshape(scores, (batch_size, num_heads, query_length, key_length))
    return attended, scores


def _attend(queries, keys, values, mask, return_attention_scores, **kwargs):
    result = scaled_dot_product_attention(
        queries,
        keys,
        values,
        mask=mask,
        return_attention_scores=return_attention_scores,
        **kwargs,
    )
    return result if return_attention_scores else (result, None)


def attend_heads(queries, keys, values, mask, num_heads, **kwargs):
    """`scaled_dot_product_attention` on heads, with a mask per head or not.

    Args:
        queries: `(batch, query_length, num_heads, key_dim)`.
        keys: `(batch, key_length, num_heads, key_dim)`.
        values: `(batch, key_length, num_heads, value_dim)`.
        mask: `None`, a boolean `(batch, query_length, key_length)`, or a
            per-head `(batch, num_heads or 1, query_length, key_length)`.
        num_heads: int.
        **kwargs: the other arguments of `scaled_dot_product_attention`,
            `return_attention_scores` included.

    Returns:
        `(attended, scores)`: `(batch, query_length, num_heads, value_dim)`
        and the weights `(batch, num_heads, query_length, key_length)`, or
        `None` unless `return_attention_scores=True`.
    """
    if mask is not None and len(mask.shape) == 4:
        if mask.shape[1] != 1:
            return _attend_each_head_alone(
                queries, keys, values, mask, num_heads, **kwargs
            )
        mask = mask[:, 0]  # (batch, query_length, key_length)
    return _attend(queries, keys, values, mask, **kwargs)
