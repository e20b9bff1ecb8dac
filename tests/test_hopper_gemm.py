"""``kernels/hopper_gemm.py``: the prototype wgmma GEMM gives the oracle's ``A @ dequant(B).T + bias`` for
fp16 and bf16, blocks 32/64/128, ragged M, N and K, with and without bias (simulator; on an sm_90 GPU the
kernel itself)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SIMULATED, pythonpath_with, run_benchmark

from numba_nbits.arrays import to_device, to_host
from numba_nbits.formats import quantize
from numba_nbits.kernels import hopper_gemm as H
from numba_nbits.reference import matmul_nbits_ref
from numba_nbits.weights import build_weights

CASES = [  # (M, N, K, block, act, bias)
    (3, 64, 128, 32, "float16", False),
    (17, 72, 200, 64, "bfloat16", True),
    (9, 40, 256, 128, "float16", True),
]
GPU_CASES = CASES + [(64, 256, 1024, 128, "float16", True), (100, 192, 768, 32, "bfloat16", False),
                     (33, 4096, 4096, 128, "float16", False)]


def _needs_sm90():
    if SIMULATED:
        return
    from numba import cuda

    if cuda.get_current_device().compute_capability != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")


@pytest.mark.parametrize("M,N,K,bs,act,bias", CASES if SIMULATED else GPU_CASES)
def test_hopper_gemm_matches_the_oracle(M, N, K, bs, act, bias):
    _needs_sm90()
    import ml_dtypes

    rng = np.random.default_rng(M * 7 + N + K + bs)
    dt = ml_dtypes.bfloat16 if act == "bfloat16" else np.float16
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, sc, _ = quantize(W, bits=4, block_size=bs, symmetric=True)
    sc = sc.astype(dt)
    b = rng.standard_normal(N).astype(dt) if bias else None
    A = rng.standard_normal((M, K)).astype(dt)
    w = build_weights(B, sc, None, K=K, N=N, bits=4, block_size=bs, simulated=SIMULATED, bias=b)
    y = to_host(H.run_hopper_gemm(w, to_device(A, SIMULATED))).astype(np.float64)
    want = matmul_nbits_ref(A.astype(np.float32), B, sc.astype(np.float32), None, None,
                            None if b is None else b.astype(np.float32), K=K, N=N, bits=4, block_size=bs)
    tol = 1e-2 if act == "bfloat16" else 2e-3
    err = np.abs(y - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= tol, f"relative error {err:.3g} > {tol}"


def test_m_tiles_and_guards():
    assert [H.m_tile(m) for m in (1, 8, 9, 17, 33, 64, 65, 4096)] == [8, 8, 16, 32, 64, 64, 64, 64]
    src = H.generate_source("float16", 8, 128)
    assert src.count("mma(acc") == 8 and "fence_proxy_async()" in src  # KS = 128: 8 steps of 16 k


def test_kernel_assembles_for_sm90a():
    """Generated kernels compile to PTX that ptxas accepts for sm_90a (no GPU needed)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    prog = r'''
import json, os, re, shutil, subprocess, sys, tempfile
try:
    from benchmarks.ptx_stats import _fake_device
    _fake_device()  # device-function lookups ask for the current device: a cc-9.0 stand-in
    from numba import cuda
    from numba.cuda import types
    from numba_nbits.kernels import hopper_gemm as H
except Exception as e:
    print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
ptxas = shutil.which("ptxas")
if ptxas is None:
    print(json.dumps({"skip": "no ptxas"})); sys.exit(0)
out = {}
for act, mt, bs in (("float16", 64, 128), ("bfloat16", 8, 32)):
    k = H.hopper_gemm_kernel(act, mt, bs)
    try:
        ptx, _ = cuda.compile_ptx(k.pyfunc, types.void(*k.argtypes), cc=(9, 0, "a"))
    except Exception as e:
        print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
    with tempfile.TemporaryDirectory() as d:
        fn = os.path.join(d, "k.ptx")
        for version in (None, "9.0", "8.5", "8.0"):
            src = ptx if version is None else re.sub(r"^\.version \S+", f".version {version}", ptx, flags=re.M)
            open(fn, "w").write(src)
            r = subprocess.run([ptxas, "-arch=sm_90a", "-v", fn, "-o", os.path.join(d, "k.cubin")],
                               capture_output=True, text=True)
            if r.returncode == 0 or "Unsupported .version" not in r.stderr:
                break
    out[f"{act}-{mt}-{bs}"] = {"rc": r.returncode, "log": (r.stderr + r.stdout)[-600:],
                               "wgmma": len(re.findall(r"wgmma\.mma_async", ptx))}
print(json.dumps(out))
'''
    # numba-cuda's compile_ptx: the child compiles with numba-cuda whatever backend this process uses
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_NBITS_BACKEND="numba", PYTHONPATH=pythonpath_with(root))
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(f"cannot compile and assemble for sm_90a here: {res['skip']}")
    assert res["float16-64-128"]["rc"] == 0 and res["float16-64-128"]["wgmma"] == 8, res["float16-64-128"]
    assert res["bfloat16-8-32"]["rc"] == 0 and res["bfloat16-8-32"]["wgmma"] == 4, res["bfloat16-8-32"]


def test_bench_hopper_gemm_tiny(tmp_path):
    """``benchmarks/bench_hopper_gemm.py --tiny`` runs (simulator-sized) and checks the prototype against the
    default call."""
    import csv

    p = run_benchmark("bench_hopper_gemm", "--tiny", out=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "bench_hopper_gemm.csv")))
    assert [r["what"].split(" ")[0] for r in rows] == ["default", "hopper_gemm"]
    assert float(rows[1]["rel_err"]) <= 2e-3
