"""Token embedding plus position encoding, sections 3.4 and 3.5."""

import math

import keras
from keras import ops

from keras_attn.layers._last_axis_matmul import last_axis_matmul
from keras_attn.layers.positions import position_schemes
from keras_attn.validation import check_bool, check_positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Embeds token ids, scales by `sqrt(embedding_dim)`, adds positions.

    The same weight matrix can serve as the pre-softmax projection (weight
    tying, section 3.4): call the layer with `reverse=True` on hidden states
    to get logits `hidden @ embeddings^T`.

    The token table is a `keras.layers.ReversibleEmbedding` (weights tied),
    so Keras's quantization covers both uses: after `quantize("int8")` (or
    `model.quantize("int8")`) the lookup and the reverse projection both
    read the int8 table with its per-token scale, and the quantized layer
    saves and loads as Keras's own. A float table (LoRA included) projects
    as one 2-D product (see `last_axis_matmul`).

    The token embeddings are initialised with standard deviation
    `embedding_dim ** -0.5`, so that after the `sqrt(embedding_dim)` scaling
    of section 3.4 they have unit variance, like the position encodings.

    Args:
        vocabulary_size: int, number of token ids.
        sequence_length: int, the largest sequence length (the number of
            learned positions; sinusoids have no limit).
        embedding_dim: int, the model dimension `d_model`.
        position: the position scheme (see
            `keras_attn.layers.positions.position_schemes`): a
            `PositionScheme` (a model hands down the one it built), or a
            scheme's name, `"sinusoidal"` (section 3.5) or `"learned"`
            (`sequence_length` positions), or a dict of a name and the
            scheme's fields (`PositionScheme.get_config`; a scheme sized by
            heads, `"alibi"`, `"relative"` or `"rotary"`, names them:
            `{"name": "rotary", "num_heads": 8}`). Only a scheme that adds
            to the embeddings adds anything here. Defaults to
            `"sinusoidal"`.
        scale_by_sqrt_dim: bool, multiply token embeddings by
            `sqrt(embedding_dim)` as in section 3.4. Defaults to `True`.
        mask_zero: bool, whether id 0 is padding; the output then carries a
            Keras mask that downstream attention layers honour. Defaults to
            `False`.
        embeddings_initializer: initializer of the token embeddings.
            Defaults to `None`, meaning normal with stddev
            `embedding_dim ** -0.5`.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: int tensor `(batch, length)` of token ids (booleans are
            refused; ids outside `[0, vocabulary_size)` are clamped into it,
            so compiled calls stay finite and backend-independent; models
            refuse them earlier in eager calls), or with
            `reverse=True` a float tensor `(batch, length, embedding_dim)`.
        start_index: int or scalar tensor, position of the first token (for
            cached decoding). Defaults to `0`.
        reverse: bool, project hidden states to vocabulary logits with the
            transposed token embedding. Defaults to `False`.

    Returns:
        `(batch, length, embedding_dim)` embeddings, or
        `(batch, length, vocabulary_size)` logits with `reverse=True`.

    Example:

    >>> embed = keras_attn.layers.TokenAndPositionEmbedding(
    ...     vocabulary_size=100, sequence_length=16, embedding_dim=8)
    >>> hidden = embed(keras.ops.ones((2, 5), dtype="int32"))
    >>> tuple(embed(hidden, reverse=True).shape)
    (2, 5, 100)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, sections 3.4-3.5.
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length,
        embedding_dim,
        position="sinusoidal",
        scale_by_sqrt_dim=True,
        mask_zero=False,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = check_positive_int(vocabulary_size, "vocabulary_size")
        self.sequence_length = check_positive_int(sequence_length, "sequence_length")
        self.embedding_dim = check_positive_int(embedding_dim, "embedding_dim")
        self.position_scheme = position_schemes.get(
            position, sequence_length=self.sequence_length
        )
        # The config's `position`: as given, or the scheme's own config.
        if isinstance(position, position_schemes.PositionScheme):
            position = position.get_config()
        self.position = dict(position) if isinstance(position, dict) else position
        self.position_scheme.check_embedding_dim(self.embedding_dim, "embedding_dim")
        self.scale_by_sqrt_dim = check_bool(scale_by_sqrt_dim, "scale_by_sqrt_dim")
        self.mask_zero = check_bool(mask_zero, "mask_zero")
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(stddev=embedding_dim**-0.5)
        )
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocabulary_size,
            embedding_dim,
            tie_weights=True,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        # `None` for a scheme that does not add to the embeddings.
        self.position_encoding = self.position_scheme.position_layer(
            dtype=self.dtype_policy
        )
        self.supports_masking = True

    def build(self, inputs_shape):
        self.token_embedding.build(inputs_shape)
        if self.position_encoding is not None:
            self.position_encoding.build((*inputs_shape, self.embedding_dim))
        self.built = True

    def call(self, inputs, start_index=0, reverse=False):
        if reverse and self.token_embedding.quantization_mode is not None:
            # Keras's quantized reverse projection (the table with its scale).
            return self.token_embedding(inputs, reverse=True)
        if reverse:
            embeddings = ops.cast(self.token_embedding.embeddings, self.compute_dtype)
            # (batch, length, dim) @ (dim, vocabulary) -> (batch, length, vocabulary)
            return last_axis_matmul(inputs, ops.transpose(embeddings))
        tokens = self.token_embedding(self._clamped_ids(inputs))
        if self.scale_by_sqrt_dim:
            tokens = tokens * ops.cast(math.sqrt(self.embedding_dim), tokens.dtype)
        if self.position_encoding is None:
            return tokens
        return tokens + self.position_encoding(tokens, start_index=start_index)

    def _clamped_ids(self, inputs):
        """The ids as int32, clamped into `[0, vocabulary_size)`.

        Eager model calls refuse ids outside the vocabulary before they get
        here (`keras_attn.models.token_inputs`); a compiled call cannot
        raise portably, and an out-of-range gather gives NaN on JAX and an
        error on TensorFlow, so the lookup reads the nearest row instead:
        finite, and the same on every backend.
        """
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if "int" not in dtype and "float" not in dtype:
            raise TypeError(
                "`inputs` must be integer token ids (or, with `reverse=True`, "
                f"float hidden states). Received: inputs.dtype={dtype}"
            )
        ids = ops.cast(inputs, "int32")
        return ops.clip(ids, 0, self.vocabulary_size - 1)

    def compute_output_spec(self, inputs, start_index=0, reverse=False):
        # Declared rather than traced: tracing `call` with an unknown length
        # fails on JAX for learned positions (a slice of symbolic length).
        if reverse:
            shape = (*inputs.shape[:-1], self.vocabulary_size)
        else:
            shape = (*inputs.shape, self.embedding_dim)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if self.mask_zero and "int" in dtype:
            return ops.not_equal(inputs, 0)
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "embedding_dim": self.embedding_dim,
                "position": self.position,
                "scale_by_sqrt_dim": self.scale_by_sqrt_dim,
                "mask_zero": self.mask_zero,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
