"""A GPT-style decoder-only causal language model."""

import keras

from keras_attn.layers.blocks.transformer_decoder_block import TransformerDecoderBlock
from keras_attn.models.presets import LM_PRESETS
from keras_attn.models.zoo_model import (
    ZooModel,
    position_bias_argument,
)
from keras_attn.shared_docstrings import shared_docstrings


@keras.saving.register_keras_serializable(package="keras_attn")
@shared_docstrings
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
            `keras_attn.layers.FastDropout` (whose docstring says how it
            rounds the rate).
        max_sequence_length: int, the longest sequence (learned positions,
            caches). Defaults to `1024`.
        position: the position scheme's name (see
            `keras_attn.layers.positions.position_schemes`), `"learned"` (GPT-2),
            `"sinusoidal"`, `"alibi"`, `"relative"` (T5) or `"rotary"`
            (RoPE), or a dict of a name and the scheme's fields, e.g.
            `{"name": "rotary", "max_wavelength": 500000.0}`
            (`position_schemes.check_position`). Defaults to `"learned"`.
        normalize_first: bool, pre-norm blocks and a final norm.
            Defaults to `True`.
        tie_embeddings: bool, project to the vocabulary with the token
            embedding. Defaults to `True`.
        pad_id: int, the padding id (masked as a key; its labels should be
            ignored by the loss). Defaults to `0`.
        activation: feed-forward activation, a Keras activation or a
            gated one: `"geglu"`, `"swiglu"` or `"reglu"` (Shazeer, 2020).
            Defaults to `"gelu"`.
        layer_norm_epsilon: float, a normal float32 number (at least
            `2**-126`). Defaults to `1e-5`.
        {{zoo_model_arguments}}
        scale_embeddings: bool, multiply the token embeddings by
            `sqrt(hidden_dim)` (section 3.4 of the paper); `False` for
            Llama-style models. Defaults to `True`.
        **kwargs: base `keras.Model` arguments (`name`, `trainable`).

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
        max_sequence_length=1024,
        position="learned",
        normalize_first=True,
        tie_embeddings=True,
        pad_id=0,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        dtype=None,
        normalization="layer",
        use_bias=True,
        attention=None,
        scale_embeddings=True,
        **kwargs,
    ):
        # === Config (checked before any layer is built) ===
        # Every argument is one that models share, checked and stored under
        # its name (`ZooModel._check_model_arguments`).
        self._check_model_arguments(locals())
        self._use_position_scheme()

        # === Layers ===
        padding_mask_layer = self._padding_mask_layer()
        token_embedding = self._token_embedding(
            dtype, "token_embedding", scale_by_sqrt_dim=self.scale_embeddings
        )
        embedding_dropout = self._dropout(dtype)
        # `None` unless the position scheme biases attention scores.
        position_bias = self.position_scheme.attention_bias_layer(
            False, dtype, "position_bias"
        )
        blocks = self._transformer_blocks(
            TransformerDecoderBlock, self.num_layers, "decoder_block", dtype
        )
        output_norm = (
            self._normalization(dtype, "output_norm") if self.normalize_first else None
        )
        output_projection = self._vocabulary_logits(token_embedding, dtype)

        # === Functional Model ===
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        padding_mask = padding_mask_layer(token_ids)  # (batch, length)
        x = embedding_dropout(token_embedding(token_ids))
        bias = position_bias_argument(position_bias, "self_attention_bias", x)
        for block in blocks:
            # No `encoder_sequence`: the blocks have no cross-attention.
            x = block(x, decoder_padding_mask=padding_mask, **bias)
        if output_norm is not None:
            x = output_norm(x)
        # (batch, length, vocabulary_size)
        logits = output_projection(x)
        super().__init__(token_ids, logits, dtype=dtype, **kwargs)

        # The layers as attributes, assigned after the graph so that the
        # weights keep the graph's order (see `ZooModel`).
        self.padding_mask_layer = padding_mask_layer
        self.token_embedding = token_embedding
        self.embedding_dropout = embedding_dropout
        self.position_bias = position_bias
        self.blocks = blocks
        self.output_norm = output_norm
        self.output_projection = output_projection

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "max_sequence_length": self.max_sequence_length,
                "position": self.position,
                "normalize_first": self.normalize_first,
                "tie_embeddings": self.tie_embeddings,
                "scale_embeddings": self.scale_embeddings,
                "pad_id": self.pad_id,
                **self._transformer_config(),
            }
        )
        return config

    # === Decoding with a key/value cache ===

    def initial_cache(self, batch_size, max_length):
        """Allocates an empty key/value cache for `max_length` positions.

        Args:
            batch_size: int or scalar int tensor.
            max_length: int, the most positions (prompt included) to decode
                (at most the position scheme's `max_length`).

        Returns:
            A dict of tensors (a pytree that `keras.ops.while_loop` carries):
            `"self_attention"`, one `(keys, values)` pair per block, each
            `(batch, max_length, num_key_value_heads, head_dim)`.
        """
        return {
            "self_attention": self._self_attention_cache(
                self.blocks, batch_size, max_length
            )
        }

    def decode_step(self, token_ids, cache, cache_index):
        """Runs new positions, reading and extending the cache.

        Call it once with the whole prompt (`new_length` = prompt length,
        `cache_index=0`) to fill the cache, then with one token per step.

        Args:
            token_ids: int tensor `(batch, new_length)`, the tokens at
                positions `cache_index ... cache_index + new_length - 1`.
            {{decode_step_arguments}}

        Returns:
            `(logits, cache)`: `(batch, new_length, vocabulary_size)` and the
            updated cache.
        """
        x, cache_index, bias = self._embed_new_positions(
            self.token_embedding, self.position_bias, token_ids, cache, cache_index
        )
        caches = []
        for block, block_cache in zip(self.blocks, cache["self_attention"]):
            x, block_cache = block.call_cached(x, block_cache, cache_index, **bias)
            caches.append(block_cache)
        if self.output_norm is not None:
            x = self.output_norm(x)
        logits = self.output_projection(x)
        return logits, {**cache, "self_attention": tuple(caches)}
