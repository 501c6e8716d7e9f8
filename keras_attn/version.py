"""The keras-attn version, in one place.

`keras_attn.__version__` re-exports it, the presets record it
(`keras_attn.models.preset_io`), and `pyproject.toml` reads it from here
(`[tool.setuptools.dynamic]`), so the package and its build never disagree.
"""

__version__ = "0.1.0"
