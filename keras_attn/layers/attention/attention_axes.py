"""Attention over several axes (`attention_axes`) as a change of layout.

`keras_attn.layers.MultiHeadAttention` attends along one sequence axis in
`keras_attn.layers.attention.attention_core`, whose inputs are `(batch, length, heads,
head_dim)`. Inputs of higher rank, such as images `(batch, height, width,
channels)` attended over `attention_axes=(1, 2)`, are brought to that layout:
the axes not attended over join the batch, the attended axes are flattened
into one length, and the result is put back afterwards. The kernel, its
masking rules and its fused fast path are then the same for every rank.

The attention scores and the masks use the layout of
`keras.layers.MultiHeadAttention`: scores `(batch, <other axes>, heads,
<query attended axes>, <key attended axes>)`, masks the same without the
heads axis (missing leading axes broadcast).
"""

import functools
import operator
import string

from keras import ops


def projection_equation(free_axes, contracted_axes, produced_axes):
    """The einsum equation of a projection, and its bias axes.

    Args:
        free_axes: int, axes carried through (batch and positions).
        contracted_axes: int, axes summed over (the features, or heads and
            head size for the output projection).
        produced_axes: int, axes the kernel produces.

    Returns:
        `(equation, bias_axes)`, e.g. `("abc,cde->abde", "de")` for `(2, 1,
        2)`, the query/key/value projection of a sequence.
    """
    letters = string.ascii_lowercase
    free = letters[:free_axes]
    contracted = letters[free_axes : free_axes + contracted_axes]
    produced = letters[
        free_axes + contracted_axes : free_axes + contracted_axes + produced_axes
    ]
    return f"{free}{contracted},{contracted}{produced}->{free}{produced}", produced


def normalize_attention_axes(attention_axes, rank):
    """Attention axes as sorted non-negative ints, for inputs of rank `rank`.

    Args:
        attention_axes: `None` (every axis but the batch and the features),
            or a tuple of ints; negative ones count from the end of the
            inputs (`-2` is the last axis before the features).
        rank: int, the rank of `query` (batch and features included).

    Returns:
        A tuple of ints in `[1, rank - 2]`.
    """
    if attention_axes is None:
        return tuple(range(1, rank - 1))
    axes = []
    for axis in attention_axes:
        position = axis + rank if axis < 0 else axis
        if not 1 <= position <= rank - 2:
            raise ValueError(
                "`attention_axes` must name axes of the inputs other than the "
                f"batch (0) and the features ({rank - 1}, or -1). Received: "
                f"attention_axes={tuple(attention_axes)} for inputs of rank {rank}"
            )
        axes.append(position)
    if len(set(axes)) != len(axes):
        raise ValueError(
            "`attention_axes` must not repeat an axis. Received: "
            f"attention_axes={tuple(attention_axes)}"
        )
    return tuple(sorted(axes))


def _broadcast(tensor, shape):
    """`ops.broadcast_to(tensor, shape)` by tiling the axes of size 1.

    TensorFlow broadcasts at most five axes at once ("Broadcast between
    [1,2,1,4,1,4] and [2,2,3,4,3,4] is not supported yet"); masks and
    biases over two attended axes have six.
    """
    rank = len(shape)
    tensor = ops.reshape(
        tensor, (1,) * (rank - len(tensor.shape)) + tuple(ops.shape(tensor))
    )
    multiples = [
        target if size == 1 else 1 for size, target in zip(tensor.shape, shape)
    ]
    if all(isinstance(m, int) and m == 1 for m in multiples):
        return tensor
    return ops.tile(tensor, multiples)


def _product(sizes):
    """The product of sizes that may be ints or scalar tensors (unknown sizes)."""
    return functools.reduce(operator.mul, sizes, 1)


class AxesLayout:
    """Moves projected tensors between their own layout and a sequence's.

    Args:
        rank: int, the rank of the inputs `(batch, ..., features)`.
        attention_axes: tuple of ints from `normalize_attention_axes`.
    """

    def __init__(self, rank, attention_axes):
        self.rank = rank
        self.attention_axes = tuple(attention_axes)
        self.batch_axes = tuple(
            axis for axis in range(rank - 1) if axis not in self.attention_axes
        )

    def to_sequence(self, projected):
        """`(batch, d_1, ..., d_n, heads, dim)` -> `(batch', length, heads, dim)`."""
        shape = ops.shape(projected)
        heads_axes = (self.rank - 1, self.rank)
        order = (*self.batch_axes, *self.attention_axes, *heads_axes)
        moved = ops.transpose(projected, order)
        batch = _product([shape[axis] for axis in self.batch_axes])
        length = _product([shape[axis] for axis in self.attention_axes])
        # (batch * <other axes>, <attended axes flattened>, heads, dim); sizes
        # spelt out, not `-1`, which cannot be inferred when a size is 0.
        return ops.reshape(moved, (batch, length, shape[-2], shape[-1]))

    def from_sequence(self, attended, query_projected):
        """Inverse of `to_sequence`, shaped like `query_projected` but for dim."""
        shape = ops.shape(query_projected)
        sizes = [shape[axis] for axis in (*self.batch_axes, *self.attention_axes)]
        # (batch, <other axes>, <attended axes>, heads, dim)
        unflat = ops.reshape(attended, (*sizes, shape[-2], ops.shape(attended)[-1]))
        order = (*self.batch_axes, *self.attention_axes, self.rank - 1, self.rank)
        inverse = [order.index(axis) for axis in range(self.rank + 1)]
        return ops.transpose(unflat, inverse)

    def scores_from_sequence(self, scores, query_projected, key_projected):
        """`(batch', heads, length_q, length_k)` -> Keras's scores layout."""
        query_shape = ops.shape(query_projected)
        key_shape = ops.shape(key_projected)
        # (batch, <other axes>, heads, <query attended axes>, <key attended axes>)
        return ops.reshape(
            scores,
            (
                *[query_shape[axis] for axis in self.batch_axes],
                query_shape[-2],
                *[query_shape[axis] for axis in self.attention_axes],
                *[key_shape[axis] for axis in self.attention_axes],
            ),
        )

    def scores_shape(self, query_shape, key_shape, num_heads):
        """The static shape of `scores_from_sequence`'s result."""
        return (
            *[query_shape[axis] for axis in self.batch_axes],
            num_heads,
            *[query_shape[axis] for axis in self.attention_axes],
            *[key_shape[axis] for axis in self.attention_axes],
        )

    def _sizes(self, projected, axes):
        shape = ops.shape(projected)
        return [shape[axis] for axis in axes]

    def _insert_missing_axes(self, mask, attended, full_rank, argument_name):
        """Reshapes `mask` to rank `full_rank`, inserting size-1 axes before
        its last `attended` axes (as `keras.layers.MultiHeadAttention`
        expands a mask), so a `(batch, T, S)` mask broadcasts over the
        other axes."""
        missing = full_rank - len(mask.shape)
        if missing < 0:
            raise ValueError(
                f"`{argument_name}` has rank {len(mask.shape)}, more than the "
                f"{full_rank} axes (batch, other axes, attended axes) it can "
                f"mask. Received: {argument_name}.shape={tuple(mask.shape)}"
            )
        mask_shape = ops.shape(mask)
        leading = len(mask.shape) - attended
        return ops.reshape(
            mask, (*mask_shape[:leading], *([1] * missing), *mask_shape[leading:])
        )

    def mask_to_sequence(self, mask, query, key, argument_name="attention_mask"):
        """A Keras-layout mask (no heads axis) -> `(batch', length_q, length_k)`.

        Missing axes are inserted before the attended ones (as
        `keras.layers.MultiHeadAttention` does), so a `(batch, T, S)` mask
        broadcasts over the other axes.
        """
        attended = 2 * len(self.attention_axes)
        mask = self._insert_missing_axes(
            mask, attended, len(self.batch_axes) + attended, argument_name
        )
        batch_sizes = self._sizes(query, self.batch_axes)
        query_sizes = self._sizes(query, self.attention_axes)
        key_sizes = self._sizes(key, self.attention_axes)
        mask = _broadcast(mask, (*batch_sizes, *query_sizes, *key_sizes))
        # (batch * <other axes>, length_q, length_k)
        return ops.reshape(
            mask, (_product(batch_sizes), _product(query_sizes), _product(key_sizes))
        )

    def padding_to_sequence(self, mask, projected, argument_name):
        """A padding mask `(batch, <axes>...)` -> `(batch', length)`.

        Missing axes are inserted before the attended ones, as for
        `mask_to_sequence`.
        """
        attended = len(self.attention_axes)
        mask = self._insert_missing_axes(
            mask, attended, len(self.batch_axes) + attended, argument_name
        )
        batch_sizes = self._sizes(projected, self.batch_axes)
        sizes = self._sizes(projected, self.attention_axes)
        mask = _broadcast(mask, (*batch_sizes, *sizes))
        # (batch * <other axes>, length)
        return ops.reshape(mask, (_product(batch_sizes), _product(sizes)))

    def mask_from_sequence(self, mask, query, key):
        """`(batch', length_q, length_k)` -> Keras's mask layout (no heads)."""
        # (batch, <other axes>, <query attended axes>, <key attended axes>)
        return ops.reshape(
            mask,
            (
                *self._sizes(query, self.batch_axes),
                *self._sizes(query, self.attention_axes),
                *self._sizes(key, self.attention_axes),
            ),
        )

    def scores_to_sequence(self, bias, query, key):
        """A bias in Keras's scores layout -> `(batch', heads, length_q, length_k)`.

        `bias` broadcasts (NumPy rules) to `(batch, <other axes>, heads,
        <query attended axes>, <key attended axes>)`.
        """
        batch_sizes = self._sizes(query, self.batch_axes)
        query_sizes = self._sizes(query, self.attention_axes)
        key_sizes = self._sizes(key, self.attention_axes)
        heads = ops.shape(query)[-2]
        bias = _broadcast(bias, (*batch_sizes, heads, *query_sizes, *key_sizes))
        # (batch * <other axes>, heads, length_q, length_k)
        return ops.reshape(
            bias,
            (
                _product(batch_sizes),
                heads,
                _product(query_sizes),
                _product(key_sizes),
            ),
        )
