"""Fused small GEMM (route ``fused_gemm``): the tensor-core GEMV kernels (``mma``) past M = 16, up to M = 64 (128).

ORT's chain sends M > 16 (and 2-bit M > 8) to dequantize + cuBLAS: an N x K fp16 copy of the weights is
written and read back on every call, so the call costs more than a GEMM on fp16 weights would. This route
runs the fused tensor-core kernel of the GEMV routes with 3, 4, 6 or 8 m-tiles of 8 tokens
(``tactics.m_tiles``): the packed 2/4/8-bit weights are read once per call, decoded in registers and fed
to ``mma.sync``; fp32 accumulation; the route adds bias with the bias-add kernel (as the GEMV routes do).
It is a deliberate departure from ORT's dispatch chain, on by default; ``numba_nbits.fused_gemm`` /
``NUMBA_NBITS_FUSED_GEMM=0`` restores ORT's chain (dequantize + cuBLAS there), and ``explain`` shows
which one a call takes.

From 4 m-tiles (M >= 25) on N >= 8192 rows of 4-bit weights the route takes the shared-activation kernel
(``mma_xa``): the warps of a CTA share each K step's activations through shared memory instead of each
re-reading them from L2 (``tactics.gemm_tactic``); it folds the block scale into the decoded fp16/bf16 weight
(one rounding per weight, as dequantize + cuBLAS has) instead of scaling fp32 partial sums per block. On an
sm_90 GPU, at M = 25..32 and 49..64 on wide 4-bit weights (block 128; blocks 32 / 64 at M = 49..64, and at
M = 25..32 from 65536 rows), that kernel issues Hopper's
warpgroup MMAs (``wgmma``, ``Tactic.wg``) with 256 rows per CTA instead of ``mma.sync``, most of them with the
activations permuted per call into the MMAs' order (``Tactic.pa``, ``wg_a``: one more launch). Past M = 64 (to 256)
the route serves only what that warpgroup kernel (12..32 m-tiles: wgmma n = 96..256) was measured to do faster
than dequantize + cuBLAS (``tactics.wide_serves``: sm_90, 4-bit blocks 32 / 64 / 128, N >= 12288, to M = 128
on N >= 8192, and down projections of 4096..8191 rows with K >= 12288 to M = 96; 8-bit block 128 on N >= 24576 to
M = 128, which also takes it at M = 25..32 and 49..64: ``tactics.WG8_BITS``); the rest keeps ORT's chain.

It is placed after the GEMV routes, so it serves what they leave: M = 17..64 (65..256 as above), and 2-bit
M = 9..16 (ORT's 2-bit GEMV stops at M = 8). Forced (``numba_nbits.force_route``), it serves any M in 1..64.

Speed (H200, 4-bit fp16, block 128, default calls against cuBLAS on fp16 weights, geometric means over
28672x8192, 8192x28672, 14336x4096, 4096x14336 and 128256x4096; ``benchmarks/results/2026-12-04-h200-wg-pa``,
run 3): 1.68x at M = 32, 1.17x at 64, 0.88x at 96, 0.75x at 128 (1.66x at M = 17, 1.21x at 48:
``-gemm-xa``, ``-wgmma-xa``); 1.6-3.9x faster than dequantize + cuBLAS. The plain
kernel re-reads the activations once per warp's rows, so past M = 16 the L2 traffic of A, not the weights,
bounds it; the shared-activation kernel reads them once per 128 rows and is bound by latency at low occupancy
(ncu in the same results).

An A that is not 16-byte aligned (e.g. a sliced tensor) is served by the dequantize + cuBLAS plan, built on
first need (outside graph capture), as the GEMV routes fall back to their CUDA-core engine.

Guards (``unmet``): bits 2/4/8, fp16/bf16, 1 <= M <= 64 (or <= 256 with ``wide_serves``), block 16/32/64/128,
zero points none/packed, no g_idx, N % 8 == 0, K % 8 == 0.
"""
from __future__ import annotations

from functools import partial

from ..family import KernelFamily
from . import core
from .mma import TensorCorePlan, dequant_fallback
from .tactics import (
    BITS,
    BLOCK_SIZES,
    MAX_M,
    WG8_MAX_M_TILES,
    WG_DOWN_MIN_K,
    WG_DOWN_MIN_N,
    WG_M_TILES_BEYOND,
    WG_MAX_M,
    WG_MIN_N,
    XA_MIN_N,
    XA_NOSPLIT_N,
    wg_blocks,
    wide_serves,
)

ROUTE = "fused_gemm"


def unmet(problem):
    """The needs of this family that ``problem`` fails (messages; none: supported)."""
    p = problem
    yield from core.fused_unmet(p, BITS)
    if p.dtype not in ("float16", "bfloat16"):
        yield f"A dtype {p.dtype}, needs float16 or bfloat16 (tensor cores)"
    if p.N % 8 or p.K % 8:
        yield f"N={p.N}, K={p.K} must be multiples of 8"
    if not 1 <= p.M <= WG_MAX_M:
        yield f"M={p.M} outside 1..{WG_MAX_M}"
    elif p.M > MAX_M and not wide_serves(p):
        yield (f"M={p.M} > {MAX_M} is served only where tactics.wide_serves says (sm_90, K whole super-chunks "
               f"(mma_xa.applies); 4-bit blocks {wg_blocks(4)}: N >= {XA_NOSPLIT_N}, "
               f"M <= {8 * WG_M_TILES_BEYOND[1]} on {XA_MIN_N}..{XA_NOSPLIT_N - 1} rows, "
               f"M <= {8 * WG_M_TILES_BEYOND[0]} on {WG_DOWN_MIN_N}..{XA_MIN_N - 1} rows with K >= {WG_DOWN_MIN_K}; "
               f"8-bit blocks {wg_blocks(8)}: N >= {WG_MIN_N}, M <= {8 * WG8_MAX_M_TILES})")
    if p.block_size not in BLOCK_SIZES:
        yield f"block_size={p.block_size} not in {BLOCK_SIZES}"


supports = core.supports_from(unmet)


def build(weights, problem, config=None, route: str = ROUTE, *, tactic=None):
    """Plan for ``problem`` (fixed M) over ``weights``; ``tactic``: a ``tactics.Tactic`` (default:
    ``tactics.default_tactic``, which takes ``gemm_tactic`` past M = 16, ``wide_tactic`` past 64)."""
    core.check(ROUTE, unmet(problem))
    core.check(ROUTE, core.weights_unmet(weights, problem))
    return TensorCorePlan(weights, problem, route, partial(dequant_fallback, weights, problem, config), tactic)


FAMILY = KernelFamily(ROUTE, supports, build, ("gemv/small_gemm.py", "gemv/mma_source.py", "gemv/mma_xa.py",
                                                "gemv/tactics.py"))
