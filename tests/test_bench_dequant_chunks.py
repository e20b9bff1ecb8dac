"""benchmarks/bench_dequant_chunks.py --tiny runs (simulator-sized) and writes a row per step: the dequantize
kernels from ORT's B and from the tensor-core layout (bytes checked identical by the script), then the routes, the
chunked results checked against the unchunked route's."""
from __future__ import annotations

import csv

from conftest import run_benchmark


def test_bench_dequant_chunks_tiny(tmp_path):
    p = run_benchmark("bench_dequant_chunks", "--tiny", out=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "bench_dequant_chunks.csv")))
    assert [r["what"].split(" (")[0] for r in rows] == ["dequant kernel from B", "dequant kernel from packed",
                                                        "dequant_cublas", "dequant_cublas_chunked"]
    assert "dequant_w4_float16_none_fast" in rows[0]["what"] and "dequant_packed_w4" in rows[1]["what"]
    assert [r["chunk_rows"] for r in rows] == ["", "", "16", "8"]
    assert float(rows[3]["rel_err"]) <= 2e-3


def test_bench_dequant_chunks_needs_the_unchunked_reference_first(tmp_path):
    p = run_benchmark("bench_dequant_chunks", "--chunks", "512", out=tmp_path)
    assert p.returncode == 2 and "starting with 0" in p.stderr
