"""Package-wide rules: backend-agnostic imports, serializable public classes."""

import ast
import dataclasses
import inspect
import pathlib

import keras
import pytest
from fresh_library_import import run_library_import

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
    # A fresh process: this one has long imported everything. It imports
    # `keras_attn`, then `keras_attn.text.translator`, and is shared with
    # tests/test_quiet_start.py (`tests/fresh_library_import.py`).
    run = run_library_import()
    assert run.returncode == 0, run.stderr[-3000:]
    report = run.report
    assert report["loaded"] == {
        # On TensorFlow, Keras itself imports it.
        "tensorflow": keras.backend.backend() == "tensorflow",
        "keras_attn.text": False,
        "keras_attn.export": False,
    }
    assert report["text_translator_is_translator"] is True
    assert report["export_translator_module"].startswith("keras_attn.export")
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
