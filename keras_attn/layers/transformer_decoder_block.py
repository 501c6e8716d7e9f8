"""One decoder layer of the Transformer, section 3.1 of the paper."""

import keras
from keras import ops

from keras_attn.layers.masking import causal_mask, merge_attention_masks
from keras_attn.layers.transformer_block_base import (
    TransformerBlockBase,
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
        dropout: float in `[0, 1)`, residual dropout. Defaults to `0.0`.
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
        self.self_attention = self._attention(hidden_dim, "self_attention")
        self.self_attention.build(decoder_sequence_shape, decoder_sequence_shape)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_norm.build(decoder_sequence_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.has_cross_attention = encoder_sequence_shape is not None
        if self.has_cross_attention:
            check_sequence_shape(encoder_sequence_shape, "encoder_sequence")
            self.cross_attention = self._attention(hidden_dim, "cross_attention")
            self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
            self.cross_attention_norm = self._norm("cross_attention_norm")
            self.cross_attention_norm.build(decoder_sequence_shape)
            self.cross_attention_dropout = self._dropout("cross_attention_dropout")
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(decoder_sequence_shape)
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward_norm.build(decoder_sequence_shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")
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

    def _cross_attention_and_feed_forward(
        self, x, cross_attend, return_attention_scores, training
    ):
        """The second and third sub-layers, shared by `call` and `call_cached`."""
        scores = []
        if self.has_cross_attention:

            def attend(h):
                out, weights = cross_attend(h)
                scores.append(weights)
                return out

            x = self._residual(
                x,
                attend,
                self.cross_attention_norm,
                self.cross_attention_dropout,
                training,
            )
        x = self._residual(
            x,
            lambda h: self.feed_forward(h, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            training,
        )
        if return_attention_scores:
            return x, (scores[0] if scores else None)
        return x

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
        if decoder_padding_mask is None:
            decoder_padding_mask = decoder_sequence_mask
        if encoder_padding_mask is None:
            encoder_padding_mask = encoder_sequence_mask
        if self_attention_cache is not None or cross_attention_cache is not None:
            return self._call_with_stacked_cache(
                decoder_sequence,
                encoder_sequence,
                self_attention_cache,
                self_attention_cache_update_index,
                cross_attention_cache,
                cross_attention_cache_update_index,
                decoder_padding_mask,
                decoder_attention_mask,
                encoder_padding_mask,
                encoder_attention_mask,
                use_causal_mask,
                training,
            )
        if self_attention_cache_update_index is not None:
            raise ValueError(
                "`self_attention_cache_update_index` needs a "
                "`self_attention_cache`. Received: self_attention_cache=None, "
                f"self_attention_cache_update_index={self_attention_cache_update_index}"
            )
        self_mask = merge_attention_masks(
            decoder_sequence,
            decoder_sequence,
            value_mask=decoder_padding_mask,
            attention_mask=decoder_attention_mask,
            use_causal_mask=use_causal_mask,
        )

        def self_attend(h):
            keys, values = self.self_attention.compute_key_value(h)
            return self.self_attention.call_with_key_value(
                h, keys, values, attention_mask=self_mask, training=training
            )

        x = self._residual(
            decoder_sequence,
            self_attend,
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )
        cross_mask = None
        if self.has_cross_attention:
            cross_mask = merge_attention_masks(
                decoder_sequence,
                encoder_sequence,
                value_mask=encoder_padding_mask,
                attention_mask=encoder_attention_mask,
            )

        def cross_attend(h):
            keys, values = self.cross_attention.compute_key_value(encoder_sequence)
            result = self.cross_attention.call_with_key_value(
                h,
                keys,
                values,
                attention_mask=cross_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            return result if return_attention_scores else (result, None)

        return self._cross_attention_and_feed_forward(
            x, cross_attend, return_attention_scores, training
        )

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
                value_mask=encoder_padding_mask,
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
        is combined with the causal mask offset by `cache_index`.
        """
        key_cache, value_cache = self_attention_cache
        # A direct call (not through `__call__`) may pass NumPy: on torch,
        # `ndarray + tensor` in the residual would then fail.
        decoder_sequence = ops.convert_to_tensor(decoder_sequence)
        batch_size = ops.shape(decoder_sequence)[0]
        new_length = ops.shape(decoder_sequence)[1]
        max_length = ops.shape(key_cache)[1]
        if use_causal_mask:
            # (1, new_length, max_length): new position i sees slots <= index + i.
            causal = causal_mask(
                new_length,
                max_length,
                query_offset=0 if cache_index is None else cache_index,
            )
            self_mask = (
                causal if self_mask is None else ops.logical_and(self_mask, causal)
            )
        if self_mask is not None:
            # (batch, new_length, max_length)
            self_mask = ops.broadcast_to(
                self_mask, (batch_size, new_length, max_length)
            )

        def self_attend(h):
            keys, values = key_cache, value_cache
            if cache_index is not None:
                new_keys, new_values = self.self_attention.compute_key_value(h)
                start = (0, cache_index, 0, 0)
                keys = ops.slice_update(
                    key_cache, start, ops.cast(new_keys, key_cache.dtype)
                )
                values = ops.slice_update(
                    value_cache, start, ops.cast(new_values, value_cache.dtype)
                )
            return (
                self.self_attention.call_with_key_value(
                    h, keys, values, attention_mask=self_mask, training=training
                ),
                keys,
                values,
            )

        if self.normalize_first:
            attended, keys, values = self_attend(
                self.self_attention_norm(decoder_sequence)
            )
            x = decoder_sequence + self.self_attention_dropout(
                attended, training=training
            )
        else:
            attended, keys, values = self_attend(decoder_sequence)
            x = self.self_attention_norm(
                decoder_sequence
                + self.self_attention_dropout(attended, training=training)
            )

        def cross_attend(h):
            cross_keys, cross_values = cross_attention_cache
            out = self.cross_attention.call_with_key_value(
                h,
                cross_keys,
                cross_values,
                attention_mask=cross_mask,
                training=training,
            )
            return out, None

        outputs = self._cross_attention_and_feed_forward(
            x, cross_attend, False, training
        )
        return outputs, keys, values

    def _call_with_stacked_cache(
        self,
        decoder_sequence,
        encoder_sequence,
        self_attention_cache,
        self_attention_cache_update_index,
        cross_attention_cache,
        cross_attention_cache_update_index,
        decoder_padding_mask,
        decoder_attention_mask,
        encoder_padding_mask,
        encoder_attention_mask,
        use_causal_mask,
        training,
    ):
        """keras-hub's `TransformerDecoder` cache call.

        Caches are stacked `(batch, 2, length, num_heads, head_dim)` tensors
        (keys at `[:, 0]`, values at `[:, 1]`); an update index of `None`
        reads a cache without writing it.
        """
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
        self_mask = None
        if decoder_padding_mask is not None:
            # (batch, 1, max_length): padded cache slots.
            self_mask = ops.cast(decoder_padding_mask, "bool")[:, None, :]
        if decoder_attention_mask is not None:
            extra = ops.cast(decoder_attention_mask, "bool")
            self_mask = (
                extra if self_mask is None else ops.logical_and(self_mask, extra)
            )
        cross_cache = None
        if self.has_cross_attention:
            if cross_attention_cache_update_index is None:
                cross_cache = (cross_attention_cache[:, 0], cross_attention_cache[:, 1])
            else:
                keys, values = self.cross_attention.compute_key_value(encoder_sequence)
                start = (0, cross_attention_cache_update_index, 0, 0)
                cross_cache = (
                    ops.slice_update(
                        cross_attention_cache[:, 0],
                        start,
                        ops.cast(keys, cross_attention_cache.dtype),
                    ),
                    ops.slice_update(
                        cross_attention_cache[:, 1],
                        start,
                        ops.cast(values, cross_attention_cache.dtype),
                    ),
                )
        cross_mask = None
        if self.has_cross_attention and (
            encoder_padding_mask is not None or encoder_attention_mask is not None
        ):
            cross_mask = merge_attention_masks(
                decoder_sequence,
                cross_cache[0],
                value_mask=encoder_padding_mask,
                attention_mask=encoder_attention_mask,
            )
        outputs, keys, values = self._cached(
            decoder_sequence,
            (self_attention_cache[:, 0], self_attention_cache[:, 1]),
            self_attention_cache_update_index,
            cross_cache,
            self_mask=self_mask,
            use_causal_mask=use_causal_mask,
            cross_mask=cross_mask,
            training=training,
        )
        # (batch, 2, max_length, num_heads, head_dim)
        self_attention_cache = ops.stack((keys, values), axis=1)
        if not self.has_cross_attention:
            return outputs, self_attention_cache
        return outputs, self_attention_cache, ops.stack(cross_cache, axis=1)

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
