"""The package's modules import each other without a cycle, at module level or inside functions.

In a module-level import cycle the import order matters: whichever module of the cycle is imported
first is seen half-initialised by the others. The graph is read from the source (``ast``), not from an
import: a node per module of ``numba_nbits`` (a package is its ``__init__``), an edge per module-level
import of another of them, absolute or relative. Module level means what runs when the module is
imported: its body, with the bodies of ``if`` / ``try`` / ``with`` / loops and classes, but not function
bodies and not ``if TYPE_CHECKING:`` blocks.

* ``import a.b.c`` and ``from a.b import c`` (``c`` a submodule) are edges to ``a.b.c`` and to the packages
  above it, except the packages that enclose the importing module: those have started initialising
  before any of their modules runs, so importing them runs nothing.
* ``from a.b import name`` (``name`` no submodule) reads the package's namespace: an edge to ``a.b``
  even when it encloses the importing module.

``import_graph(..., module_level=False)`` takes every import that can run, function bodies included:
what ``tests/test_kernel_cache.py`` follows to find the modules kernels are built from.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def package_modules(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    """Dotted module name -> source file, for every ``.py`` file of ``root / package``."""
    mods = {}
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST, module_level: bool):
    """The Import / ImportFrom nodes in ``node`` that can run: at import time (``module_level``), or at
    any time (function bodies included); never those of an ``if TYPE_CHECKING:`` block."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        children = node.orelse
    elif module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        yield from _import_nodes(child, module_level)


def _encloses(package: str, module: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_of(module: str, path: pathlib.Path, modules, module_level: bool = True) -> set[str]:
    """The modules of ``modules`` that ``module`` (source ``path``) imports (see the module docstring)."""
    tree = ast.parse(path.read_text(), str(path))
    here = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()

    def add(target: str) -> None:
        parts = target.split(".")
        for i in range(len(parts), 0, -1):  # the target, then the packages above it
            t = ".".join(parts[:i])
            if t in modules and not _encloses(t, module):
                out.add(t)

    for node in _import_nodes(tree, module_level):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
            continue
        if node.level:
            base = here.split(".")[:len(here.split(".")) - (node.level - 1)]
            base = ".".join(base + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base not in modules:
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in modules:
                add(sub)
            else:  # a name of base's namespace: its body must have run
                add(base)
                if base != module:
                    out.add(base)
    return out


def import_graph(root: pathlib.Path = ROOT, package: str = "numba_nbits", module_level: bool = True):
    """{module: set of the package's modules it imports} for every module of ``package`` under ``root``."""
    modules = package_modules(root, package)
    return {m: imports_of(m, p, modules, module_level) for m, p in modules.items()}


def reachable(graph: dict, start) -> set[str]:
    """``start`` and every module reached from it along the graph's edges."""
    seen, todo = set(start), list(start)
    while todo:
        for m in graph[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def find_cycle(graph: dict) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it has none."""
    state: dict = {}  # 1: on the current path, 2: done
    path: list = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_package_has_no_module_level_import_cycle():
    graph = import_graph()
    assert "numba_nbits.launch.kernel" in graph and graph["numba_nbits.op"]  # the scan found the package
    cycle = find_cycle(graph)
    assert cycle is None, "module-level import cycle: " + " -> ".join(cycle)


def test_no_cycle_either_through_imports_inside_functions():
    """A cycle closed by an import inside a function still ties the two modules together (each needs
    the other to be importable, and which one loads first depends on the caller)."""
    cycle = find_cycle(import_graph(module_level=False))
    assert cycle is None, "import cycle (through function-level imports): " + " -> ".join(cycle)


def test_find_cycle_names_the_cycle_of_a_small_graph():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert find_cycle({"x": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def _write(root: pathlib.Path, files: dict) -> None:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_the_scan_resolves_relative_absolute_and_submodule_imports(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\nfrom .sub import c\nimport pkg.d\n",
        "pkg/b.py": "def f():\n    from . import a\n",  # function level: not an edge of the module-level graph
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\nelse:\n    try:\n"
                    "        import pkg.b as _b\n    except ImportError:\n        pass\n",
        "pkg/sub/__init__.py": "from .c import NAME\n",
        "pkg/sub/c.py": "from .. import b\nfrom . import NAME2\n",  # NAME2: a name of pkg.sub's namespace
    })
    g = import_graph(tmp_path, "pkg")
    assert g["pkg.a"] == {"pkg.b", "pkg.sub", "pkg.sub.c", "pkg.d"}
    assert g["pkg.b"] == set() and g["pkg.d"] == {"pkg.b"}
    assert g["pkg.sub"] == {"pkg.sub.c"} and g["pkg.sub.c"] == {"pkg.b", "pkg.sub"}
    assert find_cycle(g) == ["pkg.sub", "pkg.sub.c", "pkg.sub"]  # c reads its package while it imports c
    every = import_graph(tmp_path, "pkg", module_level=False)
    assert every["pkg.b"] == {"pkg.a"} and every["pkg.d"] == {"pkg.b"}  # TYPE_CHECKING imports never run
    assert reachable(g, ["pkg.b"]) == {"pkg.b"} and reachable(g, ["pkg.sub.c"]) == {"pkg.sub.c", "pkg.sub", "pkg.b"}


def test_a_cyclic_pair_of_modules_fails_the_check(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/x.py": "from .y import f\n", "pkg/y.py": "from . import x\n"})
    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg.x", "pkg.y", "pkg.x"]
    # a cycle through a package: importing pkg.p.m runs pkg/p/__init__.py, which imports pkg.q
    _write(tmp_path, {"pkg/y.py": "", "pkg/p/__init__.py": "from . import m\nfrom .. import q\n", "pkg/p/m.py": "",
                      "pkg/q.py": "from .p.m import g\n"})
    assert find_cycle(import_graph(tmp_path, "pkg")) == ["pkg.p", "pkg.q", "pkg.p"]
