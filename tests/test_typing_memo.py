"""numba_nbits.typing_memo: numba-cuda's compile with call typing remembered inside ``active()`` produces the same LLVM
IR as without it, on real kernels, and answers repeats from the memo; an unknown method is left alone, and outside
``active()`` the wrapper is numba's method.

The suite runs on numba's simulator, which has no typing-to-LLVM pipeline of numba-cuda, so the check runs numba-cuda's
compiler in a process of its own (``NUMBA_ENABLE_CUDASIM=0``; without a GPU the current-device query is answered with
compute capability 9.0). Only LLVM IR is produced: no NVVM or GPU is needed.
"""
from __future__ import annotations

from conftest import run_offline_ir_script

_SAME_IR = r'''
from numba.core.types import functions
from numba_nbits import lowering_fix, typing_memo
from numba_nbits.kernels.dequant import dequant_kernel
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic, default_tactic

lowering_fix.install()

stock_method = functions.BaseFunction.get_call_type
kernels = [gemv_mma_kernel("float16", 1, default_tactic(4096, 4096, 128, 1, 4), 128, "none", 4),
           gemv_mma_kernel("bfloat16", 8, Tactic.parse("t1w4u1s3xhv"), 64, "packed", 4, False, True),
           dequant_kernel(4, "bfloat16", "typed", True)]
known = dict(typing_memo.KNOWN_SOURCE_SHA256)
typing_memo.KNOWN_SOURCE_SHA256.clear()  # as if numba had changed the method
assert typing_memo.install() is False, typing_memo.status()
assert "not the known one" in typing_memo.status(), typing_memo.status()
assert functions.BaseFunction.get_call_type is stock_method
stock = [ir(k) for k in kernels]
typing_memo.KNOWN_SOURCE_SHA256.update(known)
typing_memo._state["done"] = False
assert typing_memo.install() is True, typing_memo.status()
assert functions.BaseFunction.get_call_type is typing_memo._memo_get_call_type
outside = ir(kernels[0])  # installed, not active: numba's method
memo, hits = [], []
for k in kernels:
    with typing_memo.active():
        memo.append(ir(k))
        hits.append(typing_memo.hits())
assert typing_memo.hits() == 0  # the memo (and its count) end with the block
assert outside == stock[0], "outside active(): the LLVM IR differs"
for k, a, b in zip(kernels, stock, memo):
    assert a == b, f"{k.name}: the LLVM IR differs"
    assert "define" in a and len(a) > 10000, k.name
assert all(h > 100 for h in hits[:2]), hits
print("same IR:", [k.name for k in kernels], "hits:", hits)
'''


def test_same_llvm_ir_with_call_typing_remembered():
    out = run_offline_ir_script(_SAME_IR, timeout=900)
    assert "same IR: ['gemv_mma_w4_float16_mt1_t1w8u1p1_b128_none', " in out, out
