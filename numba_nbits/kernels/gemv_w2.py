"""2-bit fused GEMV (spec §4.3, route ``gemv_w2``): ``Y = A · dequant(B)ᵀ`` for M = 1..8.

Math: ``Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, k//bs]) * scale[n, k//bs]``, fp32
accumulation, one rounding to the output dtype; zero points none (default 2) or packed uint8
(four per byte, low bits = first block). No fused bias.

Layout: B ``uint8[N, k_blocks, bs/4]``, four codes per byte, low bits first; ``K % 16 == 0`` and
``K % block_size == 0``, so a row is ``K/4`` bytes, a multiple of 4. Rows that are multiples of 16
bytes (K % 64 == 0) are read with 16-byte ``ld.global.nc.v4`` loads of 64 codes; otherwise an 8-
or 4-byte-chunk specialisation reads them with 32-bit loads.

Kernel (the shared engine of ``gemv_common``): code ``j`` of a word (bits 2j..2j+1) decodes as
``u32_as_f32(0x4B000000 | (w & (3 << 2j))) - (2^23 + zp * 4^j)`` for j <= 10 and, after one
12-bit right shift, the same with offset ``2j - 12`` for j = 11..15; the powers of two are folded
into the staged A. A 2-bit chunk carries 64 codes, 4x the decode work per byte of the 4-bit
kernel, so M = 1 uses 4 rows per warp and one chunk per lane per iteration (4 loads in flight,
each 64 codes of work). M tiles {1, 2, 4, 8} (smallest >= M).

Guards (``routes.gemv_w2``): bits 2, no g_idx, zero points none/packed, N % 8 == 0,
K % 16 == 0, 1 <= M <= 8, 512 % block_size == 0, K % block_size == 0.
"""
from __future__ import annotations

from . import gemv_common as gc

ROUTE = "gemv_w2"
M_MAX = 8
M_TILES = (1, 2, 4, 8)
#: (rows per warp, chunks per lane per iteration, warps per block) by M tile.
SHAPES = {1: (4, 1, 8), 2: (4, 1, 8), 4: (2, 1, 8), 8: (2, 1, 4)}


def m_tile(M: int) -> int:
    for t in M_TILES:
        if M <= t:
            return t
    return M_TILES[-1]


def check_problem(weights, problem) -> None:
    w, p = weights, problem
    gc.check(w.bits == 2, ROUTE, f"bits={w.bits}, needs 2")
    gc.check(w.g_idx is None, ROUTE, "g_idx is not supported by fused kernels")
    gc.check(w.zp_kind in ("none", "packed"), ROUTE, f"zero points {w.zp_kind!r}, needs none or packed uint8")
    gc.check(w.N % 8 == 0 and w.K % 16 == 0, ROUTE, f"N={w.N} % 8, K={w.K} % 16 must be 0")
    gc.check(1 <= p.M <= M_MAX, ROUTE, f"M={p.M} outside 1..{M_MAX}")
    gc.check(w.block_size >= 16 and 512 % w.block_size == 0, ROUTE, f"block_size={w.block_size}: 512 % block != 0")
    gc.check(w.K % w.block_size == 0, ROUTE, f"K={w.K} not a multiple of block_size={w.block_size}")
    gc.check(p.K == w.K and p.N == w.N, ROUTE, "problem and weights disagree on N/K")


def build(weights, problem, config=None, kernel: str = "auto", tactic=None):
    """Plan for ``problem`` (fixed M) over ``weights``: ``plan.run(a, out, stream)`` per call. ``kernel``:
    "auto" (the tensor-core GEMV ``gemv_mma`` for fp16/bf16 A when it supports the problem, else the
    CUDA-core engine), "cuda_core" or "mma"; ``tactic``: a ``gemv_mma.Tactic`` for the tensor-core plan."""
    from . import gemv_mma

    check_problem(weights, problem)
    return gemv_mma.route_plan(weights, problem, ROUTE, lambda: build_cuda_core(weights, problem), kernel,
                               tactic=tactic)


def build_cuda_core(weights, problem) -> gc.GemvPlan:
    """The CUDA-core plan (shared engine of ``gemv_common``) for ``problem``."""
    check_problem(weights, problem)
    mt = m_tile(problem.M)
    r, u, warps = SHAPES[mt]
    return gc.build_plan(weights, problem, route=ROUTE, mt=mt, r_max=r, u=u, warps=warps)
