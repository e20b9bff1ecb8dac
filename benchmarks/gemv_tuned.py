"""Tuned tables of the tensor-core GEMV from sweep rows: the fit rule and the package's file format.

``benchmarks/sweep_gemv_m1.py`` measures every candidate tactic per case; ``fit`` turns its rows into
one bit width's table ``{(N, K, block_size, m_class): tactic tag}`` (the form
``numba_nbits.kernels.gemv.tuned_tables.tuned_table`` returns). ``tuned_json`` / ``dump_tuned`` write it in
the format of the package's tables (``numba_nbits/kernels/gemv/tuned/<gpu>-v<KERNEL_VERSION>.json``:
``gpu``, ``kernel_version``, ``columns``, ``sources`` and ``tables`` keyed by bit width, one row
``[N, K, block_size, m_class, tactic]`` per line), and ``merge_tuned`` puts one sweep's bit width into
an existing file, keeping the others.
"""
from __future__ import annotations

import json
import os

KSPLIT_MARGIN = 0.10  # a split-K tactic (plan-owned workspace) must win by this much to be tuned in
TUNED_COLUMNS = ("N", "K", "block_size", "m_class", "tactic")  # a tuned-table row


def fit(rows, ksplit_margin: float = KSPLIT_MARGIN) -> dict:
    """The tuned table of one bit width from sweep rows, as ``gemv.tuned_tables.tuned_table`` returns it
    (fp16 rows; bf16 rows only where no fp16 row exists): key ``(N, K, block_size, m_class(M))`` -> the
    fastest correct tactic, except that a split-K tactic (``k`` in the tag: plan-owned workspace) is
    taken only when it beats the fastest tactic without split-K by more than ``ksplit_margin``. Where
    a class has several M (not in this sweep), the smaller M decides."""
    from numba_nbits.kernels.gemv.tactics import Tactic, m_class

    best: dict = {}
    for dt in ("float16", "bfloat16"):
        by: dict = {}
        for r in rows:
            if r["dtype"] != dt or not r.get("correct") or not (r.get("us", float("nan")) > 0):
                continue
            key = (r["N"], r["K"], r["block_size"], m_class(r["M"]))
            by.setdefault((key, r["M"]), []).append(r)
        for (key, M), rs in sorted(by.items()):
            if key in best and (best[key][1] != dt or best[key][2] <= M):
                continue
            plain = [r for r in rs if Tactic.parse(r["tactic"]).ksplit == 1]
            fastest = min(rs, key=lambda r: r["us"])
            pick = fastest
            if plain:
                fp = min(plain, key=lambda r: r["us"])
                if fp["us"] <= fastest["us"] * (1 + ksplit_margin):
                    pick = fp
            best[key] = (pick["tactic"], dt, M)
    return {k: v[0] for k, v in sorted(best.items())}


def tuned_json(table: dict, bits: int, source: str, gpu: str | None = None) -> dict:
    """``table`` (``fit``) as a tuned-table file of the package (``gemv/tuned/<gpu>-v<KERNEL_VERSION>.json``,
    default ``gpu``: ``tuned_tables.DEFAULT_GPU``) holding the one bit width ``bits``, fitted to ``source``."""
    from numba_nbits.kernels.gemv import tuned_tables as T

    return {"gpu": gpu or T.DEFAULT_GPU, "kernel_version": T.KERNEL_VERSION, "columns": list(TUNED_COLUMNS),
            "sources": {str(bits): source}, "tables": {str(bits): [[*k, v] for k, v in sorted(table.items())]}}


def merge_tuned(base: dict, new: dict, keys_only: bool = False) -> dict:
    """``base`` (a tuned-table file) with the bit widths of ``new`` (table and source) replaced or added; with
    ``keys_only`` only ``new``'s rows replace or join ``base``'s rows of the same (N, K, block, m-class), the other
    rows stay, and the source names both (``"<base's> + <new's>"``)."""
    for field in ("gpu", "kernel_version", "columns"):
        if base[field] != new[field]:
            raise ValueError(f"cannot merge tuned tables of different {field}: {base[field]!r} vs {new[field]!r}")
    if not keys_only:
        return {**base, "sources": {**base["sources"], **new["sources"]},
                "tables": {**base["tables"], **new["tables"]}}
    tables, sources = dict(base["tables"]), dict(base["sources"])
    for bits, rows in new["tables"].items():
        keyed = {tuple(r[:-1]): r for r in tables.get(bits, [])}
        keyed.update({tuple(r[:-1]): r for r in rows})
        tables[bits] = [keyed[k] for k in sorted(keyed)]
        sources[bits] = " + ".join(x for x in (base["sources"].get(bits), new["sources"][bits]) if x)
    return {**base, "sources": sources, "tables": tables}


def dump_tuned(data: dict) -> str:
    """A tuned-table file's text, spelled like the package's files (one table row per line)."""
    def items(d, fmt):
        return ",\n".join(f"  {json.dumps(k)}: {fmt(v)}" for k, v in d.items())

    def rows(rs):
        return "[\n" + ",\n".join(f"   {json.dumps(r)}" for r in rs) + "\n  ]"

    head = "".join(f" {json.dumps(k)}: {json.dumps(data[k])},\n" for k in ("gpu", "kernel_version", "columns"))
    return ("{\n" + head + ' "sources": {\n' + items(data["sources"], json.dumps) + '\n },\n "tables": {\n'
            + items(data["tables"], rows) + "\n }\n}\n")


def source_path(path: str) -> str:
    """The measurement directory ``path`` as a ``sources`` entry: relative to the repository when inside
    it (``benchmarks/results/<dir>``), else absolute."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = os.path.abspath(path)
    return os.path.relpath(p, root) if p.startswith(root + os.sep) else p
