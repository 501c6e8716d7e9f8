"""Grouped-query attention (Ainslie et al., 2023) under Keras's names."""

import keras

from keras_attn.layers.attention.attention_arguments import check_head_dim
from keras_attn.layers.attention.multi_head_attention import MultiHeadAttention
from keras_attn.layers.attention.query_key_heads import check_num_key_value_heads


@keras.saving.register_keras_serializable(package="keras_attn")
class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention: `num_key_value_heads` key/value heads.

    A drop-in for Keras's `GroupedQueryAttention` (exported as
    `keras.layers.GroupQueryAttention`): the same
    constructor and call arguments, read-only names, weights (`query`,
    `key`, `gate`, `value`, `attention_output`, in that order) and override
    point: `_compute_attention` is called as Keras's layer calls it,
    `(query, key, value, attention_mask=..., training=...)` with the keys
    and values repeated to `num_query_heads` heads and the call's
    `return_attention_scores` in `self._return_attention_scores` (an
    override passes `use_causal_mask` on by keyword). It is
    `keras_attn.layers.MultiHeadAttention` with `num_heads=num_query_heads`,
    `key_dim=value_dim=head_dim` and `num_key_value_heads`, so it attends
    without repeating the keys and values (`keras_attn.layers.
    grouped_heads`), and has `compute_key_value` / `call_with_key_value`
    for cached decoding (the cache holds `num_key_value_heads` heads), the
    additive `attention_bias`, and, through `**kwargs`, `qk_norm` and the
    rotary arguments. A fully masked query row gives zeros, never NaN.

    Args:
        head_dim: int, size of each attention head.
        num_query_heads: int, number of query heads.
        num_key_value_heads: int dividing `num_query_heads`, number of key
            and value heads (`1`: multi-query attention; `num_query_heads`:
            multi-head attention).
        dropout: float in `[0, 1)`, dropout on the attention weights.
            Defaults to `0.0`.
        use_bias: bool, whether the projections have biases. Defaults to
            `True`.
        sliding_window: positive int: query `i` attends keys `j` with
            `|i - j| < sliding_window` only. Defaults to `None`.
        flash_attention: `None`, `True` or `False`, as in
            `keras_attn.layers.MultiHeadAttention`. Defaults to `None`.
        kernel_initializer: initializer of the projection kernels.
            Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of the projection biases. Defaults to
            `"zeros"`.
        kernel_regularizer: regularizer of the kernels. Defaults to `None`.
        bias_regularizer: regularizer of the biases. Defaults to `None`.
        activity_regularizer: regularizer of each projection's output.
            Defaults to `None`.
        kernel_constraint: constraint on the kernels. Defaults to `None`.
        bias_constraint: constraint on the biases. Defaults to `None`.
        use_gate: bool, whether to gate the attended values with
            `sigmoid(query W^G)`. Defaults to `False`.
        seed: int, seed of the attention dropout. Defaults to `None`.
        **kwargs: `MultiHeadAttention`'s `qk_norm`, `qk_norm_epsilon`,
            `rotary_max_wavelength`, `rotary_scaling_factor`, `rotary_dim`,
            and base `keras.layers.Layer` arguments.

    Call arguments:
        As `keras_attn.layers.MultiHeadAttention` on sequences: `query`
        `(batch, target_length, features)`, `value`, `key`, `query_mask`,
        `value_mask`, `key_mask`, `attention_mask`,
        `return_attention_scores`, `training`, `use_causal_mask`,
        `attention_bias`.

    Returns:
        The output `(batch, target_length, features)`, or `(output,
        scores)` with the scores `(batch, num_query_heads, target_length,
        source_length)`.

    Example:

    >>> layer = keras_attn.layers.GroupedQueryAttention(
    ...     head_dim=4, num_query_heads=4, num_key_value_heads=2)
    >>> x = keras.random.normal((3, 5, 8))
    >>> y, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(y.shape), tuple(scores.shape), tuple(layer.key_dense.kernel.shape)
    ((3, 5, 8), (3, 4, 5, 5), (8, 2, 4))

    References:
        Ainslie et al., "GQA: Training Generalized Multi-Query Transformer
        Models from Multi-Head Checkpoints", 2023,
        https://arxiv.org/abs/2305.13245.
    """

    # An override of `_compute_attention` follows Keras's
    # `GroupedQueryAttention` signature, `(query, key, value,
    # attention_mask=None, training=None, use_causal_mask=False)`, and reads
    # the call's `return_attention_scores` from `self._return_attention_scores`.
    _override_takes_return_attention_scores = False

    def __init__(
        self,
        head_dim,
        num_query_heads,
        num_key_value_heads,
        dropout=0.0,
        use_bias=True,
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
        **kwargs,
    ):
        # Checked here first, so that errors use this layer's names.
        head_dim = check_head_dim(head_dim, "head_dim")
        num_query_heads = check_head_dim(num_query_heads, "num_query_heads")
        num_key_value_heads = check_num_key_value_heads(
            check_head_dim(num_key_value_heads, "num_key_value_heads"),
            num_query_heads,
            heads_name="num_query_heads",
        )
        super().__init__(
            num_heads=num_query_heads,
            key_dim=head_dim,
            num_key_value_heads=num_key_value_heads,
            dropout=dropout,
            use_bias=use_bias,
            sliding_window=sliding_window,
            flash_attention=flash_attention,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            use_gate=use_gate,
            seed=seed,
            **kwargs,
        )
        self._feature_dim = None

    # --- Keras's names -------------------------------------------------------

    @property
    def head_dim(self):
        return self._key_dim

    @property
    def num_query_heads(self):
        return self._num_heads

    @property
    def num_repeats(self):
        """Query heads per key/value head."""
        return self._num_heads // self._num_key_value_heads

    @property
    def feature_dim(self):
        """The query's feature size (`None` until built)."""
        return self._feature_dim

    @property
    def kernel_initializer(self):
        return self._kernel_initializer

    @property
    def bias_initializer(self):
        return self._bias_initializer

    @property
    def kernel_regularizer(self):
        return self._kernel_regularizer

    @property
    def bias_regularizer(self):
        return self._bias_regularizer

    @property
    def kernel_constraint(self):
        return self._kernel_constraint

    @property
    def bias_constraint(self):
        return self._bias_constraint

    def build(self, query_shape, value_shape, key_shape=None):
        self._feature_dim = query_shape[-1]
        super().build(query_shape, value_shape, key_shape)

    # --- Shapes and config ---------------------------------------------------

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        # Keras's checks and messages.
        key_shape = value_shape if key_shape is None else key_shape
        if query_shape[-1] != value_shape[-1]:
            raise ValueError(
                "The last dimension of `query_shape` and `value_shape` must be "
                f"equal, but are {query_shape[-1]}, {value_shape[-1]}. "
                f"Received: query_shape={query_shape}, value_shape={value_shape}"
            )
        if tuple(value_shape[1:-1]) != tuple(key_shape[1:-1]):
            raise ValueError(
                "All dimensions of `value` and `key`, except the last one, must "
                f"be equal. Received: value_shape={value_shape} and "
                f"key_shape={key_shape}"
            )
        return query_shape

    def get_config(self):
        config = super().get_config()
        # `MultiHeadAttention`'s names of this layer's arguments, and the
        # arguments this layer fixes.
        config["num_query_heads"] = config.pop("num_heads")
        config["head_dim"] = config.pop("key_dim")
        config["num_key_value_heads"] = self._num_key_value_heads
        for fixed in ("value_dim", "output_shape", "attention_axes"):
            config.pop(fixed)
        return config
