"""benchmarks/bench_small_gemm.py --tiny runs (simulator-sized): a row for the default call, ORT's chain and the
tensor-core plan past M = 16 (and torch on the dequantized weights where torch has CUDA), each checked against the
default call; 4-bit fp16 and 8-bit bf16."""
from __future__ import annotations

import csv

import pytest
from conftest import run_benchmark


@pytest.mark.parametrize("extra, bits, dtype, tol", [([], "4", "float16", 2e-3),
                                                      (["--bits", "8", "--dtype", "bfloat16"], "8", "bfloat16", 1e-2)])
def test_bench_small_gemm_tiny(tmp_path, extra, bits, dtype, tol):
    p = run_benchmark("bench_small_gemm", "--tiny", *extra, out=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "bench_small_gemm.csv")))
    ours = [r["what"] for r in rows if r["what"] != f"{dtype} dense (torch)"]  # the torch row: a GPU with torch
    assert ours == ["default (fused_gemm)", "ORT chain (dequant_cublas)", "gemv_mma t1w4u1p1 mt4"]
    assert all(r["bits"] == bits and r["dtype"] == dtype for r in rows)
    assert all(float(r["rel_err"]) <= tol for r in rows)
    assert "relative error" not in p.stdout


@pytest.mark.parametrize("M", ["16", "257"])
def test_bench_small_gemm_refuses_m_outside_its_kernels(tmp_path, M):
    p = run_benchmark("bench_small_gemm", "--M", M, out=tmp_path)
    assert p.returncode == 2 and "--M must be in 17..256" in p.stderr
