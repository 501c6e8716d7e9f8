"""A BERT-style encoder with a pooled classification head."""

import types

import keras
from keras import ops

from keras_attn.layers.blocks.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.layers.heads.sequence_pooling import POOLINGS, SequencePooling
from keras_attn.models.presets import ENCODER_CLASSIFIER_PRESETS
from keras_attn.models.token_inputs import check_token_batch
from keras_attn.models.zoo_model import (
    ZooModel,
    position_bias_argument,
)
from keras_attn.shared_docstrings import shared_docstrings
from keras_attn.validation import (
    check_bool,
    check_choice,
    check_positive_int,
)


def _encode(layers, token_ids, segment_ids=None, training=None):
    """Token ids `(batch, length)` -> features `(batch, length, hidden_dim)`.

    `layers` is the model, or, while the model is built, a namespace of its
    layers under the same names. `segment_ids` `(batch, length)` is read
    only by a model with segment embeddings.
    """
    padding_mask = layers.padding_mask_layer(token_ids)  # (batch, length)
    x = layers.token_embedding(token_ids)
    if layers.segment_embedding is not None:
        # Clamped as the token embedding clamps its ids (eager calls refuse
        # ids outside the segments earlier): a compiled gather out of range
        # gives NaN on JAX and an error on TensorFlow.
        segments = ops.clip(
            ops.cast(segment_ids, "int32"), 0, layers.segment_embedding.input_dim - 1
        )
        x = x + layers.segment_embedding(segments)
    if layers.embedding_norm is not None:
        x = layers.embedding_norm(x)
    x = layers.embedding_dropout(x, training=training)
    bias = position_bias_argument(layers.position_bias, "attention_bias", x)
    for block in layers.blocks:
        x = block(x, padding_mask=padding_mask, training=training, **bias)
    if layers.output_norm is not None:
        x = layers.output_norm(x)
    return x, padding_mask


@keras.saving.register_keras_serializable(package="keras_attn")
@shared_docstrings
class TransformerEncoderClassifier(ZooModel):
    """A Transformer encoder with a pooled classification head (BERT-style).

    Token ids go through a token + position embedding (plus a segment
    embedding with `num_segments`), a stack of `TransformerEncoderBlock`s
    that attend to every non-padding position, then one vector per
    sequence (the first position's features, `pooling="cls"`, or the mean
    over non-padding positions, `pooling="mean"`), optionally BERT's pooler
    (`pooled_dense`), dropout and a `Dense(num_classes)` layer giving
    logits. With `pooling="cls"` the caller puts a classification token at
    position 0 (BERT's `[CLS]`; the recipe uses the tokenizer's start id).

    With `normalize_first=False` (BERT, the paper's post-norm) a layer norm
    follows the embeddings; with `normalize_first=True` (pre-norm) a layer
    norm follows the last block instead.

    The same layers serve as a sequence encoder: `encode` returns
    per-token features, and `encoder` a functional model
    `token_ids -> (batch, length, hidden_dim)` that shares this model's
    weights (for use inside other models).

    Args:
        vocabulary_size: int, number of token ids.
        num_classes: int, number of labels.
        num_layers: int, encoder blocks. Defaults to `12`.
        hidden_dim: int, `d_model`. Defaults to `768`.
        num_heads: int. Defaults to `12`.
        intermediate_dim: int, `d_ff`. Defaults to `3072`.
        dropout: float, on embeddings, sub-layer outputs and the pooled
            vector. Defaults to `0.1`. Run by
            `keras_attn.layers.FastDropout` (whose docstring says how it
            rounds the rate).
        max_sequence_length: int, the number of learned positions.
            Defaults to `512`.
        position: the position scheme's name (see
            `keras_attn.layers.positions.position_schemes`), `"learned"` (BERT),
            `"sinusoidal"`, `"alibi"`, `"relative"` (T5) or `"rotary"`
            (RoPE), or a dict of a name and the scheme's fields
            (`position_schemes.check_position`). Defaults to `"learned"`.
        pooling: `"cls"` or `"mean"`. Defaults to `"cls"`.
        normalize_first: bool, pre-norm blocks. Defaults to `False`.
        pad_id: int, the padding id. Defaults to `0`.
        activation: feed-forward activation, a Keras activation or a
            gated one: `"geglu"`, `"swiglu"` or `"reglu"` (Shazeer, 2020).
            Defaults to `"gelu"`.
        layer_norm_epsilon: float, a normal float32 number (at least
            `2**-126`). Defaults to `1e-6`.
        {{zoo_model_arguments}}
        scale_embeddings: bool, multiply the token embeddings by
            `sqrt(hidden_dim)` (section 3.4 of the Transformer paper);
            `False` for BERT. Defaults to `True`.
        num_segments: int, the number of segment ids (BERT's
            `type_vocab_size`): a learned vector per segment is added to
            the token and position embeddings, and the model takes a
            second input, `segment_ids`. Defaults to `None`, meaning no
            segments (one input, `token_ids`).
        pooled_dense: bool, a `Dense(hidden_dim, activation="tanh")` layer
            on the pooled vector before the dropout and the head (BERT's
            pooler). Defaults to `False`.
        **kwargs: base `keras.Model` arguments (`name`, `trainable`).

    Call arguments:
        inputs: int tensor `token_ids` `(batch, length)`, `pad_id` at
            padding; with `num_segments`, a dict of `token_ids` and
            `segment_ids` (ints in `[0, num_segments)`, of the shape of
            `token_ids`).

    Returns:
        Logits `(batch, num_classes)`.

    Example:

    >>> model = keras_attn.models.TransformerEncoderClassifier.from_preset(
    ...     "encoder_classifier_tiny", vocabulary_size=100, num_classes=3)
    >>> tuple(model(keras.ops.ones((2, 7), "int32")).shape)
    (2, 3)
    >>> tuple(model.encoder(keras.ops.ones((2, 7), "int32")).shape)
    (2, 7, 32)

    References:
        - Devlin et al., "BERT: Pre-training of Deep Bidirectional
          Transformers for Language Understanding", 2019.
        - Vaswani et al., "Attention Is All You Need", 2017, section 3.1.
    """

    presets = ENCODER_CLASSIFIER_PRESETS
    preset_arguments = ("vocabulary_size", "num_classes")
    token_inputs = ("token_ids",)
    # Pooling over no position has no meaning.
    nonempty_inputs = ("token_ids",)

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        max_sequence_length=512,
        position="learned",
        pooling="cls",
        normalize_first=False,
        pad_id=0,
        activation="gelu",
        layer_norm_epsilon=1e-6,
        dtype=None,
        normalization="layer",
        use_bias=True,
        attention=None,
        scale_embeddings=True,
        num_segments=None,
        pooled_dense=False,
        **kwargs,
    ):
        # === Config (checked before any layer is built) ===
        # The arguments that models share, checked and stored under their
        # names (`ZooModel._check_model_arguments`); then this model's own.
        self._check_model_arguments(locals())
        self.num_classes = check_positive_int(num_classes, "num_classes")
        self.pooling = check_choice(pooling, "pooling", POOLINGS)
        self.num_segments = (
            None
            if num_segments is None
            else check_positive_int(num_segments, "num_segments")
        )
        self.pooled_dense = check_bool(pooled_dense, "pooled_dense")
        self._use_position_scheme()

        # === Layers ===
        # Post-norm (BERT) normalizes the embeddings; pre-norm the output.
        pre_norm = self.normalize_first
        layers = types.SimpleNamespace(
            padding_mask_layer=self._padding_mask_layer(),
            token_embedding=self._token_embedding(
                dtype, "token_embedding", scale_by_sqrt_dim=self.scale_embeddings
            ),
            segment_embedding=(
                None
                if self.num_segments is None
                else keras.layers.Embedding(
                    self.num_segments,
                    self.hidden_dim,
                    embeddings_initializer=keras.initializers.RandomNormal(
                        stddev=self.hidden_dim**-0.5
                    ),
                    dtype=dtype,
                    name="segment_embedding",
                )
            ),
            embedding_norm=(
                None if pre_norm else self._normalization(dtype, "embedding_norm")
            ),
            embedding_dropout=self._dropout(dtype),
            # `None` unless the position scheme biases attention scores.
            position_bias=self.position_scheme.attention_bias_layer(
                True, dtype, "position_bias"
            ),
            blocks=self._transformer_blocks(
                TransformerEncoderBlock, self.num_layers, "encoder_block", dtype
            ),
            output_norm=(
                self._normalization(dtype, "output_norm") if pre_norm else None
            ),
        )
        sequence_pooling = SequencePooling(self.pooling, dtype=dtype, name="pooling")
        pooler = (
            keras.layers.Dense(
                self.hidden_dim, activation="tanh", dtype=dtype, name="pooled_dense"
            )
            if self.pooled_dense
            else None
        )
        pooled_dropout = self._dropout(dtype, "pooled_dropout")
        classification_head = keras.layers.Dense(
            self.num_classes, dtype=dtype, name="logits"
        )

        # === Functional Model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        inputs, segment_ids = token_ids, None
        if self.num_segments is not None:
            segment_ids = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
            inputs = {"token_ids": token_ids, "segment_ids": segment_ids}
        sequence, padding_mask = _encode(layers, token_ids, segment_ids)
        # (batch, hidden_dim)
        pooled = sequence_pooling(sequence, padding_mask=padding_mask)
        if pooler is not None:
            pooled = pooler(pooled)
        logits = classification_head(pooled_dropout(pooled))
        super().__init__(inputs, logits, dtype=dtype, **kwargs)

        # The layers as attributes, assigned after the graph so that the
        # weights keep the graph's order (see `ZooModel`).
        self.padding_mask_layer = layers.padding_mask_layer
        self.token_embedding = layers.token_embedding
        self.segment_embedding = layers.segment_embedding
        self.embedding_norm = layers.embedding_norm
        self.embedding_dropout = layers.embedding_dropout
        self.position_bias = layers.position_bias
        self.blocks = layers.blocks
        self.output_norm = layers.output_norm
        self.sequence_pooling = sequence_pooling
        self.pooler = pooler
        self.pooled_dropout = pooled_dropout
        self.classification_head = classification_head
        self._sequence_output = sequence

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_classes": self.num_classes,
                "max_sequence_length": self.max_sequence_length,
                "position": self.position,
                "pooling": self.pooling,
                "normalize_first": self.normalize_first,
                "pad_id": self.pad_id,
                "scale_embeddings": self.scale_embeddings,
                "num_segments": self.num_segments,
                "pooled_dense": self.pooled_dense,
                **self._transformer_config(),
            }
        )
        return config

    def _check_inputs(self, inputs):
        checked = super()._check_inputs(inputs)
        if self.num_segments is None:
            return checked
        segments, tokens = checked["segment_ids"], checked["token_ids"]
        check_token_batch(segments, "segment_ids", self.num_segments, "segment")
        # Known sizes only: a traced or exported length may be symbolic.
        if any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(segments.shape, tokens.shape)
        ):
            raise ValueError(
                "`segment_ids` must have the shape of `token_ids`. Received: "
                f"segment_ids.shape={tuple(segments.shape)}, "
                f"token_ids.shape={tuple(tokens.shape)}"
            )
        return checked

    @property
    def encoder(self):
        """A functional model `token_ids -> (batch, length, hidden_dim)`.

        Its inputs are the model's (with `num_segments`, the dict of
        `token_ids` and `segment_ids`). It shares this model's layers (a
        new `keras.Model` object on every access; training it trains this
        model).
        """
        return keras.Model(
            self.input, self._sequence_output, name=f"{self.name}_encoder"
        )

    def encode(self, token_ids, training=False, segment_ids=None):
        """Runs the encoder without the head.

        Args:
            token_ids: int tensor `(batch, length)`.
            training: bool. Defaults to `False`.
            segment_ids: int tensor `(batch, length)`, read by a model with
                `num_segments`. Defaults to `None`, meaning segment 0 at
                every position.

        Returns:
            `(features, padding_mask)`: `(batch, length, hidden_dim)` and
            boolean `(batch, length)`.
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        if self.num_segments is not None:
            segment_ids = (
                ops.zeros_like(token_ids)
                if segment_ids is None
                else ops.convert_to_tensor(segment_ids, "int32")
            )
        return _encode(self, token_ids, segment_ids, training)
