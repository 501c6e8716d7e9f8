"""The paper's encoder-decoder Transformer as a functional Keras model."""

import keras
from keras import ops

from keras_attn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_attn.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.models.presets import TRANSFORMER_PRESETS
from keras_attn.models.zoo_model import (
    ZooModel,
    checked_arguments,
    dropout_layer,
    layer_norm,
    padding_mask,
    token_embedding,
    transformer_blocks,
    vocabulary_logits,
)


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


def _layers(arguments, dtype):
    """The named sub-layers of a `Transformer`, in a dict."""
    if arguments.tie_embeddings:
        encoder_embedding = token_embedding(arguments, dtype, "token_embedding")
        decoder_embedding = encoder_embedding
    else:
        encoder_embedding = token_embedding(arguments, dtype, "encoder_embedding")
        decoder_embedding = token_embedding(arguments, dtype, "decoder_embedding")
    final_norms = arguments.normalize_first
    return {
        "encoder_padding_mask": padding_mask(arguments, "encoder_padding_mask"),
        "decoder_padding_mask": padding_mask(arguments, "decoder_padding_mask"),
        "encoder_embedding": encoder_embedding,
        "decoder_embedding": decoder_embedding,
        "encoder_dropout": dropout_layer(arguments, dtype, "encoder_embedding_dropout"),
        "decoder_dropout": dropout_layer(arguments, dtype, "decoder_embedding_dropout"),
        "encoder_blocks": transformer_blocks(
            TransformerEncoderBlock,
            arguments.num_encoder_layers,
            "encoder_block",
            arguments,
            dtype,
        ),
        "decoder_blocks": transformer_blocks(
            TransformerDecoderBlock,
            arguments.num_decoder_layers,
            "decoder_block",
            arguments,
            dtype,
        ),
        "encoder_norm": (
            layer_norm(arguments, dtype, "encoder_output_norm") if final_norms else None
        ),
        "decoder_norm": (
            layer_norm(arguments, dtype, "decoder_output_norm") if final_norms else None
        ),
        "logits": vocabulary_logits(arguments, decoder_embedding, dtype),
    }


@keras.saving.register_keras_serializable(package="keras_attn")
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
            `keras_attn.layers.FastDropout` at a resolution of 1/2048 (0.1 runs
            at 0.10010).
        attention_dropout: float, dropout on attention weights. Defaults to
            `0.0`.
        max_sequence_length: int, the longest sequence (learned positions,
            decoding caches). Defaults to `256`.
        position: `"sinusoidal"` or `"learned"`. Defaults to `"sinusoidal"`.
        normalize_first: bool, pre-norm blocks plus a final layer norm.
            Defaults to `False` (the paper's post-norm).
        tie_embeddings: bool, share encoder/decoder embeddings and the output
            projection. Defaults to `True`.
        num_encoder_layers: positive int. Defaults to `None`, meaning
            `num_layers`.
        num_decoder_layers: positive int. Defaults to `None`, meaning
            `num_layers`.
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
        arguments = checked_arguments(locals())
        if arguments.num_encoder_layers is None:
            arguments.num_encoder_layers = arguments.num_layers
        if arguments.num_decoder_layers is None:
            arguments.num_decoder_layers = arguments.num_layers

        # === Layers ===
        parts = _layers(arguments, dtype)

        # === Functional Model ===
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in self.token_inputs
        }
        encoder_output, encoder_padding_mask = _run_encoder(
            parts, inputs["encoder_tokens"]
        )
        logits = _run_decoder(
            parts, inputs["decoder_tokens"], encoder_output, encoder_padding_mask
        )
        super().__init__(inputs, logits, arguments, dtype=dtype, **kwargs)
        self._parts = parts

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
