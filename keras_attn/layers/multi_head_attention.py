"""Multi-head attention, section 3.2.2 of the paper."""

import keras

from keras_attn.layers.attention_projection import AttentionProjection
from keras_attn.layers.masking import merge_attention_masks
from keras_attn.layers.scaled_dot_product_attention import (
    scaled_dot_product_attention,
)
from keras_attn.layers.validation import (
    check_dropout_rate,
    check_positive_int,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention: `Concat(head_1, ..., head_h) W^O`.

    Each head is `Attention(Q W_i^Q, K W_i^K, V W_i^V)` (equation (1) of the
    paper) computed by `keras_attn.layers.scaled_dot_product_attention`, so
    the fused `keras.ops.dot_product_attention` kernel is used whenever the
    attention weights and attention dropout are not needed.

    The weights have the same names and shapes as those of
    `keras.layers.MultiHeadAttention` (`query`, `key`, `value` and
    `attention_output` `EinsumDense` sub-layers), so weights copy across.

    Masks are boolean, `True` meaning "may attend". Keras masks carried by
    the inputs (for instance from an `Embedding(mask_zero=True)`) fill
    `query_mask` and `value_mask` automatically. A query whose row is fully
    masked attends to nothing: its attention weights and attended values are
    zero (the output is then the output projection's bias), never NaN.

    Args:
        num_heads: int, number of attention heads `h`.
        key_dim: int, size of each head for queries and keys, `d_k`.
        value_dim: int, size of each head for values, `d_v`. Defaults to
            `None`, meaning `key_dim`.
        dropout: float in `[0, 1)`, dropout on the attention weights.
            Defaults to `0.0`.
        use_bias: bool, whether the projections have biases. Defaults to
            `True`.
        output_dim: int, size of the output features. Defaults to `None`,
            meaning the last dimension of `query`.
        use_fused_attention: bool, whether to call
            `keras.ops.dot_product_attention` when possible. Defaults to
            `True`.
        kernel_initializer: initializer of the projection kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of the projection biases. Defaults to
            `"zeros"`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: tensor `(batch, query_length, query_dim)`.
        value: tensor `(batch, key_length, value_features)`.
        key: optional tensor `(batch, key_length, key_features)`. Defaults
            to `value`.
        query_mask: optional boolean `(batch, query_length)`.
        value_mask: optional boolean `(batch, key_length)`.
        attention_mask: optional boolean tensor broadcastable to
            `(batch, query_length, key_length)`.
        use_causal_mask: bool, whether to add the causal (look-ahead) mask.
        return_attention_scores: bool, whether to also return the attention
            weights `(batch, num_heads, query_length, key_length)`.
        training: bool, whether dropout is active.

    Returns:
        The output `(batch, query_length, output_dim)`, or a tuple
        `(output, attention_scores)` when `return_attention_scores=True`.

    Example:

    >>> layer = keras_attn.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = keras.random.normal((3, 5, 8))
    >>> y, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape)
    ((3, 5, 8), (3, 2, 5, 5))

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.2.2.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        use_fused_attention=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.key_dim = check_positive_int(key_dim, "key_dim")
        self.value_dim = (
            self.key_dim
            if value_dim is None
            else check_positive_int(value_dim, "value_dim")
        )
        self.dropout = check_dropout_rate(dropout, "dropout")
        self.use_bias = bool(use_bias)
        self.output_dim = (
            None if output_dim is None else check_positive_int(output_dim, "output_dim")
        )
        self.use_fused_attention = bool(use_fused_attention)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self.seed_generator = keras.random.SeedGenerator(seed=None)

    def _projection(self, equation, output_shape, bias_axes, name):
        projection = AttentionProjection(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )
        # This layer applies the Keras masks of its inputs itself; without
        # this, every call on mask-carrying inputs (`mask_zero=True`
        # embeddings) warns that the projection "will destroy the mask".
        projection.supports_masking = True
        return projection

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        for argument, shape in (
            ("query", query_shape),
            ("value", value_shape),
            ("key", key_shape),
        ):
            if len(shape) != 3 or shape[-1] is None:
                raise ValueError(
                    f"`{argument}` must have shape (batch, length, features) "
                    f"with a known feature size. Received: {argument}.shape="
                    f"{tuple(shape)}"
                )
        output_dim = self.output_dim or query_shape[-1]
        heads = self.num_heads
        self.query_dense = self._projection(
            "abc,cde->abde", (None, heads, self.key_dim), "de", "query"
        )
        self.key_dense = self._projection(
            "abc,cde->abde", (None, heads, self.key_dim), "de", "key"
        )
        self.value_dense = self._projection(
            "abc,cde->abde", (None, heads, self.value_dim), "de", "value"
        )
        self.output_dense = self._projection(
            "abcd,cde->abe", (None, output_dim), "e", "attention_output"
        )
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.value_dense.build(value_shape)
        self.output_dense.build((query_shape[0], query_shape[1], heads, self.value_dim))
        self.built = True

    def compute_key_value(self, value, key=None):
        """Projects keys and values into heads (the cacheable half of a call).

        Args:
            value: tensor `(batch, key_length, value_features)`.
            key: optional tensor `(batch, key_length, key_features)`.
                Defaults to `value`.

        Returns:
            `(keys, values)` of shapes `(batch, key_length, num_heads,
            key_dim)` and `(batch, key_length, num_heads, value_dim)`.
        """
        key = value if key is None else key
        return self.key_dense(key), self.value_dense(value)

    def call_with_key_value(
        self,
        query,
        keys,
        values,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        """Attends from `query` to keys and values already projected.

        This is the decoding path: `keys`/`values` come from
        `compute_key_value`, once per sentence for cross-attention and
        growing by one position per step for self-attention.

        Args:
            query: tensor `(batch, query_length, query_dim)`.
            keys: tensor `(batch, key_length, num_heads, key_dim)`.
            values: tensor `(batch, key_length, num_heads, value_dim)`.
            attention_mask: optional boolean
                `(batch, query_length, key_length)`.
            return_attention_scores: bool. Defaults to `False`.
            training: bool, whether dropout is active. Defaults to `None`.

        Returns:
            As `call`.
        """
        # (batch, query_length, num_heads, key_dim)
        queries = self.query_dense(query)
        result = scaled_dot_product_attention(
            queries,
            keys,
            values,
            mask=attention_mask,
            dropout_rate=self.dropout,
            training=bool(training),
            seed_generator=self.seed_generator,
            return_attention_scores=return_attention_scores,
            use_fused_attention=self.use_fused_attention,
        )
        attended, scores = result if return_attention_scores else (result, None)
        # (batch, query_length, num_heads, value_dim) -> (batch, query_length, output_dim)
        output = self.output_dense(attended)
        if return_attention_scores:
            return output, scores
        return output

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        key = value if key is None else key
        mask = merge_attention_masks(
            query,
            key,
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        keys, values = self.compute_key_value(value, key)
        return self.call_with_key_value(
            query,
            keys,
            values,
            attention_mask=mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape),
            dtype=self.compute_dtype,
        )
        if not return_attention_scores:
            return output
        # (batch, num_heads, query_length, key_length)
        scores_shape = (query.shape[0], self.num_heads, query.shape[1], value.shape[1])
        return output, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "use_fused_attention": self.use_fused_attention,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
