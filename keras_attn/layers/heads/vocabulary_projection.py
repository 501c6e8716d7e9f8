"""The pre-softmax projection to vocabulary logits as one 2-D product."""

import keras

from keras_attn.layers.blocks.position_wise_dense import PositionwiseDense


@keras.saving.register_keras_serializable(package="keras_attn")
class VocabularyProjection(PositionwiseDense):
    """`keras.layers.Dense` over the last axis, computed as one 2-D product.

    The same layer, weights and numbers as `keras.layers.Dense(units)`
    (weights `kernel` `(hidden, units)` and `bias` `(units,)`, LoRA and
    quantization included), made for the large pre-softmax projection of a
    sequence model: inputs of rank 3 or more are flattened to
    `(batch * length, hidden)` before the product, which XLA compiles to a
    cheaper backward pass on the CPU (see `last_axis_matmul`). A quantized
    layer (`quantize("int8")`, `"int4"`, `"float8"`, or `model.quantize`)
    runs `Dense`'s own quantized call; a LoRA-enabled layer saves its
    factors unmerged (see `keras_attn.layers.PositionwiseDense`).

    Args:
        units: int, the number of outputs (the vocabulary size).
        **kwargs: the other arguments of `keras.layers.Dense`.

    Call arguments:
        inputs: float tensor `(..., hidden)`.

    Returns:
        float tensor `(..., units)`.

    Example:

    >>> project = keras_attn.layers.VocabularyProjection(100)
    >>> tuple(project(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 100)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.4.
    """

    _keeps_dense_weights = True
