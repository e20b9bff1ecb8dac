"""4-bit fused GEMV (spec §4.1, route ``gemv_w4``): ``Y = A · dequant(B)ᵀ`` for M = 1..16.

Math: ``Y[m, n] = sum_{k<K} A[m, k] * (q[n, k] - zp[n, k//bs]) * scale[n, k//bs]``, fp32
accumulation, one rounding to the output dtype. Zero points: none (default 8) or packed uint8
(two per byte, low nibble = even block). Bias is *not* fused: the dispatcher follows this route
with the bias-add kernel (ORT's "retry without bias").

Layout: B ``uint8[N, k_blocks, bs/2]``, low nibble = even k; a row is ``K_padded/2`` bytes. When
``K_padded % 32 == 0`` (always, unless block 16 with an odd number of blocks) rows are 16-byte
multiples and B is read with 16-byte ``ld.global.nc.v4`` loads of 32 codes; otherwise a second
specialisation reads 8-byte chunks (16 codes) with two 32-bit loads. K need not be a multiple of
the block size: the last block is padded in B and the kernel multiplies the padded codes by A = 0.

Kernel design (shared engine, see ``gemv_common`` for the full derivation):

* decode by the magic-number trick with the zero point folded into the subtracted constant and
  the nibble position folded into the pre-scaled A: LOP3 + FADD + FFMA per code and row, no I2F;
* M = 1: ``R`` = 4 rows per warp share each lane's shared-memory read of A, ``U`` = 2 chunks per
  lane per iteration, so each lane has 8 independent 16-byte loads in flight (the H200 needs about
  23 KB in flight per SM to cover ~700 ns of DRAM latency at 4.3 TB/s; 8 warps x 32 lanes x 128 B
  is 32 KB per block); per (row, quantization block) the exact partial sum ``sum (q - zp) a`` is
  scaled once;
* M = 2..16: register tiling over M with a compile-time tile ``MT`` in {2, 4, 8, 16} (the
  smallest that covers M; ``blockIdx.y`` walks larger M): each 16-byte word is loaded and
  decoded once, ``(q - zp) * scale`` formed once per code, and FMA'd into all MT rows. Per
  §2.4 of perf-anchors this is FMA-bound from M ~ 4 in fp32; it is the path for fp32 A and a
  correct fallback for fp16/bf16 (a tensor-core kernel serves those at larger M);
* A staged per block in shared memory (pre-scaled fp32, bank-conflict-free padding), once per
  block with a persistent grid when the whole K fits in ``SMEM_BUDGET``, else in balanced K tiles;
* 64-bit indices; warp-shuffle butterfly reduction; lanes spread the stores.

Guards (``routes.gemv_w4``; ``build`` re-checks the kernel's own needs): bits 4, no g_idx, zero
points none/packed, N % 8 == 0, K % 8 == 0, 1 <= M <= 16, block size 16/32/64/128.
"""
from __future__ import annotations

from . import gemv_common as gc

ROUTE = "gemv_w4"
BLOCK_SIZES = (16, 32, 64, 128)
M_MAX = 16
#: Compile-time M tiles; M is covered by the smallest tile >= M (blockIdx.y walks larger M).
M_TILES = (1, 2, 4, 8, 16)
#: (rows per warp, chunks per lane per iteration, warps per block) by M tile. M=1: 4 rows x 2
#: chunks = 8 16-byte loads in flight per lane. Larger tiles are FMA-bound: 4 rows share each A
#: read (shared-memory bandwidth is 1/4 of the FMA rate), 1 chunk keeps registers in check.
SHAPES = {1: (4, 2, 8), 2: (4, 1, 8), 4: (4, 1, 8), 8: (4, 1, 4), 16: (2, 1, 4)}


def m_tile(M: int) -> int:
    for t in M_TILES:
        if M <= t:
            return t
    return M_TILES[-1]


def check_problem(weights, problem) -> None:
    w, p = weights, problem
    gc.check(w.bits == 4, ROUTE, f"bits={w.bits}, needs 4")
    gc.check(w.g_idx is None, ROUTE, "g_idx is not supported by fused kernels")
    gc.check(w.zp_kind in ("none", "packed"), ROUTE, f"zero points {w.zp_kind!r}, needs none or packed uint8")
    gc.check(w.N % 8 == 0 and w.K % 8 == 0, ROUTE, f"N={w.N}, K={w.K} must be multiples of 8")
    gc.check(1 <= p.M <= M_MAX, ROUTE, f"M={p.M} outside 1..{M_MAX}")
    gc.check(w.block_size in BLOCK_SIZES, ROUTE, f"block_size={w.block_size} not in {BLOCK_SIZES}")
    gc.check(p.K == w.K and p.N == w.N, ROUTE, "problem and weights disagree on N/K")


def build_cuda_core(weights, problem) -> gc.GemvPlan:
    """The CUDA-core plan for ``problem`` (fixed M): ``plan.run(a, out, stream)`` per call."""
    check_problem(weights, problem)
    mt = m_tile(problem.M)
    r, u, warps = SHAPES[mt]
    return gc.build_plan(weights, problem, route=ROUTE, mt=mt, r_max=r, u=u, warps=warps)


def build(weights, problem, config=None, kernel: str = "auto", tactic=None):
    """Plan for ``problem`` over ``weights``. ``kernel``: "auto" (tensor cores, ``gemv_mma``, for fp16/bf16
    when ``gemv_mma.supports`` the problem, else CUDA cores), "cuda_core" or "mma"; ``tactic``: a ``gemv_mma.Tactic`` for the tensor-core plan."""
    from . import gemv_mma

    check_problem(weights, problem)
    return gemv_mma.route_plan(weights, problem, ROUTE, lambda: build_cuda_core(weights, problem), kernel,
                               tactic=tactic)
