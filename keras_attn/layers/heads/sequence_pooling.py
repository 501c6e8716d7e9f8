"""One vector per sequence: the first position's features or a masked mean."""

import keras
from keras import ops

from keras_attn.validation import check_choice

POOLINGS = ("cls", "mean")


@keras.saving.register_keras_serializable(package="keras_attn")
class SequencePooling(keras.layers.Layer):
    """Pools `(batch, length, dim)` features into `(batch, dim)`.

    `pooling="cls"` takes position 0, where the caller put a classification
    token (BERT's `[CLS]`, ViT's `[class]` token: equation 4 of the ViT
    paper); `pooling="mean"` averages the positions that are not padding
    (all positions without a `padding_mask`). A sequence that is all
    padding pools to zeros. The layer holds no weights.

    Args:
        pooling: `"cls"` or `"mean"`. Defaults to `"cls"`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, ...).

    Call arguments:
        sequence: float tensor `(batch, length, dim)`.
        padding_mask: optional boolean tensor `(batch, length)`, `True` at
            real tokens; used by `"mean"`. Defaults to `None`.

    Returns:
        A tensor `(batch, dim)`.

    Example:

    >>> pool = keras_attn.layers.SequencePooling("mean")
    >>> x = keras.ops.ones((2, 5, 8))
    >>> tuple(pool(x, padding_mask=keras.ops.ones((2, 5), "bool")).shape)
    (2, 8)
    """

    def __init__(self, pooling="cls", **kwargs):
        super().__init__(**kwargs)
        self.pooling = check_choice(pooling, "pooling", POOLINGS)
        self.built = True

    def call(self, sequence, padding_mask=None):
        if self.pooling == "cls":
            if sequence.shape[1] == 0:
                raise ValueError(
                    '`pooling="cls"` reads the first position, and `sequence` '
                    f"has none. Received: sequence.shape={tuple(sequence.shape)}"
                )
            return sequence[:, 0, :]
        if padding_mask is None:
            # The mean of an empty sequence is zero, not 0 / 0.
            count = ops.maximum(ops.cast(ops.shape(sequence)[1], sequence.dtype), 1.0)
            return ops.sum(sequence, axis=1) / count
        # (batch, length, 1)
        weights = ops.cast(padding_mask, sequence.dtype)[:, :, None]
        total = ops.sum(sequence * weights, axis=1)  # (batch, dim)
        count = ops.maximum(ops.sum(weights, axis=1), 1.0)  # (batch, 1)
        return total / count

    def compute_output_shape(self, sequence_shape, padding_mask_shape=None):
        return (sequence_shape[0], sequence_shape[2])

    def get_config(self):
        config = super().get_config()
        config["pooling"] = self.pooling
        return config
