"""benchmarks/bench_mixed_gemm.py: its logic on a tiny shape (simulator or GPU), and its summary table."""
from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_mixed_gemm", ROOT / "benchmarks" / "bench_mixed_gemm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_mixed_gemm_tiny(tmp_path, monkeypatch, capsys):
    bench = _load()
    monkeypatch.setenv("OUT", str(tmp_path))
    assert bench.main(["--tiny", "--tactics", "m16,m16sk", "--bits", "8"]) == 0
    with open(tmp_path / "bench_mixed_gemm.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == bench.COLUMNS
    subjects = {(r["bits"], r["route/tactic"].split("/")[0]) for r in rows}
    assert subjects == {("8", s) for s in ("mixed_gemm", "dequant_cublas", "dense_fp16")}
    assert [r["route/tactic"] for r in rows if r["route/tactic"].startswith("mixed")] == ["mixed_gemm/m16"]
    for r in rows:
        assert r["shape"] == "16x128" and r["M"] == "3" and r["block"] == "128"
        assert float(r["us"]) > 0 and float(r["TFLOP/s"]) > 0 and float(r["TB/s"]) > 0
        if r["rel_err"]:
            assert float(r["rel_err"]) < bench.TOL
    assert sum(1 for r in rows if r["rel_err"]) == 3  # the dense row is checked on the first bits' pass
    out = capsys.readouterr().out
    assert "best tactic" in out and "0 rows over the fp16 tolerance" in out and "0 rows failed" in out
    assert "16x128 8-bit M=3 m16sk: split-K would not split" in out  # K = 128: nothing to split


def test_bench_summary_picks_the_best_tactic():
    bench = _load()

    def row(subject, us, bits=4, M=16):
        return {"shape": "4096x4096", "M": M, "bits": bits, "block": 128, "route/tactic": subject, "us": us,
                "TFLOP/s": 2 * M * 4096 * 4096 / us / 1e6, "TB/s": 1.0, "rel_err": 1e-4}

    rows = [row("mixed_gemm/m16", 30.0), row("mixed_gemm/m64", 20.0), row("dequant_cublas", 40.0),
            row("dense_fp16/torch", 10.0), row("mixed_gemm/m16", 50.0, bits=8), row("dequant_cublas", 25.0, bits=8)]
    lines = bench.summary(rows).splitlines()
    assert len(lines) == 3
    f4 = lines[1].split()
    assert f4[:4] == ["4096x4096", "16", "4", "m64"] and float(f4[4]) == 20.0
    assert math.isclose(float(f4[7]), 2.0) and math.isclose(float(f4[9]), 0.5)
    f8 = lines[2].split()
    assert f8[3] == "m16" and math.isclose(float(f8[7]), 0.5) and f8[9] == "nan"


def test_bench_rejects_unknown_tactic():
    bench = _load()
    with pytest.raises(SystemExit):
        bench.main(["--tiny", "--tactics", "nope"])
    with pytest.raises(SystemExit):
        bench.main(["--tiny", "--bits", "2"])


def test_bench_skips_hopeless_rows():
    from numba_nbits.kernels import mixed_gemm as X

    bench = _load()
    T = X.TACTICS
    assert bench._skip(X, T["m16"], 4096, 128256, 4096, False).startswith("M > 16 * BM")
    assert bench._skip(X, T["m16"], 4096, 128256, 4096, True) == ""  # --every
    assert bench._skip(X, T["m128"], 4096, 128256, 4096, False) == ""
    assert bench._skip(X, T["m16sk"], 16, 4096, 4096, False) == ""  # 32 tiles: splits
    assert bench._skip(X, T["m16sk"], 256, 128256, 4096, False) == "split-K would not split"


def test_bench_reports_a_failing_tactic(tmp_path, monkeypatch, capsys):
    """A tactic that fails is reported and counted (exit status 1); the other rows are still written."""
    bench = _load()
    from numba_nbits.kernels import mixed_gemm as X

    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setitem(X.TACTICS, "broken", X.Tactic("broken", wn=4, wm=1, tpw=2, mtw=2))

    def boom(*a, **k):
        raise RuntimeError("no launch")

    real_build = X.build
    monkeypatch.setattr(X, "build", lambda w, p, c, t, *r: boom() if t == "broken" else real_build(w, p, c, t, *r))
    monkeypatch.setattr(bench, "_dense_runner", lambda *a: ([lambda stream: None], "dense_fp16/stub"))
    monkeypatch.setattr(bench, "_checked", lambda fn, sim: 1.0)  # no kernel runs: logic only
    monkeypatch.setattr(bench, "_row", lambda rows, shape, M, bits, subject, us, nb, err: rows.append(
        {"shape": "x", "M": M, "bits": bits, "block": 128, "route/tactic": subject, "us": us, "TFLOP/s": 1.0,
         "TB/s": 1.0, "rel_err": None}))
    assert bench.main(["--tiny", "--tactics", "broken,m16", "--bits", "4"]) == 1
    out = capsys.readouterr().out
    assert "FAILED 16x128 4-bit M=3 broken: RuntimeError: no launch" in out and "1 rows failed" in out
    with open(tmp_path / "bench_mixed_gemm.csv") as fh:
        subjects = [r["route/tactic"] for r in csv.DictReader(fh)]
    assert subjects == ["mixed_gemm/m16", "dequant_cublas", "dense_fp16/stub"]
