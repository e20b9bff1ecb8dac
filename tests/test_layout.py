"""The README's Layout table matches the tree: every path it names exists, and every module and
subpackage of ``numba_nbits`` (and every top-level folder of the repository) is named in it."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def layout_rows(text: str) -> list:
    """The first-column paths of the README's ``## Layout`` table, each resolved against the directory of
    the row's first path (``numba_nbits/formats.py``, ``reference.py`` -> ``numba_nbits/reference.py``)."""
    section = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        names = re.findall(r"`([^`]+)`", line.split("|")[1])
        base = None
        for n in names:
            n = n.rstrip("/")
            if "/" in n or base is None:
                base = str(pathlib.PurePosixPath(n).parent) if "/" in n else ""
                rows.append(n)
            else:
                rows.append(f"{base}/{n}" if base else n)
    return rows


def test_layout_rows_resolve_relative_names():
    text = "x\n## Layout\n\n| path | holds |\n|---|---|\n| `a/b.py`, `c.py` | . |\n| `d/`, `e/` | . |\n## Next\n"
    assert layout_rows(text) == ["a/b.py", "a/c.py", "d", "e"]


def test_readme_layout_table_matches_the_tree():
    rows = layout_rows((ROOT / "README.md").read_text())
    missing = [r for r in rows if not (ROOT / r).exists()]
    assert not missing, f"the README's Layout table names paths that do not exist: {missing}"
    named = set(rows)
    pkg = ROOT / "numba_nbits"
    parts = sorted(p.relative_to(ROOT).as_posix() for p in pkg.iterdir()
                   if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
                   or (p.is_dir() and (p / "__init__.py").exists()))
    unnamed = [p for p in parts if p not in named]
    assert not unnamed, f"numba_nbits modules / subpackages missing from the README's Layout table: {unnamed}"
    top = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
                 and p.name not in ("numba_nbits",) and not p.name.endswith(".egg-info")
                 and p.name not in ("build", "dist", "__pycache__"))
    assert not [t for t in top if t not in named], f"top-level folders missing from the Layout table: {top}"
