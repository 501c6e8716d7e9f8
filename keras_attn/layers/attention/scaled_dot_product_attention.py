"""Scaled dot-product attention, section 3.2.1 of the paper."""

from keras_attn.layers.attention.attention_arguments import check_flash_attention
from keras_attn.layers.attention.attention_core import (
    as_attention_bias,
    compute_attention,
)
from keras_attn.layers.attention.masking import as_bool_mask


def scaled_dot_product_attention(
    query,
    key,
    value,
    mask=None,
    dropout_rate=0.0,
    training=False,
    seed_generator=None,
    return_attention_scores=False,
    bias=None,
    flash_attention=None,
):
    """Computes `softmax(Q K^T / sqrt(d_k) + bias) V` over several heads at once.

    This is Attention(Q, K, V) of equation (1) in the paper, applied per
    head, with an optional additive bias on the scores (a relative position
    bias, ALiBi). Masked positions get zero weight. A query row with no key
    to attend gets zero weight everywhere, so its output is zero (never
    NaN), in every dtype. The softmax runs in float32 even under a
    mixed-precision policy.

    The mask and bias are checked here, then
    `keras_attn.layers.attention.attention_core.compute_attention` computes it: when
    neither attention scores nor attention dropout are needed (and values
    have the keys' head size), with `keras.ops.dot_product_attention`, the backend's fused kernel, with the
    kernel chosen before the call (`keras_attn.layers.attention.fused_attention`):
    cuDNN's flash attention on a GPU where it accepts the call, XLA's
    dot-product attention elsewhere, and never a failed try. Otherwise the
    explicit path computes the same equation and can return the weights.

    Args:
        query: tensor `(batch, query_length, num_heads, key_dim)`.
        key: tensor `(batch, key_length, num_heads, key_dim)`.
        value: tensor `(batch, key_length, num_heads, value_dim)`.
        mask: optional boolean tensor `(batch, query_length, key_length)`
            (or `(batch, num_heads, query_length, key_length)`, or a shape
            that broadcasts to it), `True` where a query may attend a key.
            Defaults to `None`.
        dropout_rate: float, dropout on the attention weights during
            training (section 5.4 applies dropout to sub-layer outputs; this
            is the common extra). Defaults to `0.0`.
        training: bool, whether dropout is active. Defaults to `False`.
        seed_generator: `keras.random.SeedGenerator` for the dropout.
            Defaults to `None`.
        return_attention_scores: bool, whether to also return the attention
            weights. Defaults to `False`.
        bias: optional float tensor (any float dtype) broadcastable to
            `(batch, num_heads, query_length, key_length)`, added to the
            scaled scores. Defaults to `None`.
        flash_attention: `None` uses `keras.ops.dot_product_attention`
            when possible, `False` never, `True` as `None` but refusing
            `return_attention_scores` and dropout. Defaults to `None`.

    Returns:
        The attended values `(batch, query_length, num_heads, value_dim)`,
        and with `return_attention_scores=True` also the weights
        `(batch, num_heads, query_length, key_length)`.

    Example:

    >>> q = keras.random.normal((2, 5, 4, 8))
    >>> k = v = keras.random.normal((2, 7, 4, 8))
    >>> out = keras_attn.layers.scaled_dot_product_attention(q, k, v)
    >>> tuple(out.shape)
    (2, 5, 4, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.2.1.
    """
    flash_attention = check_flash_attention(flash_attention, dropout_rate)
    attended, weights = compute_attention(
        query,
        key,
        value,
        mask=as_bool_mask(mask, "mask"),
        bias=as_attention_bias(bias, "bias"),
        dropout_rate=dropout_rate,
        training=training,
        seed_generator=seed_generator,
        return_attention_scores=return_attention_scores,
        flash_attention=flash_attention,
    )
    if return_attention_scores:
        return attended, weights
    return attended
