"""Multi-head attention, section 3.2.2 of the paper."""

import keras
from keras import ops

from keras_attn.layers.attention_arguments import (
    check_head_dim,
    check_input_shapes,
    check_key_value_shapes,
    check_sliding_window,
    resolve_flash_attention,
    standardize_attention_axes,
    standardize_output_shape,
)
from keras_attn.layers.attention_axes import (
    AxesLayout,
    normalize_attention_axes,
    projection_equation,
)
from keras_attn.layers.attention_heads import (
    attend_heads,
    combine_masks,
    window_mask,
)
from keras_attn.layers.attention_projection import AttentionProjection
from keras_attn.layers.masking import (
    as_bool_mask,
    causal_mask,
    merge_attention_masks,
)
from keras_attn.validation import (
    check_bool,
    check_dropout_rate,
    check_float_dtype,
    check_seed,
)


def _as_bool(mask, argument_name):
    return None if mask is None else as_bool_mask(mask, argument_name)


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention: `Concat(head_1, ..., head_h) W^O`.

    Each head is `Attention(Q W_i^Q, K W_i^K, V W_i^V)` (equation (1) of the
    paper) computed by `keras_attn.layers.scaled_dot_product_attention`, so
    the fused `keras.ops.dot_product_attention` kernel is used whenever the
    attention weights and attention dropout are not needed.

    A drop-in for `keras.layers.MultiHeadAttention`: the same constructor
    and call arguments with the same meanings and defaults, and weights of
    the same names, shapes and order (`query`, `key`, `gate`, `value` and
    `attention_output` `EinsumDense` sub-layers), so weights copy across.
    Plain sequence attention (rank-3 inputs) runs its projections as 2-D
    products (`keras_attn.layers.AttentionProjection`); other ranks and
    `attention_axes` are brought to that layout around the same kernel.

    Masks are boolean, `True` meaning "may attend". Keras masks carried by
    the inputs (for instance from an `Embedding(mask_zero=True)`) fill
    `query_mask`, `value_mask` and `key_mask` automatically. A query whose
    row is fully masked attends to nothing: its attention weights and
    attended values are zero (the output is then the output projection's
    bias), never NaN. (Keras's layer spreads such a row's weights evenly.)

    Args:
        num_heads: int, number of attention heads `h`.
        key_dim: int, size of each head for queries and keys, `d_k`.
        value_dim: int, size of each head for values, `d_v`. Defaults to
            `None`, meaning `key_dim`.
        dropout: float in `[0, 1)`, dropout on the attention weights.
            Defaults to `0.0`.
        use_bias: bool, whether the projections have biases. Defaults to
            `True`.
        output_shape: int or tuple of ints, the output's shape besides the
            batch and attended axes. Defaults to `None`, meaning the last
            dimension of `query`.
        attention_axes: int or tuple of ints, the axes of the inputs
            attended over (negative ones count from the end). Defaults to
            `None`, meaning every axis but the batch and the features: the
            sequence axis of `(batch, length, features)` inputs.
        sliding_window: positive int; query `i` may only attend keys `j`
            with `|i - j| < sliding_window` (with `use_causal_mask=True`,
            the causal window of Mistral-style models). Applied by `call`,
            not by `call_with_key_value`. Defaults to `None` (no window).
        flash_attention: `None` lets the fused
            `keras.ops.dot_product_attention` kernel run whenever the
            attention weights and attention dropout are not needed (the
            backend then uses flash attention where it can); `False` always
            takes the explicit einsum path; `True` is `None` that, as in
            Keras, refuses `dropout > 0` and `return_attention_scores=True`.
            Defaults to `None`.
        kernel_initializer: initializer of the projection kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of the projection biases. Defaults to
            `"zeros"`.
        kernel_regularizer: regularizer of the projection kernels.
            Defaults to `None`.
        bias_regularizer: regularizer of the projection biases. Defaults to
            `None`.
        activity_regularizer: regularizer of each projection's output.
            Defaults to `None`.
        kernel_constraint: constraint on the projection kernels. Defaults
            to `None`.
        bias_constraint: constraint on the projection biases. Defaults to
            `None`.
        use_gate: bool, whether to gate each head's attended values with
            `sigmoid(query W^G)` before the output projection (Qiu et al.,
            2025). Defaults to `False`.
        seed: int, seed of the attention dropout; no seed generator exists
            when `dropout=0`. Defaults to `None`.
        output_dim: deprecated alias of `output_shape` (an int).
        use_fused_attention: deprecated: `use_fused_attention=False` is
            `flash_attention=False`, `True` is `flash_attention=None`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: tensor `(batch, query_length, query_dim)`, or
            `(batch, <axes>..., query_dim)` with `attention_axes`.
        value: tensor `(batch, key_length, value_features)`.
        key: optional tensor `(batch, key_length, key_features)`. Defaults
            to `value`.
        query_mask: optional boolean `(batch, query_length)`.
        value_mask: optional boolean `(batch, key_length)`.
        key_mask: optional boolean `(batch, key_length)`, combined with
            `value_mask`.
        attention_mask: optional boolean tensor broadcastable to
            `(batch, query_length, key_length)`, or a per-head
            `(batch, num_heads, query_length, key_length)`.
        return_attention_scores: bool, whether to also return the attention
            weights `(batch, num_heads, query_length, key_length)`.
        training: bool, whether dropout is active.
        use_causal_mask: bool, whether to add the causal (look-ahead) mask.

    Returns:
        The output `(batch, query_length, *output_shape)`, or a tuple
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
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        output_dim=None,
        use_fused_attention=None,
        **kwargs,
    ):
        self.num_heads = check_head_dim(num_heads, "num_heads")
        self.key_dim = check_head_dim(key_dim, "key_dim")
        value_dim = check_head_dim(value_dim, "value_dim", allow_none=True)
        check_float_dtype(kwargs.get("dtype"), "dtype")
        super().__init__(**kwargs)
        self.value_dim = value_dim or self.key_dim
        self.dropout = check_dropout_rate(dropout, "dropout")
        self.use_bias = check_bool(use_bias, "use_bias")
        self._output_shape = standardize_output_shape(output_shape, output_dim)
        self.attention_axes = standardize_attention_axes(attention_axes)
        self.sliding_window = check_sliding_window(sliding_window)
        self.flash_attention = resolve_flash_attention(
            flash_attention, use_fused_attention, self.dropout
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.projection_activity_regularizer = keras.regularizers.get(
            activity_regularizer
        )
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.use_gate = check_bool(use_gate, "use_gate")
        self.seed = check_seed(seed, "seed")
        self.supports_masking = True
        # Keras's layer has no seed generator without dropout: no state to
        # carry (or to trace through `jit`) that nothing reads.
        self.seed_generator = (
            keras.random.SeedGenerator(seed) if self.dropout > 0.0 else None
        )
        self._layout = None

    @property
    def output_dim(self):
        """Deprecated: the last entry of `output_shape` (`None` if unset)."""
        return None if self._output_shape is None else self._output_shape[-1]

    @property
    def use_fused_attention(self):
        """Deprecated: whether the fused kernel may run (`flash_attention`)."""
        return self.flash_attention is not False

    def _projection(self, equation, output_shape, bias_axes, name, activation=None):
        projection = AttentionProjection(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            activation=activation,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            activity_regularizer=self.projection_activity_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
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
        check_input_shapes(query_shape, value_shape, key_shape)
        rank = len(query_shape)
        axes = normalize_attention_axes(self.attention_axes, rank)
        # Sequence attention keeps the projections' 2-D fast path and needs
        # no layout change; every other case goes through `AxesLayout`.
        self._layout = None if rank == 3 else AxesLayout(rank, axes)
        output_shape = self._output_shape or (query_shape[-1],)
        positions = (None,) * (rank - 2)
        heads = self.num_heads
        to_heads, head_bias = projection_equation(rank - 1, 1, 2)
        self.query_dense = self._projection(
            to_heads, (*positions, heads, self.key_dim), head_bias, "query"
        )
        self.query_dense.build(query_shape)
        self.key_dense = self._projection(
            to_heads, (*positions, heads, self.key_dim), head_bias, "key"
        )
        self.key_dense.build(key_shape)
        if self.use_gate:
            self.gate_dense = self._projection(
                to_heads,
                (*positions, heads, self.value_dim),
                head_bias,
                "gate",
                activation="sigmoid",
            )
            self.gate_dense.build(query_shape)
        self.value_dense = self._projection(
            to_heads, (*positions, heads, self.value_dim), head_bias, "value"
        )
        self.value_dense.build(value_shape)
        from_heads, output_bias = projection_equation(rank - 1, 2, len(output_shape))
        self.output_dense = self._projection(
            from_heads, (*positions, *output_shape), output_bias, "attention_output"
        )
        self.output_dense.build((*query_shape[:-1], heads, self.value_dim))
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
        check_key_value_shapes(value.shape, key.shape)
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
        growing by one position per step for self-attention. The mask is
        used as given: `sliding_window` is not applied here (the caller
        knows the positions).

        Args:
            query: tensor `(batch, query_length, query_dim)`.
            keys: tensor `(batch, key_length, num_heads, key_dim)`.
            values: tensor `(batch, key_length, num_heads, value_dim)`.
            attention_mask: optional boolean
                `(batch, query_length, key_length)` or
                `(batch, num_heads, query_length, key_length)`.
            return_attention_scores: bool. Defaults to `False`.
            training: bool, whether dropout is active. Defaults to `None`.

        Returns:
            As `call`.
        """
        self._check_scores_allowed(return_attention_scores)
        if self._layout is not None:
            raise ValueError(
                "`call_with_key_value` attends along one sequence axis; layer "
                f"{self.name} was built for inputs of rank {self._layout.rank}. "
                "Call the layer instead."
            )
        # (batch, query_length, num_heads, key_dim)
        queries = self.query_dense(query)
        attended, scores = self._attend(
            queries, keys, values, attention_mask, return_attention_scores, training
        )
        return self._output(query, attended, scores, return_attention_scores)

    def _check_scores_allowed(self, return_attention_scores):
        if self.flash_attention and return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash "
                "attention is enabled. Please disable flash attention to access"
                " attention scores."
            )

    def _attend(self, queries, keys, values, mask, return_attention_scores, training):
        """The kernel on `(batch, length, heads, dim)` tensors; per-head masks."""
        return attend_heads(
            queries,
            keys,
            values,
            mask,
            self.num_heads,
            dropout_rate=self.dropout,
            training=bool(training),
            seed_generator=self.seed_generator,
            return_attention_scores=return_attention_scores,
            use_fused_attention=self.flash_attention is not False,
        )

    def _output(self, query, attended, scores, return_attention_scores):
        if self.use_gate:
            # (batch, ..., num_heads, value_dim), sigmoid-activated
            attended = attended * self.gate_dense(query)
        # (batch, ..., num_heads, value_dim) -> (batch, ..., *output_shape)
        output = self.output_dense(attended)
        if return_attention_scores:
            return output, scores
        return output

    def _positional_mask(self, query_length, key_length, use_causal_mask):
        """Causal and sliding-window masks `(1, query_length, key_length)`."""
        causal = causal_mask(query_length, key_length) if use_causal_mask else None
        window = None
        if self.sliding_window is not None:
            window = window_mask(query_length, key_length, self.sliding_window)
        return combine_masks(causal, window)

    def call(
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
    ):
        key = value if key is None else key
        check_key_value_shapes(value.shape, key.shape)
        self._check_scores_allowed(return_attention_scores)
        if key_mask is not None:
            value_mask = combine_masks(
                _as_bool(value_mask, "value_mask"), _as_bool(key_mask, "key_mask")
            )
        if self._layout is not None:
            mask = self._axes_mask(query_mask, value_mask, attention_mask)
            return self._call_over_axes(
                query,
                value,
                key,
                mask,
                return_attention_scores,
                training,
                use_causal_mask,
            )
        mask = merge_attention_masks(
            query,
            key,
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        if self.sliding_window is not None:
            query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
            # (1, query_length, key_length)
            window = window_mask(query_length, key_length, self.sliding_window)
            if mask is None:
                mask = ops.broadcast_to(
                    window, (ops.shape(query)[0], *ops.shape(window)[1:])
                )
            else:
                mask = ops.logical_and(
                    mask, window if len(mask.shape) == 3 else window[:, None]
                )
        keys, values = self.compute_key_value(value, key)
        # (batch, query_length, num_heads, key_dim)
        queries = self.query_dense(query)
        attended, scores = self._attend(
            queries, keys, values, mask, return_attention_scores, training
        )
        return self._output(query, attended, scores, return_attention_scores)

    @staticmethod
    def _axes_mask(query_mask, value_mask, attention_mask):
        """The masks of a call over `attention_axes`, in Keras's layout."""
        return combine_masks(
            _as_bool(attention_mask, "attention_mask"),
            None
            if query_mask is None
            else ops.expand_dims(_as_bool(query_mask, "query_mask"), -1),
            None
            if value_mask is None
            else ops.expand_dims(_as_bool(value_mask, "value_mask"), -2),
        )

    def _call_over_axes(
        self,
        query,
        value,
        key,
        mask,
        return_attention_scores,
        training,
        use_causal_mask,
    ):
        """`call` for inputs of rank > 3: attention over `attention_axes`.

        `mask` uses Keras's layout without the heads axis. The causal mask
        and the sliding window run along the attended positions in
        row-major order (with one attention axis: along it).
        """
        layout = self._layout
        # (batch, ..., num_heads, dim)
        queries = self.query_dense(query)
        keys = self.key_dense(key)
        values = self.value_dense(value)
        # (batch', length, num_heads, dim)
        sequence = [layout.to_sequence(x) for x in (queries, keys, values)]
        if mask is not None:
            # (batch', query_length, key_length)
            mask = layout.mask_to_sequence(mask, queries, keys)
        query_length, key_length = ops.shape(sequence[0])[1], ops.shape(sequence[1])[1]
        # (1, query_length, key_length) parts
        mask = combine_masks(
            mask, self._positional_mask(query_length, key_length, use_causal_mask)
        )
        if mask is not None:
            mask = ops.broadcast_to(
                mask, (ops.shape(sequence[0])[0], query_length, key_length)
            )
        attended, scores = self._attend(
            *sequence, mask, return_attention_scores, training
        )
        attended = layout.from_sequence(attended, queries)
        if scores is not None:
            scores = layout.scores_from_sequence(scores, queries, keys)
        return self._output(query, attended, scores, return_attention_scores)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_key_value_shapes(value_shape, key_shape)
        return (*tuple(query_shape)[:-1], *(self._output_shape or (query_shape[-1],)))

    def compute_output_spec(
        self, query, value, key=None, return_attention_scores=False, **kwargs
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
                self.num_heads,
                query.shape[1],
                value.shape[1],
            )
        else:
            axes = normalize_attention_axes(self.attention_axes, rank)
            scores_shape = AxesLayout(rank, axes).scores_shape(
                query.shape, value.shape, self.num_heads
            )
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
                "output_shape": self._output_shape,
                "attention_axes": self.attention_axes,
                "sliding_window": self.sliding_window,
                "flash_attention": self.flash_attention,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(
                    self.kernel_regularizer
                ),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": keras.regularizers.serialize(
                    self.projection_activity_regularizer
                ),
                "kernel_constraint": keras.constraints.serialize(
                    self.kernel_constraint
                ),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
                "use_gate": self.use_gate,
                "seed": self.seed,
            }
        )
        return config
