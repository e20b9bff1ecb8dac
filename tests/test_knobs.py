"""Issue 18 items 4-5: the knobs of spec §8 that steer kernels (L2 prefetch, paired-K and wave-aware GEMV
tactics, fpA_intB M chunking) and the fpA_intB profiler never losing to the route it replaces.

Simulator cases are tiny (N <= 64, K <= 256); each asserts a visible effect of its knob (kernel name,
generated source, candidate list, chunk count), so a knob that does nothing fails its test.
"""
from __future__ import annotations

import numpy as np
import pytest

from numba_nbits.arrays import np_dtype, to_device, to_host
from numba_nbits.config import Config, load_config
from numba_nbits.dispatch.problem import Problem
from numba_nbits.formats import quantize
from numba_nbits.kernels import gemv_common as gc
from numba_nbits.kernels import gemv_mma as G
from numba_nbits.kernels import gemv_w8
from numba_nbits.launch import simulated
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights

SIM = simulated()


def _make(rng, N, K, bs, dtype, M, bits=4, zp_kind="none"):
    W = rng.standard_normal((N, K)).astype(np.float32).astype(np_dtype(dtype))
    B, sc, zp = quantize(W, bits, bs, symmetric=(zp_kind == "none"))
    w = build_weights(B, sc, zp, K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float32).astype(np_dtype(dtype))
    ref = matmul_nbits_ref(A, B, sc, zp, K=K, N=N, bits=bits, block_size=bs)
    return w, A, ref


def _problem(w, M, **kw):
    return Problem(M=M, N=w.N, K=w.K, bits=w.bits, block_size=w.block_size, dtype=w.dtype, zero_points=w.zp_kind,
                   **kw)


def _run(plan, A, N):
    a = to_device(A, SIM)
    out = to_device(np.zeros((A.shape[0], N), A.dtype), SIM)
    plan.run(a, out, 0)
    return to_host(out)


def _ok(y, ref, dtype):
    err = relative_error(y, ref)
    assert err < TOLERANCES[dtype], err


# ====================================================================== L2 prefetch (8-bit, M = 1)

PF_ON = load_config({"ORT_QUANTIZED_DECODE_L2_PREFETCH": "1"})


def test_l2_prefetch_gate():
    p = Problem(M=1, N=64, K=256, bits=8, block_size=32, dtype="float16")
    assert gemv_w8.l2_prefetch(p, PF_ON)
    assert not gemv_w8.l2_prefetch(p, Config()) and not gemv_w8.l2_prefetch(p, None)
    assert not gemv_w8.l2_prefetch(Problem(M=2, N=64, K=256, bits=8, block_size=32, dtype="float16"), PF_ON)
    assert not gemv_w8.l2_prefetch(Problem(M=1, N=64, K=256, bits=8, block_size=32, dtype="float16", sm=75), PF_ON)


def test_l2_prefetch_source_only_with_the_knob():
    for tag in ("t1w8u1", "t2w4u1p1s3", "t1w8u1p1b4r3g4"):
        tac = G.Tactic.parse(tag)
        gen = G._gen_ring_source if tac.ring else G._gen_source
        assert "prefetch_l2" not in gen("float16", 1, tac, 32, "none", 8)
        assert "prefetch_l2" in gen("float16", 1, tac, 32, "none", 8, True)
    spec = gc.Spec("float32", 8, 32, "none", 16, 1, 4, 2, 8)
    assert "prefetch_l2" not in gc.generate_source(spec)
    on = gc.Spec("float32", 8, 32, "none", 16, 1, 4, 2, 8, l2pf=True)
    assert "prefetch_l2" in gc.generate_source(on) and on.name == spec.name + "_l2pf"


@pytest.mark.parametrize("dtype,tag", [("float16", "t1w1u1"), ("bfloat16", "t1w1u1p1r2")])
def test_l2_prefetch_tensor_core_plan(rng, dtype, tag):
    # 4 super-chunks per row, prefetch 2 stages ahead: the prefetches of super-chunks 0 and 1 are issued
    # (the twin checks their range) and those of 2 and 3 are guarded off
    w, A, ref = _make(rng, 16, 256, 32, dtype, 1, bits=8)
    tac = G.Tactic.parse(tag)
    off = gemv_w8.build(w, _problem(w, 1), Config(), tactic=tac)
    on = gemv_w8.build(w, _problem(w, 1), PF_ON, tactic=tac)
    assert not off.kernel.endswith("_l2pf") and on.kernel == off.kernel + "_l2pf"
    _ok(_run(off, A, w.N), ref, dtype)
    _ok(_run(on, A, w.N), ref, dtype)
    # M = 2 is not the M = 1 kernel: no prefetch
    w2, A2, ref2 = _make(rng, 16, 256, 32, dtype, 2, bits=8)
    assert not gemv_w8.build(w2, _problem(w2, 2), PF_ON, tactic=tac).kernel.endswith("_l2pf")


def test_l2_prefetch_cuda_core_plan(rng):
    # fp32 A: the CUDA-core engine; K = 8192 8-bit = 512 16-byte chunks per row, so lanes prefetch
    w, A, ref = _make(rng, 8, 8192, 128, "float32", 1, bits=8)
    off = gemv_w8.build(w, _problem(w, 1), Config())
    on = gemv_w8.build(w, _problem(w, 1), PF_ON)
    assert on.spec.l2pf and not off.spec.l2pf and on.spec.name == off.spec.name + "_l2pf"
    _ok(_run(on, A, w.N), ref, "float32")
