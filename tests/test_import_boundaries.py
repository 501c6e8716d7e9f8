"""Module boundaries of `keras_attn`: each module imports on its own, no cycles.

The import graph is read from the source with `ast`. Its nodes are the
modules of `keras_attn` (a package is its `__init__`); an edge `A -> B` is
an import statement in `A` that names `B`, at module level or inside a
function: a function-local import hides a dependency until the call, it
does not remove it. `from P import name` is an edge to `P.name` when that
is a module, else to `P`.

The rule for packages: importing `keras_attn.a.b` runs `keras_attn/__init__`
and `keras_attn/a/__init__` first, but that is Python's doing, not an edge
of `keras_attn.a.b`. A package `__init__` re-exports modules below it, so
its own edges point down the tree and close no cycle, unless a module
imports back a package that (through its `__init__`) imports that module:
`from keras_attn.layers import X` inside `keras_attn/layers/`, or
`from keras_attn import __version__` anywhere below the root. Such an
import is an edge like any other, and the graph must have no cycle at all.
The root is a special case of that rule, checked on its own: no module but
`keras_attn/__init__.py` imports the root `keras_attn` (`import keras_attn`,
or `from keras_attn import X` where `X` is not a module).
"""

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import keras
import pytest

PACKAGE = "keras_attn"
PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1] / PACKAGE


def module_names(package_dir=PACKAGE_DIR):
    """`{dotted module name: path}` for every `.py` file of the package."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _absolute(module, node, is_package):
    """The module a `from ... import` names, relative imports resolved."""
    if not node.level:
        return node.module
    parts = module.split(".")
    # `.` is the package itself in an `__init__`, the enclosing one elsewhere.
    base = parts[: len(parts) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module, source, modules, is_package=False):
    """`[(imported module, line)]`: every import of the package in `source`.

    Args:
        module: the importing module's dotted name.
        source: its source code.
        modules: every module of the package (`module_names()`).
        is_package: whether `module` is a package `__init__`.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported = _absolute(module, node, is_package)
            for alias in node.names:
                child = f"{imported}.{alias.name}"
                found.append((child if child in modules else imported, node.lineno))
    return [(name, line) for name, line in found if name in modules]


def import_graph(modules):
    """`{module: {imported module: first line}}` over the whole package."""
    graph = {}
    for name, path in modules.items():
        edges = {}
        source = path.read_text()
        is_package = path.name == "__init__.py"
        for imported, line in imports(name, source, modules, is_package):
            if imported != name:
                edges.setdefault(imported, line)
        graph[name] = edges
    return graph


def find_cycle(graph):
    """One cycle as `[a, b, ..., a]`, or `None`: a depth-first search."""
    visiting, done = [], set()

    def visit(node):
        visiting.append(node)
        for neighbour in sorted(graph.get(node, ())):
            if neighbour in visiting:
                return visiting[visiting.index(neighbour) :] + [neighbour]
            if neighbour not in done:
                cycle = visit(neighbour)
                if cycle:
                    return cycle
        visiting.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def cycles(graph):
    """One cycle per group of modules that import each other (Kosaraju)."""
    finished, seen = [], set()

    def visit(node, edges, out):
        seen.add(node)
        for neighbour in sorted(edges.get(node, ())):
            if neighbour not in seen:
                visit(neighbour, edges, out)
        out.append(node)

    for node in sorted(graph):
        if node not in seen:
            visit(node, graph, finished)
    reverse = {node: set() for node in graph}
    for node, edges in graph.items():
        for neighbour in edges:
            reverse.setdefault(neighbour, set()).add(node)
    found, seen = [], set()
    for node in reversed(finished):
        if node not in seen:
            group = []
            visit(node, reverse, group)
            if len(group) > 1:
                inside = {n: [m for m in graph[n] if m in group] for n in group}
                found.append(find_cycle(inside))
    return found


def _describe(cycle, graph, modules):
    return (
        " -> ".join(cycle)
        + "\n"
        + "\n".join(
            f"  {modules[a].relative_to(PACKAGE_DIR.parent)}:{graph[a][b]} imports {b}"
            for a, b in zip(cycle, cycle[1:])
        )
    )


def test_the_graph_has_every_module_and_known_edges():
    modules = module_names()
    graph = import_graph(modules)
    assert {"keras_attn", "keras_attn.layers", "keras_attn.validation"} <= set(graph)
    assert "keras_attn.validation" in graph["keras_attn.generation.samplers"]
    assert set(graph["keras_attn"]) >= {"keras_attn.layers", "keras_attn.models"}


def test_import_graph_has_no_cycle():
    modules = module_names()
    graph = import_graph(modules)
    found = cycles(graph)
    assert not found, "Import cycles:\n" + "\n".join(
        _describe(cycle, graph, modules) for cycle in found
    )


def test_the_cycle_check_can_fail():
    modules = {
        "pkg": pathlib.Path("pkg/__init__.py"),
        "pkg.a": pathlib.Path("pkg/a.py"),
        "pkg.b": pathlib.Path("pkg/b.py"),
    }
    sources = {
        "pkg": "from pkg.a import f\n",
        "pkg.a": "def f():\n    from pkg import b\n",  # function-local
        "pkg.b": "from pkg import g\n",  # the package back: pkg -> a -> b -> pkg
    }
    graph = {
        name: dict(imports(name, source, modules, is_package=name == "pkg"))
        for name, source in sources.items()
    }
    assert find_cycle(graph) == ["pkg", "pkg.a", "pkg.b", "pkg"]
    assert cycles(graph) == [["pkg", "pkg.a", "pkg.b", "pkg"]]
    graph["pkg.b"] = {}
    assert find_cycle(graph) is None and cycles(graph) == []


def root_imports(modules, package_dir=PACKAGE_DIR):
    """`["path:line imports ..."]`: imports of the root outside its `__init__`."""
    offending = []
    for name, path in modules.items():
        if name == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name == PACKAGE]
            elif (
                isinstance(node, ast.ImportFrom)
                and _absolute(name, node, path.name == "__init__.py") == PACKAGE
            ):
                names = [
                    f"{PACKAGE}.{alias.name}"
                    for alias in node.names
                    if f"{PACKAGE}.{alias.name}" not in modules
                ]
            else:
                continue
            offending += [
                f"{path.relative_to(package_dir.parent)}:{node.lineno} imports {n}"
                for n in names
            ]
    return offending


def test_only_the_package_init_imports_the_root():
    offending = root_imports(module_names())
    assert not offending, "\n".join(offending)


def test_the_root_import_check_can_fail(tmp_path):
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from keras_attn import sub\n")
    (package / "sub" / "__init__.py").write_text(
        "from keras_attn import sub\nimport keras_attn.sub\n"
    )
    (package / "sub" / "leaf.py").write_text(
        "def version():\n    from keras_attn import __version__\nimport keras_attn\n"
    )
    offending = sorted(root_imports(module_names(package), package))
    assert offending == [
        "keras_attn/sub/leaf.py:2 imports keras_attn.__version__",
        "keras_attn/sub/leaf.py:3 imports keras_attn",
    ]


# One process: for each module, every `keras_attn` module is dropped from
# `sys.modules` and that module imported first. A subprocess, because a fresh
# import registers new classes with Keras, which the test session's classes
# would no longer be.
#
# Importing `a.b.c` first runs `a`, then `a.b` (each unless loaded), then
# `a.b.c` unless one of them loaded it. So when importing its package `a.b`
# first loads `a.b.c`, importing `a.b.c` first runs the very same imports
# in the same order, and fails or not as that did: checked already (the
# names come sorted, a package before its modules). Most modules are loaded
# by the root's `__init__`; this leaves about one import in seven.
_IMPORT_EACH = textwrap.dedent(
    """
    import importlib, json, sys, traceback

    failures, missing, loaded_by, imported_first = {}, {}, {}, []
    for name in json.loads(sys.argv[1]):
        package = name.rpartition(".")[0]
        if name in loaded_by.get(package, ()):
            loaded_by[name] = loaded_by[package]
            continue
        for loaded in [m for m in sys.modules if m.split(".")[0] == "keras_attn"]:
            del sys.modules[loaded]
        imported_first.append(name)
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] == "keras_attn":
                failures[name] = traceback.format_exc(limit=-4)
            else:  # an optional dependency this environment lacks
                missing[name] = error.name
        except Exception:
            failures[name] = traceback.format_exc(limit=-4)
        else:
            loaded_by[name] = {m for m in sys.modules if m.split(".")[0] == "keras_attn"}
    print(json.dumps({
        "failures": failures,
        "missing": missing,
        "imported_first": imported_first,
        "covered": sorted(set(loaded_by) - set(imported_first)),
    }))
    """
)


@pytest.mark.slow
def test_every_module_imports_on_its_own():
    names = sorted(module_names())
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, json.dumps(names)],
        capture_output=True,
        text=True,
        env=dict(os.environ, KERAS_BACKEND=keras.backend.backend()),
        cwd=PACKAGE_DIR.parent,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    # Each module imported first, or loaded by its package imported first.
    assert sorted(report["imported_first"] + report["covered"]) == names
    assert "keras_attn" in report["imported_first"]
    # `missing`: modules of an optional dependency this environment lacks
    # (jax_setup without JAX); CI installs them all.
    assert not report["failures"], (
        "\n".join(f"{name}:\n{error}" for name, error in report["failures"].items())
        + f"\nnot checked, a dependency missing: {report['missing']}"
    )
