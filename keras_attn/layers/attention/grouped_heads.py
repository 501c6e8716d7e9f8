"""Grouped-query attention's head arithmetic: keys and values with fewer heads.

With `num_key_value_heads` key/value heads for `num_heads` query heads
(Ainslie et al., 2023), query head `h` attends with key/value head
`h // group`, `group = num_heads // num_key_value_heads`: the layout of
`ops.repeat(keys, group, axis=2)`, of `keras.layers.GroupQueryAttention`
and of `jax.nn.dot_product_attention`. The explicit attention path groups
the queries as `(batch, length, key_heads, group, dim)` instead of repeating
the keys and values, so no copy of them is made (`grouped_scores`,
`grouped_weighted_values`; with as many key/value heads as query heads the
attention core runs the plain multi-head einsums).
"""

from keras import ops


def check_grouped_heads(query, key, value):
    """Raises `ValueError` unless key/value heads are equal and divide query heads.

    Args:
        query: `(batch, query_length, num_heads, key_dim)`.
        key: `(batch, key_length, key_heads, key_dim)`.
        value: `(batch, key_length, key_heads, value_dim)`.
    """
    heads, key_heads, value_heads = query.shape[2], key.shape[2], value.shape[2]
    if key_heads != value_heads or (
        None not in (heads, key_heads) and heads % key_heads
    ):
        raise ValueError(
            "`key` and `value` must have the same number of heads, which must "
            "divide the query's number of heads (grouped-query attention). "
            f"Received: query.shape={tuple(query.shape)}, "
            f"key.shape={tuple(key.shape)}, value.shape={tuple(value.shape)}"
        )


def grouped_scores(query, key):
    """`Q K^T` of grouped-query attention, `(batch, num_heads, query_length,
    key_length)`.

    Args:
        query: `(batch, query_length, num_heads, key_dim)`.
        key: `(batch, key_length, key_heads, key_dim)`, `key_heads`
            dividing `num_heads`.
    """
    heads, key_heads = query.shape[2], key.shape[2]
    batch_size, query_length = ops.shape(query)[0], ops.shape(query)[1]
    # (batch, query_length, key_heads, group, key_dim)
    grouped = ops.reshape(
        query,
        (batch_size, query_length, key_heads, heads // key_heads, query.shape[-1]),
    )
    # (batch, key_heads, group, query_length, key_length)
    scores = ops.einsum("bqhgd,bkhd->bhgqk", grouped, key)
    # (batch, num_heads, query_length, key_length)
    return ops.reshape(scores, (batch_size, heads, query_length, ops.shape(key)[1]))


def grouped_weighted_values(weights, value):
    """The attended values of grouped-query attention, `(batch, query_length,
    num_heads, value_dim)`.

    Args:
        weights: `(batch, num_heads, query_length, key_length)`.
        value: `(batch, key_length, key_heads, value_dim)`, `key_heads`
            dividing `num_heads`.
    """
    heads, key_heads = weights.shape[1], value.shape[2]
    batch_size, _, query_length, key_length = ops.shape(weights)
    # (batch, key_heads, group, query_length, key_length)
    grouped = ops.reshape(
        weights,
        (batch_size, key_heads, heads // key_heads, query_length, key_length),
    )
    # (batch, query_length, key_heads, group, value_dim)
    attended = ops.einsum("bhgqk,bkhd->bqhgd", grouped, value)
    # (batch, query_length, num_heads, value_dim)
    return ops.reshape(attended, (batch_size, query_length, heads, value.shape[-1]))


def per_key_head(per_query_head, key_heads):
    """A boolean `(batch, heads or 1, length)` reduced to the key/value heads.

    A key is attended by a key/value head when any query head of its group
    attends it: `(batch, num_heads, length)` -> `(batch, key_heads,
    length)`; one shared row (heads axis 1) or rows already per key head
    pass through.
    """
    heads = per_query_head.shape[1]
    if heads in (1, key_heads):
        return per_query_head
    batch_size, _, length = ops.shape(per_query_head)
    # (batch, key_heads, group, length)
    grouped = ops.reshape(
        per_query_head, (batch_size, key_heads, heads // key_heads, length)
    )
    return ops.any(grouped, axis=2)


def repeat_key_value_heads(key, value, num_heads):
    """Keys and values with each head repeated for its group of query heads.

    `(batch, key_length, key_heads, dim)` -> `(batch, key_length, num_heads,
    dim)`, as `keras.layers.GroupQueryAttention` repeats them; for the
    kernels and overrides that want one key/value head per query head.
    """
    group = num_heads // key.shape[2]
    if group == 1:
        return key, value
    return ops.repeat(key, group, axis=2), ops.repeat(value, group, axis=2)
