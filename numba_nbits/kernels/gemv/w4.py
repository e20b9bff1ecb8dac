"""4-bit fused GEMV (spec §4.1, route ``gemv_w4``): ``Y = A · dequant(B)ᵀ`` for M = 1..16.

Math: ``Y[m, n] = sum_{k<K} A[m, k] * (q[n, k] - zp[n, k//bs]) * scale[n, k//bs]``, fp32
accumulation, one rounding to the output dtype. Zero points: none (default 8) or packed uint8
(two per byte, low nibble = even block). Bias is *not* fused: the dispatcher follows this route
with the bias-add kernel (ORT's "retry without bias").

fp16/bf16 A runs the tensor-core GEMV (``mma``) when it supports the problem; the CUDA-core engine
(``core_source`` derives its decode) serves fp32 A and an A that is not 16-byte aligned:

* B ``uint8[N, k_blocks, bs/2]``, a row ``K_padded/2`` bytes. When ``K_padded % 32 == 0`` (always,
  unless block 16 with an odd number of blocks) rows are 16-byte multiples and B is read with 16-byte
  ``ld.global.nc.v4`` loads of 32 codes; otherwise 8-byte chunks (16 codes, two 32-bit loads). K need
  not be a multiple of the block size: the last block is padded in B and multiplied by A = 0.
* M = 1: ``R`` = 4 rows per warp share each lane's shared-memory read of A, ``U`` = 2 chunks per lane
  per iteration, so each lane has 8 independent 16-byte loads in flight (the H200 needs about 23 KB in
  flight per SM to cover its DRAM latency at full bandwidth; 8 warps x 32 lanes x 128 B is 32 KB per
  block); per (row, quantization block) the exact partial sum ``sum (q - zp) a`` is scaled once.
* M = 2..16: register tiling over M with a compile-time tile ``MT`` in {2, 4, 8, 16} (the smallest
  that covers M; ``blockIdx.y`` walks larger M): each 16-byte word is loaded and decoded once,
  ``(q - zp) * scale`` formed once per code and FMA'd into all MT rows. FMA-bound from M ~ 4 in fp32.

Guards (``unmet``; the route ``gemv_w4`` checks the spec's): bits 4, no g_idx, zero points
none/packed, N % 8 == 0, K % 8 == 0, 1 <= M <= 16, block size 16/32/64/128.
"""
from __future__ import annotations

from ..family import KernelFamily
from . import core
from .mma import build_route

ROUTE = "gemv_w4"
BITS = 4
BLOCK_SIZES = (16, 32, 64, 128)
M_MAX = 16
#: Compile-time M tiles; M is covered by the smallest tile >= M (blockIdx.y walks larger M).
M_TILES = (1, 2, 4, 8, 16)
#: (rows per warp, chunks per lane per iteration, warps per block) by M tile. M=1: 4 rows x 2
#: chunks = 8 16-byte loads in flight per lane. Larger tiles are FMA-bound: 4 rows share each A
#: read (shared-memory bandwidth is 1/4 of the FMA rate), 1 chunk keeps registers in check.
SHAPES = {1: (4, 2, 8), 2: (4, 1, 8), 4: (4, 1, 8), 8: (4, 1, 4), 16: (2, 1, 4)}


def unmet(problem):
    """The needs of this family that ``problem`` fails (messages; none: supported)."""
    p = problem
    yield from core.fused_unmet(p, BITS)
    if p.N % 8 or p.K % 8:
        yield f"N={p.N}, K={p.K} must be multiples of 8"
    if not 1 <= p.M <= M_MAX:
        yield f"M={p.M} outside 1..{M_MAX}"
    if p.block_size not in BLOCK_SIZES:
        yield f"block_size={p.block_size} not in {BLOCK_SIZES}"


supports = core.supports_from(unmet)


def build_cuda_core(weights, problem, route: str = ROUTE) -> core.GemvPlan:
    """The CUDA-core plan for ``problem`` (fixed M)."""
    core.check(ROUTE, unmet(problem))
    return core.build_shaped(weights, problem, route, core.smallest_tile(problem.M, M_TILES), SHAPES)


def build(weights, problem, config=None, route: str = ROUTE, *, kernel: str = "auto", tactic=None):
    """Plan for ``problem`` over ``weights``. ``kernel``: "auto" (tensor cores, ``mma``, for fp16/bf16
    when ``tactics.supports`` the problem, else CUDA cores), "cuda_core" or "mma"; ``tactic``: a
    ``tactics.Tactic`` for the tensor-core plan."""
    return build_route(ROUTE, unmet, weights, problem, route, lambda: build_cuda_core(weights, problem, route), kernel,
                       tactic, config=config)


FAMILY = KernelFamily(ROUTE, supports, build, ("gemv/w4.py", "gemv/mma_source.py", "gemv/core_source.py"))
