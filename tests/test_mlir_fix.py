"""numba_nbits.mlir_fix and typing_memo's numba-cuda-mlir wrapper: the PTX numba-cuda-mlir makes of real kernels (two
tensor-core GEMV kernels, the warpgroup GEMM, a dequantize kernel) and of a small kernel of nested loops, branches and
a device function called from several places is byte-identical with and without them (up to the per-compilation
number of the shared-memory symbol); inside ``active()`` the device functions' IR is made once per compile; outside
it numba-cuda-mlir's functions run as shipped; an unknown function is left alone.

numba-cuda-mlir runs in a process of its own (``NUMBA_NBITS_BACKEND=mlir``, ``NUMBA_ENABLE_CUDASIM=0``; without a GPU
its compute-capability query is answered with 9.0 as ``benchmarks.ptx_stats`` does); only PTX is produced.
"""
from __future__ import annotations

import pytest
from conftest import BRANCHY_KERNEL, run_mlir_script

_SAME_PTX = r'''
import re
from benchmarks.ptx_stats import _fake_device
_fake_device()
from numba import cuda
from numba.cuda import types
from numba_nbits import backend, mlir_fix, mlir_layout, typing_memo
from numba_nbits.lowering_fix import source_sha256
from numba_nbits.kernels.dequant import dequant_kernel
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic, default_tactic

assert backend.compiler() == "mlir", backend.compiler()
# mlir_layout changes the PTX on purpose (tests/test_mlir_layout.py): off here, where the same PTX is the point
mlir_layout._state.update(done=True, installed=False, reason="off for this comparison")


''' + BRANCHY_KERNEL + r'''

def ptx(k, fixed):
    c = backend.cuda()
    sig = backend.types().void(*backend.argtypes(k.argtypes))
    opts = backend.jit_options(k.options, (9, 0))
    if fixed:
        with backend._frontend():
            text = c.jit(sig, **opts)(backend.rebind(k.pyfunc)).compile(sig).metadata["ptx"]
            memo = len(mlir_fix._TLS.inline_memo)
    else:
        text = c.jit(sig, **opts)(backend.rebind(k.pyfunc)).compile(sig).metadata["ptx"]
        memo = getattr(mlir_fix._TLS, "inline_memo", None)
    return re.sub(r"static_shared_memory_[0-9]+", "static_shared_memory_N", text), memo


changed = [key for key, owner, attr, _ in mlir_fix._targets()
           if source_sha256(getattr(owner, attr)) != mlir_fix.KNOWN_SOURCE_SHA256[key]]
from numba_cuda_mlir.numba_cuda.types import functions
known_typing = typing_memo.KNOWN_MLIR_SOURCE_SHA256.values()
if source_sha256(functions.BaseFunction.get_call_type) not in known_typing:
    changed.append("BaseFunction.get_call_type")
if changed:  # another numba-cuda-mlir release: its functions are left alone
    print("SKIP numba-cuda-mlir's", ", ".join(changed), "not the known ones"); raise SystemExit(0)
known = dict(mlir_fix.KNOWN_SOURCE_SHA256)
mlir_fix.KNOWN_SOURCE_SHA256["ssa._run_ssa"] = "0" * 64  # as if numba-cuda-mlir had changed one function
assert mlir_fix.install() is False and "ssa._run_ssa is not the known one" in mlir_fix.status(), mlir_fix.status()
mlir_fix.KNOWN_SOURCE_SHA256.update(known)
mlir_fix._state["done"] = False
assert mlir_fix.install() is True, mlir_fix.status()
assert typing_memo.install_mlir() is True, typing_memo.mlir_status()

kernels = [gemv_mma_kernel("float16", 2, Tactic.parse("t2w4u1p1"), 128, "none", 4, False, True),
           gemv_mma_kernel("bfloat16", 1, default_tactic(4096, 4096, 32, 1, 4), 32, "packed", 4, False, True),
           gemv_mma_kernel("float16", 16, Tactic.parse("t1w8u1xhvm"), 128, "none", 4, False, True),
           dequant_kernel(8, "bfloat16", "typed", False), _Branchy]
for k in kernels:
    stock, none = ptx(k, False)
    fixed, kept = ptx(k, True)
    assert none is None, k.name  # no memo outside active()
    assert kept > 0 or k.name.startswith("dequant"), (k.name, kept)  # the device functions' IR was kept
    assert ".entry" in stock and stock == fixed, k.name
    print("same", k.name, kept, flush=True)
'''


def test_same_ptx_with_the_mlir_replacements():
    pytest.importorskip("numba_cuda_mlir")
    r = run_mlir_script(_SAME_PTX)
    assert r.returncode == 0, r.stderr[-3000:]
    if r.stdout.startswith("SKIP "):
        pytest.skip(r.stdout[5:].strip())
    lines = r.stdout.split("\n")
    assert [ln.split()[1] for ln in lines if ln.startswith("same ")] == [
        "gemv_mma_w4_float16_mt2_t2w4u1p1_b128_none_kf", f"gemv_mma_w4_bfloat16_mt1_{_tag()}_b32_packed_kf",
        "gemv_mma_w4_float16_mt16_t1w8u1xhvm_b128_none_kf", "dequant_w8_bfloat16_typed_fast", "branchy"], r.stdout


def _tag() -> str:
    """The tactic the script's process (numba-cuda-mlir compiles its kernels) picks: its compiler's tuned table."""
    from unittest import mock

    import numba_nbits.backend as B
    from numba_nbits.kernels.gemv.tactics import default_tactic

    with mock.patch.object(B, "compiler", lambda: "mlir"):
        return default_tactic(4096, 4096, 32, 1, 4).tag


def test_stmt_index_as_the_scan():
    """The table-driven ``_stmt_index`` answers as numba-cuda-mlir's scan for every statement, every ``stop`` (the
    default -1 leaves the last statement out) and a statement not in the block; another block goes to the scan."""
    pytest.importorskip("numba_cuda_mlir")
    from numba_cuda_mlir.numba_cuda.core import ir, ssa

    from numba_nbits import mlir_fix

    if not mlir_fix.install():
        pytest.skip(mlir_fix.status())
    scope = ir.Scope(None, ir.Loc("f", 1))
    loc = ir.Loc("f", 1)
    blk = ir.Block(scope, loc)
    stmts = [ir.Assign(ir.Const(i, loc), scope.redefine("v", loc), loc) for i in range(6)]
    blk.body = stmts[:3] + [stmts[1]] + stmts[3:5]  # stmts[1] twice (first position wins), stmts[5] absent
    other = ir.Block(scope, loc)
    other.body = list(blk.body)
    handler = ssa._FixSSAVars(ssa._CacheListVars())
    scan = mlir_fix._ORIGINAL["_stmt_index"]
    saved = getattr(mlir_fix._TLS, "positions", None)
    mlir_fix._TLS.positions = [blk, None]
    try:
        for s in stmts:
            for stop in (-1, 0, 1, 2, 3, 4, 5, 6, 9):
                assert ssa._FixSSAVars._stmt_index(handler, s, blk, stop) == scan(handler, s, blk, stop), (s, stop)
            assert ssa._FixSSAVars._stmt_index(handler, s, blk) == scan(handler, s, blk)
            assert ssa._FixSSAVars._stmt_index(handler, s, other, 3) == scan(handler, s, other, 3)
        assert mlir_fix._TLS.positions[1] is not None  # the table was used
    finally:
        mlir_fix._TLS.positions = saved
