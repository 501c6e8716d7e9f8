"""`last_axis_matmul`: a dense product over the last axis as one 2-D product.

Not a layer: a private helper of the layers that project (`PositionwiseDense`,
`VocabularyProjection`, `TokenAndPositionEmbedding`; `AttentionProjection`
runs the same product with the reshapes its heads need).
"""

from keras import ops


def last_axis_matmul(inputs, kernel, bias=None):
    """`inputs @ kernel + bias` over the last axis, as one 2-D product.

    `keras.ops.matmul` (or an einsum) of a `(batch, length, hidden)` tensor
    with a `(hidden, units)` kernel gives the same numbers, but XLA compiles
    the 3-D product's backward pass with extra transposed copies of the
    activations and gradients (for an 8,000-word vocabulary, a copy of the
    `(batch, length, 8000)` gradient that cost more than the loss). With the
    leading axes flattened first, every product of the forward and backward
    pass is an ordinary 2-D matrix product: the training step of
    `bench/train_throughput.py` ran 1.09x (JAX) and 1.13x (TensorFlow)
    faster with the feed-forward and attention projections flattened
    (`docs/performance.md`, section 4).

    Args:
        inputs: float tensor `(..., hidden)`.
        kernel: float tensor `(hidden, units)`.
        bias: optional float tensor `(units,)`. Defaults to `None`.

    Returns:
        float tensor `(..., units)`.
    """
    leading_shape = ops.shape(inputs)[:-1]
    # (batch * length, hidden)
    flat = ops.reshape(inputs, (-1, ops.shape(inputs)[-1]))
    outputs = ops.matmul(flat, kernel)  # (batch * length, units)
    if bias is not None:
        outputs = ops.add(outputs, bias)
    # (batch, length, units)
    return ops.reshape(outputs, (*leading_shape, ops.shape(kernel)[-1]))
