"""Package-wide rules: backend-agnostic imports, serializable public classes."""

import ast
import dataclasses
import inspect
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import keras
import pytest

import keras_attn
import keras_attn.layers
import keras_attn.models

PACKAGE_DIR = pathlib.Path(keras_attn.layers.__file__).parent.parent
BACKEND_AGNOSTIC = ["layers", "models", "training", "generation"]
BANNED = {"tensorflow", "jax", "jaxlib", "torch", "tf_keras"}
# The one exemption (as in pyproject.toml's ruff rules): torch's global
# generator state, which Keras's unseeded dropout draws from on torch and
# Keras has no API to save (keras_attn/training/torch_random_state.py).
ALLOWED = {"training/torch_random_state.py": {"torch"}}


def imported_modules(source):
    """Top-level names of every module `source` imports, however it does."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno
        elif isinstance(node, ast.Call):
            # importlib.import_module("jax") / __import__("tensorflow")
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    yield first.value.split(".")[0], node.lineno


def backend_agnostic_files():
    files = []
    for package in BACKEND_AGNOSTIC:
        files.extend(sorted((PACKAGE_DIR / package).rglob("*.py")))
    return files


def test_there_are_files_to_check():
    names = {path.parent.name for path in backend_agnostic_files()}
    assert {"layers", "models"} <= names


@pytest.mark.parametrize(
    "path",
    backend_agnostic_files(),
    ids=lambda path: str(path.relative_to(PACKAGE_DIR)),
)
def test_no_backend_imports(path):
    allowed = ALLOWED.get(path.relative_to(PACKAGE_DIR).as_posix(), set())
    offending = [
        f"{path.relative_to(PACKAGE_DIR)}:{line} imports {module}"
        for module, line in imported_modules(path.read_text())
        if module in BANNED - allowed
    ]
    assert not offending, offending


def test_the_import_check_can_fail():
    source = "import jax.numpy as jnp\nfrom tensorflow import nest\n"
    source += "import importlib\nimportlib.import_module('torch')\n"
    assert {m for m, _ in imported_modules(source)} >= {"jax", "tensorflow", "torch"}


def public_classes():
    classes = []
    for module in (keras_attn.layers, keras_attn.models):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                classes.append(obj)
    return classes


@pytest.mark.parametrize("cls", public_classes(), ids=lambda cls: cls.__name__)
def test_public_class_is_registered(cls):
    # A layer, or a frozen settings object layers take (`AttentionSettings`).
    assert issubclass(cls, keras.layers.Layer) or dataclasses.is_dataclass(cls)
    name = keras.saving.get_registered_name(cls)
    assert name == f"keras_attn>{cls.__name__}"
    assert keras.saving.get_registered_object(name) is cls


def test_every_public_layer_is_exported():
    exported = set(keras_attn.layers.__all__)
    assert {
        "MultiHeadAttention",
        "SinusoidalPositionEncoding",
        "PositionEmbedding",
        "TokenAndPositionEmbedding",
        "FeedForward",
        "TransformerEncoderBlock",
        "TransformerDecoderBlock",
        "scaled_dot_product_attention",
    } <= exported
    assert "Transformer" in keras_attn.models.__all__


SUBPACKAGES = {
    "distribution",
    "export",
    "generation",
    "hf",
    "layers",
    "models",
    "saving",
    "text",
    "training",
}


def test_subpackages_are_attributes_loaded_on_first_use():
    # A fresh process: this one has long imported everything.
    program = textwrap.dedent(
        """
        import json, sys
        import keras_attn

        before = {
            "tensorflow": "tensorflow" in sys.modules,
            "text": "keras_attn.text" in sys.modules,
            "export": "keras_attn.export" in sys.modules,
        }
        from keras_attn.text.translator import Translator

        assert keras_attn.text.Translator is Translator
        assert keras_attn.export.export_translator.__module__.startswith(
            "keras_attn.export"
        )
        print(json.dumps({"before": before, "dir": dir(keras_attn)}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=dict(os.environ, KERAS_BACKEND=keras.backend.backend()),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["before"] == {
        # On TensorFlow, Keras itself imports it.
        "tensorflow": keras.backend.backend() == "tensorflow",
        "text": False,
        "export": False,
    }
    assert SUBPACKAGES <= set(report["dir"])


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(
        AttributeError, match="module 'keras_attn' has no attribute 'txt'"
    ):
        keras_attn.txt  # noqa: B018
    assert not hasattr(keras_attn, "tokenizers")
    assert SUBPACKAGES <= set(dir(keras_attn))


def test_the_version_has_one_home():
    # keras_attn/version.py; the root re-exports it and the build reads it.
    tomllib = pytest.importorskip("tomllib")
    import keras_attn.version

    assert keras_attn.__version__ == keras_attn.version.__version__
    pyproject = tomllib.loads((PACKAGE_DIR.parent / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "keras_attn.version.__version__"}
