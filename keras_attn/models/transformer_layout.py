"""Megatron-style sharding rules for `keras_attn.models.Transformer`.

The rules are regular expressions over `variable.path` (Keras matches them
with `re.fullmatch`), written against the stable sub-layer names of
`MultiHeadAttention` (`query`, `key`, `value`, `attention_output`),
the blocks' `feed_forward` (`intermediate_dense`, `output_dense`),
`TokenAndPositionEmbedding` (`token_embedding`) and the untied output
projection (`logits`). Encoder self-attention, decoder self-attention and
cross-attention share the rules. Every variable that no rule matches (layer
norms, position embeddings, output biases, seed states) is replicated.
"""

import keras

EMBEDDING_AXES = ("vocabulary", "hidden", None)

# Any prefix of enclosing layers (`encoder_block_0/self_attention/`, ...).
_PREFIX = r"(?:.*/)?"


def transformer_layout_map(
    device_mesh, model_axis="model", embedding_axis="vocabulary"
):
    """Returns a `keras.distribution.LayoutMap` that shards a `Transformer`.

    Tensor parallelism as in Megatron-LM: each attention layer's heads and
    each feed-forward layer's inner dimension `d_ff` are split over the
    `model_axis` of `device_mesh`, so a device holds whole heads and a slice
    of `d_ff`, and one all-reduce per sub-layer (after `attention_output`
    and after `output_dense`) completes the result.

    | variable (shape) | layout |
    |---|---|
    | `query`, `key`, `value` kernels `(hidden, heads, head_dim)` | `(None, model, None)` |
    | their biases `(heads, head_dim)` | `(model, None)` |
    | `attention_output` kernel `(heads, head_dim, hidden)` | `(model, None, None)` |
    | `intermediate_dense` kernel `(hidden, d_ff)`, bias `(d_ff,)` | `(None, model)`, `(model,)` |
    | `output_dense` kernel `(d_ff, hidden)` | `(model, None)` |
    | token embeddings `(vocabulary, hidden)` | `(model, None)` or `(None, model)` |
    | untied `logits` kernel `(hidden, vocabulary)`, bias | `(None, model)`, `(model,)` |

    JAX needs each sharded dimension to be divisible by the size of
    `model_axis`: `num_heads`, `intermediate_dim` and, for
    `embedding_axis="vocabulary"`, `vocabulary_size` (or `hidden_dim` for
    `"hidden"`).

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with an axis named
            `model_axis` (usually axes `("batch", "model")`).
        model_axis: str, the mesh axis to shard over. Defaults to
            `"model"`.
        embedding_axis: which token-embedding dimension to shard:
            `"vocabulary"` (rows, as Megatron's vocabulary-parallel
            embedding; the tied output projection then yields logits
            sharded by vocabulary), `"hidden"` (columns) or `None`
            (replicated). Defaults to `"vocabulary"`.

    Returns:
        A `keras.distribution.LayoutMap` for
        `keras.distribution.ModelParallel(layout_map=...)`.

    Example:

    >>> devices = keras.distribution.list_devices()[:1]  # e.g. 8 on a GPU host
    >>> mesh = keras.distribution.DeviceMesh((1, 1), ("batch", "model"), devices)
    >>> layout_map = keras_attn.models.transformer_layout_map(mesh)
    >>> layout_map["encoder_block_0/self_attention/query/kernel"].axes
    (None, 'model', None)
    >>> layout_map["decoder_block_0/feed_forward/output_dense/kernel"].axes
    ('model', None)
    >>> print(layout_map["decoder_block_0/feed_forward_norm/gamma"])  # replicated
    None

    Pass it to `keras.distribution.ModelParallel(layout_map=layout_map,
    batch_dim_name="batch")`, or let `keras_attn.distribution.configure`
    do it.

    References:
        Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter
        Language Models Using Model Parallelism", 2019, section 3.
    """
    if model_axis not in device_mesh.axis_names:
        raise ValueError(
            f"`model_axis` must name an axis of `device_mesh` "
            f"{tuple(device_mesh.axis_names)}. Received: model_axis={model_axis!r}"
        )
    if embedding_axis not in EMBEDDING_AXES:
        raise ValueError(
            f"`embedding_axis` must be one of {EMBEDDING_AXES}. "
            f"Received: embedding_axis={embedding_axis!r}"
        )
    layout_map = keras.distribution.LayoutMap(device_mesh)
    _add_block_rules(layout_map, model_axis)
    _add_embedding_rules(layout_map, model_axis, embedding_axis)
    return layout_map


def _add_block_rules(layout_map, m):
    """Attention: split the heads; feed-forward: split `d_ff`."""
    layout_map[_PREFIX + r"(?:query|key|value)/kernel"] = (None, m, None)
    layout_map[_PREFIX + r"(?:query|key|value)/bias"] = (m, None)
    layout_map[_PREFIX + r"attention_output/kernel"] = (m, None, None)
    layout_map[_PREFIX + r"feed_forward/intermediate_dense/kernel"] = (None, m)
    layout_map[_PREFIX + r"feed_forward/intermediate_dense/bias"] = (m,)
    layout_map[_PREFIX + r"feed_forward/output_dense/kernel"] = (m, None)


def _add_embedding_rules(layout_map, m, embedding_axis):
    """The token embeddings and the untied output projection."""
    if embedding_axis == "vocabulary":
        layout_map[_PREFIX + r"token_embedding/embeddings"] = (m, None)
        layout_map[_PREFIX + r"logits/kernel"] = (None, m)
        layout_map[_PREFIX + r"logits/bias"] = (m,)
    elif embedding_axis == "hidden":
        layout_map[_PREFIX + r"token_embedding/embeddings"] = (None, m)
        layout_map[_PREFIX + r"logits/kernel"] = (m, None)
