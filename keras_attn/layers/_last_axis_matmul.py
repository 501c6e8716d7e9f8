"""`last_axis_matmul`: a dense product over the last axis as one 2-D product.

Not a layer: a private helper of the layers that project (`PositionwiseDense`,
`VocabularyProjection`, `TokenAndPositionEmbedding`; `AttentionProjection`
runs the same product with the reshapes its heads need).
"""

import keras
from keras import ops


def flattens_positions():
    """Whether position-wise products flatten the leading axes first.

    On JAX and TensorFlow they do: XLA compiles a 2-D product's backward
    pass without the transposed copies a 3-D product gets (see
    `last_axis_matmul`). On torch they do not: `torch.matmul` and
    `torch.einsum` fold the leading axes in C++, while each flattening
    reshape is a `keras.ops` call whose host-side dispatch an eager step
    pays for nothing (`docs/performance.md`, section 12).
    """
    return keras.backend.backend() != "torch"


def last_axis_matmul(inputs, kernel, bias=None):
    """`inputs @ kernel + bias` over the last axis, as one 2-D product.

    `keras.ops.matmul` (or an einsum) of a `(batch, length, hidden)` tensor
    with a `(hidden, units)` kernel gives the same numbers, but XLA compiles
    the 3-D product's backward pass with extra transposed copies of the
    activations and gradients (for an 8,000-word vocabulary, a copy of the
    `(batch, length, 8000)` gradient that cost more than the loss). With the
    leading axes flattened first, every product of the forward and backward
    pass is an ordinary 2-D matrix product (measured in
    `docs/performance.md`, section 4).

    On torch (see `flattens_positions`) the product runs on `inputs` as
    they are: the same numbers, two `keras.ops` calls fewer.

    Args:
        inputs: float tensor `(..., hidden)`.
        kernel: float tensor `(hidden, units)`.
        bias: optional float tensor `(units,)`. Defaults to `None`.

    Returns:
        float tensor `(..., units)`.
    """
    if not flattens_positions():
        outputs = ops.matmul(inputs, kernel)  # (..., units)
        return outputs if bias is None else ops.add(outputs, bias)
    leading_shape = ops.shape(inputs)[:-1]
    # (batch * length, hidden)
    flat = ops.reshape(inputs, (-1, ops.shape(inputs)[-1]))
    outputs = ops.matmul(flat, kernel)  # (batch * length, units)
    if bias is not None:
        outputs = ops.add(outputs, bias)
    # (batch, length, units)
    return ops.reshape(outputs, (*leading_shape, ops.shape(kernel)[-1]))
