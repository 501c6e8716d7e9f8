"""Dropout that draws one random number for every two inputs (section 5.4)."""

import keras
from keras import ops

from keras_attn.validation import check_rate, check_seed

# Each float32 uniform draw carries 23 random mantissa bits (on JAX and on
# TensorFlow): two independent 11-bit uniforms are cut from it (2048**2 <= 2**23).
_LEVELS = 2048
# A rate that 11-bit levels cannot represent within this relative error is
# dropped out with one draw per input instead (`keras.random.dropout`).
_MAX_RATE_ERROR = 0.01


def quantized_dropout_rate(rate):
    """The rate `fast_dropout` applies for `rate`, or `None` if it is exact-only.

    Args:
        rate: float in `[0, 1)`, the requested dropout rate.

    Returns:
        `round(rate * 2048) / 2048` when that is within 1% of `rate` and
        its keep probability `1 - rate` within 1% of `1 - rate` requested,
        else `None` (the rate is then applied exactly, at the usual cost).
        So rates of about 0.025 to 0.975 are quantized; every rate below or
        above (including those that would round to 0 or to 1, such as
        0.99999) is exact.
    """
    quantized = round(rate * _LEVELS) / _LEVELS
    if quantized <= 0 or abs(quantized - rate) > _MAX_RATE_ERROR * rate:
        return None
    # The kept inputs are scaled by 1 / (1 - rate): near rate 1 that scale,
    # not the rate, is what 11-bit levels would get wrong (or divide by 0).
    if abs(quantized - rate) > _MAX_RATE_ERROR * (1.0 - rate):
        return None
    return quantized


def _split_axis(shape):
    """The last axis of static, even size (`None` if there is none)."""
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] is not None and shape[axis] % 2 == 0:
            return axis
    return None


def applied_dropout_rate(rate):
    """The drop probability `fast_dropout(x, rate)` applies on this backend.

    Args:
        rate: float in `[0, 1)`, the requested dropout rate.

    Returns:
        `rate` itself on torch and for rates `quantized_dropout_rate` leaves
        exact; else the rate at a resolution of 1/2048 (0.1 becomes 0.10010)
        for inputs with an axis of even size.
    """
    if keras.backend.backend() == "torch":
        return rate
    quantized = quantized_dropout_rate(rate)
    return rate if quantized is None else quantized


def fast_dropout(inputs, rate, seed=None):
    """Inverted dropout with half the random numbers of `keras.random.dropout`.

    Random number generation is a large part of dropout's cost on JAX and
    TensorFlow (JAX's threefry hash in particular): `keras.random.dropout`
    draws one 32-bit number per input. Here every uniform float32 draw,
    which holds 23 random bits, is split into two independent 11-bit
    uniforms that decide two inputs (`x[..., i, ...]` and
    `x[..., i + n // 2, ...]` along the last axis of even size `n`: the
    features of a hidden state, the keys of attention weights, or else an
    earlier axis), so half as many numbers are drawn.

    The rate is applied at a resolution of 1/2048: the rate used is
    `round(rate * 2048) / 2048` (0.1 becomes 0.10010), and the kept inputs
    are scaled by `1 / (1 - rate used)`, so the expected output equals the
    input exactly. Rates whose drop or keep probability that resolution
    misses by more than 1% (below about 0.025 or above about 0.975), and
    inputs with no axis of even static size, fall back to
    `keras.random.dropout`, which is exact: every rate in `[0, 1)` works.

    On torch every rate is `keras.random.dropout`, exact: there it is
    torch's own dropout kernel, one pass that draws cheap random numbers,
    and the split above would add element-wise passes to an eager step.
    `applied_dropout_rate(rate)` gives the rate used on the current backend.

    Args:
        inputs: float tensor of any rank.
        rate: float in `[0, 1)`, the fraction of inputs to zero.
        seed: `keras.random.SeedGenerator` or int. Defaults to `None`.

    Returns:
        A tensor of the shape and dtype of `inputs`.

    Example:

    >>> x = keras.ops.ones((4, 8, 16))
    >>> y = keras_attn.layers.fast_dropout(x, 0.5, seed=1)
    >>> tuple(y.shape)
    (4, 8, 16)

    References:
        Srivastava et al., "Dropout: A Simple Way to Prevent Neural Networks
        from Overfitting", 2014; Vaswani et al., 2017, section 5.4.
    """
    quantized = quantized_dropout_rate(rate)
    axis = _split_axis(inputs.shape)
    if quantized is None or axis is None or keras.backend.backend() == "torch":
        return keras.random.dropout(inputs, rate, seed=seed)
    shape = ops.shape(inputs)
    half_shape = (*shape[:axis], inputs.shape[axis] // 2, *shape[axis + 1 :])
    # `inputs`' shape with `axis` halved, uniform on [0, 1) in steps of 2**-23
    uniform = keras.random.uniform(half_shape, seed=seed, dtype="float32")
    scaled = uniform * float(_LEVELS)
    high = ops.floor(scaled)  # top 11 bits: 0 ... 2047
    low = ops.floor((scaled - high) * float(_LEVELS))  # next 11 bits: 0 ... 2047
    threshold = float(round(quantized * _LEVELS))
    # `inputs`' shape
    keep = ops.concatenate([high >= threshold, low >= threshold], axis=axis)
    scale = ops.cast(1.0 / (1.0 - quantized), inputs.dtype)
    return ops.where(keep, inputs * scale, ops.zeros_like(inputs))


@keras.saving.register_keras_serializable(package="keras_attn")
class FastDropout(keras.layers.Layer):
    """`keras.layers.Dropout` with half the random numbers.

    Sets a fraction `rate` of the inputs to zero during training and scales
    the rest by `1 / (1 - rate)`, through `keras_attn.layers.fast_dropout`:
    on JAX and TensorFlow one uniform draw decides two inputs, and the rate
    is applied at a resolution of 1/2048 (0.1 becomes 0.10010); on torch it
    is torch's exact dropout kernel (see `fast_dropout`). The
    Transformer's residual and embedding dropout (section 5.4) use it; in
    inference it is the identity.

    Args:
        rate: float in `[0, 1)`, the fraction of inputs to drop.
        seed: int, the seed of the layer's `keras.random.SeedGenerator`.
            Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: float tensor of any rank.
        training: bool, whether to drop. Defaults to `False`.

    Returns:
        A tensor of the shape and dtype of `inputs`.

    Example:

    >>> layer = keras_attn.layers.FastDropout(0.1, seed=0)
    >>> x = keras.ops.ones((2, 5, 8))
    >>> bool(keras.ops.all(layer(x) == x))  # identity outside training
    True
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = check_rate(rate, "rate")
        self.seed = check_seed(seed, "seed")
        if self.rate > 0:
            self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True
        self.built = True

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        return fast_dropout(inputs, self.rate, seed=self.seed_generator)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
