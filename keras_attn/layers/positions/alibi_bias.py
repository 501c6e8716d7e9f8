"""Attention with linear biases, ALiBi (Press et al., 2021).

No position embedding: each head adds `-slope * distance` to its attention
scores, with a fixed slope per head, so that a head attends less the farther
a key lies. Trained short, it extrapolates to longer sequences.
"""

import math

import keras
from keras import ops

from keras_attn.layers.attention.masking import relative_positions
from keras_attn.validation import (
    check_bool,
    check_positive_float,
    check_positive_int,
    is_integer,
)


def _slopes(num_heads, alibi_bias_max):
    """The slopes as Python floats, after the paper's reference code."""

    def power_of_two_slopes(n):
        # A geometric sequence starting at 2 ** (-alibi_bias_max / n), with
        # that same ratio.
        start = 2.0 ** (-alibi_bias_max / n)
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        return power_of_two_slopes(num_heads)
    # Otherwise the slopes of the power of two below, then every other
    # slope of the next power of two (those lying in between).
    below = 2 ** math.floor(math.log2(num_heads))
    between = _slopes(2 * below, alibi_bias_max)[0::2]
    return power_of_two_slopes(below) + between[: num_heads - below]


def alibi_slopes(num_heads, alibi_bias_max=8):
    """The slope of each head.

    For `n` heads, a power of two, `2 ** (-alibi_bias_max * h / n)` for
    `h = 1..n`. For other head counts, as the paper's code and keras-hub:
    the slopes of the power of two just below, then every other slope of
    the next power of two.

    Args:
        num_heads: int, the number of attention heads.
        alibi_bias_max: float, the exponent of the last slope's
            `2 ** -alibi_bias_max` (for a power-of-two head count).
            Defaults to `8`.

    Returns:
        A float32 tensor `(num_heads,)`.

    Example:

    >>> keras.ops.convert_to_numpy(keras_attn.layers.alibi_slopes(4)).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    num_heads = check_positive_int(num_heads, "num_heads")
    alibi_bias_max = check_positive_float(alibi_bias_max, "alibi_bias_max")
    return ops.convert_to_tensor(_slopes(num_heads, alibi_bias_max), "float32")


def alibi_bias(
    num_heads,
    query_length,
    key_length,
    query_offset=0,
    alibi_bias_max=8,
    bidirectional=False,
):
    """ALiBi's additive attention bias, `-slope * (query_position - key_position)`.

    Query `i` sits at position `query_offset + i`, key `j` at `j`. For a
    decoder (causal mask) this is the paper's bias; keys after the query
    get a positive bias there, which the causal mask removes. With
    `bidirectional=True` the distance is `|query_position - key_position|`,
    for encoders.

    Args:
        num_heads: int, the number of attention heads.
        query_length: int or scalar tensor, the number of queries.
        key_length: int or scalar tensor, the number of keys.
        query_offset: int or scalar int tensor, the position of the first
            query: the cache index in cached decoding. Defaults to `0`.
        alibi_bias_max: float, see `alibi_slopes`. Defaults to `8`.
        bidirectional: bool, whether to penalize the distance in both
            directions. Defaults to `False`.

    Returns:
        A float32 tensor `(1, num_heads, query_length, key_length)`, to add
        to the scores (the `attention_bias` of an attention layer).

    Example:

    >>> bias = keras_attn.layers.alibi_bias(2, query_length=3, key_length=3)
    >>> keras.ops.convert_to_numpy(bias[0, 0]).tolist()
    [[0.0, 0.0625, 0.125], [-0.0625, 0.0, 0.0625], [-0.125, -0.0625, 0.0]]

    References:
        Press et al., "Train Short, Test Long: Attention with Linear Biases
        Enables Input Length Extrapolation", 2021,
        https://arxiv.org/abs/2108.12409.
    """
    slopes = alibi_slopes(num_heads, alibi_bias_max)
    bidirectional = check_bool(bidirectional, "bidirectional")
    for name, value in (("query_length", query_length), ("key_length", key_length)):
        if is_integer(value):
            check_positive_int(value, name)
    # key_position - query_position, <= 0 for the keys a decoder sees.
    relative = relative_positions(query_length, key_length, query_offset)
    if bidirectional:
        relative = -ops.abs(relative)
    relative = ops.cast(relative, "float32")
    # (1, heads, query, key)
    return slopes[None, :, None, None] * relative[None, None, :, :]


@keras.saving.register_keras_serializable(package="keras_attn")
class AlibiBias(keras.layers.Layer):
    """Adds ALiBi's bias to attention scores.

    Takes the arguments of `keras_hub.layers.AlibiBias` and gives its
    values: head `h` adds `slope_h * (j - (key_length - 1))` to the score
    of key `j`, the paper's bias for the last query. Softmax ignores a
    constant per row, so every query's attention weights are those of
    the paper's `-slope_h * (i - j)` over the keys it may attend to
    (`keras_attn.layers.alibi_bias` gives that form, for any query
    offset).

    Args:
        alibi_bias_max: float, the slopes are `2 ** (-alibi_bias_max * h /
            num_heads)` (see `alibi_slopes`). Defaults to `8`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        attention_scores: float tensor `(batch, num_heads, query_length,
            key_length)`; `num_heads` must be known.

    Returns:
        The scores plus the bias, same shape, in the layer's compute dtype.

    Example:

    >>> scores = keras.ops.zeros((1, 2, 1, 3))  # (batch, heads, query, key)
    >>> biased = keras_attn.layers.AlibiBias()(scores)
    >>> keras.ops.convert_to_numpy(biased[0, :, 0]).tolist()
    [[-0.125, -0.0625, 0.0], [-0.0078125, -0.00390625, 0.0]]

    References:
        Press et al., "Train Short, Test Long: Attention with Linear Biases
        Enables Input Length Extrapolation", 2021,
        https://arxiv.org/abs/2108.12409.
    """

    def __init__(self, alibi_bias_max=8, **kwargs):
        super().__init__(**kwargs)
        checked = check_positive_float(alibi_bias_max, "alibi_bias_max")
        self.alibi_bias_max = int(checked) if is_integer(alibi_bias_max) else checked

    def build(self, input_shape):
        shape = tuple(input_shape)
        if len(shape) != 4 or shape[1] is None:
            raise ValueError(
                "AlibiBias expects `attention_scores` of shape (batch, "
                "num_heads, query_length, key_length) with a known num_heads. "
                f"Received: attention_scores.shape={shape}"
            )
        self.built = True

    def call(self, attention_scores):
        shape = ops.shape(attention_scores)
        if len(shape) != 4:
            raise ValueError(
                "AlibiBias expects `attention_scores` of rank 4, (batch, "
                "num_heads, query_length, key_length). Received: "
                f"attention_scores.shape={tuple(shape)}"
            )
        num_heads, key_length = attention_scores.shape[1], shape[-1]
        # The last query's row, broadcast over the queries: (1, heads, 1, key).
        bias = alibi_bias(
            num_heads,
            query_length=1,
            key_length=key_length,
            query_offset=key_length - 1,
            alibi_bias_max=self.alibi_bias_max,
        )
        return ops.add(attention_scores, ops.cast(bias, self.compute_dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config["alibi_bias_max"] = self.alibi_bias_max
        return config
