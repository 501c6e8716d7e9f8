"""What the encoder and decoder blocks share: arguments and sub-layer wiring."""

import keras

from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.feed_forward import FeedForward
from keras_attn.layers.multi_head_attention import MultiHeadAttention
from keras_attn.validation import (
    check_divisible,
    check_dropout_rate,
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
        if not layer_norm_epsilon > 0:
            raise ValueError(
                "`layer_norm_epsilon` must be positive. "
                f"Received: layer_norm_epsilon={layer_norm_epsilon}"
            )
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.normalize_first = bool(normalize_first)
        self.use_fused_attention = bool(use_fused_attention)
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
        return keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _dropout(self, name):
        return FastDropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _residual(self, inputs, sublayer, norm, dropout, training):
        """`LayerNorm(x + Dropout(Sublayer(x)))` (sections 3.1 and 5.4).

        With `normalize_first=True`, the pre-norm variant
        `x + Dropout(Sublayer(LayerNorm(x)))` (Xiong et al., 2020), which
        trains deep stacks more stably.
        """
        if self.normalize_first:
            return inputs + dropout(sublayer(norm(inputs)), training=training)
        return norm(inputs + dropout(sublayer(inputs), training=training))

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
