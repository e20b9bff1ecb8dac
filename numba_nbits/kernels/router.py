"""MoE router GEMV (spec §5, route ``router_gemv``): ``Y = A · dequant(B)ᵀ + bias``, bias fused.

Serves ORT's router specialisation: 4-bit, no zero points (default 8), M = 1, block 32 or 64,
``K % block_size == 0``, ``(N, K)`` in ``routes.ROUTER_SHAPES`` (gpt-oss-20b's 32 x 2880).
The bias, when the node has one, is added in fp32 to the reduced sum before the single rounding
to the output dtype (ORT: "lane 0 adds bias[n] in float then stores"), in the same launch.

A 32 x 2880 int4 router is 46 KB of weights: the kernel is pure latency (launch + one DRAM round
trip), so the design minimises serial steps rather than maximising bandwidth:

* no shared-memory staging and no ``syncthreads``: each lane reads its A values straight from
  global memory (L1/L2 hits after the first warp) in the same round trip as its B loads, scaling
  them by the decode's power-of-two constants on the fly (``gemv_common``, ``direct_a``);
* one warp per output row (``R`` = 1), 4 warps per block (8 blocks for N = 32), and every lane's
  chunks of the row unrolled at once (``U = ceil(K/32/32)`` = 3 for K = 2880), so each lane issues
  all of its 16-byte B loads before the first use;
* decode and accumulation as in ``gemv_w4`` (magic number, exact per-block partial sums scaled
  once per block), shuffle reduction, bias add, store.

Guards re-checked by ``build``: bits 4, no zero points, no g_idx, M == 1, block 32/64,
K % block == 0, N % 8 == 0. Other (N, K) are accepted (the route table restricts the shapes).
"""
from __future__ import annotations

from . import gemv_common as gc

ROUTE = "router_gemv"
BLOCK_SIZES = (32, 64)
WARPS = 4  # 8 blocks of 128 threads for N = 32: spread over 8 SMs, no tail
U_MAX = 4  # chunks per lane unrolled: covers K up to 4096 in one round of loads


def check_problem(weights, problem) -> None:
    w, p = weights, problem
    gc.check(w.bits == 4, ROUTE, f"bits={w.bits}, needs 4")
    gc.check(w.zp_kind == "none", ROUTE, "router GEMV takes no zero points")
    gc.check(w.g_idx is None, ROUTE, "g_idx is not supported by fused kernels")
    gc.check(p.M == 1, ROUTE, f"M={p.M}, needs 1")
    gc.check(w.block_size in BLOCK_SIZES, ROUTE, f"block_size={w.block_size} not in {BLOCK_SIZES}")
    gc.check(w.K % w.block_size == 0, ROUTE, f"K={w.K} not a multiple of block_size={w.block_size}")
    gc.check(w.N % 8 == 0 and w.K % 8 == 0, ROUTE, f"N={w.N}, K={w.K} must be multiples of 8")
    gc.check(p.K == w.K and p.N == w.N, ROUTE, "problem and weights disagree on N/K")


def build(weights, problem, config=None) -> gc.GemvPlan:
    """Plan for the router problem: one launch computing ``A @ W.T + bias``."""
    check_problem(weights, problem)
    return gc.build_plan(weights, problem, route=ROUTE, mt=1, r_max=1, u=U_MAX, warps=WARPS, direct_a=True,
                         bias=weights.bias is not None)
