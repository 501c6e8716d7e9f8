"""Every example in the documentation runs, and the site builds.

- The ```` ```python ```` blocks of each page under `docs/` (the API pages
  aside) run top to bottom in one namespace per page, like a notebook, on
  the current Keras backend. A comment on the line before a block changes
  that: `<!-- no-exec -->` skips it (it needs data or a long run),
  `<!-- exec-if: jax -->` runs it on that backend only (`exec-if: jax
  tensorflow` on those two), and
  `<!-- excerpt: keras_attn/layers/x.py -->` marks a quotation of library
  code, checked line by line against that file instead of run.
- The `>>>` examples in the docstrings of `keras_attn.layers`, `.models`,
  `.training` and `.generation` run under `doctest`.
- Every public name (each subpackage's `__all__`) has an API entry, and every
  test that the reliability page cites exists.
- `mkdocs build --strict` passes: a broken link or reference fails it.
"""

import ast
import doctest
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_attn

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS_DIR = REPO_ROOT / "docs"
API_DIR = DOCS_DIR / "api"
BACKEND = keras.backend.backend()

DOCTEST_PACKAGES = (
    "keras_attn",
    "keras_attn.layers",
    "keras_attn.models",
    "keras_attn.training",
    "keras_attn.generation",
)
# Subpackages whose `__all__` the API reference must cover, and their page.
API_PAGES = {
    "layers": "layers.md",
    "models": "models.md",
    "training": "training.md",
    "generation": "generation.md",
    "text": "text.md",
    "export": "export.md",
    "distribution": "distribution.md",
}

_FENCE_START = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w-]*)")
_MARKER = re.compile(
    r"^<!--\s*(?P<kind>no-exec|exec-if|excerpt)\s*:?\s*(?P<arg>.*?)\s*-->$"
)


class CodeBlock:
    """One fenced block of a Markdown page, with the marker before it."""

    def __init__(self, page, line, language, code, marker, marker_arg):
        self.page = page
        self.line = line  # 1-based line of the first code line
        self.language = language
        self.code = code
        self.marker = marker
        self.marker_arg = marker_arg

    def __repr__(self):
        return f"{self.page.relative_to(REPO_ROOT)}:{self.line}"


def code_blocks(page):
    """The fenced code blocks of a Markdown file, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, index, previous = [], 0, ""
    while index < len(lines):
        start = _FENCE_START.match(lines[index])
        if not start:
            if lines[index].strip():
                previous = lines[index].strip()
            index += 1
            continue
        indent = start.group("indent")
        body, index = [], index + 1
        first_line = index + 1
        while index < len(lines) and lines[index].strip() != "```":
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line)
            index += 1
        index += 1  # the closing fence
        marker = _MARKER.match(previous)
        blocks.append(
            CodeBlock(
                page,
                first_line,
                start.group("language"),
                "\n".join(body) + "\n",
                marker.group("kind") if marker else None,
                marker.group("arg") if marker else None,
            )
        )
        previous = ""
    return blocks


def doc_pages():
    """Markdown pages under `docs/` with Python blocks, the API pages aside."""
    pages = sorted(DOCS_DIR.rglob("*.md"))
    return [
        page
        for page in pages
        if API_DIR not in page.parents
        and any(block.language == "python" for block in code_blocks(page))
    ]


def _page_id(page):
    return str(page.relative_to(DOCS_DIR))


# When `scripts/test.sh` runs the backends side by side, each page and
# module of examples runs on one of them (`split_backend`): torch, where
# the examples run eagerly (all pages and docstrings in about 50 s, where
# JAX and TensorFlow each spent about 120 s on their share, compiling
# every tiny model). A page checks that its examples run as written, and
# what each backend does differently is the unit tests' to check, on all
# three. A page with `exec-if` blocks shows backends apart and runs on
# every backend. A one-backend run runs all.
_EXAMPLES_BACKEND = "torch"


def _shared_out(values, ids, backend_specific=()):
    return [
        pytest.param(
            value,
            id=ids(value),
            marks=()
            if value in backend_specific
            else pytest.mark.split_backend(_EXAMPLES_BACKEND),
        )
        for value in values
    ]


def _shows_backends_apart(page):
    return any(block.marker == "exec-if" for block in code_blocks(page))


# === Markdown pages ===


@pytest.mark.parametrize(
    "page",
    _shared_out(
        doc_pages(),
        _page_id,
        [page for page in doc_pages() if _shows_backends_apart(page)],
    ),
)
def test_page_python_blocks_run(
    page, monkeypatch, tmp_path, no_collection_per_deleted_variable
):
    """Runs the page's Python blocks in order, in one namespace.

    (Without Keras's collection per deleted variable: a page that calls
    `model.quantize` spent most of its time there.)
    """
    # Pages may write files: into a temporary directory, not the checkout.
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"docs.{page.stem}"}
    ran = 0
    for block in code_blocks(page):
        if block.language != "python" or block.marker in ("no-exec", "excerpt"):
            continue
        if block.marker == "exec-if" and BACKEND not in block.marker_arg.split():
            continue
        # Leading newlines make tracebacks point at the Markdown line.
        source = "\n" * (block.line - 1) + block.code
        exec(compile(source, str(page), "exec"), namespace)  # noqa: S102
        ran += 1
    if not ran:
        pytest.skip(f"no Python block of {_page_id(page)} runs on {BACKEND}")


def _excerpt_blocks():
    return [
        block
        for page in sorted(DOCS_DIR.rglob("*.md"))
        for block in code_blocks(page)
        if block.marker == "excerpt"
    ]


@pytest.mark.parametrize("block", _excerpt_blocks(), ids=repr)
def test_code_excerpts_match_the_source(block):
    """A quoted excerpt's lines appear in the named file, in the same order."""
    source_path = REPO_ROOT / block.marker_arg
    assert source_path.is_file(), f"{block}: no file {block.marker_arg}"
    source_lines = [line.strip() for line in source_path.read_text().splitlines()]
    position = 0
    for line in block.code.splitlines():
        wanted = line.strip()
        if not wanted or wanted == "...":
            continue
        try:
            position = source_lines.index(wanted, position) + 1
        except ValueError:
            pytest.fail(
                f"{block}: the excerpt line {wanted!r} is not in "
                f"{block.marker_arg} (after line {position}); update the page."
            )


# === Docstring examples ===


def _doctest_modules():
    """The modules of `DOCTEST_PACKAGES` whose source holds a `>>>` example."""
    names = []
    for package_name in DOCTEST_PACKAGES:
        package_dir = REPO_ROOT / package_name.replace(".", "/")
        for path in sorted(package_dir.glob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                module = "" if path.stem == "__init__" else f".{path.stem}"
                names.append(package_name + module)
    return names


# Modules whose examples need what a backend lacks, with the reason.
_DOCTEST_NEEDS = {
    "keras_attn.models.transformer_layout": (
        ("jax", "tensorflow"),
        "keras.distribution has no torch backend",
    ),
}


@pytest.mark.parametrize(
    "module_name", _shared_out(_doctest_modules(), str, _DOCTEST_NEEDS)
)
def test_docstring_examples(module_name):
    backends, reason = _DOCTEST_NEEDS.get(module_name, ((BACKEND,), ""))
    if BACKEND not in backends:
        pytest.skip(reason)
    module = importlib.import_module(module_name)
    globs = {"keras": keras, "np": np, "keras_attn": keras_attn}
    tests = doctest.DocTestFinder(exclude_empty=True).find(
        module, module_name, globs=globs
    )
    assert any(test.examples for test in tests), f"no examples in {module_name}"
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    report = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


# === Consistency of the pages ===


def _public_names(subpackage):
    """`__all__` of `keras_attn.<subpackage>`, read without importing it."""
    init = REPO_ROOT / "keras_attn" / subpackage / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "__all__" for target in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{init} has no __all__")


@pytest.mark.parametrize("subpackage", sorted(API_PAGES))
def test_api_reference_lists_every_public_name(subpackage):
    page = API_DIR / API_PAGES[subpackage]
    documented = set(
        re.findall(r"^::: keras_attn\.(\S+)\s*$", page.read_text(), flags=re.M)
    )
    missing = [
        name
        for name in _public_names(subpackage)
        if f"{subpackage}.{name}" not in documented
    ]
    assert not missing, f"add `::: keras_attn.{subpackage}.NAME` to {page}: {missing}"


def test_reliability_page_cites_existing_tests():
    page = DOCS_DIR / "reliability.md"
    cited = re.findall(r"(tests/[\w/]+\.py)::(\w+)", page.read_text())
    assert cited, "the reliability page cites no test"
    missing = []
    for path, name in sorted(set(cited)):
        test_file = REPO_ROOT / path
        if not test_file.is_file() or not re.search(
            rf"^def {name}\(", test_file.read_text(), flags=re.M
        ):
            missing.append(f"{path}::{name}")
    assert not missing, f"{page} cites tests that do not exist: {missing}"


# === The site ===


@pytest.mark.split_backend("torch")
def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs extra is not installed")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    assert (tmp_path / "site" / "index.html").is_file()
