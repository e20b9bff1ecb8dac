"""The activations of the warpgroup kernel in wgmma's order (``Tactic.pa``): one small kernel per call.

The shared-activation kernel's warpgroup form (``mma_xa``, ``Tactic.wg``) reads each super-chunk's activations from
its shared-memory ring as ``wgmma``'s K-major core matrices, in the k order of the packed weights (``layout``: the
logical columns ``2t, 2t + 1, 2t + 8, 2t + 9`` of a step are four consecutive physical k). That order splits every
8-byte run of A over two core matrices, so the ring copies A in 4-byte pieces: 16 ``cp.async`` per thread and
super-chunk at 8 m-tiles and 256 threads, with their address arithmetic about a quarter of the main loop.

With ``pa`` this kernel writes, once per call, each super-chunk's activations exactly as one ring slot holds them:
word ``d`` of super-chunk ``c`` is the A area's word ``d`` (``mma_xa``: (step, row block, k block, row, word),
word fastest), rows past M repeating row M - 1. The main kernel then copies slot-sized contiguous blocks in
16-byte pieces. It costs one launch and ``2 * 8 * m_tiles * K`` bytes written and read (2 MB at M = 128 and
K = 8192, about a microsecond at the HBM's rate) and a workspace: the node's, per calling thread, sized for the largest
m-tiles of the plan's range (``mma.ThreadWorkspace``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ...launch import Kernel
from .layout import sizes
from .tactics import sm_count

THREADS = 256
#: CTAs per SM of the grid-stride launch (at most)
BLOCKS_PER_SM = 16


def _permute(a, out, M, half_k, m_tiles, group_steps, group_k, super_k, per_chunk, total):
    """``out[c * per_chunk + d]`` = the 32-bit word of A (``a``: M x K fp16/bf16 as words) that word ``d`` of
    super-chunk ``c``'s ring slot holds (module docstring; the mapping of ``mma_xa``'s 4-byte copies)."""
    i = np.int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
    step = np.int64(cuda.gridDim.x) * THREADS
    while i < total:
        c = i // per_chunk
        d = i - c * per_chunk
        q = d >> 6
        s = q // m_tiles
        kp = (s // group_steps) * group_k + (d & 3) * (4 * group_steps) + (s % group_steps) * 4 + ((d >> 5) & 1) * 2
        row = min((q % m_tiles) * 8 + ((d >> 2) & 7), M - 1)
        out[i] = a[row * half_k + ((c * super_k + kp) >> 1)]
        i += step


@lru_cache(maxsize=None)
def permute_kernel() -> Kernel:
    from numba.cuda import types

    i64 = types.int64
    return Kernel(_permute, (types.uint32[::1], types.uint32[::1]) + (i64,) * 8, name="gemv_wg_permute_a")


def words(M_tiles: int, K: int) -> int:
    """32-bit words of the permuted activations for ``M_tiles`` m-tiles and K (a multiple of the super-chunk)."""
    return 8 * M_tiles * K // 2


def bind(a_like, out, M: int, K: int, m_tiles: int, block_size: int, bits: int, simulated: bool):
    """The launch that fills ``out`` (``words(m_tiles, K)`` uint32) from an A laid out like ``a_like`` (argument 0,
    re-pointed per call) for weights of ``block_size`` and ``bits`` (their super-chunk, ``layout.sizes``); a
    grid-stride loop over at most ``BLOCKS_PER_SM`` CTAs per SM."""
    super_k, _, group_k, group_steps, _, _, _ = sizes(block_size, bits)
    per_chunk = 8 * m_tiles * super_k // 2
    total = words(m_tiles, K)
    grid = max(1, min(BLOCKS_PER_SM * sm_count(simulated), -(-total // THREADS)))
    return permute_kernel().bind(grid, THREADS, (a_like, out, M, K // 2, m_tiles, group_steps, group_k, super_k,
                                                 per_chunk, total))
