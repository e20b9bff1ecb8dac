"""numba_nbits.dataflow_fix: inside ``active()`` numba-cuda's use/def sets, live maps and dead maps come out equal to
numba's own, and the LLVM IR of real kernels (the warpgroup GEMM, a tensor-core GEMV, a dequantize kernel) and of a
small kernel of nested loops and branches (``conftest.BRANCHY_KERNEL``) is byte-identical with and without the
replacements; outside ``active()`` numba's functions run; an unknown function is left alone.

As in ``test_typing_memo``: numba-cuda's compiler runs in a process of its own (``NUMBA_ENABLE_CUDASIM=0``; without a
GPU the current-device query is answered with compute capability 9.0); only LLVM IR is produced.
"""
from __future__ import annotations

from conftest import BRANCHY_KERNEL, run_offline_ir_script

_SAME_IR = r'''
from numba.cuda.core import analysis, ssa
from numba_nbits import dataflow_fix, lowering_fix, typing_memo
from numba_nbits.kernels.dequant import dequant_kernel
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic, default_tactic

lowering_fix.install()
typing_memo.install()


''' + BRANCHY_KERNEL + r'''

plain_ir = ir


def ir(k):
    with typing_memo.active():  # as the library compiles
        return plain_ir(k)


stock_fns = (analysis.compute_use_defs, analysis.compute_live_map, analysis.compute_dead_maps, ssa._run_ssa,
             ssa._run_block_rewrite)
kernels = [gemv_mma_kernel("float16", 8, Tactic.parse("t1w8u1xhvm"), 128, "none", 4, False, True),
           gemv_mma_kernel("bfloat16", 2, default_tactic(4096, 4096, 128, 9, 4), 64, "packed", 4, False, True),
           dequant_kernel(4, "bfloat16", "typed", True), _Branchy]
known = dict(dataflow_fix.KNOWN_SOURCE_SHA256)
dataflow_fix.KNOWN_SOURCE_SHA256["ssa._FixSSAVars"] = "0" * 64  # as if numba-cuda had changed one of them
assert dataflow_fix.install() is False, dataflow_fix.status()
assert "ssa._FixSSAVars is not the known one" in dataflow_fix.status(), dataflow_fix.status()
assert (analysis.compute_use_defs, analysis.compute_live_map, analysis.compute_dead_maps, ssa._run_ssa,
        ssa._run_block_rewrite) == stock_fns
stock = [ir(k) for k in kernels]
dataflow_fix.KNOWN_SOURCE_SHA256.update(known)
dataflow_fix._state["done"] = False
assert dataflow_fix.install() is True, dataflow_fix.status()
assert analysis.compute_live_map is dataflow_fix.compute_live_map and ssa._run_ssa is dataflow_fix._run_ssa
outside = ir(kernels[2])  # installed, not active: numba's functions

# every use/def, live and dead map computed inside active() compared with numba's own on the same blocks
calls = {"use_defs": 0, "live_map": 0, "dead_maps": 0}


def checked_use_defs(blocks):
    got = dataflow_fix.compute_use_defs(blocks)
    if dataflow_fix._on():
        want = dataflow_fix._ORIGINAL["compute_use_defs"](blocks)
        assert got.usemap == want.usemap and got.defmap == want.defmap, "use/def sets differ"
        calls["use_defs"] += 1
    return got


def checked_live_map(cfg, blocks, usemap, defmap):
    got = dataflow_fix.compute_live_map(cfg, blocks, usemap, defmap)
    if dataflow_fix._on():
        assert got == dataflow_fix._ORIGINAL["compute_live_map"](cfg, blocks, usemap, defmap), "live maps differ"
        calls["live_map"] += 1
    return got


def checked_dead_maps(cfg, blocks, live_map, defmap):
    got = dataflow_fix.compute_dead_maps(cfg, blocks, live_map, defmap)
    if dataflow_fix._on():
        want = dataflow_fix._ORIGINAL["compute_dead_maps"](cfg, blocks, live_map, defmap)
        for field in ("internal", "escaping", "combined"):  # the same keys in the same order, the same sets
            assert list(getattr(got, field).items()) == list(getattr(want, field).items()), f"dead maps differ: {field}"
        calls["dead_maps"] += 1
    return got


analysis.compute_use_defs, analysis.compute_live_map = checked_use_defs, checked_live_map
analysis.compute_dead_maps = checked_dead_maps
fixed = []
for k in kernels:
    with dataflow_fix.active():
        fixed.append(ir(k))
assert not dataflow_fix._on()
assert outside == stock[2], "outside active(): the LLVM IR differs"
for k, a, b in zip(kernels, stock, fixed):
    assert a == b, f"{k.name}: the LLVM IR differs"
    assert "define" in a and (len(a) > 10000 or k is _Branchy), k.name
assert min(calls.values()) >= 20, calls
print("same IR:", [k.name for k in kernels], "maps compared:", calls)
'''


def test_same_maps_and_llvm_ir_with_the_dataflow_replacements():
    out = run_offline_ir_script(_SAME_IR, timeout=900)
    assert "same IR: ['gemv_mma_w4_float16_mt8_t1w8u1xhvm_b128_none_kf', " in out, out
