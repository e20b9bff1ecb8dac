"""numba_nbits.lowering_fix: numba-cuda's lowering with the linear-time singly-assigned-variable step
produces the same LLVM IR as numba-cuda's own, on real kernels; an unknown method is left alone.

The suite runs on numba's simulator, which has no lowering, so the check runs numba-cuda's compiler in a
process of its own (``NUMBA_ENABLE_CUDASIM=0``; without a GPU the current-device query is answered with
compute capability 9.0 for typing). Only LLVM IR is produced: no NVVM or GPU is needed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_SAME_IR = r'''
import re, sys
try:
    import numba.cuda.dispatcher as dispatcher
except (ImportError, AttributeError) as e:  # numba-cuda cannot run with this numpy (numba-cuda-mlir's users)
    print(f"SKIP numba-cuda does not import here: {type(e).__name__}: {e}"); sys.exit(0)
from numba_nbits.backend import numba_can_compile
if not numba_can_compile():
    import numpy
    print(f"SKIP numba-cuda does not compile with numpy {numpy.__version__} here"); sys.exit(0)
from numba import cuda
if not cuda.is_available():
    class _Device:
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Device()
from numba.cuda import lowering, types
from numba.cuda.compiler import compile_cuda
from numba_nbits import lowering_fix
from numba_nbits.kernels.dequant import dequant_kernel
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import default_tactic


def ir(k):
    cres = compile_cuda(k.pyfunc, types.void, k.argtypes, debug=False, lineinfo=False, fastmath=False,
                        nvvm_options={"opt": 3}, cc=(9, 0, "a"))
    text = re.sub(r"_Z[A-Za-z0-9_$]+", "SYM", cres.library.get_llvm_str())
    return re.sub(r"(_cudapy_smem_|\$)[0-9]+", r"\1N", text)  # per-compilation counters


stock_method = lowering.Lower._find_singly_assigned_variable
kernels = [gemv_mma_kernel("float16", 1, default_tactic(4096, 4096, 128, 1, 4), 128, "none", 4),
           dequant_kernel(4, "bfloat16", "typed", True)]
known = dict(lowering_fix.KNOWN_SOURCE_SHA256)
lowering_fix.KNOWN_SOURCE_SHA256.clear()  # as if numba-cuda had changed the method
assert lowering_fix.install() is False, lowering_fix.status()
assert "not the known one" in lowering_fix.status(), lowering_fix.status()
assert lowering.Lower._find_singly_assigned_variable is stock_method
stock = [ir(k) for k in kernels]
lowering_fix.KNOWN_SOURCE_SHA256.update(known)
lowering_fix._state["done"] = False
assert lowering_fix.install() is True, lowering_fix.status()
assert lowering.Lower._find_singly_assigned_variable is lowering_fix._find_singly_assigned_variable
fixed = [ir(k) for k in kernels]
for k, a, b in zip(kernels, stock, fixed):
    assert a == b, f"{k.name}: the LLVM IR differs"
    assert "define" in a and len(a) > 10000, k.name
print("same IR:", [k.name for k in kernels])
'''


def test_same_llvm_ir_as_numba_cudas_own_lowering():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_NBITS_BACKEND="numba",  # numba-cuda's lowering
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _SAME_IR], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    if r.stdout.startswith("SKIP "):
        pytest.skip(r.stdout[5:].strip())
    assert "same IR: ['gemv_mma_w4_float16_mt1_t1w8u1p1_b128_none', 'dequant_w4_bfloat16_typed_gidx']" in r.stdout

