"""The README's set-up (``pip install -e ".[cu13,test]"``, then ``python -m pytest``) is enough for the suite.

Every third-party package that a test module imports when it is collected (its module-level imports, and
those of the numba_nbits modules it imports at module level, followed through the package) must come
from the project's dependencies or its ``test`` extra: anything else stops collection in a venv set up
as the README says (issue 18: the perf tests imported pandas, which only the ``perf`` extra installed).
Imports inside functions (lazy, or after ``pytest.importorskip``) are not followed: they cannot break
collection.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
LOCAL = {"numba_nbits", "tests", "_minilm"} | {f.stem for f in (ROOT / "tests").glob("*.py")}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    return _norm(re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0])


def _module_level_imports(path: Path) -> list[tuple[str, int]]:
    """(module name, relative level) of the imports in the module body (including inside top-level if/try);
    level -1 marks a module-level ``pytest.importorskip("name")`` (the test module skips without it)."""
    out = []

    def visit(nodes):
        for n in nodes:
            if isinstance(n, ast.Import):
                out.extend((a.name, 0) for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                out.append((n.module or "", n.level))
                if n.level == 0 and n.module and n.module.startswith("numba_nbits"):
                    out.extend((f"{n.module}.{a.name}", 0) for a in n.names)  # may be submodules
            elif isinstance(n, (ast.Assign, ast.Expr)) and isinstance(n.value, ast.Call) \
                    and getattr(n.value.func, "attr", None) == "importorskip" and n.value.args \
                    and isinstance(n.value.args[0], ast.Constant):
                out.append((n.value.args[0].value, -1))  # optional: the module skips without it
            elif isinstance(n, (ast.If, ast.Try)):
                visit(n.body)
                visit(getattr(n, "orelse", []))
                visit(getattr(n, "finalbody", []))
                for h in getattr(n, "handlers", []):
                    visit(h.body)

    visit(ast.parse(path.read_text()).body)
    return out


def _package_file(mod: str) -> list[Path]:
    """Files executed when importing ``mod`` (a numba_nbits module): every package __init__ on the way."""
    parts = mod.split(".")
    files = []
    for i in range(1, len(parts) + 1):
        base = ROOT.joinpath(*parts[:i])
        if (base / "__init__.py").exists():
            files.append(base / "__init__.py")
        elif base.with_suffix(".py").exists():
            files.append(base.with_suffix(".py"))
    return files


def _third_party_imports() -> dict[str, str]:
    """top-level third-party module -> the first file (relative) that imports it at collection; modules a test
    file ``importorskip``s at module level are optional for everything that file reaches."""
    found: dict[str, str] = {}
    # what pytest imports at collection: the test modules and conftest, and the local helper modules they import
    # (a script that tests only start as a subprocess, such as tp_worker.py, is not imported at collection)
    roots = [f for f in sorted((ROOT / "tests").glob("*.py")) if f.name.startswith("test_") or f.name == "conftest.py"]
    for test_file in roots:
        optional = {m.split(".")[0] for m, level in _module_level_imports(test_file) if level == -1}
        seen: set[Path] = set()
        todo = [test_file]
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            pkg = ".".join(f.relative_to(ROOT).with_suffix("").parts[:-1])
            for mod, level in _module_level_imports(f):
                if level == -1:
                    continue
                if level:  # relative import inside numba_nbits
                    base = pkg.split(".")[: len(pkg.split(".")) - (level - 1)]
                    mod = ".".join(base + ([mod] if mod else []))
                top = mod.split(".")[0]
                if top == "numba_nbits":
                    todo += _package_file(mod)
                elif not level and (ROOT / "tests" / f"{top}.py").is_file():  # a helper module next to the tests
                    todo.append(ROOT / "tests" / f"{top}.py")
                elif top and top not in LOCAL | optional and top not in sys.stdlib_module_names:
                    found.setdefault(top, str(f.relative_to(ROOT)))
    return found


def _closure(names: set[str]) -> set[str]:
    """The requirement names plus everything they require (installed distributions only)."""
    out, todo = set(), list(names)
    while todo:
        n = todo.pop()
        if n in out:
            continue
        out.add(n)
        try:
            reqs = md.requires(n) or []
        except md.PackageNotFoundError:
            continue
        todo += [_req_name(r) for r in reqs if "extra ==" not in r]
    return out


def test_test_extra_covers_every_import_reached_at_collection():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = _closure({_req_name(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]})
    dists = md.packages_distributions()
    missing = {}
    for top, where in sorted(_third_party_imports().items()):
        provided_by = {_norm(d) for d in dists.get(top, [])}
        if not provided_by & allowed:
            missing[top] = f"{where} (provided by {sorted(provided_by) or 'nothing installed'})"
    assert not missing, f"imported at collection but not in the dependencies or the test extra: {missing}"


def test_scan_follows_numba_nbits_modules():
    """The scan reaches pandas through ``numba_nbits.perf.report`` (test_perf_precompile.py imports only that)."""
    assert "pandas" in _third_party_imports()
