"""Building blocks of the Transformer (Vaswani et al., 2017)."""

from keras_attn.layers.attention.attention_projection import AttentionProjection
from keras_attn.layers.attention.attention_settings import AttentionSettings
from keras_attn.layers.attention.grouped_query_attention import GroupedQueryAttention
from keras_attn.layers.attention.masking import causal_mask, merge_attention_masks
from keras_attn.layers.attention.multi_head_attention import MultiHeadAttention
from keras_attn.layers.attention.padding_mask import PaddingMask
from keras_attn.layers.attention.scaled_dot_product_attention import (
    scaled_dot_product_attention,
)
from keras_attn.layers.blocks.feed_forward import FeedForward
from keras_attn.layers.blocks.position_wise_dense import PositionwiseDense
from keras_attn.layers.blocks.transformer_decoder_block import TransformerDecoderBlock
from keras_attn.layers.blocks.transformer_encoder_block import TransformerEncoderBlock
from keras_attn.layers.embeddings.class_token import ClassToken
from keras_attn.layers.embeddings.token_and_position_embedding import (
    TokenAndPositionEmbedding,
)
from keras_attn.layers.fast_dropout import FastDropout, fast_dropout
from keras_attn.layers.heads.sequence_pooling import SequencePooling
from keras_attn.layers.heads.tied_vocabulary_projection import TiedVocabularyProjection
from keras_attn.layers.heads.vocabulary_projection import VocabularyProjection
from keras_attn.layers.normalization.layer_norm import LayerNorm, layer_norm
from keras_attn.layers.normalization.rms_normalization import RMSNormalization
from keras_attn.layers.positions import position_schemes
from keras_attn.layers.positions.alibi_bias import AlibiBias, alibi_bias, alibi_slopes
from keras_attn.layers.positions.position_embedding import PositionEmbedding
from keras_attn.layers.positions.relative_position_bias import (
    RelativePositionBias,
    relative_position_bucket,
)
from keras_attn.layers.positions.rotary_embedding import (
    RotaryEmbedding,
    apply_rotary,
    rotary_inverse_frequencies,
)
from keras_attn.layers.positions.sinusoidal_position_encoding import (
    SinusoidalPositionEncoding,
)

__all__ = [
    "AttentionProjection",
    "AttentionSettings",
    "ClassToken",
    "FastDropout",
    "FeedForward",
    "GroupedQueryAttention",
    "LayerNorm",
    "MultiHeadAttention",
    "PaddingMask",
    "PositionEmbedding",
    "PositionwiseDense",
    "SequencePooling",
    "SinusoidalPositionEncoding",
    "TiedVocabularyProjection",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "VocabularyProjection",
    "causal_mask",
    "fast_dropout",
    "layer_norm",
    "merge_attention_masks",
    "position_schemes",
    "scaled_dot_product_attention",
    "AlibiBias",
    "RMSNormalization",
    "RelativePositionBias",
    "RotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_rotary",
    "relative_position_bucket",
    "rotary_inverse_frequencies",
]
