"""A GPT-style decoder-only causal language model."""

import keras
from keras import ops

from keras_attn.layers.transformer_decoder_block import TransformerDecoderBlock
from keras_attn.models.presets import LM_PRESETS
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
from keras_attn.validation import check_positive_int


def _run(parts, token_ids, training=None):
    """Token ids `(batch, length)` -> next-token logits, one full causal pass."""
    padding_mask = parts["padding_mask"](token_ids)  # (batch, length)
    x = parts["embedding_dropout"](parts["embedding"](token_ids), training=training)
    for block in parts["blocks"]:
        # No `encoder_sequence`: the blocks have no cross-attention.
        x = block(x, decoder_padding_mask=padding_mask, training=training)
    if parts["output_norm"] is not None:
        x = parts["output_norm"](x)
    # (batch, length, vocabulary_size)
    return parts["logits"](x)


def _layers(arguments, dtype):
    """The named sub-layers of a `TransformerLM`, in a dict."""
    embedding = token_embedding(arguments, dtype, "token_embedding")
    return {
        "padding_mask": padding_mask(arguments),
        "embedding": embedding,
        "embedding_dropout": dropout_layer(arguments, dtype),
        "blocks": transformer_blocks(
            TransformerDecoderBlock,
            arguments.num_layers,
            "decoder_block",
            arguments,
            dtype,
        ),
        "output_norm": (
            layer_norm(arguments, dtype, "output_norm")
            if arguments.normalize_first
            else None
        ),
        "logits": vocabulary_logits(arguments, embedding, dtype),
    }


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerLM(ZooModel):
    """A decoder-only Transformer language model (GPT-style).

    The decoder of "Attention Is All You Need" without cross-attention:
    token + position embedding, `TransformerDecoderBlock`s with masked
    (causal) self-attention, and, with the default pre-norm blocks, a final
    layer norm (GPT-2). The output projection is the transposed token
    embedding (`tie_embeddings=True`, section 3.4 of the paper), so the
    model returns next-token logits: position `t`'s logits depend only on
    tokens `0 ... t`.

    For generation, `initial_cache` and `decode_step` run the same layers
    with a key/value cache; see `keras_attn.generation.generate_lm`.

    Args:
        vocabulary_size: int, number of token ids.
        num_layers: int. Defaults to `12`.
        hidden_dim: int, `d_model`. Defaults to `768`.
        num_heads: int. Defaults to `12`.
        intermediate_dim: int, `d_ff`. Defaults to `3072`.
        dropout: float, on embeddings and sub-layer outputs. Defaults to
            `0.1`. Run by
            `keras_attn.layers.FastDropout` at a resolution of 1/2048 (0.1 runs
            at 0.10010).
        attention_dropout: float. Defaults to `0.0`.
        max_sequence_length: int, the longest sequence (learned positions,
            caches). Defaults to `1024`.
        position: `"learned"` (GPT-2) or `"sinusoidal"`. Defaults to
            `"learned"`.
        normalize_first: bool, pre-norm blocks and a final layer norm.
            Defaults to `True`.
        tie_embeddings: bool, project to the vocabulary with the token
            embedding. Defaults to `True`.
        pad_id: int, the padding id (masked as a key; its labels should be
            ignored by the loss). Defaults to `0`.
        activation: feed-forward activation. Defaults to `"gelu"`.
        layer_norm_epsilon: float. Defaults to `1e-5`.
        use_fused_attention: bool. Defaults to `True`.
        dtype: dtype or `keras.DTypePolicy`. Defaults to `None`, meaning
            the global policy.
        **kwargs: base `keras.Model` arguments (`name`, ...).

    Call arguments:
        token_ids: int tensor `(batch, length)`.

    Returns:
        Logits `(batch, length, vocabulary_size)`; position `t` scores the
        token at `t + 1`.

    Example:

    >>> model = keras_attn.models.TransformerLM.from_preset(
    ...     "lm_tiny", vocabulary_size=100)
    >>> tuple(model(keras.ops.ones((2, 7), "int32")).shape)
    (2, 7, 100)

    References:
        - Radford et al., "Language Models are Unsupervised Multitask
          Learners", 2019 (GPT-2).
        - Vaswani et al., "Attention Is All You Need", 2017, sections 3.1,
          3.2.3 and 3.4.
    """

    presets = LM_PRESETS
    preset_arguments = ("vocabulary_size",)
    token_inputs = ("token_ids",)

    def __init__(
        self,
        vocabulary_size,
        num_layers=12,
        hidden_dim=768,
        num_heads=12,
        intermediate_dim=3072,
        dropout=0.1,
        attention_dropout=0.0,
        max_sequence_length=1024,
        position="learned",
        normalize_first=True,
        tie_embeddings=True,
        pad_id=0,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        use_fused_attention=True,
        dtype=None,
        **kwargs,
    ):
        arguments = checked_arguments(locals())

        # === Layers ===
        parts = _layers(arguments, dtype)

        # === Functional Model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        logits = _run(parts, token_ids)
        super().__init__(token_ids, logits, arguments, dtype=dtype, **kwargs)
        self._parts = parts

    @property
    def blocks(self):
        return self._parts["blocks"]

    @property
    def token_embedding(self):
        """The `TokenAndPositionEmbedding` (also the tied output projection)."""
        return self._parts["embedding"]

    # === Decoding with a key/value cache ===

    def initial_cache(self, batch_size, max_length):
        """Allocates an empty key/value cache for `max_length` positions.

        Args:
            batch_size: int or scalar int tensor.
            max_length: int, the most positions (prompt included) to decode.

        Returns:
            A dict of tensors (a pytree that `keras.ops.while_loop` carries):
            `"self_attention"`, one `(keys, values)` pair per block, each
            `(batch, max_length, num_heads, head_dim)`.
        """
        check_positive_int(max_length, "max_length")
        if self.position == "learned" and max_length > self.max_sequence_length:
            raise ValueError(
                f"`max_length` must be at most max_sequence_length="
                f"{self.max_sequence_length} with learned positions. "
                f"Received: max_length={max_length}"
            )
        head_dim = self.hidden_dim // self.num_heads
        # (batch, max_length, num_heads, head_dim)
        slots = ops.zeros(
            (batch_size, max_length, self.num_heads, head_dim),
            dtype=self.compute_dtype,
        )
        return {"self_attention": tuple((slots, slots) for _ in self.blocks)}

    def decode_step(self, token_ids, cache, cache_index):
        """Runs new positions, reading and extending the cache.

        Call it once with the whole prompt (`new_length` = prompt length,
        `cache_index=0`) to fill the cache, then with one token per step.

        Args:
            token_ids: int tensor `(batch, new_length)`, the tokens at
                positions `cache_index ... cache_index + new_length - 1`.
            cache: the dict from `initial_cache` (or a previous step).
            cache_index: int or scalar int tensor.

        Returns:
            `(logits, cache)`: `(batch, new_length, vocabulary_size)` and the
            updated cache.
        """
        x = self._parts["embedding"](token_ids, start_index=cache_index)
        caches = []
        for block, block_cache in zip(self.blocks, cache["self_attention"]):
            x, block_cache = block.call_cached(x, block_cache, cache_index)
            caches.append(block_cache)
        if self._parts["output_norm"] is not None:
            x = self._parts["output_norm"](x)
        logits = self._parts["logits"](x)
        return logits, {**cache, "self_attention": tuple(caches)}
