"""benchmarks/compile_time.py: which kernels it compiles for a model's shapes, and its argument checks (the
timing itself needs numba-cuda's compiler, not the simulator: it runs wherever NVVM is installed)."""
from __future__ import annotations

import pytest

from numba_nbits.kernels.gemv.tactics import default_tactic


def _ct():
    from benchmarks import compile_time  # the repository's scripts, not an installed package

    return compile_time


def test_kernel_set_is_one_gemv_per_tile_and_tactic_then_dequant_and_bias():
    shapes = [(4096, 4096), (14336, 4096)]
    got = _ct().kernel_set(shapes, 4, 128, "float16", range(1, 17))
    names = [k.name for k, _, _ in got]
    want = []
    for N, K in shapes:
        for M in range(1, 17):
            t = default_tactic(N, K, 128, M, 4)
            name = f"gemv_mma_w4_float16_mt{1 if M <= 8 else 2}_{t.tag}_b128_none_kf"  # K % 128 == 0
            if name not in want:
                want.append(name)
    assert names == want + ["dequant_w4_float16_none_fast", "bias_add_float16"]
    assert all(isinstance(lines, int) and lines > 0 for _, lines, _ in got[:len(want)])


def test_M_outside_the_gemv_range_is_refused():
    ct = _ct()
    assert ct._parse_M("1-3,8") == [1, 2, 3, 8]
    with pytest.raises(SystemExit, match="M 1..16"):
        ct._parse_M("1-32")


def test_bad_shapes_are_refused():
    with pytest.raises(SystemExit, match="NxK"):
        _ct().main(["--shapes", "4096"])


def test_numba_cuda_mlir_compile_split(tmp_path):
    """Under ``NUMBA_NBITS_BACKEND=mlir`` (no GPU needed) a kernel is compiled by numba-cuda-mlir with the library's
    front-end replacements, and its time is split into numba-IR passes, the lowering to MLIR and the rest."""
    import csv
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import pythonpath_with

    pytest.importorskip("numba_cuda_mlir")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_NBITS_BACKEND="mlir", OUT=str(tmp_path),
               PYTHONPATH=pythonpath_with(root))
    r = subprocess.run([sys.executable, "-m", "benchmarks.compile_time", "--shapes", "1024x1024", "--M", "1",
                        "--limit", "1"], env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("numba-cuda-mlir; call typing: "), r.stdout
    (row,) = list(csv.DictReader(open(tmp_path / "compile_time.csv")))
    assert row["kernel"] == f"gemv_mma_w4_float16_mt1_{default_tactic(1024, 1024, 128, 1, 4).tag}_b128_none_kf"
    parts = [float(row[k]) for k in ("frontend_s", "nvvm_s", "link_s")]
    assert all(p > 0 for p in parts) and abs(sum(parts) - float(row["total_s"])) < 0.01, row
    assert "mlir_backend" in row["top_passes"], row
