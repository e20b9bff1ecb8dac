"""MoE router GEMV (spec §5, route ``router_gemv``): ``Y = A · dequant(B)ᵀ + bias``, bias fused.

Serves ORT's router specialisation: 4-bit, no zero points (default 8), M = 1, block 32 or 64,
``K % block_size == 0``, ``(N, K)`` in ``routes.ROUTER_SHAPES`` (gpt-oss-20b's 32 x 2880), and (ours, not
ORT's gate: ``numba_nbits.router_small_n``) the small-N gates N <= 256, K <= 8192 (``routes.router_shape``):
on the H100 (CUPTI kernel time, L2 flushed, 2026-12-06) 4.38 us against the tensor-core GEMV's 8.95 on
256 x 7168, 2.93 against 5.80 on 128 x 4096, 2.41 against 3.81 on 64 x 2048 (block 32; with bias 1.9-2.3x,
the GEMV then needing its bias-add kernel).
The bias, when the node has one, is added in fp32 to the reduced sum before the single rounding
to the output dtype (ORT: "lane 0 adds bias[n] in float then stores"), in the same launch.

A 32 x 2880 int4 router is 46 KB of weights: the kernel is pure latency (launch + one DRAM round
trip), so the design minimises serial steps rather than maximising bandwidth:

* no shared-memory staging and no ``syncthreads``: each lane reads its A values straight from
  global memory (L1/L2 hits after the first warp) in the same round trip as its B loads, scaling
  them by the decode's power-of-two constants on the fly (``core_source``, ``direct_a``). A chunk's
  32 A values are 64 contiguous bytes, read as four 16-byte loads (``a_vec``, ``ldg_v4_at``): the
  lanes of a warp read chunks 64 bytes apart, so one scalar load per value made every warp-wide load
  touch 16 L1 lines, 96 such loads per lane. An A whose data pointer is not 16-byte aligned (a view
  into a larger buffer) runs the same kernel with scalar A loads (built on first need, outside
  graph capture; the error during capture says so);
* one warp per output row (``R`` = 1), one warp per block (32 blocks on 32 SMs for N = 32: the warps
  do not share an SM's L1 and load pipeline; CUPTI kernel time on the H200, bias, L2 flushed: 2.53 us
  against 2.64 with 2 warps per block and 2.78 with 4, 2026-12-06), and every lane's
  chunks of the row unrolled at once (``U = ceil(K/32/32)`` = 3 for K = 2880), so each lane issues
  all of its 16-byte B loads before the first use;
* decode and accumulation as in ``w4`` (magic number, exact per-block partial sums scaled once per
  block), shuffle reduction, bias add, store.

Guards (``unmet``): bits 4, no zero points, no g_idx, M == 1, block 32/64, K % block == 0,
N % 8 == 0. Other (N, K) are accepted (the route table restricts the shapes).
"""
from __future__ import annotations

from ..family import KernelFamily
from . import core

ROUTE = "router_gemv"
BITS = 4
BLOCK_SIZES = (32, 64)
WARPS = 1  # 32 blocks of 32 threads for N = 32: one warp per SM
U_MAX = 4  # chunks per lane unrolled: covers K up to 4096 in one round of loads


def unmet(problem):
    """The needs of this family that ``problem`` fails (messages; none: supported)."""
    p = problem
    if p.bits != BITS:
        yield f"bits={p.bits}, needs {BITS}"
    if p.zero_points != "none":
        yield "router GEMV takes no zero points"
    if p.has_g_idx:
        yield "g_idx is not supported by fused kernels"
    if p.M != 1:
        yield f"M={p.M}, needs 1"
    if p.block_size not in BLOCK_SIZES:
        yield f"block_size={p.block_size} not in {BLOCK_SIZES}"
    if p.K % p.block_size:
        yield f"K={p.K} not a multiple of block_size={p.block_size}"
    if p.N % 8 or p.K % 8:
        yield f"N={p.N}, K={p.K} must be multiples of 8"


supports = core.supports_from(unmet)


def _plan(weights, problem, route: str, a_vec: bool) -> core.GemvPlan:
    return core.build_plan(weights, problem, route=route, mt=1, r_max=1, u=U_MAX, warps=WARPS, direct_a=True,
                           a_vec=a_vec, bias=weights.bias is not None)


class RouterPlan(core.GemvPlan):
    """The router launch with 16-byte A loads; an A not 16-byte aligned runs the scalar-load build instead."""

    def __init__(self, weights, problem, route: str):
        v = _plan(weights, problem, route, a_vec=True)
        super().__init__(v.route, v.spec, v.launch, v.shared_mem)
        self._scalar = lambda: _plan(weights, problem, route, a_vec=False)
        self._fallback = None

    def enqueue(self, a, out, stream: int) -> None:
        if a.ptr % 16 == 0:
            super().enqueue(a, out, stream)
            return
        core.unaligned_fallback(self, stream, self._scalar, "its scalar-load kernel").enqueue(a, out, stream)

    def enqueue_runner(self, a_like, o_like):
        go = super().enqueue_runner(a_like, o_like)
        if go is None:
            return None

        def run(pa, po, stream):
            return pa % 16 == 0 and go(pa, po, stream)  # False: launched nothing, ``enqueue`` takes the call

        return run


def build(weights, problem, config=None, route: str = ROUTE) -> core.GemvPlan:
    """Plan for the router problem: one launch computing ``A @ W.T + bias``."""
    core.check(ROUTE, unmet(problem))
    core.check(ROUTE, core.weights_unmet(weights, problem))
    return RouterPlan(weights, problem, route)


FAMILY = KernelFamily("router", supports, build, ("gemv/router.py", "gemv/core_source.py"))
