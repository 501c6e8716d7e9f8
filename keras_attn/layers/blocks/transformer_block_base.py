"""What the encoder and decoder blocks share: arguments and sub-layer wiring."""

import keras

from keras_attn.layers.attention import attention_arguments
from keras_attn.layers.attention.attention_settings import AttentionSettings
from keras_attn.layers.attention.multi_head_attention import MultiHeadAttention
from keras_attn.layers.blocks.feed_forward import (
    FeedForward,
    get_activation,
    serialize_activation,
)
from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.legacy_config import migrate_block_config
from keras_attn.layers.normalization.layer_norm import LayerNorm
from keras_attn.layers.normalization.rms_normalization import RMSNormalization
from keras_attn.validation import (
    check_bool,
    check_choice,
    check_epsilon,
    check_positive_int,
    check_rate,
)

NORMALIZATIONS = ("layer", "rms")


def check_sequence_shape(shape, argument_name):
    """Returns the feature size of a `(batch, length, features)` shape."""
    if len(shape) != 3 or shape[-1] is None:
        raise ValueError(
            f"`{argument_name}` must have shape (batch, length, hidden_dim). "
            f"Received: {argument_name}.shape={tuple(shape)}"
        )
    return shape[-1]


# The blocks' attention arguments before `attention=` (configs saved then).
class TransformerBlockBase(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock`.

    Holds the shared arguments (documented on the two blocks) and builds
    their sub-layers: attention with `d_k = d_v = hidden_dim / num_heads`
    (section 3.2.2), or `attention.head_dim` when set, layer (or RMS)
    normalisation, residual dropout (section 5.4).

    The attention settings (`attention`, an `AttentionSettings`) are
    checked when made and stored as `self.attention`; every attention
    sub-layer is built from them (the cross-attention without rotation).

    The sub-layers are stored (and saved) under the public names
    `self_attention`, `self_attention_norm`, `self_attention_dropout`,
    `feed_forward`, `feed_forward_norm` and `feed_forward_dropout`;
    keras-hub's private names (`_self_attention_layer`,
    `_self_attention_layer_norm`, `_feedforward_gate_dense`, ...) read the
    same layers.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        normalize_first=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalization="layer",
        use_bias=True,
        attention=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # `MultiHeadAttention`'s check: the same exception for the same value.
        self.num_heads = attention_arguments.check_head_dim(num_heads, "num_heads")
        self.intermediate_dim = check_positive_int(intermediate_dim, "intermediate_dim")
        self.dropout = check_rate(dropout, "dropout")
        # A callable, or the name of a gated activation ("swiglu", ...).
        self.activation = get_activation(activation)
        self.layer_norm_epsilon = check_epsilon(
            layer_norm_epsilon, "layer_norm_epsilon"
        )
        self.normalize_first = check_bool(normalize_first, "normalize_first")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalization = check_choice(
            normalization, "normalization", NORMALIZATIONS
        )
        self.use_bias = check_bool(use_bias, "use_bias")
        # keras-hub's blocks use `dropout` on the attention weights too.
        self.attention = AttentionSettings.get(
            attention, default=AttentionSettings(dropout=self.dropout)
        )
        self._num_key_value_heads = self.attention.key_value_heads(self.num_heads)
        # Known once built: `attention.key_dim(hidden_dim, num_heads)`.
        self._head_dim = None
        self.supports_masking = True

    @property
    def num_key_value_heads(self):
        """The key/value heads of the attention (`num_heads` unless set)."""
        return self._num_key_value_heads

    @property
    def attention_dropout(self):
        """The dropout rate of the attention weights (`attention.dropout`)."""
        return self.attention.dropout

    @property
    def flash_attention(self):
        """`attention.flash_attention`: `None`, `True` or `False`."""
        return self.attention.flash_attention

    @property
    def head_dim(self):
        """Features per head: `attention.head_dim`, else `hidden_dim //
        num_heads`; `None` until built.

        With `num_key_value_heads`, a self-attention cache is `(batch,
        max_length, block.num_key_value_heads, block.head_dim)`.
        """
        return self._head_dim

    # keras-hub's names for the sub-layers (read-only; the public names are
    # the stored ones, so the weights' paths do not change).

    @property
    def _self_attention_layer(self):
        return self.self_attention

    @property
    def _self_attention_layer_norm(self):
        return self.self_attention_norm

    @property
    def _self_attention_dropout(self):
        return self.self_attention_dropout

    @property
    def _feedforward_intermediate_dense(self):
        return self.feed_forward.intermediate_dense

    @property
    def _feedforward_gate_dense(self):
        """The gate of a gated feed-forward network, else `None`."""
        return self.feed_forward.gate_dense

    @property
    def _feedforward_output_dense(self):
        return self.feed_forward.output_dense

    @property
    def _feedforward_layer_norm(self):
        return self.feed_forward_norm

    @property
    def _feedforward_dropout(self):
        return self.feed_forward_dropout

    def _attention(self, hidden_dim, name, rotary=False):
        """An attention sub-layer; `rotary` for self-attention (RoPE)."""
        settings = self.attention if rotary else self.attention.for_cross_attention()
        # The output projection goes back to `hidden_dim` (the query's
        # features, `MultiHeadAttention`'s default `output_shape`).
        return MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=settings.key_dim(hidden_dim, self.num_heads),
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
            **settings.layer_arguments(),
        )

    def _feed_forward(self):
        return FeedForward(
            self.intermediate_dim,
            activation=self.activation,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _norm(self, name):
        if self.normalization == "rms":
            return RMSNormalization(
                epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
            )
        return LayerNorm(
            epsilon=self.layer_norm_epsilon,
            center=self.use_bias,
            dtype=self.dtype_policy,
            name=name,
        )

    def _dropout(self, name):
        return FastDropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_self_attention(self, inputs_shape, hidden_dim):
        """The first sub-layer: self-attention, its norm and its dropout."""
        self._head_dim = self.attention.key_dim(hidden_dim, self.num_heads)
        self.self_attention = self._attention(hidden_dim, "self_attention", rotary=True)
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_norm.build(inputs_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")

    def _build_feed_forward(self, inputs_shape):
        """The last sub-layer: the feed-forward network, norm and dropout."""
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm = self._norm("feed_forward_norm")
        self.feed_forward_norm.build(inputs_shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")

    def _sublayer_input(self, x, norm):
        """What a sub-layer reads: `x`, or `Norm(x)` with pre-norm."""
        return norm(x) if self.normalize_first else x

    def _add_and_norm(self, residual, outputs, norm, dropout, training):
        """`LayerNorm(x + Dropout(Sublayer(x)))` (sections 3.1 and 5.4).

        With `normalize_first=True`, the pre-norm variant
        `x + Dropout(Sublayer(LayerNorm(x)))` (Xiong et al., 2020), which
        trains deep stacks more stably: the norm was applied to the
        sub-layer's input (`_sublayer_input`) and the sum is left as it is.
        """
        if training:
            # Dropout is the identity at inference: not called, which saves
            # a layer call per sub-layer in every eager decoding step.
            outputs = dropout(outputs, training=training)
        x = residual + outputs
        return x if self.normalize_first else norm(x)

    def _attention_residual(
        self,
        x,
        h,
        sublayer,
        keys_values,
        mask,
        bias,
        training,
        return_scores=False,
        start_index=0,
        masked_keys_are_finite=False,
    ):
        """`x` plus attention from `h` over `keys_values`, with Add & Norm.

        `sublayer` is `(attention, norm, dropout)`; `mask` (boolean) and
        `bias` (float, added to the scores) are broadcastable to
        `(batch, num_heads, query_length, key_length)`; `start_index` is
        the position of the first query (RoPE in the self-attention; the
        cache index in cached decoding); `masked_keys_are_finite` says the
        keys and values `mask` hides are zeros or the model's own (a cache's
        unwritten slots), so they need no zeroing.
        Returns `(x, attention weights)`, the weights `None` unless
        `return_scores`.
        """
        attention, norm, dropout = sublayer
        keys, values = keys_values
        attended = attention.call_with_key_value(
            h,
            keys,
            values,
            attention_mask=mask,
            attention_bias=bias,
            return_attention_scores=return_scores,
            training=training,
            start_index=start_index,
            masked_keys_are_finite=masked_keys_are_finite,
        )
        attended, scores = attended if return_scores else (attended, None)
        return self._add_and_norm(x, attended, norm, dropout, training), scores

    def _self_attention_sublayer(self, x, mask, bias, training, return_scores=False):
        """Self-attention over `x` with Add & Norm; `(x, weights or None)`.

        `mask` is the merged boolean mask `(batch, length, length)`, `bias`
        an optional float bias broadcastable to `(batch, num_heads, length,
        length)`.
        """
        h = self._sublayer_input(x, self.self_attention_norm)
        keys_values = self.self_attention.compute_key_value(h, start_index=0)
        sublayer = (
            self.self_attention,
            self.self_attention_norm,
            self.self_attention_dropout,
        )
        return self._attention_residual(
            x, h, sublayer, keys_values, mask, bias, training, return_scores
        )

    def _feed_forward_sublayer(self, x, training):
        """The position-wise feed-forward network with Add & Norm."""
        h = self._sublayer_input(x, self.feed_forward_norm)
        outputs = self.feed_forward(h, training=training)
        return self._add_and_norm(
            x, outputs, self.feed_forward_norm, self.feed_forward_dropout, training
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation": serialize_activation(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        # The variants are written only when set (as `MultiHeadAttention`
        # does): a default block's config reads as the one files saved
        # before them hold.
        variants = {
            "normalization": (self.normalization, "layer"),
            "use_bias": (self.use_bias, True),
            "attention": (self.attention, AttentionSettings(dropout=self.dropout)),
        }
        config.update(
            {
                name: value.get_config() if name == "attention" else value
                for name, (value, default) in variants.items()
                if value != default
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Configs saved before `attention=` (or `flash_attention`) load as
        # they are, without a warning: the file is not the user's code.
        config = migrate_block_config(config)
        return super().from_config(config)
