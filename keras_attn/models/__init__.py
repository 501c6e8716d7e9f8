"""Functional Keras models built from `keras_attn.layers`."""

from keras_attn.models.presets import TRANSFORMER_PRESETS
from keras_attn.models.transformer import Transformer

__all__ = ["TRANSFORMER_PRESETS", "Transformer"]
