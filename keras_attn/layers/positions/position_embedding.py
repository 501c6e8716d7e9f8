"""Learned position embedding (the paper's alternative in section 3.5)."""

import keras
from keras import ops

from keras_attn.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionEmbedding(keras.layers.Layer):
    """A trainable vector per position, up to `sequence_length` positions.

    Section 3.5 of the paper reports that learned position embeddings give
    nearly identical results to the sinusoids (Table 3, row (E)).

    Args:
        sequence_length: int, the largest number of positions.
        initializer: initializer of the position vectors. Defaults to
            `"glorot_uniform"`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: tensor `(batch, length, dim)`; only its shape is used.
            `length` (plus `start_index`) must not exceed `sequence_length`.
        start_index: int or scalar tensor, position of the first element.
            Defaults to `0`.

    Returns:
        The position vectors broadcast to the shape of `inputs`.

    Example:

    >>> layer = keras_attn.layers.PositionEmbedding(sequence_length=32)
    >>> tuple(layer(keras.ops.zeros((2, 10, 8))).shape)
    (2, 10, 8)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.5.
    """

    def __init__(self, sequence_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = check_positive_int(sequence_length, "sequence_length")
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        length, dim = inputs_shape[-2], inputs_shape[-1]
        check_positive_int(dim, "inputs.shape[-1]")
        if length is not None and length > self.sequence_length:
            raise ValueError(
                f"PositionEmbedding has {self.sequence_length} positions "
                f"(`sequence_length={self.sequence_length}`) but received a "
                f"sequence of length {length}. Received: inputs.shape="
                f"{tuple(inputs_shape)}"
            )
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, dim),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        length = shape[-2]
        # Checked when static: out of range, JAX's slice would silently
        # clamp to the last positions.
        static_start = start_index if isinstance(start_index, int) else 0
        if isinstance(length, int) and static_start + length > self.sequence_length:
            raise ValueError(
                f"PositionEmbedding has {self.sequence_length} positions but "
                f"received a sequence of length {length} starting at position "
                f"{static_start}. Received: start_index={start_index}, "
                f"inputs.shape={tuple(shape)}"
            )
        if isinstance(length, int) and isinstance(start_index, int):
            # (length, dim)
            embeddings = ops.slice(
                ops.convert_to_tensor(self.position_embeddings),
                (start_index, 0),
                (length, shape[-1]),
            )
        else:
            # The rows are gathered for a traced start (a decoding step: torch
            # would read a slice's start as a Python number, a graph break
            # under `torch.compile`) and for a symbolic length (a SavedModel
            # export with dynamic shapes: a slice would need `length <=
            # sequence_length`, which JAX's shape polymorphism cannot decide).
            positions = ops.add(ops.arange(length, dtype="int32"), start_index)
            # (length, dim)
            embeddings = ops.take(self.position_embeddings, positions, axis=0)
        return ops.broadcast_to(ops.cast(embeddings, self.compute_dtype), shape)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sequence_length": self.sequence_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
