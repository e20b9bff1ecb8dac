"""8-bit fused GEMV (spec §4.2, route ``gemv_w8``): ``Y = A · dequant(B)ᵀ`` for M = 1..5 (1..16 with
fp16/bf16 A and block_size <= 128: the tensor-core GEMV ``gemv_mma`` serves those, flat in M).

Math: ``Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, k//bs]) * scale[n, k//bs]``, fp32
accumulation, one rounding to the output dtype; zero points none (default 128) or packed uint8
(one byte per block). Never fused with bias (the dispatcher adds it afterwards, spec §4).

Layout: B ``uint8[N, k_blocks, bs]``, one code per byte; ``K % block_size == 0`` and
``256 % block_size == 0`` (guards), so a row is ``K`` bytes, a multiple of 16: every row is read
with 16-byte ``ld.global.nc.v4`` loads of 16 codes.

Kernel (the shared engine of ``gemv_common``; see its docstring): byte ``j`` of a word is decoded
by ``u32_as_f32(0x4B000000 | (w & (0xFF << 8j))) - (2^23 + zp * 2^(8j))`` for j = 0, 1 and, after
one 16-bit right shift of the word, the same for bytes 2, 3; the ``2^-8j`` factors are folded into
the staged A. M = 1: 4 rows per warp x 2 chunks per lane = 8 independent 16-byte loads in flight
per lane. M = 2..5: the M tile equals M (an 8-bit GEMV moves twice the bytes of a 4-bit one per
FMA, so it stays memory-bound longer; no lanes are wasted on padding rows).

Guards (``routes.gemv_w8``): bits 8, no g_idx, zero points none/packed, N % 8 == 0, K % 8 == 0,
1 <= M <= 5 (or <= 16 for the tensor-core GEMV), 256 % block_size == 0, K % block_size == 0.

fp16/bf16 A (block <= 128) runs ``gemv_mma`` (two 4-bit planes per code, see its docstring); the
engine below serves fp32 A, block 256 and an A that is not 16-byte aligned (M > 5 then in M tiles
of 5 over ``blockIdx.y``).

L2 prefetch (``ORT_QUANTIZED_DECODE_L2_PREFETCH``, spec §8): when on, for M = 1 on a device of sm >= 80
(``l2_prefetch``; the simulator counts as sm 90), both engines are built in their ``l2pf`` variant, which
issues ``prefetch.global.L2`` (``intrinsics.prefetch_l2``) for the weight bytes each lane will load a
couple of iterations later (kernel names end in ``_l2pf``). With the knob off the kernels are unchanged.
"""
from __future__ import annotations

from . import gemv_common as gc

ROUTE = "gemv_w8"
M_MAX = 5  # spec §4.2; the tensor-core GEMV takes M up to M_MAX_MMA
M_MAX_MMA = 16
MMA_BLOCKS = (16, 32, 64, 128)
#: (rows per warp, chunks per lane per iteration, warps per block) by M tile (see gemv_w4).
SHAPES = {1: (4, 2, 8), 2: (4, 1, 8), 3: (4, 1, 8), 4: (4, 1, 8), 5: (2, 1, 8)}


def check_problem(weights, problem) -> None:
    w, p = weights, problem
    gc.check(w.bits == 8, ROUTE, f"bits={w.bits}, needs 8")
    gc.check(w.g_idx is None, ROUTE, "g_idx is not supported by fused kernels")
    gc.check(w.zp_kind in ("none", "packed"), ROUTE, f"zero points {w.zp_kind!r}, needs none or packed uint8")
    gc.check(w.N % 8 == 0 and w.K % 8 == 0, ROUTE, f"N={w.N}, K={w.K} must be multiples of 8")
    mma = w.dtype in ("float16", "bfloat16") and w.block_size in MMA_BLOCKS
    gc.check(1 <= p.M <= (M_MAX_MMA if mma else M_MAX), ROUTE,
             f"M={p.M} outside 1..{M_MAX} (1..{M_MAX_MMA} for fp16/bf16 A with block_size <= 128)")
    gc.check(w.block_size >= 16 and 256 % w.block_size == 0, ROUTE, f"block_size={w.block_size}: 256 % block != 0")
    gc.check(w.K % w.block_size == 0, ROUTE, f"K={w.K} not a multiple of block_size={w.block_size}")
    gc.check(p.K == w.K and p.N == w.N, ROUTE, "problem and weights disagree on N/K")


L2PF_MIN_SM = 80


def l2_prefetch(problem, config) -> bool:
    """Whether the call takes the L2-prefetching kernels: knob on, M == 1, device sm >= 80."""
    return bool(config is not None and config.l2_prefetch and problem.M == 1 and problem.sm >= L2PF_MIN_SM)


def build(weights, problem, config=None, kernel: str = "auto", tactic=None):
    """Plan for ``problem`` (fixed M) over ``weights``: ``plan.run(a, out, stream)`` per call. ``kernel``:
    "auto" (the tensor-core GEMV ``gemv_mma`` for fp16/bf16 A when it supports the problem, else the
    CUDA-core engine), "cuda_core" or "mma"; ``tactic``: a ``gemv_mma.Tactic`` for the tensor-core plan."""
    from . import gemv_mma

    check_problem(weights, problem)
    pf = l2_prefetch(problem, config)
    return gemv_mma.route_plan(weights, problem, ROUTE, lambda: build_cuda_core(weights, problem, l2pf=pf), kernel,
                               tactic=tactic, l2pf=pf)


def build_cuda_core(weights, problem, l2pf: bool = False) -> gc.GemvPlan:
    """The CUDA-core plan (shared engine of ``gemv_common``) for ``problem``."""
    check_problem(weights, problem)
    mt = min(problem.M, M_MAX)  # M > 5 (fallback of the tensor-core plan): blockIdx.y walks M tiles of 5
    r, u, warps = SHAPES[mt]
    return gc.build_plan(weights, problem, route=ROUTE, mt=mt, r_max=r, u=u, warps=warps, l2pf=l2pf)
