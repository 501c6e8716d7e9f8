"""Multi-head attention, section 3.2.2 of the paper.

`MultiHeadAttention` reads as Keras's layer does: the constructor checks
and stores its arguments, `build` makes the projections, `call` projects,
merges the masks and hands the heads to `_compute_attention` (Keras's
override point), which runs the one attention core
(`keras_attn.layers.attention.attention_core.compute_attention`). Cached decoding
splits a call in two: `compute_key_value`, then `call_with_key_value`.
Inputs of rank > 3 (`attention_axes`) are brought to a sequence's layout
around the same core (`keras_attn.layers.attention.attention_axes.AxesLayout`).
"""

import math

import keras
from keras import ops

from keras_attn.layers.attention.attention_arguments import (
    check_flash_attention,
    check_head_dim,
    check_input_shapes,
    check_key_value_shapes,
    check_sliding_window,
    standardize_attention_axes,
    standardize_output_shape,
)
from keras_attn.layers.attention.attention_axes import (
    AxesLayout,
    normalize_attention_axes,
    projection_equation,
)
from keras_attn.layers.attention.attention_core import (
    as_attention_bias,
    compute_attention,
)
from keras_attn.layers.attention.attention_projection import AttentionProjection
from keras_attn.layers.attention.attention_settings import (
    check_logit_soft_cap,
    check_scale,
)
from keras_attn.layers.attention.grouped_heads import repeat_key_value_heads
from keras_attn.layers.attention.masking import (
    as_bool_mask,
    merge_attention_masks,
    sliding_window_mask,
)
from keras_attn.layers.attention.masks_over_axes import masks_to_sequence
from keras_attn.layers.attention.query_key_heads import (
    HeadRotation,
    check_num_key_value_heads,
    check_rotation_rank,
    head_norm,
    transform_heads,
)
from keras_attn.layers.call_arguments import call_arguments
from keras_attn.layers.legacy_config import migrate_attention_config
from keras_attn.validation import (
    check_bool,
    check_epsilon,
    check_float_dtype,
    check_rate,
    check_seed,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention: `Concat(head_1, ..., head_h) W^O`.

    Each head is `Attention(Q W_i^Q, K W_i^K, V W_i^V)` (equation (1) of the
    paper) computed by `keras_attn.layers.attention.attention_core.compute_attention`,
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
            (`keras_attn.layers.fast_dropout`). Defaults to `0.0`.
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
            the causal window of Mistral-style models, `i - sliding_window
            < j <= i`). Applied by `call` (positions from 0, as Keras) and
            by `call_with_key_value` (query `i` at `start_index + i`, key
            `j` at `j`: a cache's slots). The window reaches the fused
            kernel as part of the boolean mask. Defaults to `None` (no
            window).
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
        logit_soft_cap: positive float, Gemma 2's soft cap of the attention
            logits: the scaled scores `s` become `logit_soft_cap *
            tanh(s / logit_soft_cap)` before the bias, the mask and the
            softmax (checked by
            `keras_attn.layers.attention.attention_settings.check_logit_soft_cap`).
            Capped attention runs the explicit path: refused with
            `flash_attention=True`. Defaults to `None` (no cap).
        scale: positive float, the factor of the scores `Q K^T` (checked by
            `keras_attn.layers.attention.attention_settings.check_scale`):
            `1.0` for T5, which leaves its scores unscaled (its
            initialization scales the query weights instead). Defaults to
            `None`, meaning `1 / sqrt(key_dim)` (equation (1) of the paper).
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

    # Keras's `GroupedQueryAttention` calls an override of
    # `_compute_attention` without `return_attention_scores` (the override
    # reads `self._return_attention_scores`); Keras's `MultiHeadAttention`
    # passes it. A subclass names the signature its overrides follow.
    _override_takes_return_attention_scores = True

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
        logit_soft_cap=None,
        scale=None,
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
        self._output_shape = standardize_output_shape(output_shape)
        self._attention_axes = standardize_attention_axes(attention_axes)
        self._sliding_window = check_sliding_window(sliding_window)
        self._flash_attention = check_flash_attention(flash_attention, self._dropout)
        self._logit_soft_cap = check_logit_soft_cap(
            logit_soft_cap, self._flash_attention
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
        self._scale = check_scale(scale)
        # Keras's name for the scale of the scores, which overrides of
        # `_compute_attention` written for Keras's layer read.
        self._inverse_sqrt_key_dim = (
            1.0 / math.sqrt(float(self._key_dim)) if scale is None else self._scale
        )
        # Keras's layer has no seed generator without dropout: no state to
        # carry (or to trace through `jit`) that nothing reads.
        self.seed_generator = (
            keras.random.SeedGenerator(seed) if self._dropout > 0.0 else None
        )
        # What the current call asked for, read by an override of
        # `_compute_attention` written for Keras's `GroupedQueryAttention`.
        self._return_attention_scores = False
        # Set by `build`: `None` for sequences, else the `AxesLayout` that
        # brings inputs of rank > 3 to a sequence's.
        self._layout = None
        # QK-norm's sub-layers, built with the projections.
        self.query_norm = None
        self.key_norm = None

    # --- Keras's read-only names ---------------------------------------------

    @property
    def num_heads(self):
        return self._num_heads

    @property
    def key_dim(self):
        return self._key_dim

    @property
    def value_dim(self):
        return self._value_dim

    @property
    def num_key_value_heads(self):
        """The number of key/value heads (`num_heads` unless grouped)."""
        return self._num_key_value_heads

    @property
    def dropout(self):
        return self._dropout

    @property
    def use_bias(self):
        return self._use_bias

    @property
    def use_gate(self):
        return self._use_gate

    @property
    def attention_axes(self):
        return self._attention_axes

    @property
    def sliding_window(self):
        return self._sliding_window

    @property
    def flash_attention(self):
        return self._flash_attention

    @property
    def logit_soft_cap(self):
        """The soft cap of the attention logits, or `None`."""
        return self._logit_soft_cap

    @property
    def scale(self):
        """The factor of the scores `Q K^T`; `None` for `1 / sqrt(key_dim)`."""
        return self._scale

    # The sub-layers are held as `_query_dense` etc. (Keras's names, which
    # code written for Keras's layer reaches for) and saved under these
    # public names: Keras's saving visits public attributes first, so the
    # weights' paths in `.keras` and `.weights.h5` files stay
    # `query_dense/...`, as in Keras's own layer and earlier keras-attn.

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    @property
    def gate_dense(self):
        """The gate projection, or `None` without `use_gate`."""
        return getattr(self, "_gate_dense", None)

    # --- Config --------------------------------------------------------------

    def get_config(self):
        config = super().get_config()
        # The initializers, regularizers and constraints, as Keras saves them.
        serialize = keras.saving.serialize_keras_object
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
                "kernel_initializer": serialize(self._kernel_initializer),
                "bias_initializer": serialize(self._bias_initializer),
                "kernel_regularizer": serialize(self._kernel_regularizer),
                "bias_regularizer": serialize(self._bias_regularizer),
                "activity_regularizer": serialize(self._activity_regularizer),
                "kernel_constraint": serialize(self._kernel_constraint),
                "bias_constraint": serialize(self._bias_constraint),
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
            "logit_soft_cap": (self._logit_soft_cap, None),
            "scale": (self._scale, None),
        }
        config.update(
            {
                name: value
                for name, (value, default) in variants.items()
                if value != default
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Configs saved by earlier versions may use older argument names.
        return super().from_config(migrate_attention_config(config))

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

    def _projection(self, equation, output_shape, bias_axes, name, activation=None):
        """One projection sub-layer with the layer's initializers,
        regularizers, constraints, bias setting and dtype policy."""
        projection = AttentionProjection(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self._use_bias else None,
            activation=activation,
            # A copy each: an unseeded initializer draws its seed when
            # created, so projections sharing one would start equal.
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

    # --- Attention -----------------------------------------------------------

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=None,
        use_causal_mask=False,
        attention_bias=None,
        masked_keys_are_finite=False,
    ):
        """Attention on projected heads: the override point of Keras's layer.

        `call` and `call_with_key_value` project their inputs and hand the
        heads here, having checked the mask and bias. With
        `attention_axes`, the axes not attended over have joined the batch
        and the attended ones are one length, so this method always sees
        sequences. A subclass overriding it with the signature of Keras's
        `MultiHeadAttention` (or, on `GroupedQueryAttention`, of Keras's
        `GroupedQueryAttention`) receives what Keras's layer passes: keys
        and values with one head per query head, `use_causal_mask` and
        `attention_bias` only when set, never `masked_keys_are_finite`.

        Args:
            query: projected queries `(batch, query_length, num_heads,
                key_dim)`.
            key: projected keys `(batch, key_length, key_heads, key_dim)`,
                `key_heads` being `num_key_value_heads` (or, for an
                override, `num_heads`).
            value: projected values `(batch, key_length, key_heads,
                value_dim)`.
            attention_mask: optional boolean mask `(batch, query_length,
                key_length)` or `(batch, num_heads, query_length,
                key_length)` (or a shape that broadcasts to it).
            training: bool, whether dropout is active.
            return_attention_scores: bool, whether to compute the weights.
                Defaults to `None`, meaning what the current call asked
                for (an override of Keras's `GroupedQueryAttention`
                signature does not pass it).
            use_causal_mask: bool, whether to apply the causal mask as
                well (`call` passes it only when it is the only mask, so
                the backend's causal kernel runs). Defaults to `False`.
            attention_bias: optional float tensor broadcastable to
                `(batch, num_heads, query_length, key_length)`, added to
                the scaled scores. Defaults to `None`.
            masked_keys_are_finite: bool, whether the keys and values that
                no query attends are known finite (a zeroed cache), so the
                guard that zeroes them is skipped (see
                `keras_attn.layers.attention.attention_core.compute_attention`).
                Defaults to `False`.

        Returns:
            `(attention_output, attention_scores)`: `(batch, query_length,
            num_heads, value_dim)` and the weights `(batch, num_heads,
            query_length, key_length)`, or `None` unless
            `return_attention_scores`.
        """
        if len(query.shape) != 4:
            raise ValueError(
                "`_compute_attention` takes projected heads `(batch, length, "
                "num_heads, head_dim)`. Received: "
                f"query.shape={tuple(query.shape)}"
            )
        if return_attention_scores is None:
            return_attention_scores = self._return_attention_scores
        return compute_attention(
            query,
            key,
            value,
            mask=attention_mask,
            bias=attention_bias,
            is_causal=use_causal_mask,
            scale=self._inverse_sqrt_key_dim,
            dropout_rate=self._dropout,
            training=training,
            seed_generator=self.seed_generator,
            return_attention_scores=return_attention_scores,
            flash_attention=self._flash_attention,
            masked_keys_are_finite=masked_keys_are_finite,
            logit_soft_cap=self._logit_soft_cap,
        )

    def _overrides_compute_attention(self):
        return (
            type(self)._compute_attention is not MultiHeadAttention._compute_attention
        )

    def _attention_arguments(
        self,
        keys,
        values,
        mask,
        bias,
        training,
        return_attention_scores,
        causal_only=False,
        masked_keys_are_finite=False,
    ):
        """The keys, values and keyword arguments `_compute_attention` gets.

        Our own `_compute_attention` takes every argument. An override
        written for a Keras layer is called as that layer calls it: with
        keys and values repeated to one head per query head, and only the
        arguments of its signature unless set (`masked_keys_are_finite`,
        a shortcut of our core, never).

        Returns:
            `(keys, values, keyword_arguments)`.
        """
        arguments = {"attention_mask": mask, "training": training}
        if not self._overrides_compute_attention():
            arguments.update(
                return_attention_scores=return_attention_scores,
                use_causal_mask=causal_only,
                attention_bias=bias,
                masked_keys_are_finite=masked_keys_are_finite,
            )
            return keys, values, arguments
        keys, values = repeat_key_value_heads(keys, values, self._num_heads)
        self._return_attention_scores = return_attention_scores
        if self._override_takes_return_attention_scores:
            arguments["return_attention_scores"] = return_attention_scores
        if causal_only:
            arguments["use_causal_mask"] = True
        if bias is not None:
            arguments["attention_bias"] = bias
        return keys, values, arguments

    def _project_query(self, query, start_index=0):
        """`query` projected, normalized and rotated from `start_index`:
        `(batch, ..., num_heads, key_dim)`."""
        queries = self._query_dense(query)
        return transform_heads(queries, self.query_norm, self._rotation, start_index)

    def _project_key_value(self, value, key, start_index=0):
        """Keys (projected, normalized, rotated from `start_index`) and
        values: `(batch, ..., num_key_value_heads, key_dim or value_dim)`."""
        keys = transform_heads(
            self._key_dense(key), self.key_norm, self._rotation, start_index
        )
        return keys, self._value_dense(value)

    def _scores_shape(self, query_shape, key_shape):
        """The static shape of a sequence call's attention scores."""
        # (batch, num_heads, query_length, key_length)
        return (query_shape[0], self._num_heads, query_shape[1], key_shape[1])

    def _project_output(self, query, attended, scores, return_attention_scores):
        if self._use_gate:
            # (batch, ..., num_heads, value_dim), sigmoid-activated
            attended = attended * self._gate_dense(query)
        # (batch, ..., num_heads, value_dim) -> (batch, ..., *output_shape)
        output = self._output_dense(attended)
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
        # (batch, ..., num_heads, key_dim), (batch, ..., key_heads, dim)
        queries = self._project_query(query)
        keys, values = self._project_key_value(value, key)
        layout = self._layout
        if layout is None:
            mask = merge_attention_masks(query, key, **masks)
            bias = as_attention_bias(
                attention_bias,
                "attention_bias",
                self._scores_shape(query.shape, key.shape),
            )
            sequence = (queries, keys, values)
        else:
            # (batch', length, heads, dim): the attended axes flattened into
            # one sequence in row-major order, the other axes in the batch;
            # the causal mask and the sliding window run along it.
            sequence = [layout.to_sequence(x) for x in (queries, keys, values)]
            mask, bias = masks_to_sequence(
                layout, masks, attention_bias, (queries, keys), sequence[:2]
            )
        sequence_keys, sequence_values, arguments = self._attention_arguments(
            sequence[1],
            sequence[2],
            mask,
            bias,
            training,
            return_attention_scores,
            causal_only,
        )
        attended, scores = self._compute_attention(
            sequence[0], sequence_keys, sequence_values, **arguments
        )
        if layout is not None:
            # (batch, ..., num_heads, value_dim)
            attended = layout.from_sequence(attended, queries)
            if scores is not None:
                scores = layout.scores_from_sequence(scores, queries, keys)
        return self._project_output(query, attended, scores, return_attention_scores)

    # --- Cached decoding: keys and values, then attention --------------------

    def compute_key_value(self, value, key=None, start_index=0):
        """Projects keys and values into heads (the cacheable half of a call).

        Keys are normalized (`qk_norm`) and rotated (rotary positions) here,
        so a cache stores them ready to attend.

        Args:
            value: tensor `(batch, key_length, value_features)`.
            key: optional tensor `(batch, key_length, key_features)`.
                Defaults to `value`.
            start_index: int or scalar int tensor, the position of the first
                key (the cache index), for rotary positions. Defaults to `0`.

        Returns:
            `(keys, values)` of shapes `(batch, key_length,
            num_key_value_heads, key_dim)` and `(batch, key_length,
            num_key_value_heads, value_dim)`.
        """
        key = value if key is None else key
        check_key_value_shapes(value.shape, key.shape)
        return self._project_key_value(value, key, start_index)

    def call_with_key_value(
        self,
        query,
        keys,
        values,
        attention_mask=None,
        attention_bias=None,
        return_attention_scores=False,
        training=None,
        start_index=0,
        masked_keys_are_finite=False,
    ):
        """Attends from `query` to keys and values already projected.

        This is the decoding path: `keys`/`values` come from
        `compute_key_value`, once per sentence for cross-attention and
        growing by one position per step for self-attention. The mask is
        used as given, and `sliding_window` added to it: query `i` sits at
        position `start_index + i`, key `j` at `j` (a cache's slot).

        Args:
            query: tensor `(batch, query_length, query_dim)`.
            keys: tensor `(batch, key_length, num_key_value_heads,
                key_dim)`.
            values: tensor `(batch, key_length, num_key_value_heads,
                value_dim)`.
            attention_mask: optional boolean
                `(batch, query_length, key_length)` or
                `(batch, num_heads, query_length, key_length)`.
            attention_bias: optional float tensor broadcastable to
                `(batch, num_heads, query_length, key_length)`. Defaults to
                `None`.
            return_attention_scores: bool. Defaults to `False`.
            training: bool, whether dropout is active. Defaults to `None`.
            start_index: int or scalar int tensor, the position of the first
                query (the cache index), for rotary positions and the
                sliding window. Defaults to `0`.
            masked_keys_are_finite: bool, whether the keys and values at
                the positions `attention_mask` hides from every query are
                known finite, as the unwritten slots of a cache allocated
                with zeros: then they are not zeroed first (two passes
                over `keys` and `values` saved per call). Defaults to
                `False`.

        Returns:
            As `call`.
        """
        if self._layout is not None:
            raise ValueError(
                "`call_with_key_value` attends along one sequence axis; layer "
                f"{self.name} was built for inputs of rank {self._layout.rank}. "
                "Call the layer instead."
            )
        mask = as_bool_mask(attention_mask, "attention_mask")
        if self._sliding_window is not None:
            # (1, query_length, key_length), the queries from `start_index`
            window = sliding_window_mask(
                ops.shape(query)[1],
                ops.shape(keys)[1],
                self._sliding_window,
                query_offset=start_index,
            )
            mask = window if mask is None else ops.logical_and(mask, window)
        bias = as_attention_bias(
            attention_bias,
            "attention_bias",
            self._scores_shape(query.shape, keys.shape),
        )
        # (batch, query_length, num_heads, key_dim)
        queries = self._project_query(query, start_index)
        keys, values, arguments = self._attention_arguments(
            keys,
            values,
            mask,
            bias,
            training,
            return_attention_scores,
            masked_keys_are_finite=masked_keys_are_finite,
        )
        attended, scores = self._compute_attention(queries, keys, values, **arguments)
        return self._project_output(query, attended, scores, return_attention_scores)

    # --- Shapes --------------------------------------------------------------

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_key_value_shapes(value_shape, key_shape)
        return (*tuple(query_shape)[:-1], *(self._output_shape or (query_shape[-1],)))

    def compute_output_spec(self, *args, **kwargs):
        # `call`'s arguments; only the inputs and `return_attention_scores`
        # shape the output.
        arguments = call_arguments(self, args, kwargs)
        query, value, key = arguments["query"], arguments["value"], arguments["key"]
        key_shape = None if key is None else key.shape
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape, key_shape),
            dtype=self.compute_dtype,
        )
        if not arguments["return_attention_scores"]:
            return output
        rank = len(query.shape)
        if rank == 3:
            scores_shape = self._scores_shape(query.shape, value.shape)
        else:
            axes = normalize_attention_axes(self._attention_axes, rank)
            scores_shape = AxesLayout(rank, axes).scores_shape(
                query.shape, value.shape, self._num_heads
            )
        return output, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)


def _clone(initializer):
    """A fresh copy of `initializer` (its config, so an unseeded one draws a
    new seed)."""
    return initializer.__class__.from_config(initializer.get_config())
