"""Multi-head attention's input and output projections as 2-D products."""

import keras
from keras import ops

from keras_attn.layers._last_axis_matmul import flattens_positions
from keras_attn.layers.lora_saving import LoraSavingMixin

# (batch, length, dim) x (dim, heads, head_dim) -> (batch, length, heads, head_dim)
TO_HEADS = "abc,cde->abde"
# (batch, length, heads, head_dim) x (heads, head_dim, dim) -> (batch, length, dim)
FROM_HEADS = "abcd,cde->abe"


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionProjection(LoraSavingMixin, keras.layers.EinsumDense):
    """`keras.layers.EinsumDense` for attention heads, as one 2-D product.

    The same layer, weights and numbers as `keras.layers.EinsumDense` (and
    so as the projections of `keras.layers.MultiHeadAttention`): for the
    query/key/value equation `"abc,cde->abde"` and the output equation
    `"abcd,cde->abe"`, with a bias over the output axes or none, the kernel
    is viewed as one `(dim, heads * head_dim)` or `(heads * head_dim, dim)`
    matrix and the product runs on the inputs flattened to
    `(batch * length, features)`, as `last_axis_matmul` does, which XLA
    compiles to a cheaper backward pass; the flattening and the split into
    heads are one reshape each. On torch every equation runs as in
    `EinsumDense` (one `torch.einsum`, which flattens in C++: each
    `keras.ops` call costs host time in an eager step, and the 2-D product
    takes four more). Any other equation runs as in `EinsumDense`.

    Everything else is `EinsumDense`'s own: LoRA (`enable_lora`, read
    through the `kernel` property, so the 2-D product includes it),
    quantization (`quantize("int8")`, `"int4"`, `"float8"`, and so
    `model.quantize(...)`: a quantized layer runs `EinsumDense`'s quantized
    call, never this `call`) and dtype policies. One difference: a
    LoRA-enabled layer saves its LoRA factors as they are, not merged into
    the kernel, so a `.keras` file loads back into a LoRA-enabled layer
    exactly (see `keras_attn.layers.lora_saving`).

    Args:
        equation: str, the einsum equation (see `keras.layers.EinsumDense`).
        output_shape: int or tuple, the output shape without the batch axis.
        **kwargs: the other arguments of `keras.layers.EinsumDense`.

    Call arguments:
        inputs: float tensor `(batch, length, dim)` for `"abc,cde->abde"`, or
            `(batch, length, heads, head_dim)` for `"abcd,cde->abe"`.

    Returns:
        `(batch, length, heads, head_dim)` or `(batch, length, dim)`.

    Example:

    >>> query = keras_attn.layers.AttentionProjection(
    ...     "abc,cde->abde", output_shape=(None, 4, 8), bias_axes="de")
    >>> tuple(query(keras.ops.ones((2, 5, 16))).shape)
    (2, 5, 4, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.2.2.
    """

    def __init__(self, equation, output_shape, **kwargs):
        super().__init__(equation, output_shape, **kwargs)

    def call(self, inputs, training=None):
        if not self._flattens():
            return super().call(inputs, training=training)
        kernel = self.kernel
        if self.equation == TO_HEADS:
            dim = kernel.shape[0]
            # (batch * length, dim) x (dim, heads * head_dim)
            flat = ops.reshape(inputs, (-1, dim))
            outputs = ops.matmul(flat, ops.reshape(kernel, (dim, -1)))
            if self.bias is not None:
                outputs = ops.add(outputs, ops.reshape(self.bias, (-1,)))
            # (batch, length, heads, head_dim)
            outputs = ops.reshape(outputs, (*ops.shape(inputs)[:-1], *kernel.shape[1:]))
        else:
            # (heads * head_dim, dim)
            matrix = ops.reshape(kernel, (-1, kernel.shape[-1]))
            # (batch * length, heads * head_dim)
            flat = ops.reshape(inputs, (-1, matrix.shape[0]))
            outputs = ops.matmul(flat, matrix)  # (batch * length, dim)
            if self.bias is not None:
                outputs = ops.add(outputs, self.bias)  # bias: (dim,)
            # (batch, length, dim)
            outputs = ops.reshape(outputs, (*ops.shape(inputs)[:-2], matrix.shape[1]))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def quantize(self, mode=None, type_check=True, config=None):
        # `EinsumDense.quantize` refuses subclasses (they might replace the
        # weights it quantizes); this one keeps `EinsumDense`'s weights, and
        # a quantized layer runs `EinsumDense`'s quantized call.
        if type_check and type(self) is not AttentionProjection:
            raise NotImplementedError(
                f"Layer {type(self).__name__} does not implement `quantize`: "
                "a subclass of `AttentionProjection` must state that its "
                f"weights are those of `EinsumDense`. Received: mode={mode}"
            )
        super().quantize(mode, type_check=False, config=config)

    def _flattens(self):
        """Whether `call` runs as one 2-D product (else as `EinsumDense`).

        Not on torch: there `EinsumDense`'s `ops.einsum` is one call into
        `torch.einsum`, which flattens in C++, while the 2-D product costs
        four more `keras.ops` calls (reshapes and a shape), each paying
        Keras's host-side dispatch in an eager step.
        """
        if not flattens_positions():
            return False
        output_axes = {TO_HEADS: 2, FROM_HEADS: 1}.get(self.equation)
        if output_axes is None:
            return False
        bias_shape = None if self.bias is None else tuple(self.bias.shape)
        return bias_shape in (None, tuple(self.kernel.shape[-output_axes:]))
