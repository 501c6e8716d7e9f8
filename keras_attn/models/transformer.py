"""The paper's encoder-decoder Transformer as a functional Keras model."""

import keras
from keras import ops

from keras_attn.layers.fast_dropout import FastDropout
from keras_attn.layers.padding_mask import PaddingMask
from keras_attn.layers.tied_vocabulary_projection import TiedVocabularyProjection
from keras_attn.layers.token_and_position_embedding import TokenAndPositionEmbedding
from keras_attn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_attn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.layers.vocabulary_projection import VocabularyProjection
from keras_attn.models.model_features import ModelFeaturesMixin
from keras_attn.models.preset_io import PresetMixin
from keras_attn.models.presets import TRANSFORMER_PRESETS
from keras_attn.models.token_inputs import check_same_batch_size, check_token_ids
from keras_attn.validation import check_positive_int


def _embed(embedding, dropout, tokens, training=None, start_index=0):
    return dropout(embedding(tokens, start_index=start_index), training=training)


def _run_encoder(parts, tokens, training=None):
    """Token ids `(batch, source_length)` -> encoder output and padding mask."""
    padding_mask = parts["encoder_padding_mask"](tokens)  # (batch, source_length)
    x = _embed(parts["encoder_embedding"], parts["encoder_dropout"], tokens, training)
    for block in parts["encoder_blocks"]:
        x = block(x, padding_mask=padding_mask, training=training)
    if parts["encoder_norm"] is not None:
        x = parts["encoder_norm"](x)
    return x, padding_mask


def _run_decoder(parts, tokens, encoder_output, encoder_padding_mask, training=None):
    """Teacher-forced decoder: `(batch, target_length)` ids -> logits."""
    decoder_padding_mask = parts["decoder_padding_mask"](tokens)
    x = _embed(parts["decoder_embedding"], parts["decoder_dropout"], tokens, training)
    for block in parts["decoder_blocks"]:
        x = block(
            x,
            encoder_output,
            decoder_padding_mask=decoder_padding_mask,
            encoder_padding_mask=encoder_padding_mask,
            training=training,
        )
    if parts["decoder_norm"] is not None:
        x = parts["decoder_norm"](x)
    # (batch, target_length, vocabulary_size)
    return parts["logits"](x)


@keras.saving.register_keras_serializable(package="keras_attn")
class Transformer(PresetMixin, ModelFeaturesMixin, keras.Model):
    """The encoder-decoder Transformer of "Attention Is All You Need".

    A functional model: inputs `encoder_tokens` `(batch, source_length)` and
    `decoder_tokens` `(batch, target_length)` (int ids, `pad_id` marks
    padding), output next-token logits `(batch, target_length,
    vocabulary_size)`. Source and target share one vocabulary and, with
    `tie_embeddings=True`, one weight matrix for both embeddings and the
    pre-softmax projection (section 3.4).

    For decoding, `encode`, `initial_cache` and `decode_step` run the same
    layers with a key/value cache (see `keras_attn.generation`).

    Args:
        vocabulary_size: int, size of the shared source/target vocabulary.
        num_layers: int, encoder and decoder layers `N`. Defaults to `6`.
        hidden_dim: int, `d_model`. Defaults to `512`.
        num_heads: int, `h`. Defaults to `8`.
        intermediate_dim: int, `d_ff`. Defaults to `2048`.
        dropout: float, `P_drop` on embeddings and sub-layer outputs.
            Defaults to `0.1`.
        attention_dropout: float, dropout on attention weights. Defaults to
            `0.0`.
        max_sequence_length: int, the longest sequence (learned positions,
            decoding caches). Defaults to `256`.
        position: `"sinusoidal"` or `"learned"`. Defaults to `"sinusoidal"`.
        normalize_first: bool, pre-norm blocks plus a final layer norm.
            Defaults to `False` (the paper's post-norm).
        tie_embeddings: bool, share encoder/decoder embeddings and the output
            projection. Defaults to `True`.
        num_encoder_layers: int. Defaults to `None`, meaning `num_layers`.
        num_decoder_layers: int. Defaults to `None`, meaning `num_layers`.
        pad_id: int, the padding token id. Defaults to `0`.
        activation: feed-forward activation. Defaults to `"relu"`.
        layer_norm_epsilon: float. Defaults to `1e-6`.
        use_fused_attention: bool. Defaults to `True`.
        dtype: dtype or `keras.DTypePolicy` of the layers. Defaults to
            `None`, meaning the global policy.
        **kwargs: base `keras.Model` arguments (`name`, ...).

    Example:

    >>> model = keras_attn.models.Transformer.from_preset(
    ...     "transformer_tiny", vocabulary_size=100)
    >>> logits = model({"encoder_tokens": keras.ops.ones((2, 7), "int32"),
    ...                 "decoder_tokens": keras.ops.ones((2, 5), "int32")})
    >>> tuple(logits.shape)
    (2, 5, 100)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3 and
        Table 3.
    """

    def __init__(
        self,
        vocabulary_size,
        num_layers=6,
        hidden_dim=512,
        num_heads=8,
        intermediate_dim=2048,
        dropout=0.1,
        attention_dropout=0.0,
        max_sequence_length=256,
        position="sinusoidal",
        normalize_first=False,
        tie_embeddings=True,
        num_encoder_layers=None,
        num_decoder_layers=None,
        pad_id=0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        use_fused_attention=True,
        dtype=None,
        **kwargs,
    ):
        num_encoder_layers = check_positive_int(
            num_encoder_layers or num_layers, "num_encoder_layers"
        )
        num_decoder_layers = check_positive_int(
            num_decoder_layers or num_layers, "num_decoder_layers"
        )
        check_positive_int(vocabulary_size, "vocabulary_size")
        if not 0 <= pad_id < vocabulary_size:
            raise ValueError(
                f"`pad_id` must be a token id in [0, vocabulary_size={vocabulary_size}). "
                f"Received: pad_id={pad_id}"
            )

        # === Layers ===
        def embedding(name):
            return TokenAndPositionEmbedding(
                vocabulary_size,
                max_sequence_length,
                hidden_dim,
                position=position,
                dtype=dtype,
                name=name,
            )

        block_args = dict(
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            normalize_first=normalize_first,
            use_fused_attention=use_fused_attention,
            dtype=dtype,
        )

        def final_norm(name):
            if not normalize_first:
                return None
            return keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=dtype, name=name
            )

        encoder_embedding = embedding(
            "token_embedding" if tie_embeddings else "encoder_embedding"
        )
        decoder_embedding = (
            encoder_embedding if tie_embeddings else embedding("decoder_embedding")
        )
        parts = {
            "encoder_padding_mask": PaddingMask(pad_id, name="encoder_padding_mask"),
            "decoder_padding_mask": PaddingMask(pad_id, name="decoder_padding_mask"),
            "encoder_embedding": encoder_embedding,
            "decoder_embedding": decoder_embedding,
            "encoder_dropout": FastDropout(
                dropout, dtype=dtype, name="encoder_embedding_dropout"
            ),
            "decoder_dropout": FastDropout(
                dropout, dtype=dtype, name="decoder_embedding_dropout"
            ),
            "encoder_blocks": [
                TransformerEncoderBlock(**block_args, name=f"encoder_block_{i}")
                for i in range(num_encoder_layers)
            ],
            "decoder_blocks": [
                TransformerDecoderBlock(**block_args, name=f"decoder_block_{i}")
                for i in range(num_decoder_layers)
            ],
            "encoder_norm": final_norm("encoder_output_norm"),
            "decoder_norm": final_norm("decoder_output_norm"),
            # The pre-softmax projection: the embedding's table transposed
            # (tied, section 3.4) or a `Dense` of its own.
            "logits": (
                TiedVocabularyProjection(decoder_embedding, dtype=dtype, name="logits")
                if tie_embeddings
                else VocabularyProjection(vocabulary_size, dtype=dtype, name="logits")
            ),
        }

        # === Functional Model ===
        encoder_tokens = keras.Input(
            shape=(None,), dtype="int32", name="encoder_tokens"
        )
        decoder_tokens = keras.Input(
            shape=(None,), dtype="int32", name="decoder_tokens"
        )
        encoder_output, encoder_padding_mask = _run_encoder(parts, encoder_tokens)
        logits = _run_decoder(
            parts, decoder_tokens, encoder_output, encoder_padding_mask
        )
        super().__init__(
            inputs={"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens},
            outputs=logits,
            **kwargs,
        )

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.max_sequence_length = max_sequence_length
        self.position = position
        self.normalize_first = normalize_first
        self.tie_embeddings = tie_embeddings
        self.num_encoder_layers = num_encoder_layers
        self.num_decoder_layers = num_decoder_layers
        self.pad_id = pad_id
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_fused_attention = use_fused_attention
        # The layers' policy (a functional model's own `dtype_policy` is
        # always the global one, so `get_config` cannot use it).
        self._layers_dtype_policy = keras.dtype_policies.get(
            dtype if dtype is not None else keras.config.dtype_policy()
        )
        self._parts = parts

    def call(self, inputs, training=None, mask=None):
        # Anything but the dict of `model.inputs` gets Keras's structure error.
        names = [tensor.name for tensor in self.inputs]
        named = {}
        if isinstance(inputs, dict):
            named = {name: inputs[name] for name in names if name in inputs}
        for name, tokens in named.items():
            check_token_ids(tokens, name, self.vocabulary_size)
        check_same_batch_size(named)
        return super().call(inputs, training=training, mask=mask)

    @property
    def encoder_blocks(self):
        return self._parts["encoder_blocks"]

    @property
    def decoder_blocks(self):
        return self._parts["decoder_blocks"]

    @property
    def token_embedding(self):
        """The (decoder) `TokenAndPositionEmbedding`."""
        return self._parts["decoder_embedding"]

    presets = TRANSFORMER_PRESETS
    preset_arguments = ("vocabulary_size",)

    # === Decoding with a key/value cache ===

    def encode(self, encoder_tokens, training=False):
        """Runs the encoder.

        Args:
            encoder_tokens: int tensor `(batch, source_length)`.
            training: bool. Defaults to `False`.

        Returns:
            `(encoder_output, encoder_padding_mask)`: `(batch, source_length,
            hidden_dim)` and boolean `(batch, source_length)`.
        """
        return _run_encoder(self._parts, encoder_tokens, training)

    def decode(
        self, decoder_tokens, encoder_output, encoder_padding_mask, training=False
    ):
        """Teacher-forced decoder pass without a cache; returns logits."""
        return _run_decoder(
            self._parts,
            decoder_tokens,
            encoder_output,
            encoder_padding_mask,
            training,
        )

    def initial_cache(self, encoder_output, encoder_padding_mask, max_length):
        """Allocates the decoding cache for one batch of source sentences.

        Cross-attention keys and values are computed here, once per sentence;
        self-attention slots are filled one position per `decode_step`.

        Args:
            encoder_output: `(batch, source_length, hidden_dim)`.
            encoder_padding_mask: boolean `(batch, source_length)`.
            max_length: int, the most target positions to decode.

        Returns:
            A dict of tensors (a pytree that `keras.ops.while_loop` carries).
        """
        if (
            self.position == "learned"
            and isinstance(max_length, int)
            and max_length > self.max_sequence_length
        ):
            raise ValueError(
                f"`max_length` must be at most max_sequence_length="
                f"{self.max_sequence_length} with learned positions. "
                f"Received: max_length={max_length}"
            )
        batch_size = ops.shape(encoder_output)[0]
        head_dim = self.hidden_dim // self.num_heads
        slots = ops.zeros(
            (batch_size, max_length, self.num_heads, head_dim),
            dtype=self._layers_dtype_policy.compute_dtype,
        )
        return {
            "self_attention": tuple((slots, slots) for _ in self.decoder_blocks),
            "cross_attention": tuple(
                block.compute_cross_attention_cache(encoder_output)
                for block in self.decoder_blocks
            ),
            "encoder_padding_mask": encoder_padding_mask,
        }

    def decode_step(self, decoder_tokens, cache, cache_index):
        """Decodes new positions, reading and extending the cache.

        Args:
            decoder_tokens: int tensor `(batch, new_length)`, the tokens at
                positions `cache_index ... cache_index + new_length - 1`.
            cache: the dict from `initial_cache` (or a previous step).
            cache_index: int or scalar int tensor.

        Returns:
            `(logits, cache)`: `(batch, new_length, vocabulary_size)` and the
            updated cache.
        """
        x = self._parts["decoder_embedding"](decoder_tokens, start_index=cache_index)
        self_caches = []
        for block, self_cache, cross_cache in zip(
            self.decoder_blocks, cache["self_attention"], cache["cross_attention"]
        ):
            x, self_cache = block.call_cached(
                x,
                self_cache,
                cache_index,
                cross_attention_cache=cross_cache,
                encoder_padding_mask=cache["encoder_padding_mask"],
            )
            self_caches.append(self_cache)
        if self._parts["decoder_norm"] is not None:
            x = self._parts["decoder_norm"](x)
        logits = self._parts["logits"](x)
        return logits, {**cache, "self_attention": tuple(self_caches)}

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "max_sequence_length": self.max_sequence_length,
            "position": self.position,
            "normalize_first": self.normalize_first,
            "tie_embeddings": self.tie_embeddings,
            "num_encoder_layers": self.num_encoder_layers,
            "num_decoder_layers": self.num_decoder_layers,
            "pad_id": self.pad_id,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "use_fused_attention": self.use_fused_attention,
        }
        return self._features_config(config)

    @classmethod
    def from_config(cls, config):
        return cls._from_features_config(config)
