"""Planning and launching the fused CUDA-core GEMV engine (source: ``core_source``), and the checks every
GEMV family shares.

``build_plan`` picks the chunk size of a B row (16 bytes when rows are multiples of 16, else 8 or 4),
the rows per warp (``choose_rows_per_warp``: the most that still give ``MIN_BLOCKS`` blocks), the K
tile of staged A (``tile_chunks_for``: all of K when it fits ``SMEM_BUDGET``, else balanced tiles)
and, on a GPU with A staged once, a persistent grid of as many blocks as fit on the device at once
(``resident_blocks``). The families (``w4``, ``w8``, ``w2``, ``router``) choose the M tile, rows per
warp, unroll and warps per block.

A family says what it serves as a generator of unmet needs (``unmet(problem)``: one message per need
the problem fails): ``supports`` is "none", and ``build`` re-checks with ``check``, whose error names
the first one.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ...launch import Kernel
from ..family import Plan
from .core_source import Spec, kernel_for

#: Shared memory (bytes) a block may use for staged A. 48 KiB needs no opt-in and leaves room for
#: 4 such blocks per H200 SM (228 KiB); A of K = 11,264 (M tile 1) fits in one tile.
SMEM_BUDGET = 48 * 1024
#: Row groups (blocks) a launch should have before rows per warp are reduced: one per SM of a
#: 132-SM H200, so small-N problems (4096 rows: R = 2) still spread over the whole GPU.
MIN_BLOCKS = 132


def chunk_bytes_for(row_bytes: int) -> int:
    """Largest of 16/8/4 bytes dividing a row of B (rows start 16-byte aligned only if 16 | row)."""
    for cb in (16, 8, 4):
        if row_bytes % cb == 0:
            return cb
    raise ValueError(f"row of {row_bytes} bytes is not a multiple of 4")


def choose_rows_per_warp(N: int, warps: int, r_max: int) -> int:
    """Most rows per warp (A reuse) that still gives >= MIN_BLOCKS blocks; at least 1."""
    r = r_max
    while r > 1 and -(-N // (warps * r)) < MIN_BLOCKS:
        r //= 2
    return r


def tile_chunks_for(row_chunks: int, mt: int, pad: int) -> int:
    """Chunks of K per staged tile: all of them if they fit SMEM_BUDGET, else balanced tiles."""
    cap = max(1, SMEM_BUDGET // (mt * pad * 4))
    if row_chunks <= cap:
        return row_chunks
    ntiles = -(-row_chunks // cap)
    per = -(-row_chunks // ntiles)
    per = -(-per // 32) * 32  # whole lanes' worth when possible
    return min(per, cap)


_DEVICE_INFO = {}


def device_info():
    """(SM count, shared memory per SM, name) of the current device (GPU only; cached)."""
    if not _DEVICE_INFO:
        dev = cuda.get_current_device()
        _DEVICE_INFO["sms"] = int(dev.MULTIPROCESSOR_COUNT)
        _DEVICE_INFO["smem_sm"] = int(dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
        name = dev.name
        _DEVICE_INFO["name"] = name.decode() if isinstance(name, bytes) else str(name)
    return _DEVICE_INFO["sms"], _DEVICE_INFO["smem_sm"], _DEVICE_INFO["name"]


def resident_blocks(kernel: Kernel, threads: int, smem: int) -> int:
    """Blocks of this kernel that fit on one SM at once (threads, registers, shared memory)."""
    regs = max(kernel.registers(), 1)
    regs = -(-regs // 8) * 8
    _, smem_sm, _ = device_info()
    by_threads = 2048 // threads
    by_regs = 65536 // (regs * threads)
    by_smem = smem_sm // (smem + 1024) if smem else 32
    return max(1, min(32, by_threads, by_regs, by_smem))


class GemvPlan(Plan):
    """A bound fused-GEMV launch: ``enqueue`` points it at A and Y and launches (graph-capturable)."""

    def __init__(self, route: str, spec: Spec, launch, shared_mem: int):
        self.route = route
        self.spec = spec
        self.kernel = spec.name
        self.launch = launch
        self.grid = launch.grid
        self.block = launch.block
        self.shared_mem = shared_mem

    def enqueue(self, a, out, stream: int) -> None:
        L = self.launch
        L.set_array(0, a)
        L.set_array(5, out)
        L.launch(stream)

    def enqueue_runner(self, a_like, o_like):
        try:
            go = self.launch.pointer_launcher(((0, a_like), (5, o_like)))
        except ValueError:  # a layout the kernel's signature does not take: the general path says so
            return None
        if go is None:
            return None

        def run(pa, po, stream):
            go(pa, po, stream)
            return True

        return run

    def __repr__(self):
        return f"GemvPlan({self.route}, {self.kernel}, grid={self.grid}, block={self.block}, smem={self.shared_mem})"


def build_plan(weights, problem, *, route: str, mt: int, r_max: int, u: int, warps: int,
               direct_a: bool = False, a_vec: bool = False, bias: bool = False, chunk_bytes: int | None = None,
               grid_cap: int | None = None, tile_cap: int | None = None, l2pf: bool = False) -> GemvPlan:
    """Bind the generic GEMV kernel for ``weights`` and ``problem`` (the families call this).

    ``grid_cap`` / ``tile_cap`` (tests only) force the persistent row-group loop and K tiling on
    small shapes.
    """
    w = weights
    M, N, K = problem.M, w.N, w.K
    row_bytes = w.K_padded * w.bits // 8
    cb = chunk_bytes or chunk_bytes_for(row_bytes)
    row_chunks = row_bytes // cb
    r = choose_rows_per_warp(N, warps, r_max)
    if a_vec and not (direct_a and cb == 16 and K % (cb * 8 // w.bits) == 0):
        raise ValueError(f"16-byte A loads need direct A, 16-byte chunks and K a multiple of a chunk's codes "
                         f"(K={K}, chunk {cb} bytes)")
    spec = Spec(act=w.dtype, bits=w.bits, block_size=w.block_size, zp_kind=w.zp_kind, chunk_bytes=cb, mt=mt, r=r,
                u=max(1, min(u, -(-row_chunks // 32))), warps=warps, direct_a=direct_a, a_vec=a_vec, bias=bias,
                l2pf=l2pf and cb == 16)
    kern = kernel_for(spec)
    if direct_a:
        tile = row_chunks
        smem = 0
    else:
        tile = tile_chunks_for(row_chunks, mt, spec.pad)
        if tile_cap:
            tile = min(tile, tile_cap)
        smem = mt * tile * spec.pad * 4
    n_groups = -(-N // (warps * r))
    grid_x = n_groups
    if not w.simulated and not direct_a and tile >= row_chunks:
        # persistent blocks: A staged once per block, blocks stride over the row groups
        sms, _, _ = device_info()
        grid_x = min(n_groups, sms * resident_blocks(kern, spec.threads, smem))
    if grid_cap:
        grid_x = min(grid_x, grid_cap)
    grid = (grid_x, -(-M // mt), 1)
    a0 = _placeholder(w, (M, K))
    o0 = _placeholder(w, (M, N))
    zpp = w.zp_packed if w.zp_kind == "packed" else w.dummy(np.uint8)
    bi = w.bias if (bias and w.bias is not None) else w.dummy(w.np_dtype)
    args = (a0, w.b_words, w.scales, zpp, bi, o0, M, N, K, w.k_blocks, w.zp_row, row_chunks, tile, n_groups)
    launch = kern.bind(grid, spec.threads, args, shared_mem=smem)
    return GemvPlan(route, spec, launch, smem)


def build_shaped(weights, problem, route: str, mt: int, shapes: dict, l2pf: bool = False) -> GemvPlan:
    """``build_plan`` with the family's (rows per warp, unroll, warps) of M tile ``mt`` from ``shapes``."""
    r, u, warps = shapes[mt]
    return build_plan(weights, problem, route=route, mt=mt, r_max=r, u=u, warps=warps, l2pf=l2pf)


def _placeholder(w, shape):
    """A zero-sized-data placeholder of the right rank for the A / Y slots until ``run`` sets them."""
    from ...arrays import DevArray

    key = ("placeholder",) + tuple(shape)

    def make():
        if w.simulated:
            arr = np.zeros(shape, w.np_dtype)
            return DevArray(0, shape, arr.strides, w.np_dtype, arr)
        itemsize = w.np_dtype.itemsize
        strides = (shape[1] * itemsize, itemsize)
        return DevArray(0, shape, strides, w.np_dtype, None)

    return w.derived(str(key), make)


def smallest_tile(M: int, tiles: tuple) -> int:
    """The smallest compile-time M tile >= M (the largest for larger M: ``blockIdx.y`` walks the tiles)."""
    for t in tiles:
        if M <= t:
            return t
    return tiles[-1]


def unaligned_fallback(plan, stream: int, build, what: str):
    """The plan an A that is not 16-byte aligned runs instead of ``plan``'s 16-byte-load kernel: ``plan._fallback``,
    made by ``build()`` on first need; during graph capture, where nothing may be built, a ``CaptureError`` names
    ``what`` and asks for a warmup with the same A layout first."""
    if plan._fallback is None:
        from ...launch import CaptureError, is_capturing

        if is_capturing(stream):
            raise CaptureError(f"{plan.route}: A is not 16-byte aligned and {what} is not built yet; run a warmup "
                               "inference with the same A layout outside capture first.")
        plan._fallback = build()
    return plan._fallback


def supports_from(unmet):
    """A family's ``supports(problem)``: true when ``unmet(problem)`` yields nothing."""
    def supports(problem) -> bool:
        return next(iter(unmet(problem)), None) is None

    supports.__doc__ = f"Whether the family serves the problem: no need of ``{unmet.__module__}.unmet`` is unmet."
    return supports


def check(family: str, unmet) -> None:
    """Raise ``ValueError("<family>: unsupported problem (<what>)")`` for the first of ``unmet`` (the
    messages of the needs a problem fails), if any: how every family's ``build`` re-checks ``supports``."""
    for what in unmet:
        raise ValueError(f"{family}: unsupported problem ({what})")


def fused_unmet(problem, bits, zero_points=("none", "packed")):
    """The needs every fused-GEMV family has: its bit width (``bits``: one, or a tuple of those it decodes), no
    g_idx, the zero-point forms it decodes."""
    p = problem
    if isinstance(bits, tuple):
        if p.bits not in bits:
            yield f"bits={p.bits}, needs one of {bits}"
    elif p.bits != bits:
        yield f"bits={p.bits}, needs {bits}"
    if p.has_g_idx:
        yield "g_idx is not supported by fused kernels"
    if p.zero_points not in zero_points:
        yield f"zero points {p.zero_points!r}, needs none or packed uint8"


def block_multiple_unmet(problem, block_divides: int):
    """Blocks that divide ``block_divides`` (so a row is whole 16-byte chunks) and K a multiple of the block."""
    p = problem
    if p.block_size < 16 or block_divides % p.block_size:
        yield f"block_size={p.block_size}: {block_divides} % block != 0"
    if p.K % p.block_size:
        yield f"K={p.K} not a multiple of block_size={p.block_size}"


def weights_unmet(weights, problem):
    """What ``weights`` lack for ``problem`` in every fused-GEMV family (messages)."""
    w, p = weights, problem
    if w.g_idx is not None:
        yield "g_idx is not supported by fused kernels"
    if w.bits != p.bits or w.zp_kind != p.zero_points:
        yield f"problem and weights disagree on bits/zero points ({p.bits}/{p.zero_points} vs {w.bits}/{w.zp_kind})"
    if p.K != w.K or p.N != w.N:
        yield "problem and weights disagree on N/K"
