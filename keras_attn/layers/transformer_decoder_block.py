"""One decoder layer of the Transformer, section 3.1 of the paper."""

import keras
from keras import ops

from keras_attn.layers.attention_heads import combine_masks
from keras_attn.layers.masking import (
    as_bool_mask,
    causal_mask,
    merge_attention_masks,
)
from keras_attn.layers.transformer_block_base import (
    TransformerBlockBase,
    bool_masks,
    check_sequence_shape,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoderBlock(TransformerBlockBase):
    """Masked self-attention, cross-attention and feed-forward, with Add & Norm.

    Built without an `encoder_sequence` the block has no cross-attention and
    serves decoder-only (GPT-style) models.

    Args:
        num_heads: int, number of attention heads; must divide the input's
            feature size.
        intermediate_dim: int, the feed-forward inner size `d_ff`.
        dropout: float in `[0, 1)`, residual dropout, applied by
            `keras_attn.layers.FastDropout` at a resolution of 1/2048 (0.1
            runs at 0.10010). Defaults to `0.0`.
        attention_dropout: float in `[0, 1)`, dropout on attention weights.
            Defaults to `None`, meaning `dropout` (as keras-hub's blocks,
            which use `dropout` for both).
        activation: feed-forward activation. Defaults to `"relu"`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        normalize_first: bool, pre-norm instead of the paper's post-norm.
            Defaults to `False`.
        use_fused_attention: bool. Defaults to `True`.
        kernel_initializer: initializer of the attention and feed-forward
            kernels. Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of the attention and feed-forward
            biases. Defaults to `"zeros"`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        decoder_sequence: tensor `(batch, target_length, hidden_dim)`.
        encoder_sequence: optional tensor `(batch, source_length,
            hidden_dim)`, the encoder output. Required if the block was built
            with one.
        decoder_padding_mask: optional boolean `(batch, target_length)`.
        encoder_padding_mask: optional boolean `(batch, source_length)`.
        decoder_attention_mask: optional boolean
            `(batch, target_length, target_length)`.
        use_causal_mask: bool, the look-ahead mask of section 3.2.3.
            Defaults to `True`.
        return_attention_scores: bool, also return the cross-attention
            weights `(batch, num_heads, target_length, source_length)`.
            Defaults to `False`.
        training: bool, whether dropout is active.
        decoder_sequence_mask, encoder_sequence_mask: filled by Keras from
            mask-carrying inputs; used when the padding masks are not given.

    Returns:
        `(batch, target_length, hidden_dim)`, or `(output, cross_attention_
        scores)` with `return_attention_scores=True`.

    Example:

    >>> block = keras_attn.layers.TransformerDecoderBlock(
    ...     num_heads=2, intermediate_dim=32)
    >>> target = keras.random.normal((2, 5, 16))
    >>> source = keras.random.normal((2, 7, 16))
    >>> out, scores = block(target, source, return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 5, 16), (2, 2, 5, 7))

    References:
        Vaswani et al., "Attention Is All You Need", 2017, sections 3.1, 3.2.3.
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        hidden_dim = check_sequence_shape(decoder_sequence_shape, "decoder_sequence")
        self._build_self_attention(decoder_sequence_shape, hidden_dim)
        self.has_cross_attention = encoder_sequence_shape is not None
        if self.has_cross_attention:
            check_sequence_shape(encoder_sequence_shape, "encoder_sequence")
            self.cross_attention = self._attention(hidden_dim, "cross_attention")
            self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
            self.cross_attention_norm = self._norm("cross_attention_norm")
            self.cross_attention_norm.build(decoder_sequence_shape)
            self.cross_attention_dropout = self._dropout("cross_attention_dropout")
        self._build_feed_forward(decoder_sequence_shape)
        self.built = True

    def _check_encoder_sequence(self, encoder_sequence):
        if self.has_cross_attention and encoder_sequence is None:
            raise ValueError(
                f"Layer {self.name} was built with cross-attention, so "
                "`encoder_sequence` is required. Received: encoder_sequence=None"
            )
        if not self.has_cross_attention and encoder_sequence is not None:
            raise ValueError(
                f"Layer {self.name} was built without cross-attention (no "
                "`encoder_sequence` at build time); it cannot attend to an "
                "`encoder_sequence`."
            )

    def _cross_attention_sublayer(self, x, cross_cache, mask, return_scores, training):
        """Cross-attention with Add & Norm; returns `(x, scores or None)`.

        `cross_cache` is the encoder output's `(keys, values)`; without
        cross-attention (decoder-only blocks) `x` passes unchanged.
        """
        if not self.has_cross_attention:
            return x, None
        h = self._sublayer_input(x, self.cross_attention_norm)
        keys, values = cross_cache
        attended, scores = self._attend(
            self.cross_attention, h, keys, values, mask, return_scores, training
        )
        x = self._add_and_norm(
            x,
            attended,
            self.cross_attention_norm,
            self.cross_attention_dropout,
            training,
        )
        return x, scores

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        decoder_attention_mask=None,
        use_causal_mask=True,
        return_attention_scores=False,
        training=None,
        encoder_attention_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        decoder_sequence_mask=None,
        encoder_sequence_mask=None,
    ):
        self._check_encoder_sequence(encoder_sequence)
        masks = bool_masks(
            decoder_padding_mask=(
                decoder_sequence_mask
                if decoder_padding_mask is None
                else decoder_padding_mask
            ),
            decoder_attention_mask=decoder_attention_mask,
            encoder_padding_mask=(
                encoder_sequence_mask
                if encoder_padding_mask is None
                else encoder_padding_mask
            ),
            encoder_attention_mask=encoder_attention_mask,
        )
        if self_attention_cache is not None or cross_attention_cache is not None:
            return self._call_with_stacked_cache(
                decoder_sequence,
                encoder_sequence,
                (self_attention_cache, self_attention_cache_update_index),
                (cross_attention_cache, cross_attention_cache_update_index),
                masks,
                use_causal_mask,
                training,
            )
        if self_attention_cache_update_index is not None:
            raise ValueError(
                "`self_attention_cache_update_index` needs a "
                "`self_attention_cache`. Received: self_attention_cache=None, "
                f"self_attention_cache_update_index={self_attention_cache_update_index}"
            )
        self_masks = (
            masks["decoder_padding_mask"],
            masks["decoder_attention_mask"],
            use_causal_mask,
        )
        x, _ = self._self_attention_sublayer(
            decoder_sequence, self_masks, False, training
        )
        cross_cache, cross_mask = None, None
        if self.has_cross_attention:
            cross_cache = self.cross_attention.compute_key_value(encoder_sequence)
            cross_mask = merge_attention_masks(
                decoder_sequence,
                encoder_sequence,
                value_mask=masks["encoder_padding_mask"],
                attention_mask=masks["encoder_attention_mask"],
            )
        x, scores = self._cross_attention_sublayer(
            x, cross_cache, cross_mask, return_attention_scores, training
        )
        x = self._feed_forward_sublayer(x, training)
        if return_attention_scores:
            return x, scores
        return x

    def compute_cross_attention_cache(self, encoder_sequence):
        """Keys and values of the encoder output, computed once per sentence.

        Args:
            encoder_sequence: tensor `(batch, source_length, hidden_dim)`.

        Returns:
            `(keys, values)`, each `(batch, source_length, num_heads,
            head_dim)`.
        """
        self._check_encoder_sequence(encoder_sequence)
        return self.cross_attention.compute_key_value(encoder_sequence)

    def call_cached(
        self,
        decoder_sequence,
        self_attention_cache,
        cache_index,
        cross_attention_cache=None,
        encoder_padding_mask=None,
    ):
        """Runs the block for new positions only, reusing cached keys/values.

        The new positions' self-attention keys and values are written into
        the cache at `cache_index`; earlier positions are read from it, so
        each decoding step costs one position's work.

        Args:
            decoder_sequence: tensor `(batch, new_length, hidden_dim)`, the
                inputs at positions `cache_index ... cache_index +
                new_length - 1` (usually `new_length == 1`).
            self_attention_cache: `(keys, values)`, each
                `(batch, max_length, num_heads, head_dim)`.
            cache_index: int or scalar int tensor, position of the first new
                element.
            cross_attention_cache: `(keys, values)` from
                `compute_cross_attention_cache`; required with
                cross-attention.
            encoder_padding_mask: optional boolean `(batch, source_length)`.

        Returns:
            `(outputs, self_attention_cache)`: `(batch, new_length,
            hidden_dim)` and the updated cache.
        """
        if self.has_cross_attention and cross_attention_cache is None:
            raise ValueError(
                f"Layer {self.name} has cross-attention: pass "
                "`cross_attention_cache` from `compute_cross_attention_cache`."
            )
        cross_mask = None
        if self.has_cross_attention and encoder_padding_mask is not None:
            cross_mask = merge_attention_masks(
                decoder_sequence,
                cross_attention_cache[0],
                value_mask=as_bool_mask(encoder_padding_mask, "encoder_padding_mask"),
            )
        outputs, keys, values = self._cached(
            decoder_sequence,
            self_attention_cache,
            cache_index,
            cross_attention_cache,
            self_mask=None,
            use_causal_mask=True,
            cross_mask=cross_mask,
            training=False,
        )
        return outputs, (keys, values)

    @staticmethod
    def _write_cache(cache, index, keys, values):
        """`cache = (keys, values)` with the new ones written at `index`."""
        start = (0, index, 0, 0)
        key_cache, value_cache = cache
        return (
            ops.slice_update(key_cache, start, ops.cast(keys, key_cache.dtype)),
            ops.slice_update(value_cache, start, ops.cast(values, value_cache.dtype)),
        )

    @staticmethod
    def _cached_self_mask(self_mask, use_causal_mask, cache_index, shape):
        """The self-attention mask of a cached step, `(batch, new, max)`.

        `shape` is `(batch, new_length, max_length)`; the causal mask is
        offset by `cache_index` (new position `i` sees slots `<= index + i`).
        """
        batch_size, new_length, max_length = shape
        if use_causal_mask:
            # (1, new_length, max_length)
            causal = causal_mask(
                new_length,
                max_length,
                query_offset=0 if cache_index is None else cache_index,
            )
            self_mask = (
                causal if self_mask is None else ops.logical_and(self_mask, causal)
            )
        if self_mask is None:
            return None
        # (batch, new_length, max_length)
        return ops.broadcast_to(self_mask, (batch_size, new_length, max_length))

    def _cached(
        self,
        decoder_sequence,
        self_attention_cache,
        cache_index,
        cross_attention_cache,
        self_mask,
        use_causal_mask,
        cross_mask,
        training,
    ):
        """The cached step of `call_cached` and of keras-hub's cache call.

        `cache_index=None` reads the self-attention cache without writing
        it. `self_mask` (broadcastable to `(batch, new_length, max_length)`)
        is combined with the causal mask offset by `cache_index`. Returns
        `(outputs, keys, values)`, the last two the updated cache.
        """
        # A direct call (not through `__call__`) may pass NumPy: on torch,
        # `ndarray + tensor` in the residual would then fail.
        x = ops.convert_to_tensor(decoder_sequence)
        batch_size, new_length = ops.shape(x)[0], ops.shape(x)[1]
        max_length = ops.shape(self_attention_cache[0])[1]
        self_mask = self._cached_self_mask(
            self_mask,
            use_causal_mask,
            cache_index,
            (batch_size, new_length, max_length),
        )
        h = self._sublayer_input(x, self.self_attention_norm)
        keys, values = self_attention_cache
        if cache_index is not None:
            new_keys, new_values = self.self_attention.compute_key_value(h)
            keys, values = self._write_cache(
                self_attention_cache, cache_index, new_keys, new_values
            )
        attended, _ = self._attend(
            self.self_attention, h, keys, values, self_mask, False, training
        )
        x = self._add_and_norm(
            x, attended, self.self_attention_norm, self.self_attention_dropout, training
        )
        x, _ = self._cross_attention_sublayer(
            x, cross_attention_cache, cross_mask, False, training
        )
        return self._feed_forward_sublayer(x, training), keys, values

    def _check_stacked_caches(self, self_attention_cache, cross_attention_cache):
        if self_attention_cache is None or (
            self.has_cross_attention and cross_attention_cache is None
        ):
            raise ValueError(
                f"Layer {self.name}: `self_attention_cache` and "
                "`cross_attention_cache` (with cross-attention) must both be set "
                "or both be `None`. Received: "
                f"self_attention_cache={'set' if self_attention_cache is not None else None}, "
                f"cross_attention_cache={'set' if cross_attention_cache is not None else None}"
            )

    @staticmethod
    def _stacked_self_mask(decoder_padding_mask, decoder_attention_mask):
        """Padding and explicit masks of keras-hub's cache call, or `None`."""
        padding = None
        if decoder_padding_mask is not None:
            # (batch, 1, max_length): padded cache slots.
            padding = decoder_padding_mask[:, None, :]
        return combine_masks(padding, decoder_attention_mask)

    def _stacked_cross_cache(self, encoder_sequence, cache, update_index):
        """The cross-attention `(keys, values)` read from, or written to, `cache`."""
        if not self.has_cross_attention:
            return None
        # (batch, source_length, num_heads, head_dim) each
        unstacked = (cache[:, 0], cache[:, 1])
        if update_index is None:
            return unstacked
        keys, values = self.cross_attention.compute_key_value(encoder_sequence)
        return self._write_cache(unstacked, update_index, keys, values)

    def _call_with_stacked_cache(
        self,
        decoder_sequence,
        encoder_sequence,
        self_cache_and_index,
        cross_cache_and_index,
        masks,
        use_causal_mask,
        training,
    ):
        """keras-hub's `TransformerDecoder` cache call.

        Caches are stacked `(batch, 2, length, num_heads, head_dim)` tensors
        (keys at `[:, 0]`, values at `[:, 1]`), each given with its update
        index; an index of `None` reads a cache without writing it. `masks`
        holds the call's four masks by argument name.
        """
        self_cache, self_index = self_cache_and_index
        stacked_cross_cache, cross_index = cross_cache_and_index
        self._check_stacked_caches(self_cache, stacked_cross_cache)
        cross_cache = self._stacked_cross_cache(
            encoder_sequence, stacked_cross_cache, cross_index
        )
        cross_mask = None
        if self.has_cross_attention and (
            masks["encoder_padding_mask"] is not None
            or masks["encoder_attention_mask"] is not None
        ):
            cross_mask = merge_attention_masks(
                decoder_sequence,
                cross_cache[0],
                value_mask=masks["encoder_padding_mask"],
                attention_mask=masks["encoder_attention_mask"],
            )
        self_mask = self._stacked_self_mask(
            masks["decoder_padding_mask"], masks["decoder_attention_mask"]
        )
        outputs, keys, values = self._cached(
            decoder_sequence,
            (self_cache[:, 0], self_cache[:, 1]),
            self_index,
            cross_cache,
            self_mask=self_mask,
            use_causal_mask=use_causal_mask,
            cross_mask=cross_mask,
            training=training,
        )
        # (batch, 2, max_length, num_heads, head_dim)
        self_cache = ops.stack((keys, values), axis=1)
        if not self.has_cross_attention:
            return outputs, self_cache
        return outputs, self_cache, ops.stack(cross_cache, axis=1)

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape

    def compute_output_spec(self, decoder_sequence, encoder_sequence=None, **kwargs):
        self._check_encoder_sequence(encoder_sequence)
        output = keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)
        self_cache = kwargs.get("self_attention_cache")
        if self_cache is not None:
            self_cache = keras.KerasTensor(self_cache.shape, dtype=self_cache.dtype)
            if not self.has_cross_attention:
                return output, self_cache
            cross_cache = kwargs["cross_attention_cache"]
            return (
                output,
                self_cache,
                keras.KerasTensor(cross_cache.shape, dtype=cross_cache.dtype),
            )
        if not kwargs.get("return_attention_scores", False):
            return output
        if encoder_sequence is None:
            return output, None
        # (batch, num_heads, target_length, source_length)
        scores_shape = (
            decoder_sequence.shape[0],
            self.num_heads,
            decoder_sequence.shape[1],
            encoder_sequence.shape[1],
        )
        return output, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)
