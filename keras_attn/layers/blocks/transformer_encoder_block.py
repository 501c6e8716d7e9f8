"""One encoder layer of the Transformer, section 3.1 of the paper."""

import keras

from keras_attn.layers.attention.masking import as_bool_mask, merge_attention_masks
from keras_attn.layers.blocks.transformer_block_base import (
    TransformerBlockBase,
    check_sequence_shape,
)
from keras_attn.layers.call_arguments import call_arguments


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoderBlock(TransformerBlockBase):
    """Self-attention and a feed-forward network, each with Add & Norm.

    Args:
        num_heads: int, number of attention heads; must divide the input's
            feature size (`d_k = d_model / h`), unless `attention` sets
            `head_dim` (then `d_k = head_dim`).
        intermediate_dim: int, the feed-forward inner size `d_ff`.
        dropout: float in `[0, 1)`, residual dropout on each sub-layer's
            output before the residual addition (section 5.4), applied by
            `keras_attn.layers.FastDropout` (whose docstring says how it
            rounds the rate). Defaults to `0.0`.
        activation: feed-forward activation: a Keras activation (name or
            callable) or a gated one, `"geglu"`, `"swiglu"` or `"reglu"`
            (see `keras_attn.layers.FeedForward`). Defaults to `"relu"`.
        layer_norm_epsilon: float, a normal float32 number (at least
            `2**-126`; smaller ones are flushed to zero and a position of
            equal values would normalize to NaN). Defaults to `1e-6`.
        normalize_first: bool, pre-norm (`True`) instead of the paper's
            post-norm. Defaults to `False`.
        kernel_initializer: initializer of the attention and feed-forward
            kernels. Defaults to `"glorot_uniform"`.
        bias_initializer: initializer of the attention and feed-forward
            biases. Defaults to `"zeros"`.
        normalization: `"layer"` (`keras_attn.layers.LayerNorm`) or
            `"rms"` (`keras_attn.layers.RMSNormalization`, no centering or
            offset), the sub-layer norms, both with epsilon
            `layer_norm_epsilon`. Defaults to `"layer"`.
        use_bias: bool; `False` removes the biases of the attention
            projections and of the feed-forward network, and the offsets
            (`beta`) of the layer norms (`center=False`), as in LLaMA or
            PaLM. Defaults to `True`.
        attention: the settings of the self-attention: a
            `keras_attn.layers.AttentionSettings` (attention dropout, the
            fused kernel, grouped key/value heads, QK-norm, rotary
            positions), or its config (a dict). Defaults to `None`, meaning
            `AttentionSettings(dropout=dropout)`: keras-hub's blocks use
            `dropout` on the attention weights too.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, length, hidden_dim)`.
        padding_mask: optional boolean `(batch, length)`, `False` at padding.
            Defaults to the Keras mask of `inputs`, if any.
        attention_mask: optional boolean `(batch, length, length)`.
        use_causal_mask: bool, restrict each position to earlier ones
            (decoder-only language models). Defaults to `False`.
        training: bool, whether dropout is active.
        return_attention_scores: bool, whether to also return the
            self-attention weights `(batch, num_heads, length, length)`.
            Defaults to `False`.
        attention_bias: optional float tensor broadcastable to
            `(batch, num_heads, length, length)`, added to the
            self-attention scores before the softmax (a relative position
            bias, ALiBi, ...).

    Returns:
        A tensor of the shape of `inputs`, or `(output, attention_scores)`
        with `return_attention_scores=True`.

    Example:

    >>> block = keras_attn.layers.TransformerEncoderBlock(
    ...     num_heads=2, intermediate_dim=32)
    >>> tuple(block(keras.random.normal((2, 6, 16))).shape)
    (2, 6, 16)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.1.
    """

    def build(self, inputs_shape):
        hidden_dim = check_sequence_shape(inputs_shape, "inputs")
        self._build_self_attention(inputs_shape, hidden_dim)
        self._build_feed_forward(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        training=None,
        return_attention_scores=False,
        attention_bias=None,
        mask=None,
    ):
        # `mask` is the Keras mask Keras passes in for mask-carrying inputs.
        padding_mask = mask if padding_mask is None else padding_mask
        self_mask = merge_attention_masks(
            inputs,
            inputs,
            value_mask=as_bool_mask(padding_mask, "padding_mask"),
            attention_mask=as_bool_mask(attention_mask, "attention_mask"),
            use_causal_mask=use_causal_mask,
        )
        x, scores = self._self_attention_sublayer(
            inputs, self_mask, attention_bias, training, return_attention_scores
        )
        x = self._feed_forward_sublayer(x, training)
        if return_attention_scores:
            return x, scores
        return x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def compute_output_spec(self, *args, **kwargs):
        # `call`'s arguments; only `inputs` and `return_attention_scores`
        # shape the output.
        arguments = call_arguments(self, args, kwargs)
        inputs = arguments["inputs"]
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not arguments["return_attention_scores"]:
            return output
        # (batch, num_heads, length, length)
        _, scores = self.self_attention.compute_output_spec(
            inputs, inputs, return_attention_scores=True
        )
        return output, scores
