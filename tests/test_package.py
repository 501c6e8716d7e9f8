"""Package-wide rules: backend-agnostic imports, serializable public classes."""

import ast
import inspect
import pathlib

import keras
import pytest

import keras_attn.layers
import keras_attn.models

PACKAGE_DIR = pathlib.Path(keras_attn.layers.__file__).parent.parent
BACKEND_AGNOSTIC = ["layers", "models", "training", "generation"]
BANNED = {"tensorflow", "jax", "jaxlib", "torch", "tf_keras"}


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
    offending = [
        f"{path.relative_to(PACKAGE_DIR)}:{line} imports {module}"
        for module, line in imported_modules(path.read_text())
        if module in BANNED
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
    assert issubclass(cls, keras.layers.Layer)
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
