"""keras-attn: the Transformer of "Attention Is All You Need" for Keras 3.

Sub-packages, each an attribute of `keras_attn` (or importable on its own):

- `keras_attn.layers`: attention, position encodings, embeddings,
  feed-forward, encoder and decoder blocks.
- `keras_attn.models`: functional models and their presets.
- `keras_attn.training`: label-smoothed loss, warm-up schedule, metrics.
- `keras_attn.generation`: greedy, beam search and sampling with a cache.
- `keras_attn.distribution`: data and model parallel training
  (`keras.distribution` on JAX, `tf.distribute` on TensorFlow).
- `keras_attn.saving`: `load_model` with errors that name the file.
- `keras_attn.text`: tokenizers, tf.data pipelines, BLEU and the
  `Translator`, `TextGenerator`, `TextClassifier` tasks (needs
  `keras-attn[text]`).
- `keras_attn.export`: SavedModel export of a translator (needs TensorFlow).
- `keras_attn.hf`: Hugging Face checkpoints (`from_preset("hf://owner/name")`)
  on our models (needs `keras-attn[hf]`; `docs/bring_a_checkpoint.md`).

`import keras_attn` loads the first six, which need Keras alone and register
their classes for `keras.saving.load_model`. `text` and `export` import
TensorFlow, so they load on first use (`keras_attn.text.Translator` after
`import keras_attn` works; PEP 562) and `import keras_attn` stays light on
JAX and torch.
"""

import importlib

from keras_attn import distribution, generation, layers, models, saving, training
from keras_attn.version import __version__

# Loaded by `__getattr__` on first use: they import TensorFlow.
_LAZY_SUBPACKAGES = ("export", "hf", "text")

__all__ = [
    "distribution",
    "generation",
    "layers",
    "models",
    "saving",
    "training",
    "__version__",
]


def __getattr__(name):
    # Called only for names not yet in the module's namespace: importing a
    # submodule sets it there, so this runs once per lazy subpackage.
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBPACKAGES))
