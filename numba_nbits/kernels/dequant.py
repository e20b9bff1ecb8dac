"""Dequantize kernels for 2/4/8-bit MatMulNBits weights (the universal route's first step).

Math: ``W[n, k] = (q[n, k] - zp[n, g]) * scale[n, g]`` with ``g = k // block_size`` (or
``g = g_idx[k]``), computed in float32 and rounded once to the output dtype (spec §3's
recommendation; within every ORT tolerance).

Layout read: B is ``uint8[N, k_blocks, block_size*bits/8]``; each row is ``K_padded*bits/8`` bytes,
a multiple of 4, so B is read as uint32 words. A word holds ``32/bits`` consecutive codes of one
row, low bits first, and never straddles a quantization block (blob sizes are multiples of 4).
Scales are ``[N, k_blocks]`` in the activation dtype; zero points are absent (default
``2^(bits-1)``), packed uint8 ``[N, ceil(k_blocks*bits/8)]`` or typed ``[N, k_blocks]``.

Without g_idx the kernel is ``dequant_fast`` (``dequant_fast.py``: the same bytes with far fewer
instructions), or, for a B of 2**31 words or more, the ``_vec`` kernel below.

Thread mapping: one thread per uint32 word of B, 256 threads per block, 1-D grid over all words;
the thread writes its ``32/bits`` outputs to ``out[n, k0:k0+32/bits]`` of the ``N x K_padded``
scratch (padded columns included, as ORT's fallback does; the GEMM reads only the first K).
Without g_idx the outputs are packed in registers (``cvt.rn.f16x2.f32`` / ``bf16x2``, or fp32 bits)
and written with 16-byte ``st.global.v4`` stores (8-byte for 8-bit codes into 16-bit dtypes), so a
thread's outputs leave in one to four store instructions instead of one per element. With g_idx every element looks up its own group and is
stored singly (the deprecated act-order path). Indices are 64-bit, so shapes beyond 2^31 elements
are fine.
"""
from __future__ import annotations

import threading
from functools import lru_cache

import numpy as np
from numba import cuda

from ..arrays import DevArray
from ..formats import quant_format
from ..launch import Kernel
from .family import KernelFamily, Plan
from .dequant_fast import MAX_WORDS, division_magic, make_dequant_fast
from .dtypes import LOADS, STORES, array_type
from .intrinsics import f32_as_u32, pack_bf16x2, pack_f16x2, st_v2, st_v4

THREADS = 256  # one uint32 word per thread; 256 keeps 8 warps per block for latency hiding


def _make_dequant(bits: int, act: str, zp_kind: str, has_gidx: bool):
    fmt = quant_format(bits)
    CODES = fmt.codes_per_word
    MASK = fmt.code_mask
    CPB = fmt.codes_per_byte  # codes per zero-point byte
    DEFAULT_ZP = np.float32(fmt.default_zero_point)
    ld = LOADS[act]
    st = STORES[act]
    PACKED = zp_kind == "packed"
    TYPED = zp_kind == "typed"

    def dequant(bw, scales, zp_packed, zp_typed, gidx, out, n_words, row_words, k_blocks, zp_row, block_size):
        w = np.int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
        if w >= n_words:
            return
        n = w // row_words
        k0 = (w - n * row_words) * CODES
        k_pad = row_words * CODES
        word = np.uint32(bw[w])
        g = k0 // block_size
        scale = ld(scales, n * k_blocks + g)
        zp = DEFAULT_ZP
        if PACKED:
            zb = np.uint32(zp_packed[n * zp_row + g // CPB])
            zp = np.float32((zb >> np.uint32((g % CPB) * bits)) & np.uint32(MASK))
        if TYPED:
            zp = ld(zp_typed, n * k_blocks + g)
        base = n * k_pad + k0
        for j in range(CODES):
            q = np.float32((word >> np.uint32(j * bits)) & np.uint32(MASK))
            if has_gidx:
                gj = np.int64(gidx[k0 + j])
                scale = ld(scales, n * k_blocks + gj)
                if PACKED:
                    zb = np.uint32(zp_packed[n * zp_row + gj // CPB])
                    zp = np.float32((zb >> np.uint32((gj % CPB) * bits)) & np.uint32(MASK))
                if TYPED:
                    zp = ld(zp_typed, n * k_blocks + gj)
            st(out, base + j, (q - zp) * scale)

    dequant.__name__ = f"dequant_w{bits}_{act}_{zp_kind}{'_gidx' if has_gidx else ''}"
    return dequant


def _make_dequant_vec(bits: int, act: str, zp_kind: str):
    """The no-g_idx kernel: outputs packed into uint32 words and written with vector stores."""
    fmt = quant_format(bits)
    CODES = fmt.codes_per_word
    MASK = fmt.code_mask
    CPB = fmt.codes_per_byte
    DEFAULT_ZP = np.float32(fmt.default_zero_point)
    ISZ = 4 if act == "float32" else 2
    PER_U32 = 4 // ISZ
    NU32 = CODES // PER_U32  # uint32 output words per B word: 2, 4, 8 or 16
    V4 = NU32 >= 4
    GROUPS = NU32 // 4 if V4 else 1
    ld = LOADS[act]
    PACKED = zp_kind == "packed"
    TYPED = zp_kind == "typed"

    if ISZ == 2:
        pack = pack_f16x2 if act == "float16" else pack_bf16x2

        @cuda.jit(device=True)
        def u32_of(word, idx, zp, scale):
            lo = (np.float32((word >> np.uint32(2 * idx * bits)) & np.uint32(MASK)) - zp) * scale
            hi = (np.float32((word >> np.uint32((2 * idx + 1) * bits)) & np.uint32(MASK)) - zp) * scale
            return pack(lo, hi)
    else:
        @cuda.jit(device=True)
        def u32_of(word, idx, zp, scale):
            return f32_as_u32((np.float32((word >> np.uint32(idx * bits)) & np.uint32(MASK)) - zp) * scale)

    def dequant_vec(bw, scales, zp_packed, zp_typed, gidx, out, n_words, row_words, k_blocks, zp_row, block_size):
        w = np.int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
        if w >= n_words:
            return
        n = w // row_words
        k0 = (w - n * row_words) * CODES
        word = np.uint32(bw[w])
        g = k0 // block_size
        scale = ld(scales, n * k_blocks + g)
        zp = DEFAULT_ZP
        if PACKED:
            zb = np.uint32(zp_packed[n * zp_row + g // CPB])
            zp = np.float32((zb >> np.uint32((g % CPB) * bits)) & np.uint32(MASK))
        if TYPED:
            zp = ld(zp_typed, n * k_blocks + g)
        base = w * NU32  # uint32 index of this word's first output
        if V4:
            for grp in range(GROUPS):
                i = grp * 4
                st_v4(out, base + i, u32_of(word, i, zp, scale), u32_of(word, i + 1, zp, scale),
                      u32_of(word, i + 2, zp, scale), u32_of(word, i + 3, zp, scale))
        else:
            st_v2(out, base, u32_of(word, 0, zp, scale), u32_of(word, 1, zp, scale))

    dequant_vec.__name__ = f"dequant_w{bits}_{act}_{zp_kind}_vec"
    return dequant_vec


@lru_cache(maxsize=None)
def dequant_kernel(bits: int, act: str, zp_kind: str, has_gidx: bool, wide: bool = False) -> Kernel:
    """The compiled-on-demand dequantize kernel for one specialisation: with g_idx the per-element kernel;
    without, ``dequant_fast`` (``dequant_fast.py``), or the ``_vec`` kernel when ``wide`` (B has 2**31 words
    or more, beyond the fast kernel's division)."""
    from numba.cuda import types

    out_t = array_type(act) if has_gidx else array_type("uint32")
    argtypes = (array_type("uint32"), array_type(act), array_type("uint8"), array_type(act),
                array_type("int32"), out_t) + (types.int64,) * 5
    if has_gidx:
        fn = _make_dequant(bits, act, zp_kind, True)
    elif wide:
        fn = _make_dequant_vec(bits, act, zp_kind)
    else:
        fn = make_dequant_fast(bits, act, zp_kind)
        argtypes += (types.int64,) * 2
    return Kernel(fn, argtypes, fastmath=False)


def bind_dequant(b_words, scales, zp_packed, zp_typed, gidx, out, *, bits, act, zp_kind, has_gidx,
                 n_rows, k_blocks, block_size, zp_row):
    """A ``Launch`` that dequantizes ``n_rows`` rows of B (flat uint32 words) into ``out``.

    All arrays are 1-D ``DevArray`` views; ``zp_packed``/``zp_typed``/``gidx`` may be 1-element
    placeholders when unused.
    """
    row_words = k_blocks * block_size // quant_format(bits).codes_per_word
    n_words = n_rows * row_words
    wide = n_words >= MAX_WORDS
    k = dequant_kernel(bits, act, zp_kind, has_gidx, wide)
    if not has_gidx:
        out = out.view(np.uint32)
    grid = max(1, (n_words + THREADS - 1) // THREADS)
    args = [b_words, scales, zp_packed, zp_typed, gidx, out, n_words, row_words, k_blocks, zp_row, block_size]
    if not (has_gidx or wide):  # dequant_fast: the block as a shift, the row by multiplication
        args[-1] = block_size.bit_length() - 1
        args += division_magic(row_words)
    return k.bind(grid, THREADS, tuple(args))


# ------------------------------------------------------------------------ the universal route


def _flat_views(w, n0: int, rows: int):
    """(b_words, scales, zp_packed, zp_typed) views of rows [n0, n0+rows) of the node's weights."""
    row_words = w.K_padded * w.bits // 32
    kb = w.k_blocks
    b = w.b_words.offset(n0 * row_words * 4, (rows * row_words,))
    s = w.scales.offset(n0 * kb * w.scales.itemsize, (rows * kb,))
    zpp = w.zp_packed.offset(n0 * w.zp_row, (rows * w.zp_row,)) if w.zp_packed is not None else w.dummy(np.uint8)
    zpt = (w.zp_typed.offset(n0 * kb * w.zp_typed.itemsize, (rows * kb,)) if w.zp_typed is not None
           else w.dummy(w.np_dtype))
    return b, s, zpp, zpt


class NodeScratch:
    """Under the simulator (no streams, no capture): a node's dequantize scratch of ``size`` elements of ``dtype`` in
    host memory, one per calling thread, shared by the node's plans of every M (``DequantGemmPlan``; on a GPU the
    scratch is borrowed per call from ``scratch.pool_for``)."""

    def __init__(self, size: int, dtype):
        self.size, self.dtype = size, np.dtype(dtype)
        self._tls = threading.local()

    def get(self):
        """This thread's scratch."""
        sc = getattr(self._tls, "scratch", None)
        if sc is None:
            from ..arrays import device_empty

            sc = self._tls.scratch = device_empty((self.size,), self.dtype, True)
        return sc


class DequantGemmPlan(Plan):
    """Dequantize (all of N, or N in chunks) into a scratch, then one cuBLAS GEMM per chunk.

    The dequantize reads ORT's B (``dequant_fast``, or the g_idx / large-matrix kernels), or, for weights that
    keep only the tensor-core layout (``Weights.packed_only``), that layout (``gemv.dequant_packed``: the same
    bytes).

    The scratch (``rows x K_padded`` in A's dtype, ``scratch_nbytes``) is borrowed per call from the device's
    stream-ordered pool (``scratch.pool_for``): allocated in the caller's stream before the first dequantize and
    freed in it after the last GEMM, so a model's nodes reuse one scratch per stream in flight instead of each
    keeping its own (the fp16 size of the whole model), threads and streams never share one, and a captured call
    records the allocation as graph nodes. ``rows`` is N unchunked; chunked it is ``ORT_MATMULNBITS_CHUNK_SIZE``
    (ORT's rule) capped so the scratch stays within ``NUMBA_NBITS_SCRATCH_LIMIT_MB`` (256 MiB by default; ORT would
    allocate 1 GiB for a 262144 x 16384 fp16 LM head). Under the simulator (no streams) the scratch is host memory,
    one per node and thread (``NodeScratch``), and the GEMM step runs in NumPy (``cublas.gemm_host``).
    """

    def __init__(self, w, problem, config, route: str, chunked: bool, rows: int | None = None, buffers: int = 1):
        self.route = route
        self.w = w
        self.M = problem.M
        self.use_tf32 = bool(config.use_tf32)
        self.options = int(config.cuda_gemm_options)
        if rows is None:
            rows = w.N
            if chunked:  # ORT's chunk rows, additionally capped so the scratch stays within the scratch limit
                per_row = w.K_padded * w.np_dtype.itemsize
                rows = max(1, min(config.chunk_size, w.N, config.scratch_limit_bytes // per_row))
        self.rows = rows
        #: chunk buffers of the scratch (``rows x K_padded`` each): 1, or 2 for the overlapped form
        #: (``kernels.dequant_overlap``), which writes one while the GEMM reads the other
        self.buffers = buffers
        self.chunk_nbytes = rows * w.K_padded * w.np_dtype.itemsize
        self.scratch_nbytes = buffers * self.chunk_nbytes
        self._tls = threading.local()
        self._vec = w.g_idx is None  # the vector kernels write the scratch as uint32 words
        self._out_arg = 3 if w.packed_only else 5  # the scratch's argument slot in the dequantize kernel
        self._pool = self._node = None
        if w.simulated:  # host memory, one per node and thread (no streams to order a shared one)
            self._node = w.derived(f"dequant_scratch_{rows}x{buffers}",
                                   lambda: NodeScratch(buffers * rows * w.K_padded, w.np_dtype))
            base = self.scratch = self._node.get()
        else:  # borrowed per call (``enqueue``); the launches are bound to a null pointer of the chunk's layout
            from ..scratch import pool_for

            self._pool = pool_for(w.device_id)
            self.scratch = None
            base = DevArray(0, (buffers * rows * w.K_padded,), (w.np_dtype.itemsize,), w.np_dtype, None)
        gidx = w.g_idx if w.g_idx is not None else w.dummy(np.int32)
        self.chunks = []
        self._likes = []  # per chunk, the layout of the scratch view its dequantize writes
        for n0 in range(0, w.N, rows):
            n = min(rows, w.N - n0)
            out = base.offset(0, (n * w.K_padded,))
            if w.packed_only:  # ORT's B was freed: the same bytes from the tensor-core layout
                from .gemv import dequant_packed, repack

                launch = dequant_packed.bind(w, repack.prepack(w), n0, n, out)
            else:
                b, s, zpp, zpt = _flat_views(w, n0, n)
                launch = bind_dequant(b, s, zpp, zpt, gidx, out, bits=w.bits, act=w.dtype, zp_kind=w.zp_kind,
                                      has_gidx=w.g_idx is not None, n_rows=n, k_blocks=w.k_blocks,
                                      block_size=w.block_size, zp_row=w.zp_row)
            self.chunks.append((n0, n, launch))
            self._likes.append(out.view(np.uint32) if self._vec else out)
        self.kernel = self.chunks[0][2].kernel.name
        self.handle = None
        if not w.simulated:
            from ..dispatch import cublas

            self.handle = cublas.handle_for(w.device_id)

    def _parts(self, stream: int):
        """Simulator: this thread's scratch and, per chunk, the view of it the dequant kernel writes (built once):
        chunk ``i`` in buffer ``i % buffers``."""
        p = getattr(self._tls, "parts", None)
        if p is None:
            scratch = self._node.get()
            views = []
            for i, (_, n, _) in enumerate(self.chunks):
                part = scratch.offset((i % self.buffers) * self.chunk_nbytes, (n * self.w.K_padded,))
                views.append(part.view(np.uint32) if self._vec else part)
            p = self._tls.parts = (scratch, views)
        return p

    def dequantize_into(self, chunk: int, dst, stream: int) -> None:
        """Run chunk ``chunk``'s dequantize alone into ``dst`` (its rows x K_padded in the weights' dtype): for
        benchmarks that need the dequantized weights themselves."""
        _, _, launch = self.chunks[chunk]
        launch.set_array(self._out_arg, dst.view(np.uint32) if self._vec else dst)
        launch.launch(stream)

    def enqueue(self, a, out, stream: int) -> None:
        w = self.w
        if self._pool is None:  # simulator
            scratch, views = self._parts(stream)
            for (n0, n, launch), part in zip(self.chunks, views):
                launch.set_array(self._out_arg, part)
                launch.launch(stream)
                from ..dispatch.cublas import gemm_host

                sc = part.view(w.np_dtype).host_view().reshape(n, w.K_padded)
                gemm_host(a.host_view(), sc, w.K, out.host_view()[:, n0:n0 + n])
            return
        from ..dispatch.cublas import gemm

        pool = self._pool
        ptr = pool.alloc(self.scratch_nbytes, stream)
        try:
            for (n0, n, launch), like in zip(self.chunks, self._likes):
                launch.set_array_ptr(self._out_arg, ptr, like)
                launch.launch(stream)
                gemm(self.handle, stream, a.shape[0], n, w.K, ptr, w.K_padded, a.ptr, out.ptr + n0 * out.itemsize,
                     w.N, w.dtype, self.use_tf32, self.options)
        finally:
            pool.free(ptr, stream)


#: the route names this family serves; the chunked one dequantizes N in chunks
ROUTES = ("dequant_cublas", "dequant_cublas_chunked")


def supports(problem) -> bool:
    """Dequantize + cuBLAS serves every problem (every bit width, dtype, zero-point kind and g_idx)."""
    return True


def build(weights, problem, config, route: str = "dequant_cublas"):
    """Plan of the universal route (``dequant_cublas``) or its chunked form (``dequant_cublas_chunked``)."""
    if route not in ROUTES:
        raise ValueError(f"the dequant family serves the routes {', '.join(ROUTES)}, not {route!r}")
    return DequantGemmPlan(weights, problem, config, route, chunked=route == "dequant_cublas_chunked")


FAMILY = KernelFamily("dequant", supports, build, ("dequant.py", "dequant_fast.py"))
