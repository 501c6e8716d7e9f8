"""SavedModel export of trained models (needs TensorFlow on every backend).

`export_translator` writes a `keras_attn.models.Transformer` and its
`keras_attn.text.SubwordTokenizer` as one SavedModel that turns raw strings
into translations, for TF Serving or any TensorFlow runtime; see
`docs/serving.md`.
"""

from keras_attn.export.translator_export import (
    default_source_length_buckets,
    export_translator,
)

__all__ = ["default_source_length_buckets", "export_translator"]
