"""Root mean square normalization (Zhang and Sennrich, 2019)."""

import keras
from keras import ops

from keras_attn.validation import check_epsilon, is_integer


def _check_axis(axis):
    """`axis` as an int or a list of ints, as given (not yet resolved)."""
    if is_integer(axis):
        return int(axis)
    if isinstance(axis, list | tuple) and axis and all(is_integer(a) for a in axis):
        return [int(a) for a in axis]
    raise TypeError(
        "`axis` must be an integer or a non-empty list of integers. "
        f"Received: axis={axis!r}"
    )


@keras.saving.register_keras_serializable(package="keras_attn")
class RMSNormalization(keras.layers.Layer):
    """Divides the inputs by their root mean square, then scales them.

    `outputs = inputs / sqrt(mean(inputs ** 2) + epsilon) * scale`, the mean
    taken over `axis`, with one trainable `scale` per feature of `axis`
    (initialized to ones) and no centering or offset. It takes the
    arguments of `keras.layers.RMSNormalization` and gives its values; in
    addition it

    - computes in float32 whatever the dtype policy (under
      `"mixed_float16"` the sum of squares of activations of a few
      hundred would overflow float16), reading `scale` in float32 too, and
      returns the compute dtype;
    - supports any `axis`, the trailing ones or not (Keras's layer
      broadcasts `scale` against the last axes only);
    - passes a Keras mask through.

    Args:
        axis: int or list of ints, the axis or axes to normalize over.
            Defaults to `-1`.
        epsilon: float added to the mean square, a normal float32 number
            (at least `2**-126`: a smaller one, zero included, is flushed
            to zero on JAX and TensorFlow, and an all-zero input then
            normalizes to NaN). Defaults to `1e-6`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor of any rank; the sizes of `axis` must be
            known when the layer is built.

    Returns:
        A tensor of the shape of `inputs`, in the layer's compute dtype.

    Example:

    >>> norm = keras_attn.layers.RMSNormalization()
    >>> outputs = norm(keras.ops.full((2, 3, 4), 5.0))
    >>> tuple(outputs.shape), tuple(norm.scale.shape)
    ((2, 3, 4), (4,))
    >>> round(float(keras.ops.convert_to_numpy(outputs)[0, 0, 0]), 4)
    1.0

    References:
        Zhang and Sennrich, "Root Mean Square Layer Normalization", 2019,
        https://arxiv.org/abs/1910.07467.
    """

    def __init__(self, axis=-1, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.axis = _check_axis(axis)
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self.supports_masking = True

    def _resolved_axes(self, rank):
        """`self.axis` as sorted non-negative axes of a rank-`rank` input."""
        axes = [self.axis] if isinstance(self.axis, int) else self.axis
        for axis in axes:
            if not -rank <= axis < rank:
                raise ValueError(
                    f"`axis` {axis} is out of range for inputs of rank {rank}. "
                    f"Received: axis={self.axis}"
                )
        resolved = sorted(axis % rank for axis in axes)
        if len(set(resolved)) != len(resolved):
            raise ValueError(
                f"`axis` names the same axis twice for inputs of rank {rank}. "
                f"Received: axis={self.axis}"
            )
        return resolved

    def build(self, input_shape):
        axes = self._resolved_axes(len(input_shape))
        scale_shape = tuple(input_shape[axis] for axis in axes)
        if any(size is None for size in scale_shape):
            raise ValueError(
                "RMSNormalization needs the sizes of the normalized axes when "
                f"it is built. Received: inputs.shape={tuple(input_shape)}, "
                f"axis={self.axis}"
            )
        # `autocast=False`: the call reads `scale` in float32 under a mixed
        # policy instead of the compute dtype.
        self.scale = self.add_weight(
            name="scale", shape=scale_shape, initializer="ones", autocast=False
        )
        self.built = True

    def call(self, inputs):
        # Resolved for this call: a layer built for rank 3 may see rank 4.
        rank = len(inputs.shape)
        axes = self._resolved_axes(rank)
        scale = ops.cast(self.scale, "float32")
        if axes == list(range(rank - len(axes), rank)):
            # Keras's op computes in float32 (at least) and casts back; on
            # torch it is one fused kernel. Its torch path is only right for
            # trailing axes, hence the other branch.
            outputs = ops.rms_normalization(
                inputs, scale=scale, axis=axes, epsilon=self.epsilon
            )
        else:
            # `scale` shaped to broadcast: its sizes on `axes`, 1 elsewhere.
            sizes = dict(zip(axes, self.scale.shape))
            scale = ops.reshape(scale, [sizes.get(axis, 1) for axis in range(rank)])
            x = ops.cast(inputs, "float32")
            mean_square = ops.mean(ops.square(x), axis=axes, keepdims=True)
            outputs = x * ops.rsqrt(mean_square + self.epsilon) * scale
        return ops.cast(outputs, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        self._resolved_axes(len(input_shape))
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"axis": self.axis, "epsilon": self.epsilon})
        return config
