"""Multi-head attention, section 3.2.2 of the paper.

The constructor, `build` and `call` read here; the layer's other parts are
mixins in the `multi_head_attention_*` modules beside it: `projections`
(the sub-layers' factory), `override` (Keras's `_compute_attention`),
`key_value` (`compute_key_value` / `call_with_key_value`, for a cache),
`over_axes` (inputs of rank > 3), `config` (output shapes, `get_config`)
and `names` (Keras's read-only names).
"""

import math

import keras

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
from keras_attn.layers.attention_core import as_attention_bias
from keras_attn.layers.masking import merge_attention_masks
from keras_attn.layers.multi_head_attention_config import MultiHeadAttentionConfig
from keras_attn.layers.multi_head_attention_key_value import KeyValueAttention
from keras_attn.layers.multi_head_attention_names import MultiHeadAttentionNames
from keras_attn.layers.multi_head_attention_over_axes import AttentionOverAxes
from keras_attn.layers.multi_head_attention_override import (
    ComputeAttentionOverride,
)
from keras_attn.layers.multi_head_attention_projections import (
    MultiHeadAttentionProjections,
)
from keras_attn.layers.query_key_heads import (
    HeadRotation,
    check_num_key_value_heads,
    check_rotation_rank,
    head_norm,
    transform_heads,
)
from keras_attn.validation import (
    check_bool,
    check_epsilon,
    check_float_dtype,
    check_rate,
    check_seed,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(
    MultiHeadAttentionNames,
    MultiHeadAttentionConfig,
    ComputeAttentionOverride,
    KeyValueAttention,
    AttentionOverAxes,
    MultiHeadAttentionProjections,
    keras.layers.Layer,
):
    """Multi-head attention: `Concat(head_1, ..., head_h) W^O`.

    Each head is `Attention(Q W_i^Q, K W_i^K, V W_i^V)` (equation (1) of the
    paper) computed by `keras_attn.layers.attention_core.compute_attention`,
    so the fused `keras.ops.dot_product_attention` kernel is used whenever
    the attention weights and attention dropout are not needed.

    A drop-in for `keras.layers.MultiHeadAttention`: the same constructor
    and call arguments with the same meanings and defaults, weights of the
    same names, shapes and order (`query`, `key`, `gate`, `value` and
    `attention_output` `EinsumDense` sub-layers, held as `_query_dense`,
    `_key_dense`, `_gate_dense`, `_value_dense` and `_output_dense`), so
    weights copy across, and the same override point: `_compute_attention`
    receives the projected heads and the merged mask, as in Keras. Plain
    sequence attention (rank-3 inputs) runs its projections as 2-D
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
        dropout: float in `[0, 1)`, dropout on the attention weights
            (`keras_attn.layers.fast_dropout`: half the random numbers on
            JAX and TensorFlow, the rate at a resolution of 1/2048 there, 0.1
            becoming 0.10010). Defaults to `0.0`.
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
        num_key_value_heads: int dividing `num_heads`, the number of key
            and value heads (grouped-query attention, Ainslie et al., 2023;
            `1` is multi-query attention): query head `h` attends with
            key/value head `h // (num_heads // num_key_value_heads)`.
            Defaults to `None`, meaning `num_heads`.
        qk_norm: bool, whether to RMS-normalize each projected query and
            key head (sub-layers `query_norm` and `key_norm`, one scale per
            feature shared by the heads), before any rotation. Defaults to
            `False`.
        qk_norm_epsilon: float, QK-norm's epsilon, a normal float32 number
            (at least `2**-126`: a smaller one is flushed to zero, and an
            all-zero head would normalize to NaN). Defaults to `1e-6`.
        rotary_max_wavelength: float in `[1, 2**60]`, rotate queries and
            keys by their positions (RoPE, `keras_attn.layers.apply_rotary`)
            with this base; sequence inputs only. Defaults to `None` (no
            rotation).
        rotary_scaling_factor: float in `[2**-32, 2**32]`, linear position
            interpolation of the rotation; only with
            `rotary_max_wavelength`. Defaults to `1.0`.
        rotary_dim: even int `<= key_dim`, the number of features rotated
            (partial rotary); only with `rotary_max_wavelength`. Defaults
            to `None`, meaning all of `key_dim`.
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
        attention_bias: optional float tensor (any float dtype) added to
            the scaled scores before the softmax, broadcastable to
            `(batch, num_heads, query_length, key_length)` (with
            `attention_axes`: to the attention scores' layout, `(batch,
            <other axes>, num_heads, <query axes>, <key axes>)`): a
            relative position bias, ALiBi. Defaults to `None`.

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
        num_key_value_heads=None,
        qk_norm=False,
        qk_norm_epsilon=1e-6,
        rotary_max_wavelength=None,
        rotary_scaling_factor=1.0,
        rotary_dim=None,
        output_dim=None,
        use_fused_attention=None,
        **kwargs,
    ):
        num_heads = check_head_dim(num_heads, "num_heads")
        key_dim = check_head_dim(key_dim, "key_dim")
        value_dim = check_head_dim(value_dim, "value_dim", allow_none=True)
        self._key_value_heads_argument = num_key_value_heads
        self._num_key_value_heads = check_num_key_value_heads(
            num_key_value_heads, num_heads
        )
        self._qk_norm = check_bool(qk_norm, "qk_norm")
        self._qk_norm_epsilon = check_epsilon(qk_norm_epsilon, "qk_norm_epsilon")
        self._rotation = HeadRotation.from_arguments(
            rotary_max_wavelength, rotary_scaling_factor, rotary_dim, key_dim
        )
        self._rotary_arguments = (
            rotary_max_wavelength,
            rotary_scaling_factor,
            rotary_dim,
        )
        check_float_dtype(kwargs.get("dtype"), "dtype")
        super().__init__(**kwargs)
        self.supports_masking = True
        self._num_heads = num_heads
        self._key_dim = key_dim
        self._value_dim = value_dim or key_dim
        self._dropout = check_rate(dropout, "dropout")
        self._use_bias = check_bool(use_bias, "use_bias")
        self._use_gate = check_bool(use_gate, "use_gate")
        self._output_shape = standardize_output_shape(output_shape, output_dim)
        self._attention_axes = standardize_attention_axes(attention_axes)
        self._sliding_window = check_sliding_window(sliding_window)
        self._flash_attention = resolve_flash_attention(
            flash_attention, use_fused_attention, self._dropout
        )
        self._kernel_initializer = keras.initializers.get(kernel_initializer)
        self._bias_initializer = keras.initializers.get(bias_initializer)
        self._kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self._bias_regularizer = keras.regularizers.get(bias_regularizer)
        # The projections' activity regularizer (the layer's own output is
        # not regularized, as in Keras).
        self._activity_regularizer = keras.regularizers.get(activity_regularizer)
        self._kernel_constraint = keras.constraints.get(kernel_constraint)
        self._bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = check_seed(seed, "seed")
        self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(self._key_dim))
        # Keras's layer has no seed generator without dropout: no state to
        # carry (or to trace through `jit`) that nothing reads.
        self.seed_generator = (
            keras.random.SeedGenerator(seed) if self._dropout > 0.0 else None
        )
        self._layout = None
        # QK-norm's sub-layers, built with the projections.
        self.query_norm = None
        self.key_norm = None

    # --- Building ------------------------------------------------------------

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_input_shapes(query_shape, value_shape, key_shape)
        rank = len(query_shape)
        check_rotation_rank(self._rotation, rank)
        axes = normalize_attention_axes(self._attention_axes, rank)
        # Sequence attention keeps the projections' 2-D fast path and needs
        # no layout change; every other case goes through `AxesLayout`.
        self._layout = None if rank == 3 else AxesLayout(rank, axes)
        output_shape = self._output_shape or (query_shape[-1],)
        positions = (None,) * (rank - 2)
        heads, key_heads = self._num_heads, self._num_key_value_heads
        to_heads, head_bias = projection_equation(rank - 1, 1, 2)
        self._query_dense = self._projection(
            to_heads, (*positions, heads, self._key_dim), head_bias, "query"
        )
        self._query_dense.build(query_shape)
        self._key_dense = self._projection(
            to_heads, (*positions, key_heads, self._key_dim), head_bias, "key"
        )
        self._key_dense.build(key_shape)
        if self._use_gate:
            self._gate_dense = self._projection(
                to_heads,
                (*positions, heads, self._value_dim),
                head_bias,
                "gate",
                activation="sigmoid",
            )
            self._gate_dense.build(query_shape)
        self._value_dense = self._projection(
            to_heads, (*positions, key_heads, self._value_dim), head_bias, "value"
        )
        self._value_dense.build(value_shape)
        from_heads, output_bias = projection_equation(rank - 1, 2, len(output_shape))
        self._output_dense = self._projection(
            from_heads, (*positions, *output_shape), output_bias, "attention_output"
        )
        self._output_dense.build((*query_shape[:-1], heads, self._value_dim))
        if self._qk_norm:
            epsilon, dtype = self._qk_norm_epsilon, self.dtype_policy
            self.query_norm = head_norm(epsilon, dtype, "query_norm")
            self.query_norm.build((*query_shape[:-1], heads, self._key_dim))
            self.key_norm = head_norm(epsilon, dtype, "key_norm")
            self.key_norm.build((*key_shape[:-1], key_heads, self._key_dim))
        self.built = True

    # --- Attention -----------------------------------------------------------

    def _sequence_bias(self, attention_bias, query, key):
        """`attention_bias`, checked against the scores `(batch, num_heads,
        query_length, key_length)` of a call on sequences."""
        scores_shape = (query.shape[0], self._num_heads, query.shape[1], key.shape[1])
        return as_attention_bias(attention_bias, "attention_bias", scores_shape)

    def _project_output(self, query, attended, scores, return_attention_scores):
        if self._use_gate:
            # (batch, ..., num_heads, value_dim), sigmoid-activated
            attended = attended * self._gate_dense(query)
        # (batch, ..., num_heads, value_dim) -> (batch, ..., *output_shape)
        output = self._output_dense(attended)
        if return_attention_scores:
            return output, scores
        return output

    def _queries(self, query, start_index=0):
        """`query` projected, normalized and rotated from `start_index`:
        `(batch, query_length, num_heads, key_dim)`."""
        queries = self._query_dense(query)
        return transform_heads(queries, self.query_norm, self._rotation, start_index)

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
        attention_bias=None,
    ):
        key = value if key is None else key
        check_key_value_shapes(value.shape, key.shape)
        # The causal mask alone goes to the kernel as a flag (torch's causal
        # kernel); a subclass overriding `_compute_attention` gets it merged,
        # as Keras's layer does, never `None`.
        causal_only = (
            use_causal_mask
            and query_mask is None
            and value_mask is None
            and key_mask is None
            and attention_mask is None
            and self._sliding_window is None
            and not self._overrides_compute_attention()
        )
        masks = dict(
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask and not causal_only,
            sliding_window=self._sliding_window,
        )
        if self._layout is not None:
            return self._call_over_axes(
                query,
                value,
                key,
                masks,
                attention_bias,
                return_attention_scores,
                training,
                causal_only,
            )
        mask = merge_attention_masks(query, key, **masks)
        bias = self._sequence_bias(attention_bias, query, key)
        keys, values = self.compute_key_value(value, key)
        # (batch, query_length, num_heads, key_dim)
        queries = self._queries(query)
        attended, scores = self._call_compute_attention(
            queries,
            keys,
            values,
            mask,
            bias,
            training,
            return_attention_scores,
            causal_only,
        )
        return self._project_output(query, attended, scores, return_attention_scores)
