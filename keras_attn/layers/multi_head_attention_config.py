"""`MultiHeadAttention`'s output shapes and config.

What `keras_attn.layers.MultiHeadAttention` says about itself without
running: the shape of its output (and of its attention scores) for given
input shapes, for symbolic calls, and the config that rebuilds it. The
config is `keras.layers.MultiHeadAttention`'s, with the variants'
arguments (grouped-query, QK-norm, rotary) written only when set.
"""

import keras

from keras_attn.layers.attention_arguments import check_key_value_shapes
from keras_attn.layers.attention_axes import AxesLayout, normalize_attention_axes


class MultiHeadAttentionConfig:
    """`compute_output_shape`, `compute_output_spec` and `get_config` of
    `MultiHeadAttention`."""

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_key_value_shapes(value_shape, key_shape)
        return (*tuple(query_shape)[:-1], *(self._output_shape or (query_shape[-1],)))

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        attention_bias=None,
    ):
        key_shape = None if key is None else key.shape
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape, key_shape),
            dtype=self.compute_dtype,
        )
        if not return_attention_scores:
            return output
        rank = len(query.shape)
        if rank == 3:
            # (batch, num_heads, query_length, key_length)
            scores_shape = (
                query.shape[0],
                self._num_heads,
                query.shape[1],
                value.shape[1],
            )
        else:
            axes = normalize_attention_axes(self._attention_axes, rank)
            scores_shape = AxesLayout(rank, axes).scores_shape(
                query.shape, value.shape, self._num_heads
            )
        return output, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self._num_heads,
                "key_dim": self._key_dim,
                "value_dim": self._value_dim,
                "dropout": self._dropout,
                "use_bias": self._use_bias,
                "output_shape": self._output_shape,
                "attention_axes": self._attention_axes,
                "sliding_window": self._sliding_window,
                "flash_attention": self._flash_attention,
                "kernel_initializer": keras.initializers.serialize(
                    self._kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(
                    self._bias_initializer
                ),
                "kernel_regularizer": keras.regularizers.serialize(
                    self._kernel_regularizer
                ),
                "bias_regularizer": keras.regularizers.serialize(
                    self._bias_regularizer
                ),
                "activity_regularizer": keras.regularizers.serialize(
                    self._activity_regularizer
                ),
                "kernel_constraint": keras.constraints.serialize(
                    self._kernel_constraint
                ),
                "bias_constraint": keras.constraints.serialize(self._bias_constraint),
                "use_gate": self._use_gate,
                "seed": self.seed,
            }
        )
        # The variants' arguments are written only when set: a default
        # layer's config stays the one `keras.layers.MultiHeadAttention`
        # reads, and the one files saved before them hold.
        variants = {
            "num_key_value_heads": (self._key_value_heads_argument, None),
            "qk_norm": (self._qk_norm, False),
            "qk_norm_epsilon": (self._qk_norm_epsilon, 1e-6),
            "rotary_max_wavelength": (self._rotary_arguments[0], None),
            "rotary_scaling_factor": (self._rotary_arguments[1], 1.0),
            "rotary_dim": (self._rotary_arguments[2], None),
        }
        config.update(
            {
                name: value
                for name, (value, default) in variants.items()
                if value != default
            }
        )
        return config
