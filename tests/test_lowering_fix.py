"""numba_nbits.lowering_fix: numba-cuda's lowering with the linear-time singly-assigned-variable step
produces the same LLVM IR as numba-cuda's own, on real kernels; an unknown method is left alone.

The suite runs on numba's simulator, which has no lowering, so the check runs numba-cuda's compiler in a
process of its own (``NUMBA_ENABLE_CUDASIM=0``; without a GPU the current-device query is answered with
compute capability 9.0 for typing). Only LLVM IR is produced: no NVVM or GPU is needed.
"""
from __future__ import annotations

from conftest import run_offline_ir_script

_SAME_IR = r'''
from numba.cuda import lowering
from numba_nbits import lowering_fix
from numba_nbits.kernels.dequant import dequant_kernel
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import default_tactic

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
    out = run_offline_ir_script(_SAME_IR, timeout=600)
    assert "same IR: ['gemv_mma_w4_float16_mt1_t1w8u1p1_b128_none', 'dequant_w4_bfloat16_typed_gidx']" in out
