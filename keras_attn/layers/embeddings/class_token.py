"""ViT's learned `[class]` token, prepended to a sequence of patches."""

import keras
from keras import ops

from keras_attn.validation import check_positive_int


# Registered as "keras_attn>ClassToken", the name it had in
# `keras_attn/models/vision_transformer.py`: `.keras` files and presets
# saved before the move still load.
@keras.saving.register_keras_serializable(package="keras_attn")
class ClassToken(keras.layers.Layer):
    """Prepends one learned vector (ViT's `[class]` token) to a sequence.

    Args:
        initializer: initializer of the token. Defaults to `"zeros"` (as in
            the ViT reference code).
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, length, dim)`.

    Returns:
        `(batch, length + 1, dim)`, the class token at position 0.

    Example:

    >>> layer = keras_attn.layers.ClassToken()
    >>> tuple(layer(keras.ops.ones((2, 4, 8))).shape)
    (2, 5, 8)

    References:
        Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for
        Image Recognition at Scale", ICLR 2021, equation 1.
    """

    def __init__(self, initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape):
        dim = check_positive_int(inputs_shape[-1], "inputs.shape[-1]")
        self.token = self.add_weight(
            name="token", shape=(1, 1, dim), initializer=self.initializer
        )
        self.built = True

    def call(self, inputs):
        batch_size, dim = ops.shape(inputs)[0], ops.shape(inputs)[-1]
        # (1, 1, dim) -> (batch, 1, dim)
        token = ops.broadcast_to(
            ops.cast(self.token, inputs.dtype), (batch_size, 1, dim)
        )
        return ops.concatenate([token, inputs], axis=1)  # (batch, length + 1, dim)

    def compute_output_shape(self, inputs_shape):
        length = None if inputs_shape[1] is None else inputs_shape[1] + 1
        return (inputs_shape[0], length, inputs_shape[2])

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config
