"""A griffe extension for the API reference: shared text inserted, doctest
runs fenced as code blocks.

Some docstrings hold a `{{name}}` line where text that several of them share
is inserted when their module is imported
(`keras_attn/shared_docstrings.py`); griffe reads the source, so this
extension inserts the same text, with the same function (loaded from its
file: the site builds without importing Keras).

The docstrings follow Keras: the `>>>` lines of an example sit at the
docstring's own indentation under `Example:`, not indented beneath it. In
Markdown those lines would read as nested block quotes; this extension wraps
each run of `>>>` / `...` lines and their expected output in a ```` ```pycon ````
fence before mkdocstrings renders the docstring. The library's docstrings stay
as they are (and `tests/docs/test_docs_examples.py` runs them with doctest).

Loaded by `mkdocs.yml` (`plugins.mkdocstrings.handlers.python.options.extensions`).
"""

import importlib.util
from pathlib import Path

import griffe

_SHARED_DOCSTRINGS = (
    Path(__file__).resolve().parents[1] / "keras_attn/shared_docstrings.py"
)
_spec = importlib.util.spec_from_file_location("shared_docstrings", _SHARED_DOCSTRINGS)
_shared_docstrings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_shared_docstrings)


def fence_doctests(text):
    """Returns `text` with every doctest run inside a ```` ```pycon ```` fence.

    A run starts at a `>>>` line and ends at the first blank line (where
    doctest's expected output ends too). Runs already inside a fence are left
    alone.
    """
    lines = text.splitlines()
    result = []
    in_fence = False
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if in_fence or not stripped.startswith(">>>"):
            result.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(stripped)]
        result.append(f"{indent}```pycon")
        while index < len(lines) and lines[index].strip():
            result.append(lines[index])
            index += 1
        result.append(f"{indent}```")
    return "\n".join(result)


class KerasDocstrings(griffe.Extension):
    """Inserts the shared text and fences the doctest examples of every
    object that has a docstring."""

    def on_instance(self, *, node, obj, agent, **kwargs):
        if obj.docstring is None:
            return
        obj.docstring.value = _shared_docstrings.insert_shared_text(obj.docstring.value)
        if ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
