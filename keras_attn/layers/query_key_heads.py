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

from keras_attn.layers.attention_arguments import check_head_dim
from keras_attn.layers.rms_normalization import RMSNormalization
from keras_attn.layers.rotary_embedding import apply_rotary
from keras_attn.validation import check_divisible, check_positive_float


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
            max_wavelength: `None` (no rotation) or a positive float.
            scaling_factor: positive float, linear position interpolation.
            rotary_dim: `None` (all of `key_dim`) or an even int
                `<= key_dim`, the number of features rotated.
            key_dim: int, the size of each query and key head.

        Raises:
            ValueError: for an invalid argument, named with its value.
        """
        max_wavelength = check_positive_float(
            max_wavelength, "rotary_max_wavelength", allow_none=True
        )
        scaling_factor = check_positive_float(scaling_factor, "rotary_scaling_factor")
        rotary_dim = check_head_dim(rotary_dim, "rotary_dim", allow_none=True)
        if rotary_dim is not None and (rotary_dim % 2 or rotary_dim > key_dim):
            raise ValueError(
                "`rotary_dim` must be an even number of features, at most "
                f"`key_dim` ({key_dim}): rotary positions turn pairs of "
                f"features. Received: rotary_dim={rotary_dim}"
            )
        if max_wavelength is None:
            return None
        if rotary_dim is None and key_dim % 2:
            raise ValueError(
                "Rotary positions turn pairs of features: with an odd "
                "`key_dim`, set an even `rotary_dim` below it. Received: "
                f"key_dim={key_dim}, rotary_dim=None"
            )
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
