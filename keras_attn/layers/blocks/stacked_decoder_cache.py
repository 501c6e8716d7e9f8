"""keras-hub's stacked decoder cache, adapted onto the decoder block's cache step.

keras-hub's `TransformerDecoder` takes its cache through `call` keywords, as
one stacked tensor per attention. `TransformerDecoderBlock` decodes with
`call_cached` and `(keys, values)` pairs; this adapter converts between the
two outside that path, so code written for keras-hub runs unchanged.
"""

import keras
from keras import ops

from keras_attn.layers.attention.cache_index import resolve_cache_index
from keras_attn.layers.attention.masking import merge_attention_masks

# keras-hub's cache call arguments, in the order `call` gathers them.
STACKED_CACHE_ARGUMENTS = (
    "self_attention_cache",
    "self_attention_cache_update_index",
    "cross_attention_cache",
    "cross_attention_cache_update_index",
)


def uses_stacked_cache(stacked_caches):
    """Whether any of keras-hub's cache arguments was given."""
    return any(argument is not None for argument in stacked_caches)


def write_stacked_cache(cache, index, keys, values):
    """A stacked `cache` with the new keys and values written at `index`.

    Args:
        cache: `(batch, 2, max_length, kv_heads, head_dim)`, keys at
            `[:, 0]`, values at `[:, 1]`.
        index: int or scalar int tensor, the slot of the first new position.
        keys, values: `(batch, new_length, kv_heads, head_dim)` each.

    Returns:
        The updated stacked cache.
    """
    # (batch, 2, new_length, kv_heads, head_dim)
    update = ops.cast(ops.stack((keys, values), axis=1), cache.dtype)
    return ops.slice_update(cache, (0, 0, index, 0, 0), update)


class StackedDecoderCacheMixin:
    """keras-hub's cache call for `TransformerDecoderBlock`.

    keras-hub stacks a cache in one `(batch, 2, length, kv_heads,
    head_dim)` tensor (keys at `[:, 0]`, values at `[:, 1]`; `kv_heads`
    is the block's `num_key_value_heads`) and gives it
    with an update index; an index of `None` reads the cache without writing
    it (`cross_attention_cache_update_index=0` fills the cross-attention
    cache from `encoder_sequence`). The block's `call` hands these arguments
    here; the work is done by the block's `_cached_step`, as for
    `call_cached`.

    The mixin uses the block's `has_cross_attention`, `cross_attention`,
    `_cached_self_attention_mask` and `_cached_step`.
    """

    def _check_stacked_caches(self, stacked_caches, return_attention_scores):
        self_cache, _, cross_cache, cross_index = stacked_caches
        received = ", ".join(
            f"{name}=set"
            for name, value in zip(STACKED_CACHE_ARGUMENTS, stacked_caches)
            if value is not None
        )
        if self_cache is None:
            raise ValueError(
                f"Layer {self.name}: keras-hub's cache arguments need a "
                f"`self_attention_cache`. Received: {received}"
            )
        if self.has_cross_attention and cross_cache is None:
            raise ValueError(
                f"Layer {self.name} has cross-attention: `self_attention_cache` "
                "and `cross_attention_cache` must both be set or both be "
                f"`None`. Received: {received}"
            )
        if not self.has_cross_attention and (
            cross_cache is not None or cross_index is not None
        ):
            raise ValueError(
                f"Layer {self.name} was built without cross-attention; it takes "
                f"no `cross_attention_cache`. Received: {received}"
            )
        if return_attention_scores:
            raise ValueError(
                "`return_attention_scores=True` is not supported with "
                f"keras-hub's cache arguments. Received: {received}"
            )

    def _call_with_stacked_cache(
        self,
        decoder_sequence,
        encoder_sequence,
        stacked_caches,
        self_masks,
        cross_masks,
        self_attention_bias,
        return_attention_scores,
        training,
    ):
        """keras-hub's `TransformerDecoder` cache call, run by `_cached_step`.

        Args:
            decoder_sequence: tensor `(batch, new_length, hidden_dim)`.
            encoder_sequence: tensor `(batch, source_length, hidden_dim)`
                or `None`; read only when the cross-attention cache is
                written.
            stacked_caches: `(self_attention_cache,
                self_attention_cache_update_index, cross_attention_cache,
                cross_attention_cache_update_index)`.
            self_masks: `(padding_mask, attention_mask, use_causal_mask)`,
                the padding mask `(batch, max_length)` over the cache's
                slots (the Keras mask of `decoder_sequence`, which covers
                the new positions only, is not used).
            cross_masks: `(padding_mask, attention_mask)`.
            self_attention_bias: optional float tensor broadcastable to
                `(batch, num_heads, new_length, max_length)`.
            return_attention_scores: must be `False` (checked).
            training: bool, whether dropout is active.

        Returns:
            `(outputs, self_attention_cache)`, and `cross_attention_cache`
            third with cross-attention.
        """
        self._check_stacked_caches(stacked_caches, return_attention_scores)
        self_cache, self_index, cross_cache, cross_index = stacked_caches
        x = ops.convert_to_tensor(decoder_sequence)
        # (batch, max_length, kv_heads, head_dim) each
        keys_values = (self_cache[:, 0], self_cache[:, 1])
        cross_keys_values, cross_mask = None, None
        if self.has_cross_attention:
            if cross_index is not None:
                # (batch, source_length, kv_heads, head_dim) each
                new_keys, new_values = self.cross_attention.compute_key_value(
                    encoder_sequence
                )
                cross_index = resolve_cache_index(
                    cross_index,
                    cross_cache[:, 0],
                    new_keys,
                    "cross_attention_cache_update_index",
                )
                # (batch, 2, source_length, kv_heads, head_dim)
                cross_cache = write_stacked_cache(
                    cross_cache, cross_index, new_keys, new_values
                )
            # (batch, source_length, kv_heads, head_dim) each
            cross_keys_values = (cross_cache[:, 0], cross_cache[:, 1])
            padding_mask, attention_mask = cross_masks
            cross_mask = merge_attention_masks(
                x,
                cross_keys_values[0],
                value_mask=padding_mask,
                attention_mask=attention_mask,
            )
        outputs, keys_values = self._cached_step(
            x,
            keys_values,
            self_index,
            cross_keys_values,
            (self_masks, cross_mask),
            self_attention_bias,
            training,
            cache_index_name="self_attention_cache_update_index",
        )
        if self_index is not None:
            # (batch, 2, max_length, kv_heads, head_dim)
            self_cache = ops.stack(keys_values, axis=1)
        if not self.has_cross_attention:
            return outputs, self_cache
        return outputs, self_cache, cross_cache

    def _stacked_cache_output_spec(
        self, output, stacked_caches, return_attention_scores
    ):
        """`compute_output_spec` of the cache call: the output and the
        caches it was given, updated (the cross-attention one only with
        cross-attention)."""
        self._check_stacked_caches(stacked_caches, return_attention_scores)
        self_cache, _, cross_cache, _ = stacked_caches
        caches = (self_cache, cross_cache)
        if not self.has_cross_attention:
            caches = caches[:1]
        return output, *(
            keras.KerasTensor(cache.shape, dtype=cache.dtype) for cache in caches
        )
