"""One decoder layer of the Transformer, section 3.1 of the paper."""

import keras
from keras import ops

from keras_attn.layers.attention.cache_index import resolve_cache_index
from keras_attn.layers.attention.masking import (
    as_bool_mask,
    causal_mask,
    merge_attention_masks,
)
from keras_attn.layers.blocks.stacked_decoder_cache import (
    STACKED_CACHE_ARGUMENTS,
    StackedDecoderCacheMixin,
    uses_stacked_cache,
)
from keras_attn.layers.blocks.transformer_block_base import (
    TransformerBlockBase,
    check_sequence_shape,
)
from keras_attn.layers.call_arguments import call_arguments


def write_cache(cache, index, keys, values):
    """`cache = (keys, values)` with the new ones written at `index`.

    Args:
        cache: `(keys, values)`, each `(batch, max_length, kv_heads,
            head_dim)`, `kv_heads` the attention's `num_key_value_heads`.
        index: int or scalar int tensor, the slot of the first new position.
        keys, values: `(batch, new_length, kv_heads, head_dim)` each.

    Returns:
        The updated `(keys, values)`.
    """
    start = (0, index, 0, 0)
    key_cache, value_cache = cache
    return (
        ops.slice_update(key_cache, start, ops.cast(keys, key_cache.dtype)),
        ops.slice_update(value_cache, start, ops.cast(values, value_cache.dtype)),
    )


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerDecoderBlock(StackedDecoderCacheMixin, TransformerBlockBase):
    """Masked self-attention, cross-attention and feed-forward, with Add & Norm.

    Built without an `encoder_sequence` the block has no cross-attention and
    serves decoder-only (GPT-style) models.

    Args:
        num_heads: int, number of attention heads; must divide the input's
            feature size, unless `attention` sets `head_dim`.
        intermediate_dim: int, the feed-forward inner size `d_ff`.
        dropout: float in `[0, 1)`, residual dropout, applied by
            `keras_attn.layers.FastDropout` (whose docstring says how it
            rounds the rate). Defaults to `0.0`.
        activation: the feed-forward activation, a Keras activation or a
            gated one, as in `keras_attn.layers.TransformerEncoderBlock`.
            Defaults to `"relu"`.
        layer_norm_epsilon: float, a normal float32 number, as in
            `keras_attn.layers.TransformerEncoderBlock`. Defaults to `1e-6`.
        normalize_first: bool, pre-norm instead of the paper's post-norm.
            Defaults to `False`.
        kernel_initializer: initializer of the attention and feed-forward
            kernels. Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of the attention and feed-forward
            biases. Defaults to `"zeros"`.
        normalization: `"layer"` or `"rms"`, the sub-layer norms, as in
            `keras_attn.layers.TransformerEncoderBlock`. Defaults to
            `"layer"`.
        use_bias: bool; `False` removes the biases and the layer norms'
            offsets, as in `keras_attn.layers.TransformerEncoderBlock`.
            Defaults to `True`.
        attention: the settings of the self- and cross-attention: a
            `keras_attn.layers.AttentionSettings` (attention dropout, the
            fused kernel, grouped key/value heads, QK-norm, rotary
            positions, which the cross-attention leaves out), or its config
            (a dict); caches hold `block.num_key_value_heads` heads.
            Defaults to `None`, meaning `AttentionSettings(dropout=dropout)`:
            keras-hub's blocks use `dropout` on the attention weights too.
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
        encoder_attention_mask: optional boolean `(batch, target_length,
            source_length)`.
        self_attention_bias: optional float tensor broadcastable to
            `(batch, num_heads, target_length, target_length)`, added to the
            self-attention scores before the softmax (a relative position
            bias, ALiBi, ...).
        self_attention_cache, self_attention_cache_update_index,
        cross_attention_cache, cross_attention_cache_update_index:
            keras-hub's `TransformerDecoder` cache call, served by the same
            code as `call_cached` (which new code should use) through the
            adapter of `keras_attn.layers.blocks.stacked_decoder_cache`: stacked
            caches `(batch, 2, length, kv_heads, head_dim)`. The update
            indices are checked (integers) or clipped (tensors) as
            `call_cached`'s `cache_index`.
        decoder_sequence_mask, encoder_sequence_mask: filled by Keras from
            mask-carrying inputs; used when the padding masks are not given.

    Returns:
        `(batch, target_length, hidden_dim)`, or `(output, cross_attention_
        scores)` with `return_attention_scores=True`. With keras-hub's
        `self_attention_cache`: `(output, self_attention_cache)`, and
        `(output, self_attention_cache, cross_attention_cache)` with
        cross-attention, as keras-hub.

    To decode with a cache, compute `compute_cross_attention_cache` once per
    sentence, then run `call_cached` on each step's new positions.

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

    # keras-hub's names for the cross-attention sub-layers (read-only).

    @property
    def _cross_attention_layer(self):
        """`cross_attention`, or `None` without cross-attention (as keras-hub)."""
        return self.cross_attention if self.has_cross_attention else None

    @property
    def _cross_attention_layer_norm(self):
        return self.cross_attention_norm

    @property
    def _cross_attention_dropout(self):
        return self.cross_attention_dropout

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

    def _cross_attention_sublayer(
        self, x, cross_keys_values, mask, training, return_scores=False
    ):
        """Cross-attention with Add & Norm; returns `(x, weights or None)`.

        `cross_keys_values` are the encoder output's `(keys, values)`;
        without cross-attention (decoder-only blocks) `x` passes unchanged.
        """
        if not self.has_cross_attention:
            return x, None
        h = self._sublayer_input(x, self.cross_attention_norm)
        sublayer = (
            self.cross_attention,
            self.cross_attention_norm,
            self.cross_attention_dropout,
        )
        return self._attention_residual(
            x, h, sublayer, cross_keys_values, mask, None, training, return_scores
        )

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
        self_attention_bias=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        decoder_sequence_mask=None,
        encoder_sequence_mask=None,
    ):
        self._check_encoder_sequence(encoder_sequence)
        decoder_attention_mask = as_bool_mask(
            decoder_attention_mask, "decoder_attention_mask"
        )
        encoder_padding_mask = as_bool_mask(
            encoder_sequence_mask
            if encoder_padding_mask is None
            else encoder_padding_mask,
            "encoder_padding_mask",
        )
        encoder_attention_mask = as_bool_mask(
            encoder_attention_mask, "encoder_attention_mask"
        )
        stacked_caches = (
            self_attention_cache,
            self_attention_cache_update_index,
            cross_attention_cache,
            cross_attention_cache_update_index,
        )
        if uses_stacked_cache(stacked_caches):
            # keras-hub's cache call (`StackedDecoderCacheMixin`).
            return self._call_with_stacked_cache(
                decoder_sequence,
                encoder_sequence,
                stacked_caches,
                self_masks=(
                    as_bool_mask(decoder_padding_mask, "decoder_padding_mask"),
                    decoder_attention_mask,
                    use_causal_mask,
                ),
                cross_masks=(encoder_padding_mask, encoder_attention_mask),
                self_attention_bias=self_attention_bias,
                return_attention_scores=return_attention_scores,
                training=training,
            )
        decoder_padding_mask = as_bool_mask(
            decoder_sequence_mask
            if decoder_padding_mask is None
            else decoder_padding_mask,
            "decoder_padding_mask",
        )
        self_mask = merge_attention_masks(
            decoder_sequence,
            decoder_sequence,
            value_mask=decoder_padding_mask,
            attention_mask=decoder_attention_mask,
            use_causal_mask=use_causal_mask,
        )
        x, _ = self._self_attention_sublayer(
            decoder_sequence, self_mask, self_attention_bias, training
        )
        cross_keys_values, cross_mask = None, None
        if self.has_cross_attention:
            cross_keys_values = self.cross_attention.compute_key_value(encoder_sequence)
            cross_mask = merge_attention_masks(
                decoder_sequence,
                encoder_sequence,
                value_mask=encoder_padding_mask,
                attention_mask=encoder_attention_mask,
            )
        x, scores = self._cross_attention_sublayer(
            x, cross_keys_values, cross_mask, training, return_attention_scores
        )
        x = self._feed_forward_sublayer(x, training)
        if return_attention_scores:
            return x, scores
        return x

    # --- Decoding with a cache ---------------------------------------------

    def compute_cross_attention_cache(self, encoder_sequence):
        """Keys and values of the encoder output, computed once per sentence.

        Args:
            encoder_sequence: tensor `(batch, source_length, hidden_dim)`.

        Returns:
            `(keys, values)`, each `(batch, source_length, kv_heads,
            head_dim)`, `kv_heads` being `block.num_key_value_heads`.
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
        self_attention_bias=None,
    ):
        """Runs the block for new positions only, reusing cached keys/values.

        The new positions' self-attention keys and values are written into
        the cache at `cache_index`; earlier positions are read from it, so
        each decoding step costs one position's work. The slots after the
        new positions are hidden by the causal mask and read as they are:
        they must hold finite values, as the zeros a cache is allocated with
        (`TransformerLM.initial_cache`) or keys and values the block wrote
        before; a NaN there would reach the outputs (`0 * nan` is NaN).

        Args:
            decoder_sequence: tensor `(batch, new_length, hidden_dim)`, the
                inputs at positions `cache_index ... cache_index +
                new_length - 1` (usually `new_length == 1`).
            self_attention_cache: `(keys, values)`, each
                `(batch, max_length, kv_heads, head_dim)`: `kv_heads` is
                `block.num_key_value_heads`, `head_dim` `block.head_dim`.
            cache_index: int or scalar int tensor, position of the first new
                element (with RoPE, the position its rotation uses), in
                `[0, max_length - new_length]`. A Python or NumPy integer
                outside that range is a `ValueError`; a tensor (the
                decoding loop's, traced or eager) is clipped into it, and
                the step runs at the clipped index, the same on every
                backend (`keras_attn.layers.attention.cache_index`).
            cross_attention_cache: `(keys, values)` from
                `compute_cross_attention_cache`; required with
                cross-attention.
            encoder_padding_mask: optional boolean `(batch, source_length)`.
            self_attention_bias: optional float tensor broadcastable to
                `(batch, num_heads, new_length, max_length)`: the bias of
                the new positions (queries) over every cache slot (keys).

        Returns:
            `(outputs, self_attention_cache)`: `(batch, new_length,
            hidden_dim)` and the updated cache.

        Example:

        >>> block = keras_attn.layers.TransformerDecoderBlock(
        ...     num_heads=4, intermediate_dim=32,
        ...     attention=keras_attn.layers.AttentionSettings(
        ...         num_key_value_heads=2, rotary_max_wavelength=10000.0))
        >>> _ = block(keras.random.normal((1, 4, 16)))  # builds, decoder-only
        >>> # (batch, max_length, kv_heads, head_dim)
        >>> slots = keras.ops.zeros((1, 4, block.num_key_value_heads, block.head_dim))
        >>> out, cache = block.call_cached(
        ...     keras.random.normal((1, 1, 16)), (slots, slots), cache_index=0)
        >>> tuple(out.shape), tuple(cache[0].shape)
        ((1, 1, 16), (1, 4, 2, 4))
        """
        if self.has_cross_attention and cross_attention_cache is None:
            raise ValueError(
                f"Layer {self.name} has cross-attention: pass "
                "`cross_attention_cache` from `compute_cross_attention_cache`."
            )
        # A direct call (not through `__call__`) may pass NumPy: on torch,
        # `ndarray + tensor` in the residual would then fail.
        x = ops.convert_to_tensor(decoder_sequence)
        cross_mask = None
        if self.has_cross_attention and encoder_padding_mask is not None:
            cross_mask = merge_attention_masks(
                x,
                cross_attention_cache[0],
                value_mask=as_bool_mask(encoder_padding_mask, "encoder_padding_mask"),
            )
        return self._cached_step(
            x,
            self_attention_cache,
            cache_index,
            cross_attention_cache,
            ((), cross_mask),
            self_attention_bias,
            training=False,
            masked_keys_are_finite=True,
        )

    @staticmethod
    def _cached_self_attention_mask(
        x,
        keys,
        cache_index,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=True,
    ):
        """The self-attention mask of a cached step, `(batch, new_length,
        max_length)` (or `None`).

        `padding_mask` `(batch, max_length)` marks cache slots; the causal
        mask is offset by `cache_index`: new position `i` sees the slots
        `<= cache_index + i`.
        """
        mask = merge_attention_masks(
            x, keys, value_mask=padding_mask, attention_mask=attention_mask
        )
        if not use_causal_mask:
            return mask
        # (1, new_length, max_length)
        causal = causal_mask(
            ops.shape(x)[1],
            ops.shape(keys)[1],
            query_offset=0 if cache_index is None else cache_index,
        )
        if mask is not None:
            return ops.logical_and(mask, causal)
        # (batch, new_length, max_length)
        return ops.broadcast_to(
            causal, (ops.shape(x)[0], ops.shape(x)[1], ops.shape(keys)[1])
        )

    def _cached_step(
        self,
        x,
        self_attention_cache,
        cache_index,
        cross_keys_values,
        masks,
        self_attention_bias,
        training,
        masked_keys_are_finite=False,
        cache_index_name="cache_index",
    ):
        """The block on new positions over a cache (`call_cached`'s work,
        and keras-hub's cache call's).

        `masks` is `(self_masks, cross_mask)`: the arguments of
        `_cached_self_attention_mask` after the index (`(padding_mask,
        attention_mask, use_causal_mask)`, or `()` for the causal mask
        alone), and the merged cross-attention mask. `cache_index` goes
        through `resolve_cache_index` (named `cache_index_name` in its
        errors) before anything reads it; `None` reads the self-attention
        cache without writing it. With `masked_keys_are_finite` the
        self-attention reads the slots its mask hides as they are, without
        zeroing them first. Returns `(outputs, (keys, values))`, the second
        the updated cache.
        """
        self_masks, cross_mask = masks
        if cache_index is not None:
            cache_index = resolve_cache_index(
                cache_index, self_attention_cache[0], x, cache_index_name
            )
        self_mask = self._cached_self_attention_mask(
            x, self_attention_cache[0], cache_index, *self_masks
        )
        h = self._sublayer_input(x, self.self_attention_norm)
        # The new positions start at the cache index (with RoPE, the keys
        # are cached rotated); a read-only step places them from 0.
        start_index = 0 if cache_index is None else cache_index
        keys_values = self_attention_cache
        if cache_index is not None:
            new_keys, new_values = self.self_attention.compute_key_value(
                h, start_index=start_index
            )
            keys_values = write_cache(
                self_attention_cache, cache_index, new_keys, new_values
            )
        sublayer = (
            self.self_attention,
            self.self_attention_norm,
            self.self_attention_dropout,
        )
        x, _ = self._attention_residual(
            x,
            h,
            sublayer,
            keys_values,
            self_mask,
            self_attention_bias,
            training,
            start_index=start_index,
            masked_keys_are_finite=masked_keys_are_finite,
        )
        x, _ = self._cross_attention_sublayer(
            x, cross_keys_values, cross_mask, training
        )
        return self._feed_forward_sublayer(x, training), keys_values

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape

    def compute_output_spec(self, *args, **kwargs):
        # `call`'s arguments; the sequences, `return_attention_scores` and
        # keras-hub's cache arguments shape the output.
        arguments = call_arguments(self, args, kwargs)
        decoder_sequence = arguments["decoder_sequence"]
        encoder_sequence = arguments["encoder_sequence"]
        return_attention_scores = arguments["return_attention_scores"]
        self._check_encoder_sequence(encoder_sequence)
        output = keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)
        stacked_caches = tuple(arguments[name] for name in STACKED_CACHE_ARGUMENTS)
        if uses_stacked_cache(stacked_caches):
            return self._stacked_cache_output_spec(
                output, stacked_caches, return_attention_scores
            )
        if not return_attention_scores:
            return output
        if encoder_sequence is None:
            return output, None
        # (batch, num_heads, target_length, source_length)
        _, scores = self.cross_attention.compute_output_spec(
            decoder_sequence, encoder_sequence, return_attention_scores=True
        )
        return output, scores
