"""Export of trained models: SavedModel, ONNX and LiteRT (see docs/serving.md).

- `export_translator`: a `keras_attn.models.Transformer` and its
  `keras_attn.text.SubwordTokenizer` as one SavedModel that turns raw
  strings into translations, for TF Serving or any TensorFlow runtime
  (needs TensorFlow on every backend).
- `export_onnx`: a zoo model's forward pass as ONNX (TensorFlow, torch).
- `export_onnx_translator`: the translator's decoding loop as ONNX, served
  by `onnx_translator.OnnxTranslator` with ONNX Runtime and
  `sentencepiece`, without Keras or TensorFlow (`keras-attn[onnx]`).
- `export_litert`: a zoo model's forward pass as `.tflite` of builtin ops
  (`keras-attn[litert]`).
"""

from keras_attn.export.litert_export import export_litert
from keras_attn.export.onnx_export import export_onnx, export_onnx_translator
from keras_attn.export.translator_export import (
    default_source_length_buckets,
    export_translator,
)

__all__ = [
    "default_source_length_buckets",
    "export_litert",
    "export_onnx",
    "export_onnx_translator",
    "export_translator",
]
