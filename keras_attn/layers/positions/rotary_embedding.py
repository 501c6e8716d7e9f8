"""Rotary position embedding, RoPE (Su et al., 2021).

Each pair of features `(x[i], x[i + d/2])` of a query or key at position
`p` is rotated by the angle `p * theta_i`, `theta_i =
max_wavelength ** (-2i / d)` ("rotate half" pairing, as GPT-NeoX, Llama and
keras-hub). The dot product of a rotated query and key then depends only on
their distance.
"""

import math

import keras
from keras import ops

from keras_attn.validation import (
    check_bool,
    check_choice,
    check_int,
    check_max_wavelength,
    check_positive_float,
    check_positive_int,
    check_scaling_factor,
)

ROPE_TYPES = ("linear", "dynamic", "yarn")


def rotary_inverse_frequencies(
    rotary_dim,
    max_wavelength=10000,
    scaling_factor=1.0,
    rope_type="linear",
    denominator_dim=None,
    beta_fast=32.0,
    beta_slow=1.0,
    original_max_position_embeddings=4096,
    truncate=True,
):
    """The angle per position of each rotated pair, `theta_i`.

    Args:
        rotary_dim: int, the number of rotated features (even).
        max_wavelength: float, the base of the geometric progression.
            Defaults to `10000`.
        scaling_factor: float, the context-extension factor `s`. Defaults
            to `1.0` (no scaling).
        rope_type: how `s` is applied, as keras-hub's `RotaryEmbedding`:
            `"linear"` (position interpolation, `theta_i / s`),
            `"dynamic"` (`theta_i / s ** (d / (d - 2))`) or `"yarn"`
            (interpolate the low frequencies only). Defaults to `"linear"`.
        denominator_dim: int or `None`, the `d` of `-2i / d` when it is not
            `rotary_dim` (`"linear"` and `"dynamic"` only; YaRN ignores it,
            as keras-hub does). Defaults to `None`.
        beta_fast: float, YaRN's rotation count above which a pair is not
            interpolated. Defaults to `32.0`.
        beta_slow: float, YaRN's rotation count below which a pair is
            fully interpolated. Defaults to `1.0`.
        original_max_position_embeddings: int, the training length YaRN
            extends. Defaults to `4096`.
        truncate: bool, whether YaRN rounds its ramp to whole pairs.
            Defaults to `True`.

    Returns:
        A float32 tensor `(rotary_dim // 2,)`.
    """
    index = ops.arange(0, rotary_dim, 2, dtype="float32")  # 2i
    if rope_type == "yarn":
        return _yarn_inverse_frequencies(
            index,
            rotary_dim,
            max_wavelength,
            scaling_factor,
            beta_fast,
            beta_slow,
            original_max_position_embeddings,
            truncate,
        )
    denominator = float(denominator_dim or rotary_dim)
    inverse = ops.power(ops.cast(max_wavelength, "float32"), -index / denominator)
    if rope_type == "dynamic":
        exponent = rotary_dim / max(1, rotary_dim - 2)
        return inverse / ops.power(ops.cast(scaling_factor, "float32"), exponent)
    return inverse / ops.cast(scaling_factor, "float32")


def _yarn_inverse_frequencies(
    index,
    rotary_dim,
    max_wavelength,
    scaling_factor,
    beta_fast,
    beta_slow,
    original_max_position_embeddings,
    truncate,
):
    """YaRN (Peng et al., 2023): pairs that turn more than `beta_fast`
    times over the training length keep their frequency, those that turn
    fewer than `beta_slow` times are interpolated by `scaling_factor`, and
    a linear ramp joins the two.
    """
    base = ops.cast(max_wavelength, "float32")
    wavelength_factors = ops.power(base, index / float(rotary_dim))
    extrapolated = 1.0 / wavelength_factors
    interpolated = 1.0 / (scaling_factor * wavelength_factors)

    def pair_turning(rotations):
        # The (fractional) pair that turns `rotations` times over the
        # training length.
        length = float(original_max_position_embeddings)
        return (
            rotary_dim
            * ops.log(length / (rotations * 2 * math.pi))
            / (2 * ops.log(base))
        )

    low = pair_turning(ops.cast(beta_fast, "float32"))
    high = pair_turning(ops.cast(beta_slow, "float32"))
    if truncate:
        low, high = ops.floor(low), ops.ceil(high)
    low = ops.maximum(low, 0.0)
    high = ops.minimum(high, float(rotary_dim - 1))
    pair = ops.arange(rotary_dim // 2, dtype="float32")
    ramp = ops.clip((pair - low) / ops.maximum(high - low, 0.001), 0.0, 1.0)
    return interpolated * ramp + extrapolated * (1.0 - ramp)


def rotary_attention_factor(rope_type, scaling_factor):
    """YaRN's scale of the rotated features, `0.1 * ln(s) + 1`; else `1.0`."""
    if rope_type == "yarn":
        return 0.1 * math.log(scaling_factor) + 1.0
    return 1.0


def _rotate(x, positions, inverse_frequencies, sequence_axis, attention_factor=1.0):
    """Rotates the leading `2 * len(inverse_frequencies)` features of `x`.

    `x` has its batch on axis 0, its sequence on `sequence_axis` (not 0,
    not the last) and its features last; `positions` is `(length,)` or
    `(batch, length)`. Computed in float32, returned in `x`'s dtype.
    """
    rank = len(x.shape)
    rotary_dim = 2 * inverse_frequencies.shape[0]
    positions = ops.cast(positions, "float32")
    if len(positions.shape) == 1:
        positions = positions[None, :]  # (1, length)
    # (batch or 1, length, rotary_dim / 2)
    angles = positions[:, :, None] * inverse_frequencies[None, None, :]
    for axis in range(1, rank - 1):
        if axis != sequence_axis:
            angles = ops.expand_dims(angles, axis)
    cos = ops.cos(angles) * attention_factor
    sin = ops.sin(angles) * attention_factor

    dtype = x.dtype
    x = ops.cast(x, "float32")
    rotated, passed = x[..., :rotary_dim], x[..., rotary_dim:]
    first, second = ops.split(rotated, 2, axis=-1)  # (..., rotary_dim / 2) each
    parts = [first * cos - second * sin, second * cos + first * sin]
    if passed.shape[-1] != 0:
        parts.append(passed)
    return ops.cast(ops.concatenate(parts, axis=-1), dtype)


def _check_rotary_dim(rotary_dim, feature_dim, feature_name):
    """`rotary_dim` (default: all features) as an even int `<= feature_dim`."""
    if rotary_dim is None:
        rotary_dim = feature_dim
        name = feature_name
    else:
        rotary_dim = check_positive_int(rotary_dim, "rotary_dim")
        name = "rotary_dim"
        if feature_dim is not None and rotary_dim > feature_dim:
            raise ValueError(
                f"`rotary_dim` must be at most the feature size {feature_dim}. "
                f"Received: rotary_dim={rotary_dim}"
            )
    if rotary_dim is None:
        raise ValueError(
            f"Rotary embedding needs a known feature size. Received: {name}=None"
        )
    if rotary_dim % 2:
        raise ValueError(
            "Rotary embedding rotates pairs of features: the number of rotated "
            f"features must be even. Received: {name}={rotary_dim}"
        )
    return rotary_dim


def apply_rotary(
    x,
    positions,
    max_wavelength=10000,
    scaling_factor=1.0,
    rotary_dim=None,
    sequence_axis=1,
):
    """Rotates queries or keys by their positions (RoPE, linear scaling).

    Args:
        x: float tensor `(batch, length, heads, head_dim)`, or any rank with
            the batch first, the features last and the sequence on
            `sequence_axis`.
        positions: int or float tensor `(length,)` or `(batch, length)`, the
            position of each element, e.g. `ops.arange(length) + index` in
            cached decoding.
        max_wavelength: float in `[1, 2**60]`, the base of the geometric
            progression of wavelengths (bounded so that every inverse
            frequency is a normal float32 number,
            `keras_attn.validation.check_max_wavelength`). Defaults to
            `10000`.
        scaling_factor: float `s` in `[2**-32, 2**32]`: positions are
            divided by `s` (position interpolation; bounded so that the
            angles of positions below `2**24` stay finite,
            `keras_attn.validation.check_scaling_factor`). Defaults to
            `1.0`.
        rotary_dim: int or `None`, rotate only the first `rotary_dim`
            features of each head (partial rotary, as GPT-NeoX), pass the
            rest through. Even. Defaults to `None` (all of `head_dim`).
        sequence_axis: int, the axis of `length` (`2` for
            `(batch, heads, length, head_dim)`). Defaults to `1`.

    Returns:
        A tensor of the shape and dtype of `x` (computed in float32).

    Example:

    >>> q = keras.ops.ones((2, 5, 4, 8))  # (batch, length, heads, head_dim)
    >>> rotated = keras_attn.layers.apply_rotary(q, keras.ops.arange(5))
    >>> tuple(rotated.shape)
    (2, 5, 4, 8)

    References:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position
        Embedding", 2021, https://arxiv.org/abs/2104.09864.
    """
    x = ops.convert_to_tensor(x)
    rank = len(x.shape)
    check_int(sequence_axis, "sequence_axis")
    if rank < 3 or sequence_axis % rank in (0, rank - 1):
        raise ValueError(
            "`apply_rotary` needs `x` of rank >= 3 with the batch first, the "
            "features last and the sequence on `sequence_axis` in between. "
            f"Received: x.shape={tuple(x.shape)}, sequence_axis={sequence_axis}"
        )
    rotary_dim = _check_rotary_dim(rotary_dim, x.shape[-1], "x.shape[-1]")
    inverse_frequencies = rotary_inverse_frequencies(
        rotary_dim,
        check_max_wavelength(max_wavelength, "max_wavelength"),
        check_scaling_factor(scaling_factor, "scaling_factor"),
    )
    return _rotate(x, positions, inverse_frequencies, sequence_axis % rank)


@keras.saving.register_keras_serializable(package="keras_attn")
class RotaryEmbedding(keras.layers.Layer):
    """Rotates its inputs by their positions (RoPE), no weights.

    Takes the arguments of `keras_hub.layers.RotaryEmbedding` and gives its
    values, computed in float32 (returned in the compute dtype). Apply it
    to the queries and the keys of each head, not to the values; or give
    `keras_attn.layers.apply_rotary` the per-head tensors directly.

    Args:
        max_wavelength: float in `[1, 2**60]`, the base of the geometric
            progression of wavelengths (bounded so that every inverse
            frequency is a normal float32 number). Defaults to `10000`.
        scaling_factor: float `s` in `[2**-32, 2**32]`, the
            context-extension factor (how many times longer than the
            training length the sequences may be; bounded so that the
            angles of positions below `2**24` stay finite). Defaults to
            `1.0`.
        rope_type: `"linear"`, `"dynamic"` or `"yarn"`, how `s` is applied
            (see `rotary_inverse_frequencies`). Defaults to `"linear"`.
        beta_fast: float, YaRN only. Defaults to `32.0`.
        beta_slow: float, YaRN only. Defaults to `1.0`.
        original_max_position_embeddings: int, YaRN only: the training
            length. Defaults to `4096`.
        truncate: bool, YaRN only: round the ramp to whole pairs. Defaults
            to `True`.
        sequence_axis: int, the sequence axis of the inputs. Defaults to `1`.
        feature_axis: int, the feature axis of the inputs (its size must be
            even). Defaults to `-1`.
        denominator_dim: int or `None`, the `d` of `max_wavelength ** (-2i /
            d)` when it is not the feature size. Defaults to `None`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor of rank >= 3 with a sequence and a feature
            axis, e.g. `(batch, length, dim)` or `(batch, length, heads,
            head_dim)`.
        start_index: int or scalar int tensor, the position of the first
            element (the cache index in cached decoding). Defaults to `0`.
        positions: optional tensor `(length,)` or `(batch, length)`, the
            positions themselves; `start_index` is then ignored. Defaults
            to `None`.

    Returns:
        A tensor of the shape of `inputs`, in the layer's compute dtype.

    Example:

    >>> rope = keras_attn.layers.RotaryEmbedding(max_wavelength=10000)
    >>> keys = keras.ops.ones((2, 6, 4, 8))  # (batch, length, heads, head_dim)
    >>> tuple(rope(keys).shape)
    (2, 6, 4, 8)
    >>> last = rope(keys[:, 5:], start_index=5)  # one step of cached decoding
    >>> bool(keras.ops.all(keras.ops.isclose(last, rope(keys)[:, 5:])))
    True

    References:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position
        Embedding", 2021, https://arxiv.org/abs/2104.09864.
        Chen et al., "Extending Context Window of Large Language Models via
        Positional Interpolation", 2023 (linear scaling).
        Peng et al., "YaRN: Efficient Context Window Extension of Large
        Language Models", 2023.
    """

    def __init__(
        self,
        max_wavelength=10000,
        scaling_factor=1.0,
        rope_type="linear",
        beta_fast=32.0,
        beta_slow=1.0,
        original_max_position_embeddings=4096,
        truncate=True,
        sequence_axis=1,
        feature_axis=-1,
        denominator_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_wavelength = check_max_wavelength(max_wavelength, "max_wavelength")
        self.scaling_factor = check_scaling_factor(scaling_factor, "scaling_factor")
        self.rope_type = check_choice(rope_type, "rope_type", ROPE_TYPES)
        self.beta_fast = check_positive_float(beta_fast, "beta_fast")
        self.beta_slow = check_positive_float(beta_slow, "beta_slow")
        self.original_max_position_embeddings = check_positive_int(
            original_max_position_embeddings, "original_max_position_embeddings"
        )
        self.truncate = check_bool(truncate, "truncate")
        self.sequence_axis = check_int(sequence_axis, "sequence_axis")
        self.feature_axis = check_int(feature_axis, "feature_axis")
        self.denominator_dim = check_positive_int(
            denominator_dim, "denominator_dim", allow_none=True
        )
        if self.sequence_axis == self.feature_axis:
            raise ValueError(
                "`sequence_axis` and `feature_axis` must differ. Received: "
                f"sequence_axis={sequence_axis}, feature_axis={feature_axis}"
            )

    def _axes(self, rank):
        """`(sequence_axis, feature_axis)`, non-negative, for `rank`."""
        axes = []
        for name, axis in (
            ("sequence_axis", self.sequence_axis),
            ("feature_axis", self.feature_axis),
        ):
            if not -rank <= axis < rank:
                raise ValueError(
                    f"`{name}` is out of range for inputs of rank {rank}. "
                    f"Received: {name}={axis}"
                )
            axes.append(axis % rank)
        if axes[0] == axes[1]:
            raise ValueError(
                f"`sequence_axis` and `feature_axis` name the same axis of "
                f"inputs of rank {rank}. Received: sequence_axis="
                f"{self.sequence_axis}, feature_axis={self.feature_axis}"
            )
        return tuple(axes)

    def build(self, input_shape):
        rank = len(input_shape)
        if rank < 3:
            raise ValueError(
                "RotaryEmbedding needs inputs of rank >= 3 (a batch, a sequence "
                f"and a feature axis). Received: inputs.shape={tuple(input_shape)}"
            )
        _, feature_axis = self._axes(rank)
        _check_rotary_dim(
            None, input_shape[feature_axis], f"inputs.shape[{feature_axis}]"
        )
        self.built = True

    def call(self, inputs, start_index=0, positions=None):
        rank = len(inputs.shape)
        sequence_axis, feature_axis = self._axes(rank)
        # Sequence on axis 1 and features last, as `_rotate` wants them.
        moved = (sequence_axis, feature_axis) != (1, rank - 1)
        if moved:
            inputs = ops.moveaxis(inputs, (sequence_axis, feature_axis), (1, -1))
        if positions is None:
            # int32, not the default int (int64 under floatx "float64").
            positions = ops.arange(ops.shape(inputs)[1], dtype="int32")
            positions = ops.cast(positions, "float32") + ops.cast(
                start_index, "float32"
            )
        rotary_dim = inputs.shape[-1]
        inverse_frequencies = rotary_inverse_frequencies(
            rotary_dim,
            self.max_wavelength,
            self.scaling_factor,
            self.rope_type,
            self.denominator_dim,
            self.beta_fast,
            self.beta_slow,
            self.original_max_position_embeddings,
            self.truncate,
        )
        attention_factor = rotary_attention_factor(self.rope_type, self.scaling_factor)
        outputs = _rotate(
            inputs,
            positions,
            inverse_frequencies,
            sequence_axis=1,
            attention_factor=attention_factor,
        )
        if moved:
            outputs = ops.moveaxis(outputs, (1, -1), (sequence_axis, feature_axis))
        return ops.cast(outputs, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_wavelength": self.max_wavelength,
                "scaling_factor": self.scaling_factor,
                "rope_type": self.rope_type,
                "beta_fast": self.beta_fast,
                "beta_slow": self.beta_slow,
                "original_max_position_embeddings": (
                    self.original_max_position_embeddings
                ),
                "truncate": self.truncate,
                "sequence_axis": self.sequence_axis,
                "feature_axis": self.feature_axis,
                "denominator_dim": self.denominator_dim,
            }
        )
        return config
