"""Functional Keras models built from `keras_attn.layers`."""

from keras_attn.models.preset_io import list_presets
from keras_attn.models.presets import (
    ENCODER_CLASSIFIER_PRESETS,
    LM_PRESETS,
    TRANSFORMER_PRESETS,
    VIT_PRESETS,
)
from keras_attn.models.transformer import Transformer
from keras_attn.models.transformer_encoder_classifier import (
    TransformerEncoderClassifier,
)
from keras_attn.models.transformer_ensemble import TransformerEnsemble
from keras_attn.models.transformer_layout import transformer_layout_map
from keras_attn.models.transformer_lm import TransformerLM
from keras_attn.models.vision_transformer import VisionTransformer
from keras_attn.models.zoo_model import ZooModel

__all__ = [
    "ENCODER_CLASSIFIER_PRESETS",
    "LM_PRESETS",
    "TRANSFORMER_PRESETS",
    "VIT_PRESETS",
    "Transformer",
    "TransformerEncoderClassifier",
    "TransformerEnsemble",
    "TransformerLM",
    "VisionTransformer",
    "ZooModel",
    "list_presets",
    "transformer_layout_map",
]
