"""The text the zoo models' docstrings share is inserted whole."""

import pytest

from keras_attn.models import (
    Transformer,
    TransformerEncoderClassifier,
    TransformerLM,
    VisionTransformer,
)
from keras_attn.shared_docstrings import SHARED_TEXT, insert_shared_text

MODELS = [Transformer, TransformerEncoderClassifier, TransformerLM, VisionTransformer]


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_every_model_documents_the_shared_arguments(model):
    assert "{{" not in model.__doc__
    for name in ("dtype", "normalization", "use_bias", "attention"):
        assert f"\n        {name}: " in model.__doc__, name


@pytest.mark.parametrize("model", [Transformer, TransformerLM])
def test_decode_step_documents_its_cache_arguments(model):
    doc = model.decode_step.__doc__
    assert "{{" not in doc
    assert "\n            cache: the dict from `initial_cache`" in doc
    assert "\n            cache_index: int or scalar int tensor" in doc


def test_the_shared_text_takes_the_placeholders_indentation():
    doc = "Summary.\n\n    Args:\n        {{decode_step_arguments}}\n    Returns"
    lines = insert_shared_text(doc).splitlines()
    shared = SHARED_TEXT["decode_step_arguments"].splitlines()
    assert lines[3:-1] == [f"        {line}" for line in shared]
    assert lines[-1] == "    Returns"
    assert insert_shared_text(None) is None


def test_an_unknown_placeholder_is_a_key_error():
    with pytest.raises(KeyError, match="no_such_text"):
        insert_shared_text("    {{no_such_text}}")


def test_every_placeholder_in_the_source_names_a_shared_text():
    # The API reference inserts SHARED_TEXT into the source's docstrings
    # (scripts/griffe_keras_docstrings.py): a placeholder with another
    # mechanism, or none, fails `mkdocs build` and reads raw in the docs.
    import pathlib
    import re

    import keras_attn

    placeholder = re.compile(r"^[ \t]*\{\{(\w+)\}\}[ \t]*$", re.M)
    found = {}
    for path in pathlib.Path(keras_attn.__file__).parent.rglob("*.py"):
        for name in placeholder.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, path.name)
    assert {"zoo_model_arguments", "jit_compile_arg", "load_model_args"} <= set(found)
    unknown = {name: file for name, file in found.items() if name not in SHARED_TEXT}
    assert not unknown
