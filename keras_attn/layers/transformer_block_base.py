"""What the encoder and decoder blocks share: arguments and sub-layer wiring."""

import keras

from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.feed_forward import FeedForward
from keras_attn.layers.layer_norm import LayerNorm
from keras_attn.layers.masking import as_bool_mask, merge_attention_masks
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.validation import (
    check_bool,
    check_divisible,
    check_dropout_rate,
    check_positive_float,
    check_positive_int,
)


def check_sequence_shape(shape, argument_name):
    """Returns the feature size of a `(batch, length, features)` shape."""
    if len(shape) != 3 or shape[-1] is None:
        raise ValueError(
            f"`{argument_name}` must have shape (batch, length, hidden_dim). "
            f"Received: {argument_name}.shape={tuple(shape)}"
        )
    return shape[-1]


def bool_masks(**masks):
    """Each mask given by its call argument's name, boolean (or `None`).

    Checked here, so that a message names the argument the user passed
    (`padding_mask`), not the attention layer's (`value_mask`).
    """
    return {
        name: None if mask is None else as_bool_mask(mask, name)
        for name, mask in masks.items()
    }


class TransformerBlockBase(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock`.

    Holds the shared arguments (documented on the two blocks) and builds
    their sub-layers: attention with `d_k = d_v = hidden_dim / num_heads`
    (section 3.2.2), layer normalisation, residual dropout (section 5.4).
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        attention_dropout=None,
        activation="relu",
        layer_norm_epsilon=1e-6,
        normalize_first=False,
        use_fused_attention=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.intermediate_dim = check_positive_int(intermediate_dim, "intermediate_dim")
        self.dropout = check_dropout_rate(dropout, "dropout")
        # keras-hub's blocks use `dropout` on the attention weights too.
        self.attention_dropout = check_dropout_rate(
            self.dropout if attention_dropout is None else attention_dropout,
            "attention_dropout",
        )
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = check_positive_float(
            layer_norm_epsilon, "layer_norm_epsilon"
        )
        self.normalize_first = check_bool(normalize_first, "normalize_first")
        self.use_fused_attention = check_bool(
            use_fused_attention, "use_fused_attention"
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _attention(self, hidden_dim, name):
        check_divisible(hidden_dim, self.num_heads, "hidden_dim", "num_heads")
        return MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_dim // self.num_heads,
            dropout=self.attention_dropout,
            flash_attention=None if self.use_fused_attention else False,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def _feed_forward(self):
        return FeedForward(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _norm(self, name):
        return LayerNorm(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _dropout(self, name):
        return FastDropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_self_attention(self, inputs_shape, hidden_dim):
        """The first sub-layer: self-attention, its norm and its dropout."""
        self.self_attention = self._attention(hidden_dim, "self_attention")
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
        """What a sub-layer reads: `x`, or `LayerNorm(x)` with pre-norm."""
        return norm(x) if self.normalize_first else x

    def _add_and_norm(self, residual, outputs, norm, dropout, training):
        """`LayerNorm(x + Dropout(Sublayer(x)))` (sections 3.1 and 5.4).

        With `normalize_first=True`, the pre-norm variant
        `x + Dropout(Sublayer(LayerNorm(x)))` (Xiong et al., 2020), which
        trains deep stacks more stably: the norm was applied to the
        sub-layer's input (`_sublayer_input`) and the sum is left as it is.
        """
        x = residual + dropout(outputs, training=training)
        return x if self.normalize_first else norm(x)

    @staticmethod
    def _attend(attention, query, keys, values, mask, return_scores, training):
        """`call_with_key_value`, always as `(outputs, scores or None)`."""
        result = attention.call_with_key_value(
            query,
            keys,
            values,
            attention_mask=mask,
            return_attention_scores=return_scores,
            training=training,
        )
        return result if return_scores else (result, None)

    def _self_attention_sublayer(self, x, masks, return_scores, training):
        """Self-attention with Add & Norm; returns `(x, scores or None)`.

        `masks` is `(padding_mask, attention_mask, use_causal_mask)`.
        """
        padding_mask, attention_mask, use_causal_mask = masks
        mask = merge_attention_masks(
            x,
            x,
            value_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        h = self._sublayer_input(x, self.self_attention_norm)
        keys, values = self.self_attention.compute_key_value(h)
        attended, scores = self._attend(
            self.self_attention, h, keys, values, mask, return_scores, training
        )
        x = self._add_and_norm(
            x, attended, self.self_attention_norm, self.self_attention_dropout, training
        )
        return x, scores

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
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "use_fused_attention": self.use_fused_attention,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
