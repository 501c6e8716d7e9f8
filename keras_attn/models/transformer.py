"""The paper's encoder-decoder Transformer as a functional Keras model."""

import types

import keras
from keras import ops

from keras_attn.layers.blocks.transformer_decoder_block import TransformerDecoderBlock
from keras_attn.layers.blocks.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.layers.heads.tied_vocabulary_projection import TiedVocabularyProjection
from keras_attn.models.presets import TRANSFORMER_PRESETS
from keras_attn.models.zoo_model import (
    ZooModel,
    position_bias_argument,
)
from keras_attn.shared_docstrings import shared_docstrings
from keras_attn.validation import (
    check_bool,
    check_positive_float,
    check_positive_int,
)

# `layers` below is the model, or, while the model is built, a namespace
# of its layers (and its `logits_scale`) under the same names.


def _run_encoder(layers, tokens, training=None):
    """Token ids `(batch, source_length)` -> encoder output and padding mask."""
    encoder_padding_mask = layers.encoder_padding_mask_layer(tokens)
    x = layers.encoder_embedding(tokens)
    x = layers.encoder_embedding_dropout(x, training=training)
    bias = position_bias_argument(layers.encoder_position_bias, "attention_bias", x)
    for block in layers.encoder_blocks:
        x = block(x, padding_mask=encoder_padding_mask, training=training, **bias)
    if layers.encoder_output_norm is not None:
        x = layers.encoder_output_norm(x)
    # (batch, source_length, hidden_dim), (batch, source_length)
    return x, encoder_padding_mask


def _run_decoder(layers, tokens, encoder_output, encoder_padding_mask, training=None):
    """Teacher-forced decoder: `(batch, target_length)` ids -> logits."""
    decoder_padding_mask = layers.decoder_padding_mask_layer(tokens)
    x = layers.decoder_embedding(tokens)
    x = layers.decoder_embedding_dropout(x, training=training)
    bias = position_bias_argument(
        layers.decoder_position_bias, "self_attention_bias", x
    )
    for block in layers.decoder_blocks:
        x = block(
            x,
            encoder_output,
            decoder_padding_mask=decoder_padding_mask,
            encoder_padding_mask=encoder_padding_mask,
            training=training,
            **bias,
        )
    if layers.decoder_output_norm is not None:
        x = layers.decoder_output_norm(x)
    # (batch, target_length, vocabulary_size)
    return _logits(layers, x)


def _logits(layers, x):
    """The decoder's output `(batch, length, hidden_dim)` -> logits."""
    if layers.logits_scale != 1.0:
        x = x * ops.cast(layers.logits_scale, x.dtype)
    return layers.output_projection(x)


@keras.saving.register_keras_serializable(package="keras_attn")
@shared_docstrings
class Transformer(ZooModel):
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
            Defaults to `0.1`. Run by
            `keras_attn.layers.FastDropout` (whose docstring says how it
            rounds the rate).
        max_sequence_length: int, the longest sequence (learned positions,
            decoding caches). Defaults to `256`.
        position: the position scheme's name (see
            `keras_attn.layers.positions.position_schemes`), `"sinusoidal"`,
            `"learned"`, `"alibi"` (attention biases, Press et al., 2022),
            `"relative"` (T5) or `"rotary"` (RoPE, self-attention only),
            or a dict of the name and the scheme's fields, e.g.
            `{"name": "relative", "num_buckets": 32, "max_distance": 128}`.
            Defaults to `"sinusoidal"`.
        normalize_first: bool, pre-norm blocks plus a final norm.
            Defaults to `False` (the paper's post-norm).
        tie_embeddings: bool, share encoder/decoder embeddings and the output
            projection. Defaults to `True`.
        num_encoder_layers: positive int. Defaults to `None`, meaning
            `num_layers`.
        num_decoder_layers: positive int. Defaults to `None`, meaning
            `num_layers`.
        pad_id: int, the padding token id. Defaults to `0`.
        activation: feed-forward activation, a Keras activation or a
            gated one: `"geglu"`, `"swiglu"`, `"reglu"` (Shazeer, 2020) or
            `"geglu_approximate"` (GELU's tanh approximation, T5 v1.1's).
            Defaults to `"relu"`.
        layer_norm_epsilon: float, a normal float32 number (at least
            `2**-126`). Defaults to `1e-6`.
        {{zoo_model_arguments}}
        logits_bias: bool, a learned bias added to the tied projection's
            logits (Marian's `final_logits_bias`); needs
            `tie_embeddings=True` (an untied projection has its own).
            Defaults to `False`.
        scale_embeddings: bool, multiply the token embeddings by
            `sqrt(hidden_dim)` (section 3.4 of the paper); `False` for T5.
            Defaults to `True`.
        share_embeddings: bool, one token embedding for the encoder and
            the decoder. With `tie_embeddings=False` and
            `share_embeddings=True`, the output projection alone has
            weights of its own (T5 v1.1). `tie_embeddings=True` shares
            them all and needs `True`. Defaults to `None`, meaning
            `tie_embeddings`.
        logits_scale: positive float, multiplies the decoder's output
            before the output projection (so the logits, any bias aside):
            T5's tied projection reads `hidden_dim ** -0.5` times the
            decoder's output. Defaults to `1.0`.
        **kwargs: base `keras.Model` arguments (`name`, `trainable`).

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

    presets = TRANSFORMER_PRESETS
    preset_arguments = ("vocabulary_size",)
    token_inputs = ("encoder_tokens", "decoder_tokens")
    nonempty_inputs = ("encoder_tokens",)

    def __init__(
        self,
        vocabulary_size,
        num_layers=6,
        hidden_dim=512,
        num_heads=8,
        intermediate_dim=2048,
        dropout=0.1,
        max_sequence_length=256,
        position="sinusoidal",
        normalize_first=False,
        tie_embeddings=True,
        num_encoder_layers=None,
        num_decoder_layers=None,
        pad_id=0,
        activation="relu",
        layer_norm_epsilon=1e-6,
        dtype=None,
        normalization="layer",
        use_bias=True,
        attention=None,
        logits_bias=False,
        scale_embeddings=True,
        share_embeddings=None,
        logits_scale=1.0,
        **kwargs,
    ):
        # === Config (checked before any layer is built) ===
        # The arguments that models share, checked and stored under their
        # names (`ZooModel._check_model_arguments`); then this model's own.
        self._check_model_arguments(locals())
        self.share_embeddings = self.tie_embeddings
        if share_embeddings is not None:
            self.share_embeddings = check_bool(share_embeddings, "share_embeddings")
        if self.tie_embeddings and not self.share_embeddings:
            raise ValueError(
                "`tie_embeddings=True` shares one embedding between the encoder, "
                "the decoder and the output projection; it needs "
                "`share_embeddings=True` (or `None`). Received: "
                f"tie_embeddings=True, share_embeddings={share_embeddings}"
            )
        self.logits_scale = check_positive_float(logits_scale, "logits_scale")
        self.num_encoder_layers = self.num_layers
        if num_encoder_layers is not None:
            self.num_encoder_layers = check_positive_int(
                num_encoder_layers, "num_encoder_layers"
            )
        self.num_decoder_layers = self.num_layers
        if num_decoder_layers is not None:
            self.num_decoder_layers = check_positive_int(
                num_decoder_layers, "num_decoder_layers"
            )
        self.logits_bias = check_bool(logits_bias, "logits_bias")
        if self.logits_bias and not self.tie_embeddings:
            raise ValueError(
                "`logits_bias=True` adds a bias to the tied projection; an "
                "untied one (`tie_embeddings=False`) has its own bias. "
                f"Received: logits_bias=True, tie_embeddings={tie_embeddings}"
            )
        self._use_position_scheme()

        # === Layers ===
        scale = self.scale_embeddings
        if self.share_embeddings:
            encoder_embedding = self._token_embedding(dtype, "token_embedding", scale)
            decoder_embedding = encoder_embedding
        else:
            encoder_embedding = self._token_embedding(dtype, "encoder_embedding", scale)
            decoder_embedding = self._token_embedding(dtype, "decoder_embedding", scale)
        final_norms = self.normalize_first
        layers = types.SimpleNamespace(
            encoder_padding_mask_layer=self._padding_mask_layer("encoder_padding_mask"),
            decoder_padding_mask_layer=self._padding_mask_layer("decoder_padding_mask"),
            encoder_embedding=encoder_embedding,
            decoder_embedding=decoder_embedding,
            encoder_embedding_dropout=self._dropout(dtype, "encoder_embedding_dropout"),
            decoder_embedding_dropout=self._dropout(dtype, "decoder_embedding_dropout"),
            # `None` unless the position scheme biases attention scores.
            encoder_position_bias=self.position_scheme.attention_bias_layer(
                True, dtype, "encoder_position_bias"
            ),
            decoder_position_bias=self.position_scheme.attention_bias_layer(
                False, dtype, "decoder_position_bias"
            ),
            encoder_blocks=self._transformer_blocks(
                TransformerEncoderBlock, self.num_encoder_layers, "encoder_block", dtype
            ),
            decoder_blocks=self._transformer_blocks(
                TransformerDecoderBlock, self.num_decoder_layers, "decoder_block", dtype
            ),
            encoder_output_norm=(
                self._normalization(dtype, "encoder_output_norm")
                if final_norms
                else None
            ),
            decoder_output_norm=(
                self._normalization(dtype, "decoder_output_norm")
                if final_norms
                else None
            ),
            output_projection=(
                TiedVocabularyProjection(
                    decoder_embedding, use_bias=True, dtype=dtype, name="logits"
                )
                if self.logits_bias
                else self._vocabulary_logits(decoder_embedding, dtype)
            ),
            logits_scale=self.logits_scale,
        )

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in self.token_inputs
        }
        encoder_output, encoder_padding_mask = _run_encoder(
            layers, inputs["encoder_tokens"]
        )
        logits = _run_decoder(
            layers, inputs["decoder_tokens"], encoder_output, encoder_padding_mask
        )
        super().__init__(inputs, logits, dtype=dtype, **kwargs)

        # The layers as attributes, assigned after the graph so that the
        # weights keep the graph's order (see `ZooModel`).
        self.encoder_padding_mask_layer = layers.encoder_padding_mask_layer
        self.decoder_padding_mask_layer = layers.decoder_padding_mask_layer
        self.encoder_embedding = layers.encoder_embedding
        self.decoder_embedding = layers.decoder_embedding
        self.encoder_embedding_dropout = layers.encoder_embedding_dropout
        self.decoder_embedding_dropout = layers.decoder_embedding_dropout
        self.encoder_position_bias = layers.encoder_position_bias
        self.decoder_position_bias = layers.decoder_position_bias
        self.encoder_blocks = layers.encoder_blocks
        self.decoder_blocks = layers.decoder_blocks
        self.encoder_output_norm = layers.encoder_output_norm
        self.decoder_output_norm = layers.decoder_output_norm
        self.output_projection = layers.output_projection

    @property
    def token_embedding(self):
        """The decoder's `TokenAndPositionEmbedding` (with shared embeddings,
        also the encoder's)."""
        return self.decoder_embedding

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "max_sequence_length": self.max_sequence_length,
                "position": self.position,
                "normalize_first": self.normalize_first,
                "tie_embeddings": self.tie_embeddings,
                "num_encoder_layers": self.num_encoder_layers,
                "num_decoder_layers": self.num_decoder_layers,
                "pad_id": self.pad_id,
                "logits_bias": self.logits_bias,
                "scale_embeddings": self.scale_embeddings,
                "share_embeddings": self.share_embeddings,
                "logits_scale": self.logits_scale,
                **self._transformer_config(),
            }
        )
        return config

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
        return _run_encoder(self, encoder_tokens, training)

    def decode(
        self, decoder_tokens, encoder_output, encoder_padding_mask, training=False
    ):
        """Teacher-forced decoder pass without a cache; returns logits."""
        return _run_decoder(
            self, decoder_tokens, encoder_output, encoder_padding_mask, training
        )

    def initial_cache(self, encoder_output, encoder_padding_mask, max_length):
        """Allocates the decoding cache for one batch of source sentences.

        Cross-attention keys and values are computed here, once per sentence;
        self-attention slots are filled one position per `decode_step`.

        Args:
            encoder_output: `(batch, source_length, hidden_dim)`.
            encoder_padding_mask: boolean `(batch, source_length)`.
            max_length: int, the most target positions to decode (at most
                the position scheme's `max_length`).

        Returns:
            A dict of tensors (a pytree that `keras.ops.while_loop` carries).
        """
        batch_size = ops.shape(encoder_output)[0]
        return {
            "self_attention": self._self_attention_cache(
                self.decoder_blocks, batch_size, max_length
            ),
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
            {{decode_step_arguments}}

        Returns:
            `(logits, cache)`: `(batch, new_length, vocabulary_size)` and the
            updated cache.
        """
        x, cache_index, bias = self._embed_new_positions(
            self.decoder_embedding,
            self.decoder_position_bias,
            decoder_tokens,
            cache,
            cache_index,
        )
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
                **bias,
            )
            self_caches.append(self_cache)
        if self.decoder_output_norm is not None:
            x = self.decoder_output_norm(x)
        logits = _logits(self, x)
        return logits, {**cache, "self_attention": tuple(self_caches)}
