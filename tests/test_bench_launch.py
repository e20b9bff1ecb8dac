"""benchmarks/cold_start.py and benchmarks/launch_floor.py: the scripts run (cold_start simulator-sized) and
refuse what they cannot measure with a clear message."""
from __future__ import annotations

import csv
import os
import pathlib
import subprocess
import sys

from conftest import SIMULATED

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(args, tmp_path, **env):
    e = dict(os.environ, OUT=str(tmp_path), **env)
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)


def test_cold_start_tiny_writes_every_step(tmp_path):
    p = _run(["benchmarks.cold_start", "--tiny"], tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "cold_start.csv")))
    got = [(r["what"], r["cache"]) for r in rows]
    assert got == [("precompile", "cold"), ("precompile", "warm"), ("import numba_nbits + CUDA init", "warm"),
                   ("build 1 nodes (model load)", "warm"), ("first results M=2 (1 nodes)", "warm"),
                   ("first results M=1 (1 nodes)", "warm"), ("import + first results", "warm"),
                   ("fresh process wall", "warm")]
    sec = {r["what"]: float(r["seconds"]) for r in rows}
    assert all(v >= 0 for v in sec.values())
    total = sec["import numba_nbits + CUDA init"] + sec["first results M=2 (1 nodes)"] + sec["first results M=1 (1 nodes)"]
    assert abs(sec["import + first results"] - total) < 0.02
    assert "2 plans of 1 signatures" in rows[0]["detail"] and "0 failed" in rows[0]["detail"]


def test_cold_start_refuses_a_cache_that_is_not_empty(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x").write_text("")
    p = _run(["benchmarks.cold_start", "--tiny", "--cache-dir", str(tmp_path / "c")], tmp_path)
    assert p.returncode == 2 and "is not empty" in p.stderr


def test_launch_floor_needs_a_gpu(tmp_path):
    if not SIMULATED:
        p = _run(["benchmarks.launch_floor", "--calls", "0"], tmp_path)
        assert p.returncode == 2 and "must be >= 1" in p.stderr
        return
    p = _run(["benchmarks.launch_floor"], tmp_path, NUMBA_ENABLE_CUDASIM="1")
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr and not (tmp_path / "launch_floor.csv").exists()


def test_graph_launch_gpu_checks_its_arguments_and_needs_a_gpu(tmp_path):
    p = _run(["benchmarks.graph_launch_gpu", "--launches", "5"], tmp_path)
    assert p.returncode == 2 and "--launches must be >= 10" in p.stderr
    if SIMULATED:
        p = _run(["benchmarks.graph_launch_gpu"], tmp_path, NUMBA_ENABLE_CUDASIM="1")
        assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr and not (tmp_path / "graph_launch_gpu.csv").exists()


def test_call_graph_ab_checks_its_arguments_and_needs_a_gpu(tmp_path):
    p = _run(["benchmarks.call_graph_ab", "--cases", "gemv1,nope"], tmp_path)
    assert p.returncode == 2 and "unknown ['nope']" in p.stderr
    p = _run(["benchmarks.call_graph_ab", "--rounds", "0"], tmp_path)
    assert p.returncode == 2 and "must be >= 1" in p.stderr
    p = _run(["benchmarks.call_graph_ab"], tmp_path, NUMBA_ENABLE_CUDASIM="1")
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr and not (tmp_path / "call_graph_ab.csv").exists()


def test_call_graph_ab_summary_is_the_median_of_per_round_ratios():
    from benchmarks.call_graph_ab import summary

    rows = [dict(case="c", kind="numba", what="w", round=r, mode=m, value=v)
            for r, m, v in ((0, "on", "kernel"), (1, "off", 10.0), (1, "on", 5.0), (2, "off", 8.0), (2, "on", 8.0),
                            (3, "off", 4.0), (3, "on", 6.0))]
    head, line = summary(rows)
    assert line.split() == ["c", "numba", "w", "8.000", "6.000", "1.000"]  # ratios 0.5, 1.0, 1.5
