"""Fixed sinusoidal position encoding, section 3.5 of the paper."""

import keras
from keras import ops

from keras_attn.validation import check_max_wavelength, check_positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """The paper's fixed position encoding (no weights).

    `PE(pos, 2i) = sin(pos / max_wavelength^(2i / d))` and
    `PE(pos, 2i + 1) = cos(pos / max_wavelength^(2i / d))`, sine and cosine
    interleaved along the feature axis exactly as written in the paper. The
    layer returns the encoding (broadcast to the input's shape); add it to
    the embeddings yourself, or use
    `keras_attn.layers.TokenAndPositionEmbedding`.

    Args:
        max_wavelength: float in `[1, 2**60]`, the base of the geometric
            progression of wavelengths (bounded so that every inverse
            wavelength is a normal float32 number,
            `keras_attn.validation.check_max_wavelength`). Defaults to
            `10000`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, sequence_length, dim)`; only its shape is
            used. `dim` must be even.
        start_index: int or scalar tensor, the position of the first
            element (for cached decoding one token at a time). Defaults to
            `0`.

    Returns:
        A tensor of the shape and dtype of `inputs`.

    Example:

    >>> encoding = keras_attn.layers.SinusoidalPositionEncoding()
    >>> tuple(encoding(keras.ops.zeros((2, 10, 16))).shape)
    (2, 10, 16)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.5.
    """

    def __init__(self, max_wavelength=10000, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = check_max_wavelength(max_wavelength, "max_wavelength")
        self.supports_masking = True

    def build(self, inputs_shape):
        dim = inputs_shape[-1]
        check_positive_int(dim, "inputs.shape[-1]")
        if dim % 2:
            raise ValueError(
                "SinusoidalPositionEncoding needs an even feature dimension "
                f"(sine and cosine pairs). Received: inputs.shape[-1]={dim}"
            )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        sequence_length, dim = shape[-2], shape[-1]
        # int32, not Keras's default int (int64 under floatx "float64", which
        # TensorFlow will not add to an int32 `start_index`).
        positions = ops.arange(sequence_length, dtype="int32") + start_index
        positions = ops.cast(positions, "float32")
        # 2i for every feature index (pairs share a frequency).
        pair_index = ops.cast(ops.arange(dim) // 2 * 2, "float32")
        inverse_wavelengths = ops.power(
            self.max_wavelength, -pair_index / ops.cast(dim, "float32")
        )
        # (sequence_length, dim)
        angles = positions[:, None] * inverse_wavelengths[None, :]
        is_even = ops.equal(ops.arange(dim) % 2, 0)
        encoding = ops.where(is_even[None, :], ops.sin(angles), ops.cos(angles))
        return ops.broadcast_to(ops.cast(encoding, self.compute_dtype), shape)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config["max_wavelength"] = self.max_wavelength
        return config
