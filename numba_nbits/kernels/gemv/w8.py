"""8-bit fused GEMV (spec §4.2, route ``gemv_w8``): ``Y = A · dequant(B)ᵀ`` for M = 1..5 (1..16 with
fp16/bf16 A and block_size <= 128: the tensor-core GEMV ``mma`` serves those, flat in M).

Math: ``Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, k//bs]) * scale[n, k//bs]``, fp32
accumulation, one rounding to the output dtype; zero points none (default 128) or packed uint8
(one byte per block). Never fused with bias (the dispatcher adds it afterwards, spec §4).

Layout: B ``uint8[N, k_blocks, bs]``, one code per byte; ``K % block_size == 0`` and
``256 % block_size == 0`` (guards), so a row is ``K`` bytes, a multiple of 16: every row is read
with 16-byte ``ld.global.nc.v4`` loads of 16 codes.

CUDA-core engine (``core_source``): byte ``j`` of a word is decoded by ``u32_as_f32(0x4B000000 | (w &
(0xFF << 8j))) - (2^23 + zp * 2^(8j))`` for j = 0, 1 and, after one 16-bit right shift of the word,
the same for bytes 2, 3; the ``2^-8j`` factors are folded into the staged A. M = 1: 4 rows per warp x
2 chunks per lane = 8 independent 16-byte loads in flight per lane. M = 2..5: the M tile equals M (an
8-bit GEMV moves twice the bytes of a 4-bit one per FMA, so it stays memory-bound longer; no lanes
are wasted on padding rows). It serves fp32 A, block 256 and an A that is not 16-byte aligned (M > 5
then in M tiles of 5 over ``blockIdx.y``).

L2 prefetch (``ORT_QUANTIZED_DECODE_L2_PREFETCH``, spec §8): when on, for M = 1 on a device of sm >= 80
(``l2_prefetch``; the simulator counts as sm 90), both engines are built in their ``l2pf`` variant, which
issues ``prefetch.global.L2`` (``intrinsics.prefetch_l2``) for the weight bytes each lane will load a
couple of iterations later (kernel names end in ``_l2pf``). With the knob off the kernels are unchanged.

Guards (``unmet``; the route ``gemv_w8`` checks the spec's): bits 8, no g_idx, zero points
none/packed, N % 8 == 0, K % 8 == 0, 1 <= M <= 5 (or <= 16 for the tensor-core GEMV), 256 %
block_size == 0, K % block_size == 0.
"""
from __future__ import annotations

from ..family import KernelFamily
from . import core
from .mma import build_route

ROUTE = "gemv_w8"
BITS = 8
M_MAX = 5  # spec §4.2; the tensor-core GEMV takes M up to M_MAX_MMA
M_MAX_MMA = 16
MMA_BLOCKS = (16, 32, 64, 128)
#: (rows per warp, chunks per lane per iteration, warps per block) by M tile (see ``w4``).
SHAPES = {1: (4, 2, 8), 2: (4, 1, 8), 3: (4, 1, 8), 4: (4, 1, 8), 5: (2, 1, 8)}
L2PF_MIN_SM = 80


def unmet(problem):
    """The needs of this family that ``problem`` fails (messages; none: supported)."""
    p = problem
    yield from core.fused_unmet(p, BITS)
    if p.N % 8 or p.K % 8:
        yield f"N={p.N}, K={p.K} must be multiples of 8"
    mma = p.dtype in ("float16", "bfloat16") and p.block_size in MMA_BLOCKS
    if not 1 <= p.M <= (M_MAX_MMA if mma else M_MAX):
        yield f"M={p.M} outside 1..{M_MAX} (1..{M_MAX_MMA} for fp16/bf16 A with block_size <= 128)"
    yield from core.block_multiple_unmet(p, 256)


supports = core.supports_from(unmet)


def l2_prefetch(problem, config) -> bool:
    """Whether the call takes the L2-prefetching kernels: knob on, M == 1, device sm >= 80."""
    return bool(config is not None and config.l2_prefetch and problem.M == 1 and problem.sm >= L2PF_MIN_SM)


def build(weights, problem, config=None, route: str = ROUTE, *, kernel: str = "auto", tactic=None):
    """Plan for ``problem`` (fixed M) over ``weights``. ``kernel``: "auto" (the tensor-core GEMV ``mma``
    for fp16/bf16 A when it supports the problem, else the CUDA-core engine), "cuda_core" or "mma";
    ``tactic``: a ``tactics.Tactic`` for the tensor-core plan."""
    pf = l2_prefetch(problem, config)
    return build_route(ROUTE, unmet, weights, problem, route, lambda: build_cuda_core(weights, problem, pf, route),
                       kernel, tactic, l2pf=pf, config=config)


def build_cuda_core(weights, problem, l2pf: bool = False, route: str = ROUTE) -> core.GemvPlan:
    """The CUDA-core plan (shared engine, ``core``) for ``problem``."""
    core.check(ROUTE, unmet(problem))
    mt = min(problem.M, M_MAX)  # M > 5 (fallback of the tensor-core plan): blockIdx.y walks M tiles of 5
    return core.build_shaped(weights, problem, route, mt, SHAPES, l2pf)


FAMILY = KernelFamily(ROUTE, supports, build, ("gemv/w8.py", "gemv/mma_source.py", "gemv/core_source.py"))
