"""Layer normalization with a written-out gradient (Ba et al., 2016)."""

import keras
from keras import ops

from keras_attn.validation import check_epsilon


def layer_norm(inputs, gamma, beta, epsilon=1e-6):
    """`(x - mean) / sqrt(variance + epsilon) * gamma + beta` over the last axis.

    The same values as `keras.ops.layer_normalization`, computed in float32
    (cast back to the input's dtype). The gradient is written out rather
    than derived by automatic differentiation: with `x_hat` the normalized
    input, `inv = 1 / sqrt(variance + epsilon)` and `g = upstream * gamma`,

    ```
    d_inputs = inv * (g - mean(g) - x_hat * mean(g * x_hat))
    d_gamma = sum(upstream * x_hat)    d_beta = sum(upstream)
    ```

    so that the backward pass is two row reductions and one element-wise
    pass over the activations, recomputing `x_hat` from the input instead
    of keeping it. XLA's cost analysis (JAX, CPU; `bench/cost_analysis.py`,
    docs/performance.md): `LayerNorm(x + Dropout(y))` forward and backward
    at 64 x 32 x 128 moves 25.6 MB instead of 35.1 MB; the quick
    translation model's training step 2,954 MB instead of 3,081 MB.

    Args:
        inputs: float tensor `(..., features)`.
        gamma: float tensor `(features,)`, the scale.
        beta: float tensor `(features,)`, the offset.
        epsilon: float added to the variance. Defaults to `1e-6`.

    Returns:
        A tensor of the shape and dtype of `inputs`.
    """
    inputs = ops.convert_to_tensor(inputs)
    gamma, beta = ops.convert_to_tensor(gamma), ops.convert_to_tensor(beta)
    dtype = inputs.dtype

    @ops.custom_gradient
    def normalize(x, gamma, beta):
        x = ops.cast(x, "float32")
        gamma = ops.cast(gamma, "float32")
        mean = ops.mean(x, axis=-1, keepdims=True)  # (..., 1)
        variance = ops.mean(ops.square(x - mean), axis=-1, keepdims=True)
        inverse_std = ops.rsqrt(variance + epsilon)  # (..., 1)
        outputs = (x - mean) * inverse_std * gamma + ops.cast(beta, "float32")

        def grad(*args, upstream=None):
            if upstream is None:  # TensorFlow passes it by position.
                (upstream,) = args
            upstream = ops.cast(upstream, "float32")
            normalized = (x - mean) * inverse_std
            scaled = upstream * gamma
            d_inputs = inverse_std * (
                scaled
                - ops.mean(scaled, axis=-1, keepdims=True)
                - normalized * ops.mean(scaled * normalized, axis=-1, keepdims=True)
            )
            leading_axes = tuple(range(len(upstream.shape) - 1))
            d_gamma = ops.sum(upstream * normalized, axis=leading_axes)
            d_beta = ops.sum(upstream, axis=leading_axes)
            return ops.cast(d_inputs, dtype), d_gamma, d_beta

        return ops.cast(outputs, dtype), grad

    return normalize(inputs, gamma, beta)


@keras.saving.register_keras_serializable(package="keras_attn")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, cheaper to train.

    The same layer (its weights `gamma` and `beta`, their names, its
    config, its outputs) with the written-out gradient of `layer_norm`:
    fewer passes over the activations in the backward pass. The
    Transformer blocks use it for their sub-layer norms; their weights are
    saved under the blocks' attribute names, so a checkpoint made with
    `keras.layers.LayerNormalization` there loads unchanged. The models'
    own norms (`output_norm`, `embedding_norm`) stay Keras's layer: a
    functional model saves its layers' weights under names derived from
    their classes, and the shipped presets were saved with Keras's. Arguments
    beyond the plain case (another `axis`, `rms_scaling`, `scale` off)
    fall back to Keras's own computation (`center=False`, no `beta`, keeps
    the written-out gradient with a zero offset), and so does the
    torch backend: eager torch fuses nothing, so the written-out gradient
    there is many element-wise operations per norm where Keras's
    computation is torch's own `layer_norm` kernel and its gradient (the
    same values within float32 rounding; measured in `docs/performance.md`). It takes the arguments of
    `keras.layers.LayerNormalization`, with one more check: `epsilon` must
    be a normal float32 number (at least `2**-126`; a smaller one, zero
    included, is flushed to zero on JAX and TensorFlow, and a row of equal
    values would then normalize to NaN).

    Example:

    >>> norm = keras_attn.layers.LayerNorm(epsilon=1e-6)
    >>> tuple(norm(keras.ops.ones((2, 3, 4))).shape)
    (2, 3, 4)
    """

    def __init__(self, axis=-1, epsilon=1e-3, **kwargs):
        super().__init__(axis=axis, epsilon=check_epsilon(epsilon, "epsilon"), **kwargs)

    def call(self, inputs):
        last_axis = (-1, len(inputs.shape) - 1)
        plain = (
            len(self.axis) == 1
            and self.axis[0] in last_axis
            and self.scale
            and not self.rms_scaling
        )
        # On torch Keras's computation is one fused kernel (see the class
        # docstring); the written-out gradient pays off only where XLA fuses.
        if not plain or keras.backend.backend() == "torch":
            return super().call(inputs)
        # Read as float32 tensors (the cast reads the variable): TensorFlow's
        # custom gradient would otherwise ask for the variables' gradients
        # separately (`ops.convert_to_tensor` keeps a variable as it is).
        gamma = ops.cast(self.gamma, "float32")
        # `center=False` (the blocks' `use_bias=False`): no `beta`, a zero offset.
        beta = ops.cast(self.beta, "float32") if self.center else ops.zeros_like(gamma)
        outputs = layer_norm(inputs, gamma, beta, epsilon=self.epsilon)
        return ops.cast(outputs, self.compute_dtype)
