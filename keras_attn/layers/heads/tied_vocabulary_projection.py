"""The pre-softmax projection that shares the token embedding's weights."""

import keras

from keras_attn.validation import check_bool


class _Untracked:
    """Holds a layer out of Keras's sight: its owner tracks and saves it."""

    def __init__(self, layer):
        self.layer = layer


@keras.saving.register_keras_serializable(package="keras_attn")
class TiedVocabularyProjection(keras.layers.Layer):
    """Next-token logits through the transposed token embedding (section 3.4).

    Calls `embedding(hidden, reverse=True)`. The embedding stays the model's
    own layer: this layer holds no weights and no reference Keras tracks, so
    the model saves the table once, under the embedding's name, and
    `model.summary()` shows the embedding's row with its lookup's output
    shape and this layer's row with the logits'. Quantization and LoRA act
    on the embedding (the projection reads the quantized table with its
    scale).

    A projection restored from its config (outside a model) rebuilds the
    embedding from the config it records and owns it, weights included.

    Args:
        embedding: the layer whose table is shared, a
            `keras_attn.layers.TokenAndPositionEmbedding` or
            `keras.layers.ReversibleEmbedding` (any layer whose call takes
            `reverse=True`), or its serialized config.
        use_bias: bool, add a learned bias `(vocabulary_size,)` to the
            logits (Marian's `final_logits_bias`), a weight of this layer.
            Defaults to `False`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        hidden: float tensor `(batch, length, embedding_dim)`.

    Returns:
        Logits `(batch, length, vocabulary_size)`.

    Example:

    >>> embedding = keras_attn.layers.TokenAndPositionEmbedding(100, 16, 8)
    >>> _ = embedding(keras.ops.ones((2, 5), "int32"))
    >>> logits = keras_attn.layers.TiedVocabularyProjection(embedding)
    >>> tuple(logits(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 100)

    References:
        - Vaswani et al., "Attention Is All You Need", 2017, section 3.4.
        - Press and Wolf, "Using the Output Embedding to Improve Language
          Models", 2017.
    """

    def __init__(self, embedding, use_bias=False, **kwargs):
        super().__init__(**kwargs)
        self.use_bias = check_bool(use_bias, "use_bias")
        if isinstance(embedding, dict):
            embedding = keras.layers.deserialize(embedding)
            # Restored on its own: nobody else owns the table, so this layer
            # tracks (and saves) it.
            self.owned_embedding = embedding
        if not isinstance(embedding, keras.layers.Layer):
            raise TypeError(
                "`embedding` must be a Keras layer that takes `reverse=True`. "
                f"Received: embedding={embedding!r}"
            )
        self._shared = _Untracked(embedding)

    def build(self, hidden_shape):
        embedding = self._shared.layer
        if not embedding.built:
            # (batch, length, embedding_dim) -> token ids (batch, length)
            embedding.build(tuple(hidden_shape[:-1]))
        if self.use_bias:
            logits = self.compute_output_spec(keras.KerasTensor(hidden_shape))
            self.bias = self.add_weight(
                shape=(logits.shape[-1],), initializer="zeros", name="bias"
            )
        self.built = True

    def call(self, hidden):
        # (batch, length, embedding_dim) -> (batch, length, vocabulary_size)
        logits = self._shared.layer(hidden, reverse=True)
        if self.use_bias:
            logits = logits + keras.ops.cast(self.bias, logits.dtype)
        return logits

    def compute_output_spec(self, hidden):
        return self._shared.layer.compute_output_spec(hidden, reverse=True)

    def get_config(self):
        config = super().get_config()
        config["embedding"] = keras.layers.serialize(self._shared.layer)
        config["use_bias"] = self.use_bias
        return config
