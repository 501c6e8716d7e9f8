"""keras-attn: the Transformer of "Attention Is All You Need" for Keras 3.

Sub-packages, each importable on its own:

- `keras_attn.layers`: attention, position encodings, embeddings,
  feed-forward, encoder and decoder blocks.
- `keras_attn.models`: functional models and their presets.
- `keras_attn.training`: label-smoothed loss, warm-up schedule, metrics.
- `keras_attn.generation`: greedy, beam search and sampling with a cache.
- `keras_attn.distribution`: data and model parallel training
  (`keras.distribution` on JAX, `tf.distribute` on TensorFlow).
- `keras_attn.saving`: `load_model` with errors that name the file.
- `keras_attn.text`: tokenizers, tf.data pipelines, BLEU (needs
  `keras-attn[text]`).
"""

from keras_attn import distribution, generation, layers, models, saving, training

__version__ = "0.1.0"

__all__ = [
    "distribution",
    "generation",
    "layers",
    "models",
    "saving",
    "training",
    "__version__",
]
