"""The masks and bias of attention over `attention_axes`, as a sequence's.

`MultiHeadAttention` attends over the `attention_axes` of inputs of rank
> 3 by flattening them into one sequence (`keras_attn.layers.attention.attention_axes.
AxesLayout`; the axes not attended over join the batch). Its masks come in
Keras's layout without a heads axis, its bias in Keras's scores layout;
`masks_to_sequence` brings them to the sequence's, where the one mask merge
(`merge_attention_masks`) and the attention core take them.
"""

from keras_attn.layers.attention.attention_core import as_attention_bias
from keras_attn.layers.attention.masking import as_bool_mask, merge_attention_masks


def masks_to_sequence(layout, masks, attention_bias, projected, sequence):
    """The merged mask and the bias of a call over axes, sequence layout.

    Args:
        layout: the call's `AxesLayout`.
        masks: dict of `merge_attention_masks`'s keyword arguments, the
            padding masks `(batch, <axes>...)` and `attention_mask` in
            Keras's layout (the causal mask and sliding window run along
            the flattened sequence).
        attention_bias: `None` or a float tensor broadcastable to Keras's
            scores layout `(batch, <other axes>, num_heads, <query axes>,
            <key axes>)`.
        projected: `(queries, keys)`, the projected heads `(batch, ...,
            heads, dim)`.
        sequence: `(queries, keys)` in the sequence layout `(batch',
            length, heads, dim)`.

    Returns:
        `(mask, bias)`: a boolean `(batch', query_length, key_length)` (or
        per head) mask and a bias `(batch', num_heads, query_length,
        key_length)`, each `None` when absent.
    """
    queries, keys = projected
    masks = dict(masks)
    for name, padded in (
        ("query_mask", queries),
        ("value_mask", keys),
        ("key_mask", keys),
    ):
        padding = as_bool_mask(masks[name], name)
        if padding is not None:
            # (batch', length)
            masks[name] = layout.padding_to_sequence(padding, padded, name)
    attention_mask = as_bool_mask(masks["attention_mask"], "attention_mask")
    if attention_mask is not None:
        # (batch', query_length, key_length)
        masks["attention_mask"] = layout.mask_to_sequence(attention_mask, queries, keys)
    mask = merge_attention_masks(*sequence, **masks)
    bias = as_attention_bias(
        attention_bias,
        "attention_bias",
        layout.scores_shape(queries.shape, keys.shape, queries.shape[-2]),
    )
    if bias is not None:
        # (batch', num_heads, query_length, key_length)
        bias = layout.scores_to_sequence(bias, queries, keys)
    return mask, bias
