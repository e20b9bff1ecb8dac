"""Regenerate the generated sections of README.md: ``python -m numba_nbits.readme [--check]``.

Sections between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` markers are produced from code:
``routes`` from ``dispatch/routes.py`` (the same table dispatch runs), ``env`` from ``config.ENV_TABLE``,
``perf`` from the newest committed results under ``benchmarks/results/`` (the latest ``meta.json`` date;
``numba_nbits.perf.report.readme_summary``; shard
directories of a split sweep are skipped, their merge is what is shown).
``--check`` exits 1 when the README is out of date (the test suite runs it).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _routes() -> str:
    from .explain import route_table_markdown

    return route_table_markdown()


def _env() -> str:
    from .config import env_table_markdown

    return env_table_markdown()


def _is_shard(d: Path) -> bool:
    """One shard of a split sweep (``--shard I/N``): the README shows the merged directory instead."""
    if re.search(r"-shard\d+of\d+$", d.name):
        return True
    try:
        import json

        return bool(json.loads((d / "meta.json").read_text()).get("shard"))
    except (OSError, ValueError):
        return False


def _measured_at(d: Path) -> tuple:
    """Sort key of a results directory: when its run was measured (``meta.json``'s ``env.date``), then its name."""
    try:
        import json

        date = str(json.loads((d / "meta.json").read_text()).get("env", {}).get("date") or "")
    except (OSError, ValueError):
        date = ""
    return (date, d.name)


def _perf() -> str:
    try:
        from .perf import RESULTS_DIR as results
        from .perf.report import readme_summary
    except ImportError:
        return "_No performance results committed yet._"
    dirs = sorted((p for p in results.iterdir() if (p / "results.csv").is_file() and not _is_shard(p)),
                  key=_measured_at) if results.is_dir() else []
    if not dirs:
        return "_No performance results committed yet._"
    return readme_summary(dirs[-1], link=dirs[-1].relative_to(ROOT))


GENERATORS = {"routes": _routes, "env": _env, "perf": _perf}


def render(text: str) -> str:
    for name, gen in GENERATORS.items():
        pat = re.compile(rf"(<!-- BEGIN {name} -->\n).*?(<!-- END {name} -->)", re.S)
        if pat.search(text):
            body = gen().rstrip("\n") + "\n"
            text = pat.sub(lambda m: m.group(1) + body + m.group(2), text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m numba_nbits.readme")
    p.add_argument("--check", action="store_true", help="exit 1 if README.md is out of date")
    p.add_argument("--path", default=str(ROOT / "README.md"))
    args = p.parse_args(argv)
    path = Path(args.path)
    old = path.read_text()
    new = render(old)
    if args.check:
        if new != old:
            print(f"{path} is out of date: run python -m numba_nbits.readme", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
