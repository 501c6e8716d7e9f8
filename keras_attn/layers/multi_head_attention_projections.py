"""How `MultiHeadAttention` makes its projections from its own arguments.

Every projection of `keras_attn.layers.MultiHeadAttention` (`query`,
`key`, `gate`, `value`, `attention_output`) is a
`keras_attn.layers.AttentionProjection` that takes the layer's
initializers, regularizers, constraints, bias setting and dtype policy;
`build` chooses each one's equation and shape. Each projection gets its own
copy of the initializers, so that no two start from the same draw.
"""

from keras_attn.layers.attention_projection import AttentionProjection


def _clone(initializer):
    """A fresh copy of `initializer`: an unseeded initializer draws one seed
    when created, so sub-layers sharing one instance would start equal."""
    return initializer.__class__.from_config(initializer.get_config())


class MultiHeadAttentionProjections:
    """`_projection`, the factory of `MultiHeadAttention`'s sub-layers."""

    def _projection(self, equation, output_shape, bias_axes, name, activation=None):
        projection = AttentionProjection(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self._use_bias else None,
            activation=activation,
            kernel_initializer=_clone(self._kernel_initializer),
            bias_initializer=_clone(self._bias_initializer),
            kernel_regularizer=self._kernel_regularizer,
            bias_regularizer=self._bias_regularizer,
            activity_regularizer=self._activity_regularizer,
            kernel_constraint=self._kernel_constraint,
            bias_constraint=self._bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )
        # This layer applies the Keras masks of its inputs itself; without
        # this, every call on mask-carrying inputs (`mask_zero=True`
        # embeddings) warns that the projection "will destroy the mask".
        projection.supports_masking = True
        return projection
