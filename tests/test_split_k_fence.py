"""The split-K kernels (the tensor-core GEMV and the mixed GEMM) fence their partial sums under both compilers:
``intrinsics.threadfence`` lowers to ``membar.gl`` before the arrival counter's atomic and again before the last
CTA reads the other CTAs' slices.

The suite runs on numba's simulator, which does not compile, so the compiler runs in a process of its own
(``NUMBA_ENABLE_CUDASIM=0``, ``NUMBA_NBITS_BACKEND`` = numba or mlir; without a GPU the current-device query is
answered with compute capability 9.0, ``benchmarks/ptx_stats.py``). Only PTX is produced: no GPU is needed.
numba-cuda's case is skipped where it cannot compile (numpy >= 2.5), numba-cuda-mlir's where it is not installed.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OFFLINE_PTX_PREAMBLE, offline_ptx_env

ROOT = Path(__file__).resolve().parent.parent

_PROG = OFFLINE_PTX_PREAMBLE + r'''
import dataclasses
from numba_nbits.kernels.gemv import mma, tactics
from numba_nbits.kernels.mixed_gemm import plan, tactics as mt
out = {}
k = mma.gemv_mma_kernel("float16", 1, dataclasses.replace(tactics.Tactic(), ksplit=2), 32, "none", 4)
kernels = [k]
t = next(t for t in mt.TACTICS.values() if t.splitk != 1)
t = dataclasses.replace(t, splitk=2) if t.splitk == 0 else t  # 0: chosen per problem
kernels.append(plan.mixed_gemm_kernel("bfloat16", t, 64, "packed", False, 80, 4))
for k in kernels:
    ptx = backend.compile_ptx(k.pyfunc, k.argtypes, (9, 0))
    body = ptx[ptx.index(".entry"):]
    out[k.name] = [body.count("membar.gl"), body.count("atom.global.add"), body.index("membar.gl") < body.index("atom.global.add")]
print(json.dumps(out))
'''


@pytest.mark.parametrize("compiler", ["numba", "mlir"])
def test_split_k_kernels_compile_and_fence(compiler):
    r = subprocess.run([sys.executable, "-c", _PROG], env=offline_ptx_env(compiler), capture_output=True, text=True,
                       timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(f"{compiler} does not compile here: {res['skip']}")
    assert res == {"gemv_mma_w4_float16_mt1_t1w8u2k2_b32_none": [2, 1, True],
                   next(k for k in res if k.startswith("mixed_gemm_w4_bfloat16")): [2, 1, True]}, res
