"""`keras.layers.Dense` at every position, as one 2-D product."""

import keras

from keras_attn.layers._last_axis_matmul import last_axis_matmul
from keras_attn.layers.lora_saving import LoraSavingMixin
from keras_attn.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionwiseDense(LoraSavingMixin, keras.layers.Dense):
    """`keras.layers.Dense` over the last axis, computed as one 2-D product.

    The same layer, weights and numbers as `keras.layers.Dense(units)`
    (weights `kernel` `(hidden, units)` and `bias` `(units,)`): inputs of
    rank 3 or more are flattened to `(batch * length, hidden)` before the
    product, which XLA compiles to a cheaper backward pass on the CPU (see
    `last_axis_matmul`). Everything else is `Dense`'s own: LoRA
    (`enable_lora`, read through the `kernel` property), quantization
    (`quantize("int8")`, `"int4"`, `"float8"`, and so `model.quantize`: a
    quantized layer runs `Dense`'s quantized call, never this `call`) and
    dtype policies. One difference: a LoRA-enabled layer saves its LoRA
    factors as they are, not merged into the kernel, so a `.keras` file
    loads back into a LoRA-enabled layer exactly.

    Args:
        units: int, the number of outputs.
        **kwargs: the other arguments of `keras.layers.Dense`.

    Call arguments:
        inputs: float tensor `(..., hidden)`.

    Returns:
        float tensor `(..., units)`.

    Example:

    >>> dense = keras_attn.layers.PositionwiseDense(16)
    >>> tuple(dense(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 16)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.3.
    """

    _keeps_dense_weights = True

    def __init__(self, units, **kwargs):
        # `Dense` reads `True` as 1 and truncates `2.5` to 2.
        super().__init__(check_positive_int(units, "units"), **kwargs)

    def call(self, inputs, training=None):
        if len(inputs.shape) <= 2:
            return super().call(inputs, training=training)
        outputs = last_axis_matmul(inputs, self.kernel, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def quantize(self, mode=None, type_check=True, config=None):
        # `Dense.quantize` refuses subclasses (they might replace the weights
        # it quantizes); this one keeps `Dense`'s weights, and a quantized
        # layer runs `Dense`'s quantized call.
        # A subclass says it keeps them with its own `_keeps_dense_weights`.
        if type_check and not type(self).__dict__.get("_keeps_dense_weights"):
            raise NotImplementedError(
                f"Layer {type(self).__name__} does not implement `quantize`: "
                "a subclass of `PositionwiseDense` must state that it keeps "
                "`Dense`'s weights (`_keeps_dense_weights = True` in its "
                f"class body). Received: mode={mode}"
            )
        super().quantize(mode, type_check=False, config=config)
