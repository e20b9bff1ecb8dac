"""benchmarks/bench_overlap.py --tiny runs (simulator-sized) and writes a row per subject: ORT's chain, the default
call and each overlapped variant, each result checked against the chain's."""
from __future__ import annotations

import csv

from conftest import run_benchmark


def test_bench_overlap_tiny(tmp_path):
    p = run_benchmark("bench_overlap", "--tiny", out=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "bench_overlap.csv")))
    ours = [r["what"] for r in rows if r["what"] != "float16 dense (torch)"]  # the torch row: a GPU with torch
    assert ours == ["ORT chain (dequant_cublas)", "default (dequant_cublas, n/a)", "overlap 3r0 (rows40r0)",
                    "overlap 3r0p (rows40r0p)"]
    assert all(float(r["rel_err"]) <= 2e-3 for r in rows)


def test_bench_overlap_refuses_a_bad_variant(tmp_path):
    p = run_benchmark("bench_overlap", "--variants", "4x8", out=tmp_path)
    assert p.returncode != 0 and "bad variant '4x8'" in p.stderr
