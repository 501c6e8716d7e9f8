"""Hugging Face checkpoints on keras-attn's blocks (needs `keras-attn[hf]`).

`from_preset("hf://owner/name")` or `from_preset("./a_checkpoint_dir")`
on `keras_attn.models.TransformerLM`, `keras_attn.text.TextGenerator` (and
the other models and tasks whose family is mapped) reads a Hugging Face
checkpoint: `config.json`, safetensors and the tokenizer files. Each family
is one module that maps its config onto our models' options and its tensors
onto our weights (`keras_attn.hf.llama` for Llama, Mistral and Qwen2);
`keras_attn.hf.files` finds, reads and checks the files.

- `keras_attn.hf.files`: `resolve_checkpoint`, `read_config`,
  `read_weights`, `take`, the family registry.
- `keras_attn.hf.checkpoints`: `load_model`.
- `keras_attn.hf.tokenizer`: `HFTokenizer`, a checkpoint's tokenizer.
- `keras_attn.hf.export_to_transformers`: our models written back as
  checkpoints (`keras_attn.hf.export`).
"""

import importlib

_LAZY_MODULES = (
    "bert",
    "checkpoints",
    "export",
    "files",
    "llama",
    "marian",
    "t5",
    "tasks",
    "tokenizer",
)
# Public functions, each from its module.
_LAZY_FUNCTIONS = {"export_to_transformers": "export"}


def __getattr__(name):
    # Modules load on first use: a family module imports our models, which
    # import this package's `files` (for `from_preset`), so nothing below is
    # imported here.
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY_FUNCTIONS:
        module = importlib.import_module(f"{__name__}.{_LAZY_FUNCTIONS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_MODULES) | set(_LAZY_FUNCTIONS))
