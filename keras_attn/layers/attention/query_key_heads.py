"""What `MultiHeadAttention` does to projected query and key heads.

After the projections, and before the attention itself:

- grouped-query attention gives the keys and values `num_key_value_heads`
  heads, fewer than the queries' (`check_num_key_value_heads`);
- QK-norm divides each query and key head by its root mean square, with
  one learned scale per feature shared by the heads (`head_norm`; Dehghani
  et al., 2023; OLMo 2, Gemma 3, Qwen 3);
- rotary positions (RoPE) rotate the normalized queries and keys by their
  positions (`HeadRotation`), `start_index + arange(length)`, so that a
  cached decoder rotates each new key once, at its own position.
"""

from typing import NamedTuple

from keras import ops

from keras_attn.layers.attention.attention_arguments import check_head_dim
from keras_attn.layers.normalization.rms_normalization import RMSNormalization
from keras_attn.layers.positions.rotary_embedding import apply_rotary
from keras_attn.validation import (
    check_divisible,
    check_max_wavelength,
    check_scaling_factor,
)


def check_num_key_value_heads(num_key_value_heads, num_heads, heads_name="num_heads"):
    """The number of key/value heads: `num_heads` for `None`, else a divisor of it.

    Args:
        num_key_value_heads: `None` or a positive int dividing `num_heads`
            (1: multi-query attention).
        num_heads: int, the number of query heads.
        heads_name: str, the name of `num_heads` in messages. Defaults to
            `"num_heads"`.

    Returns:
        An int.
    """
    if num_key_value_heads is None:
        return num_heads
    num_key_value_heads = check_head_dim(
        num_key_value_heads, "num_key_value_heads", allow_none=True
    )
    check_divisible(num_heads, num_key_value_heads, heads_name, "num_key_value_heads")
    return num_key_value_heads


def head_norm(epsilon, dtype, name):
    """QK-norm's `RMSNormalization` over each head's features."""
    return RMSNormalization(axis=-1, epsilon=epsilon, dtype=dtype, name=name)


def check_rotary_arguments(max_wavelength, scaling_factor, rotary_dim, key_dim=None):
    """The rotary arguments of attention, checked: the one check they go through.

    `MultiHeadAttention` (through `HeadRotation.from_arguments`) and
    `AttentionSettings` (which the blocks and models build) call it, so an
    argument is refused by the same rule, under the same name, at every
    level.

    Args:
        max_wavelength: `None` (no rotation) or a float in `[1, 2**60]`
            (`keras_attn.validation.check_max_wavelength`).
        scaling_factor: float in `[2**-32, 2**32]`, linear position
            interpolation (`keras_attn.validation.check_scaling_factor`).
        rotary_dim: `None` (all of `key_dim`) or an even int
            `<= key_dim`, the number of features rotated.
        key_dim: int, the size of each query and key head, or `None`
            where it is not known yet (a block before it is built).
            Defaults to `None`.

    Returns:
        `(max_wavelength, scaling_factor, rotary_dim)`, as `float`,
        `float` and `int` (or `None`).

    Raises:
        ValueError: for an invalid argument, named with its value; for
            `rotary_dim` or a `scaling_factor` other than 1 without
            `max_wavelength`, which would be ignored.
    """
    max_wavelength = check_max_wavelength(
        max_wavelength, "rotary_max_wavelength", allow_none=True
    )
    scaling_factor = check_scaling_factor(scaling_factor, "rotary_scaling_factor")
    rotary_dim = check_head_dim(rotary_dim, "rotary_dim", allow_none=True)
    if rotary_dim is not None and (
        rotary_dim % 2 or (key_dim is not None and rotary_dim > key_dim)
    ):
        at_most = "" if key_dim is None else f", at most `key_dim` ({key_dim})"
        raise ValueError(
            f"`rotary_dim` must be an even number of features{at_most}: rotary "
            f"positions turn pairs of features. Received: rotary_dim={rotary_dim}"
        )
    if max_wavelength is None:
        ignored = []
        if rotary_dim is not None:
            ignored.append(f"rotary_dim={rotary_dim}")
        if scaling_factor != 1.0:
            ignored.append(f"rotary_scaling_factor={scaling_factor}")
        if ignored:
            names = " and ".join(f"`{item.split('=')[0]}`" for item in ignored)
            verb = "shape" if len(ignored) > 1 else "shapes"
            raise ValueError(
                f"{names} {verb} rotary positions, which `rotary_max_wavelength` "
                "turns on: set `rotary_max_wavelength` (e.g. 10000.0), or leave "
                f"{names} at the default. Received: {', '.join(ignored)}, "
                "rotary_max_wavelength=None"
            )
        return max_wavelength, scaling_factor, rotary_dim
    if rotary_dim is None and key_dim is not None and key_dim % 2:
        raise ValueError(
            "Rotary positions turn pairs of features: with an odd "
            "`key_dim`, set an even `rotary_dim` below it. Received: "
            f"key_dim={key_dim}, rotary_dim=None"
        )
    return max_wavelength, scaling_factor, rotary_dim


class HeadRotation(NamedTuple):
    """Rotary positions for `(batch, length, heads, head_dim)` heads.

    Build it with `HeadRotation.from_arguments`, which checks the
    arguments; call it as `rotation(heads, start_index)`.
    """

    max_wavelength: float
    scaling_factor: float
    rotary_dim: int | None

    @classmethod
    def from_arguments(cls, max_wavelength, scaling_factor, rotary_dim, key_dim):
        """A `HeadRotation`, or `None` when `max_wavelength` is `None`.

        Args:
            max_wavelength, scaling_factor, rotary_dim, key_dim: as
                `check_rotary_arguments`, which checks them.

        Raises:
            ValueError: for an invalid argument, named with its value.
        """
        max_wavelength, scaling_factor, rotary_dim = check_rotary_arguments(
            max_wavelength, scaling_factor, rotary_dim, key_dim
        )
        if max_wavelength is None:
            return None
        return cls(max_wavelength, scaling_factor, rotary_dim)

    def __call__(self, heads, start_index=0):
        """Rotates `heads` `(batch, length, heads, head_dim)` from `start_index`."""
        # int32 positions, not the default int (int64 under floatx "float64").
        positions = ops.arange(ops.shape(heads)[1], dtype="int32")
        positions = ops.cast(positions, "float32") + ops.cast(start_index, "float32")
        return apply_rotary(
            heads,
            positions,
            max_wavelength=self.max_wavelength,
            scaling_factor=self.scaling_factor,
            rotary_dim=self.rotary_dim,
        )


def check_rotation_rank(rotation, rank):
    """Refuses rotary positions for inputs that are not sequences."""
    if rotation is not None and rank != 3:
        raise ValueError(
            "Rotary positions need sequence inputs (batch, length, features): "
            "`rotary_max_wavelength` cannot be used with inputs of rank "
            f"{rank} (`attention_axes`). Received: "
            f"rotary_max_wavelength={rotation.max_wavelength}"
        )


def transform_heads(heads, norm=None, rotation=None, start_index=0):
    """Projected query or key heads, normalized, then rotated.

    Args:
        heads: `(batch, length, heads, head_dim)` (or more axes before the
            heads, without `rotation`).
        norm: optional `RMSNormalization` (QK-norm). Defaults to `None`.
        rotation: optional `HeadRotation`. Defaults to `None`.
        start_index: int or scalar int tensor, the position of the first
            element. Defaults to `0`.

    Returns:
        A tensor of the shape of `heads`.
    """
    if norm is not None:
        heads = norm(heads)
    if rotation is not None:
        heads = rotation(heads, start_index)
    return heads
