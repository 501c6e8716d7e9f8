"""A BERT-style encoder with a pooled classification head."""

import keras
from keras import ops

from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.padding_mask import PaddingMask
from keras_attn.layers.sequence_pooling import POOLINGS, SequencePooling
from keras_attn.layers.token_and_position_embedding import TokenAndPositionEmbedding
from keras_attn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.models.model_features import ModelFeaturesMixin
from keras_attn.models.preset_io import PresetMixin
from keras_attn.models.token_inputs import check_token_ids
from keras_attn.models.zoo_presets import ENCODER_CLASSIFIER_PRESETS
from keras_attn.validation import (
    check_choice,
    check_divisible,
    check_dropout_rate,
    check_positive_int,
)


def check_pad_id(pad_id, vocabulary_size):
    if not isinstance(pad_id, int) or not 0 <= pad_id < vocabulary_size:
        raise ValueError(
            f"`pad_id` must be a token id in [0, vocabulary_size={vocabulary_size}). "
            f"Received: pad_id={pad_id!r}"
        )
    return pad_id


def _encode(parts, token_ids, training=None):
    """Token ids `(batch, length)` -> features `(batch, length, hidden_dim)`."""
    padding_mask = parts["padding_mask"](token_ids)  # (batch, length)
    x = parts["embedding"](token_ids)
    if parts["embedding_norm"] is not None:
        x = parts["embedding_norm"](x)
    x = parts["embedding_dropout"](x, training=training)
    for block in parts["blocks"]:
        x = block(x, padding_mask=padding_mask, training=training)
    if parts["output_norm"] is not None:
        x = parts["output_norm"](x)
    return x, padding_mask


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoderClassifier(PresetMixin, ModelFeaturesMixin, keras.Model):
    """A Transformer encoder with a pooled classification head (BERT-style).

    Token ids go through a token + position embedding, a stack of
    `TransformerEncoderBlock`s that attend to every non-padding position,
    then one vector per sequence (the first position's features,
    `pooling="cls"`, or the mean over non-padding positions,
    `pooling="mean"`), dropout and a `Dense(num_classes)` layer giving
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
            vector. Defaults to `0.1`.
        attention_dropout: float, on attention weights. Defaults to `0.0`.
        max_sequence_length: int, the number of learned positions.
            Defaults to `512`.
        position: `"learned"` (BERT) or `"sinusoidal"`. Defaults to
            `"learned"`.
        pooling: `"cls"` or `"mean"`. Defaults to `"cls"`.
        normalize_first: bool, pre-norm blocks. Defaults to `False`.
        pad_id: int, the padding id. Defaults to `0`.
        activation: feed-forward activation. Defaults to `"gelu"`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        use_fused_attention: bool. Defaults to `True`.
        dtype: dtype or `keras.DTypePolicy`. Defaults to `None`, meaning
            the global policy.
        **kwargs: base `keras.Model` arguments (`name`, ...).

    Call arguments:
        token_ids: int tensor `(batch, length)`, `pad_id` at padding.

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

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        attention_dropout=0.0,
        max_sequence_length=512,
        position="learned",
        pooling="cls",
        normalize_first=False,
        pad_id=0,
        activation="gelu",
        layer_norm_epsilon=1e-6,
        use_fused_attention=True,
        dtype=None,
        **kwargs,
    ):
        check_positive_int(vocabulary_size, "vocabulary_size")
        check_positive_int(num_classes, "num_classes")
        check_positive_int(num_layers, "num_layers")
        check_positive_int(hidden_dim, "hidden_dim")
        check_positive_int(num_heads, "num_heads")
        check_divisible(hidden_dim, num_heads, "hidden_dim", "num_heads")
        check_positive_int(max_sequence_length, "max_sequence_length")
        check_dropout_rate(dropout, "dropout")
        check_choice(pooling, "pooling", POOLINGS)
        check_pad_id(pad_id, vocabulary_size)

        # === Layers ===
        def norm(name):
            return keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name=name
            )

        parts = {
            "padding_mask": PaddingMask(pad_id, name="padding_mask"),
            "embedding": TokenAndPositionEmbedding(
                vocabulary_size,
                max_sequence_length,
                hidden_dim,
                position=position,
                dtype=dtype,
                name="token_embedding",
            ),
            "embedding_norm": None if normalize_first else norm("embedding_norm"),
            "embedding_dropout": FastDropout(
                dropout, dtype=dtype, name="embedding_dropout"
            ),
            "blocks": [
                TransformerEncoderBlock(
                    num_heads=num_heads,
                    intermediate_dim=intermediate_dim,
                    dropout=dropout,
                    attention_dropout=attention_dropout,
                    activation=activation,
                    layer_norm_epsilon=layer_norm_epsilon,
                    normalize_first=normalize_first,
                    use_fused_attention=use_fused_attention,
                    dtype=dtype,
                    name=f"encoder_block_{i}",
                )
                for i in range(num_layers)
            ],
            "output_norm": norm("output_norm") if normalize_first else None,
            "pooling": SequencePooling(pooling, dtype=dtype, name="pooling"),
            "pooled_dropout": FastDropout(dropout, dtype=dtype, name="pooled_dropout"),
            "logits": keras.layers.Dense(num_classes, dtype=dtype, name="logits"),
        }

        # === Functional Model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        sequence, padding_mask = _encode(parts, token_ids)
        # (batch, hidden_dim)
        pooled = parts["pooling"](sequence, padding_mask=padding_mask)
        logits = parts["logits"](parts["pooled_dropout"](pooled))
        super().__init__(inputs=token_ids, outputs=logits, **kwargs)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_classes = num_classes
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.position = position
        self.pooling = pooling
        self.normalize_first = normalize_first
        self.pad_id = pad_id
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_fused_attention = use_fused_attention
        self._parts = parts
        # The layers' policy (a functional model's own `dtype_policy` is
        # always the global one, so `get_config` cannot use it).
        self._layers_dtype_policy = keras.dtype_policies.get(
            dtype if dtype is not None else keras.config.dtype_policy()
        )
        self._sequence_output = sequence

    def call(self, inputs, training=None, mask=None):
        check_token_ids(inputs, "token_ids", self.vocabulary_size)
        return super().call(inputs, training=training, mask=mask)

    @property
    def encoder(self):
        """A functional model `token_ids -> (batch, length, hidden_dim)`.

        It shares this model's layers (a new `keras.Model` object on every
        access; training it trains this model).
        """
        return keras.Model(
            self.input, self._sequence_output, name=f"{self.name}_encoder"
        )

    def encode(self, token_ids, training=False):
        """Runs the encoder without the head.

        Args:
            token_ids: int tensor `(batch, length)`.
            training: bool. Defaults to `False`.

        Returns:
            `(features, padding_mask)`: `(batch, length, hidden_dim)` and
            boolean `(batch, length)`.
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        return _encode(self._parts, token_ids, training)

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "vocabulary_size": self.vocabulary_size,
            "num_classes": self.num_classes,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_sequence_length": self.max_sequence_length,
            "position": self.position,
            "pooling": self.pooling,
            "normalize_first": self.normalize_first,
            "pad_id": self.pad_id,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_fused_attention": self.use_fused_attention,
        }
        return self._features_config(config)

    @classmethod
    def from_config(cls, config):
        return cls._from_features_config(config)
