"""The padding mask of a batch of token ids, as a named layer."""

import keras
from keras import ops

from keras_attn.validation import check_non_negative_int


@keras.saving.register_keras_serializable(package="keras_attn")
class PaddingMask(keras.layers.Layer):
    """`True` where a token is not padding: `token_ids != pad_id`.

    The models compute their padding masks with this layer, so that the
    mask has a name of its own in `model.summary()` (`encoder_padding_mask`,
    `decoder_padding_mask`, `padding_mask`) instead of an op's
    auto-generated one. It holds no weights.

    Args:
        pad_id: int, the padding token id. Defaults to `0`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, ...).

    Call arguments:
        token_ids: int tensor `(batch, length)`.

    Returns:
        A boolean tensor `(batch, length)`, `True` at real tokens.

    Example:

    >>> mask = keras_attn.layers.PaddingMask(pad_id=0)
    >>> keras.ops.convert_to_numpy(mask(keras.ops.array([[5, 3, 0]]))).tolist()
    [[True, True, False]]
    """

    def __init__(self, pad_id=0, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = check_non_negative_int(pad_id, "pad_id")
        self.built = True

    def call(self, token_ids):
        dtype = keras.backend.standardize_dtype(token_ids.dtype)
        if "int" not in dtype:
            raise TypeError(
                "`token_ids` must be an integer tensor of token ids. "
                f"Received: token_ids.dtype={dtype}"
            )
        return ops.not_equal(token_ids, self.pad_id)  # (batch, length)

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(token_ids.shape, dtype="bool")

    def get_config(self):
        config = super().get_config()
        config["pad_id"] = self.pad_id
        return config
