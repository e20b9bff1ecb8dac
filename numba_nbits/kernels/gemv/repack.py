"""The tensor-core GEMV's weight layout built on the device: ORT's B bytes -> ``bq`` (``layout.py``), and
``prepack``, the node's whole layout (``Packed``) built once per ``Weights``.

``layout.pack_weights`` builds the layout on the host with NumPy: unpack every code to a byte, permute,
pack again. That costs ~0.15 s per 14336x4096 node, so a model's first decode step spent most of its
time there (225 nodes of a Llama-3-8B: 37 s). ``repack`` builds the same words with one kernel that
reads the node's B, already on the device (``Weights.b``).

The layout is periodic: a block of one 16-row tile and ``KB`` k (64; 128 for 2-bit, whose 16-byte vector
spans two 64-k chunks) always gives the same ``words_per_block`` words, each word ``fields`` code fields
of ``field_bits`` bits (4; 2 for 2-bit) taken from fixed (row, k) positions of the block (8-bit: from
the low or the high nibble of the code). ``source_map(bits, block_size)`` finds those positions by
running ``layout.pack_weights`` itself on probe codes, so the device path follows the host layout by
construction (and ``tests/test_gemv_repack.py`` checks the words are identical):

* probe ``b`` sets each code to bit ``b`` of its position ``r * KB + k`` in the block (both nibbles for
  8-bit); the packed field then holds that bit, and 11 probes give every field's position;
* one probe of high nibbles only (8-bit) tells which fields come from the high plane;
* one probe of all-ones codes checks that every field is filled.

The kernel: thread ``i`` writes word ``i`` of ``bq`` (block ``i // words_per_block``: tile ``T``,
k-block ``cb``); for each field ``f`` it reads entry ``e = map[w * fields + f]`` (position in the low
16 bits, plane shift above), the code of row ``16T + r``, column ``cb * KB + k`` from B (zero outside
the N rows and the ``k_blocks * block_size`` columns of B, as the host path pads), and ORs
``((code >> shift) & field_mask) << (field_bits * f)`` into the word. One specialisation serves every
bit width and block size (all run-time parameters); a grid-stride loop, 64-bit indices.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ...arrays import device_empty, to_device
from ...launch import Kernel
from ...formats import unpack_codes, unpack_zero_points
from .layout import (MMA_LAYOUTS, ROW_PAD, TILE_N, Packed, _per_block_layout, geometry, pack_weights, tail_words,
                     with_tail)

THREADS = 256
MAX_BLOCKS = 132 * 32


def block_k(bits: int) -> int:
    """``KB``: k of one periodic block of the layout (64; 128 for 2-bit)."""
    return 128 if bits == 2 else 64


@lru_cache(maxsize=None)
def source_map(bits: int, block_size: int) -> tuple[np.ndarray, int, int]:
    """``(map, fields, field_bits)``: int32 ``map[words_per_block * fields]`` of one block (module doc)."""
    if bits not in MMA_LAYOUTS:
        raise ValueError(f"gemv_mma repacks bits in {tuple(sorted(MMA_LAYOUTS))}, got {bits}")
    kb = block_k(bits)
    fb = MMA_LAYOUTS[bits].plane_bits
    fields = 32 // fb
    fmask = (1 << fb) - 1
    unit = 0x11 if MMA_LAYOUTS[bits].planes == 2 else 1
    pos = np.zeros((ROW_PAD, kb), np.int64)
    pos[:TILE_N] = np.arange(TILE_N * kb).reshape(TILE_N, kb)

    def fields_of(codes: np.ndarray) -> np.ndarray:
        words = pack_weights(codes.astype(np.uint8), kb, block_size, bits)
        words = words[:words.size // (ROW_PAD // TILE_N)]  # tile 0 (rows 16..31 of the probe are zero)
        return (words[:, None] >> (fb * np.arange(fields, dtype=np.uint32))) & np.uint32(fmask)

    tile0 = np.zeros((ROW_PAD, kb), np.int64)
    tile0[:TILE_N] = 1
    if not (fields_of(tile0 * unit) != 0).all():
        raise AssertionError(f"gemv repack: a field of the {bits}-bit layout takes no code")
    src = np.zeros(fields_of(tile0).shape, np.int64)
    for b in range(int(TILE_N * kb - 1).bit_length()):
        src |= (fields_of(((pos >> b) & 1) * tile0 * unit) != 0).astype(np.int64) << b
    shift = np.zeros_like(src)
    if unit != 1:
        shift = (fields_of(tile0 * 0x10) != 0).astype(np.int64) * 4
    return (src | (shift << 16)).astype(np.int32).reshape(-1), fields, fb


def _repack(b, smap, out, n_rows, row_bytes, k_codes, bits, fields, field_bits, kb, wpb, nbk, total):
    i = np.int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
    step = np.int64(cuda.gridDim.x) * THREADS
    cmask = (np.int64(1) << bits) - 1
    fmask = (np.int64(1) << field_bits) - 1
    while i < total:
        blk = i // wpb
        w = i - blk * wpb
        tile = blk // nbk
        cb = blk - tile * nbk
        word = np.int64(0)
        for f in range(fields):
            e = np.int64(smap[w * fields + f])
            p = e & 0xFFFF
            r = p // kb
            row = tile * 16 + r
            k = cb * kb + (p - r * kb)
            if row < n_rows and k < k_codes:
                bit = k * bits
                code = (np.int64(b[row * row_bytes + (bit >> 3)]) >> (bit & 7)) & cmask
                word |= ((code >> (e >> 16)) & fmask) << (field_bits * f)
        out[i] = np.uint32(word)
        i += step


@lru_cache(maxsize=None)
def repack_kernel() -> Kernel:
    from numba.cuda import types

    i64 = types.int64
    return Kernel(_repack, (types.uint8[::1], types.int32[::1], types.uint32[::1]) + (i64,) * 10, name="gemv_repack")


def _scale_layout(src, out, n_rows, kb, bps, per_tile, total):
    """``out[i]`` of ``layout._per_block_layout``'s order ``[tile][super][g][h][bb]`` from the row-major
    ``(n_rows, kb)`` 16-bit scales ``src`` (row ``16 tile + 8 h + g``, block ``bps * super + bb``; 0 past them)."""
    i = np.int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
    step = np.int64(cuda.gridDim.x) * THREADS
    while i < total:
        tile = i // per_tile
        r = i - tile * per_tile
        sup = r // (16 * bps)
        r -= sup * 16 * bps
        g = r // (2 * bps)
        r -= g * 2 * bps
        h = r // bps
        row = tile * 16 + h * 8 + g
        blk = sup * bps + (r - h * bps)
        v = np.uint16(0)
        if row < n_rows and blk < kb:
            v = src[row * kb + blk]
        out[i] = v
        i += step


@lru_cache(maxsize=None)
def scale_layout_kernel() -> Kernel:
    from numba.cuda import types

    i64 = types.int64
    return Kernel(_scale_layout, (types.uint16[::1], types.uint16[::1]) + (i64,) * 5, name="gemv_scale_layout")


def scale_layout(weights, kb_pad: int, ks: int):
    """The 16-bit scales of ``weights`` in ``_per_block_layout``'s order, laid out on the device from
    ``weights.scales`` by ``scale_layout_kernel`` on the legacy default stream (``repack`` then synchronises
    it): no host relayout and upload per node. The layout's zero tail (``layout.tail_words``) follows: entries past the
    rows are zeros."""
    w = weights
    bps = ks // w.block_size
    n_pad = -(-w.N // ROW_PAD) * ROW_PAD
    total = n_pad * kb_pad + tail_words("scales", w.block_size, w.bits)
    out = device_empty((total,), np.uint16, w.simulated)
    src = w.scales.view(np.uint16, (w.N * w.k_blocks,))
    grid = max(1, min(MAX_BLOCKS, -(-total // THREADS)))
    scale_layout_kernel().bind(grid, THREADS, (src, out, w.N, w.k_blocks, bps, 16 * kb_pad, total)).launch(0)
    return out


@lru_cache(maxsize=None)
def _source_map_on_device(bits: int, block_size: int, simulated: bool, device_id: int):
    """``source_map(bits, block_size)``'s map (0.5-1 KiB) on the device, one copy per process and device (the
    repack kernel only reads it): not one upload per node."""
    return to_device(source_map(bits, block_size)[0], simulated)


def repack(weights, K_pad: int):
    """``bq`` of ``weights`` (``layout.pack_weights`` of its codes, padded to ``K_pad``, then the layout's zero tail:
    words past the rows are zeros) as a device array, built by the repack kernel from ``weights.b`` on the legacy
    default stream, which is then synchronised
    (construction-time work, outside any capture, like the host path's synchronous copy)."""
    w = weights
    bits = w.bits
    smap, fields, fb = source_map(bits, w.block_size)
    kb = block_k(bits)
    if K_pad % kb:
        raise ValueError(f"gemv repack: K_pad={K_pad} must be a multiple of {kb} for {bits}-bit")
    n_pad = -(-w.N // ROW_PAD) * ROW_PAD
    wpb = smap.size // fields
    nbk = K_pad // kb
    total = (n_pad // TILE_N) * nbk * wpb + tail_words("bq", w.block_size, bits)
    dmap = _source_map_on_device(bits, w.block_size, w.simulated, w.device_id)
    out = device_empty((total,), np.uint32, w.simulated)
    b = w.onnx_b().flat()
    row_bytes = w.k_blocks * w.block_size * bits // 8
    grid = max(1, min(MAX_BLOCKS, -(-total // THREADS)))
    launch = repack_kernel().bind(grid, THREADS, (b, dmap, out, w.N, row_bytes, w.k_blocks * w.block_size, bits,
                                                  fields, fb, kb, wpb, nbk, total))
    launch.launch(0)
    if not w.simulated:  # done before any stream (a non-blocking one too) reads it, as a synchronous copy would be
        cuda.default_stream().synchronize()
    return out


def _packed(weights, bq_of, on_device: bool = False) -> Packed:
    """``Packed`` of ``weights`` with codes ``bq_of(K_pad)``; zero points laid out on the host (1/64 of the codes'
    size or less), the scales too, or on the device with ``on_device`` for fp16/bf16 scales (``scale_layout``,
    launched before ``bq_of``, whose synchronisation then covers it)."""
    N, K, bs, bits = weights.N, weights.K, weights.block_size, weights.bits
    ks, _, n_super, K_pad = geometry(K, bs, bits)
    kb_pad = K_pad // bs
    sc_d = None
    if on_device and weights.dtype in ("float16", "bfloat16"):
        sc_d = scale_layout(weights, kb_pad, ks)
    bq = bq_of(K_pad)
    if sc_d is None:
        sc = np.asarray(weights.host["scales"]).reshape(N, weights.k_blocks)
        sc_bits = sc.view(np.uint16) if weights.dtype == "bfloat16" else sc.astype(np.float16)
        sc_d = to_device(with_tail(_per_block_layout(sc_bits, N, kb_pad, ks, bs, sc_bits.dtype), "scales", bs, bits),
                         weights.simulated)
    elif weights.dtype == "float16":
        sc_d = sc_d.view(np.float16, sc_d.shape)
    zp_l = None
    if weights.zp_kind == "packed":
        zp = unpack_zero_points(np.asarray(weights.host["zero_points"]), weights.k_blocks, bits, N=N)
        zp_l = to_device(with_tail(_per_block_layout(zp, N, kb_pad, ks, bs, np.uint8), "zp", bs, bits),
                         weights.simulated)
    n_pad = -(-N // ROW_PAD) * ROW_PAD
    return Packed(bq=bq, scales=sc_d, zp=zp_l, N_pad=n_pad, K_pad=K_pad, n_super=n_super)


def prepack(weights) -> Packed:
    """The layout of ``layout.py``'s docstring, built once per ``Weights`` (key ``gemv_mma_w<bits>`` of
    ``weights.derived``): the codes by ``repack`` on the device."""
    return weights.derived(f"gemv_mma_w{weights.bits}",
                           lambda: _packed(weights, lambda K_pad: repack(weights, K_pad), on_device=True))


def prepack_on_host(weights) -> Packed:
    """The same layout built with NumPy only (``layout.pack_weights``), no kernel launched: for host-only
    processes (the M = 1 sweep's data preparation) and weights held in host memory (``simulated``); not cached."""
    def bq_of(K_pad):
        codes = unpack_codes(np.asarray(weights.host["B"]).reshape(weights.N, weights.k_blocks, -1), None,
                             weights.bits, weights.block_size)
        return to_device(with_tail(pack_weights(codes, K_pad, weights.block_size, weights.bits), "bq",
                                   weights.block_size, weights.bits), weights.simulated)

    return _packed(weights, bq_of)


def prepack_cached_on_host(weights) -> Packed:
    """``prepack_on_host``'s layout, cached as ``prepack``'s (key ``gemv_mma_w<bits>``): how a node in host memory
    (``simulated``) that keeps only this layout builds it at construction, without simulating the repack kernel
    thread by thread (the same words: ``tests/test_gemv_repack.py``)."""
    return weights.derived(f"gemv_mma_w{weights.bits}", lambda: prepack_on_host(weights))
