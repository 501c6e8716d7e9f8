"""A BERT-style encoder with a pooled classification head."""

import keras
from keras import ops

from keras_attn.layers.sequence_pooling import SequencePooling
from keras_attn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.models.presets import ENCODER_CLASSIFIER_PRESETS
from keras_attn.models.zoo_model import (
    ZooModel,
    checked_arguments,
    dropout_layer,
    layer_norm,
    padding_mask,
    token_embedding,
    transformer_blocks,
)


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


def _layers(arguments, dtype):
    """The named sub-layers of a `TransformerEncoderClassifier`, in a dict."""
    pre_norm = arguments.normalize_first
    return {
        "padding_mask": padding_mask(arguments),
        "embedding": token_embedding(arguments, dtype, "token_embedding"),
        "embedding_norm": (
            None if pre_norm else layer_norm(arguments, dtype, "embedding_norm")
        ),
        "embedding_dropout": dropout_layer(arguments, dtype),
        "blocks": transformer_blocks(
            TransformerEncoderBlock,
            arguments.num_layers,
            "encoder_block",
            arguments,
            dtype,
        ),
        "output_norm": layer_norm(arguments, dtype, "output_norm")
        if pre_norm
        else None,
        "pooling": SequencePooling(arguments.pooling, dtype=dtype, name="pooling"),
        "pooled_dropout": dropout_layer(arguments, dtype, "pooled_dropout"),
        "logits": keras.layers.Dense(arguments.num_classes, dtype=dtype, name="logits"),
    }


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerEncoderClassifier(ZooModel):
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
            vector. Defaults to `0.1`. Run by
            `keras_attn.layers.FastDropout` at a resolution of 1/2048 (0.1 runs
            at 0.10010).
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
        arguments = checked_arguments(locals())

        # === Layers ===
        parts = _layers(arguments, dtype)

        # === Functional Model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        sequence, padding_mask = _encode(parts, token_ids)
        # (batch, hidden_dim)
        pooled = parts["pooling"](sequence, padding_mask=padding_mask)
        logits = parts["logits"](parts["pooled_dropout"](pooled))
        super().__init__(token_ids, logits, arguments, dtype=dtype, **kwargs)
        self._parts = parts
        self._sequence_output = sequence

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
