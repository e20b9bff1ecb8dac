"""2-bit fused GEMV (spec §4.3, route ``gemv_w2``): ``Y = A · dequant(B)ᵀ`` for M = 1..8.

Math: ``Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, k//bs]) * scale[n, k//bs]``, fp32
accumulation, one rounding to the output dtype; zero points none (default 2) or packed uint8
(four per byte, low bits = first block). No fused bias.

fp16/bf16 A runs the tensor-core GEMV (``mma``) when it supports the problem. The CUDA-core engine
(``core_source``): B ``uint8[N, k_blocks, bs/4]``, four codes per byte, low bits first; ``K % 16 ==
0`` and ``K % block_size == 0``, so a row is ``K/4`` bytes, a multiple of 4. Rows that are multiples
of 16 bytes (K % 64 == 0) are read with 16-byte ``ld.global.nc.v4`` loads of 64 codes; otherwise an
8- or 4-byte-chunk specialisation reads them with 32-bit loads. Code ``j`` of a word (bits
2j..2j+1) decodes as ``u32_as_f32(0x4B000000 | (w & (3 << 2j))) - (2^23 + zp * 4^j)`` for j <= 10
and, after one 12-bit right shift, the same with offset ``2j - 12`` for j = 11..15; the powers of
two are folded into the staged A. A 2-bit chunk carries 64 codes, 4x the decode work per byte of
the 4-bit kernel, so M = 1 uses 4 rows per warp and one chunk per lane per iteration (4 loads in
flight, each 64 codes of work). M tiles {1, 2, 4, 8} (smallest >= M).

Guards (``unmet``; the route ``gemv_w2`` checks the spec's): bits 2, no g_idx, zero points
none/packed, N % 8 == 0, K % 16 == 0, 1 <= M <= 8, 512 % block_size == 0, K % block_size == 0.
"""
from __future__ import annotations

from ..family import KernelFamily
from . import core
from .mma import build_route

ROUTE = "gemv_w2"
BITS = 2
M_MAX = 8
M_TILES = (1, 2, 4, 8)
#: (rows per warp, chunks per lane per iteration, warps per block) by M tile.
SHAPES = {1: (4, 1, 8), 2: (4, 1, 8), 4: (2, 1, 8), 8: (2, 1, 4)}


def unmet(problem):
    """The needs of this family that ``problem`` fails (messages; none: supported)."""
    p = problem
    yield from core.fused_unmet(p, BITS)
    if p.N % 8 or p.K % 16:
        yield f"N={p.N} % 8, K={p.K} % 16 must be 0"
    if not 1 <= p.M <= M_MAX:
        yield f"M={p.M} outside 1..{M_MAX}"
    yield from core.block_multiple_unmet(p, 512)


supports = core.supports_from(unmet)


def build_cuda_core(weights, problem, route: str = ROUTE) -> core.GemvPlan:
    """The CUDA-core plan (shared engine, ``core``) for ``problem``."""
    core.check(ROUTE, unmet(problem))
    return core.build_shaped(weights, problem, route, core.smallest_tile(problem.M, M_TILES), SHAPES)


def build(weights, problem, config=None, route: str = ROUTE, *, kernel: str = "auto", tactic=None):
    """Plan for ``problem`` (fixed M) over ``weights``. ``kernel``: "auto" (the tensor-core GEMV ``mma``
    for fp16/bf16 A when it supports the problem, else the CUDA-core engine), "cuda_core" or "mma";
    ``tactic``: a ``tactics.Tactic`` for the tensor-core plan."""
    return build_route(ROUTE, unmet, weights, problem, route, lambda: build_cuda_core(weights, problem, route), kernel,
                       tactic, config=config)


FAMILY = KernelFamily(ROUTE, supports, build, ("gemv/w2.py", "gemv/mma_source.py", "gemv/core_source.py"))
