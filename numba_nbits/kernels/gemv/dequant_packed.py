"""Dequantize from the tensor-core layout: the universal route's weights when the node keeps no ONNX-layout B.

Why
---
A node whose every route can read the tensor-core GEMV's packed layout (``layout.py``) need not keep ORT's B as
well: that copy doubles the device memory of the weights (``Weights.packed_only``). What still needs the codes in
row order is dequantize + cuBLAS (M past the fused kernels, an unaligned A's fallback), so this kernel writes the
same ``rows x K_padded`` scratch as ``dequant_fast`` does from B, reading the packed words instead.

Numerics
--------
Byte for byte ``dequant_fast``'s output for the same codes, scales and zero points: the codes are taken out of
the packed words (both 4-bit planes of an 8-bit code joined), then the same arithmetic runs (the packed-pair
``MAGIC`` decode ``fma.rn(q - zp, scale, -0)`` where ``fast_decode`` holds, else ``(q - zp) * scale`` in fp32
rounded once to the output dtype). Scales and packed zero points are read from the node's ONNX-layout arrays
(``Weights.scales`` / ``zp_packed``, which every node keeps: 1/32 of the codes' bytes or less).

Thread -> data mapping
----------------------
One warp per work item ``(tile, super-chunk)`` of the rows ``[n0, n0 + n_rows)`` (grid-stride over items). Lane
``(g, t) = (lane >> 2, lane & 3)`` loads its ``vectors`` 16-byte groups of the item exactly as the GEMV kernels do
(``ldg_v4(bq, ((tile * n_super + super) * vectors + v) * 32 + lane)``) and, per 16-k step ``s`` (k-group ``G``,
step ``sig`` in it), its fragment registers ``r`` (``(word >> 4 r + shift) & mask``, per plane): ``r = 0, 2`` are
row ``16 tile + g``, ``r = 1, 3`` row ``+ 8``, at the four consecutive physical columns
``super * KS + G * KG + 4 group_steps t + 4 sig`` (``layout``'s k order). So a lane writes, per row, ``4 group_steps``
consecutive outputs of each k-group (16-byte ``st_v4`` stores of two steps; 8-byte ``st_v2`` at block 16), and
four lanes ``t`` cover ``KG`` contiguous columns of a row. Columns at or past ``K_padded`` (the packed layout pads
K to a whole super-chunk) and rows outside the range are not written.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...formats import quant_format
from ..codegen import load_source
from ..dequant_fast import _halves, fast_decode
from .layout import MMA_LAYOUTS, sizes, step_planes

WARPS = 8
THREADS = 32 * WARPS
#: CTAs per SM of the grid-stride loop by default (256 threads each: 8 fill an SM's 2048)
MAX_BLOCKS_PER_SM = 8


def _source(bits: int, act: str, zp_kind: str, block_size: int) -> str:
    if zp_kind not in ("none", "packed") or act not in ("float16", "bfloat16"):
        raise ValueError(f"dequant_packed: fp16/bf16 with no or packed zero points, got {act}, {zp_kind}")
    fmt = quant_format(bits)
    lay = MMA_LAYOUTS[bits]
    super_k, vectors, group_k, group_steps, _, _, groups = sizes(block_size, bits)
    fast = fast_decode(bits, act, zp_kind)
    magic = 1024.0 if act == "float16" else 128.0
    mask = lay.decode_mask
    cpb = fmt.codes_per_byte
    L = ["def dequant_packed(bq, scales, zp_packed, out, n0, n_rows, K_padded, k_blocks, zp_row, n_super, tile0,",
         "                   n_items):",
         f"    lane = np.int64(cuda.threadIdx.x & {31})",
         "    g = lane >> 2",
         "    t = lane & 3",
         f"    item = np.int64(cuda.blockIdx.x) * {WARPS} + (cuda.threadIdx.x >> 5)",
         f"    stride = np.int64(cuda.gridDim.x) * {WARPS}",
         "    n_end = n0 + n_rows",
         "    while item < n_items:",
         "        tile = tile0 + item // n_super",
         "        sup = item - (item // n_super) * n_super",
         "        ra = tile * 16 + g  # rows of fragment registers 0, 2 (ra) and 1, 3 (rb)",
         "        rb = ra + 8",
         "        oka = ra >= n0 and ra < n_end",
         "        okb = rb >= n0 and rb < n_end",
         "        la = ra if oka else n0  # rows whose scales are read (a valid one for rows not written)",
         "        lb = rb if okb else n0"]
    e = L.append
    for v in range(vectors):
        e(f"        v{v} = ldg_v4(bq, ((tile * n_super + sup) * {vectors} + {v}) * 32 + lane)")
    for G in range(groups):
        e(f"        k = sup * {super_k} + {G * group_k} + t * {4 * group_steps}  # the lane's first column, group {G}")
        e(f"        blk = (sup * {super_k} + {G * group_k}) // {block_size}")
        e("        if k < K_padded:")
        for nm, row in (("a", "la"), ("b", "lb")):
            e(f"            sc_{nm} = ld(scales, np.uint64({row} * k_blocks + blk))")
            if zp_kind == "packed":
                e(f"            zb = np.uint32(zp_packed[np.uint64({row} * zp_row + (blk >> {cpb.bit_length() - 1}))])")
                e(f"            zq_{nm} = np.float32(np.uint32(zb >> np.uint32((blk & {cpb - 1}) * {bits})) & "
                  f"np.uint32({fmt.code_mask}))")
                zp = f"zq_{nm}"
            else:
                zp = f"np.float32({float(fmt.default_zero_point)!r})"
            if fast:
                e(f"            s2_{nm} = pack(sc_{nm}, sc_{nm})")
                if zp_kind == "packed":
                    e(f"            nz_{nm} = pack(np.float32({-magic!r}) - {zp}, np.float32({-magic!r}) - {zp})")
                else:
                    e(f"            nz_{nm} = np.uint32(0x{_halves(act, -(magic + fmt.default_zero_point)):08X})")
            else:
                e(f"            zf_{nm} = {zp}")
        outs = {}
        for sig in range(group_steps):
            s = G * group_steps + sig
            for r in range(4):
                nm = "a" if r % 2 == 0 else "b"
                parts = []
                for vec, wi, sh, plane in step_planes(bits, s):
                    shift = 4 * r + sh
                    src = f"(v{vec}[{wi}] >> np.uint32({shift}))" if shift else f"v{vec}[{wi}]"
                    part = f"(np.uint32({src}) & np.uint32(0x{mask:08X}))"
                    parts.append(f"({part} << np.uint32(4))" if plane else part)
                x = " | ".join(parts)
                o = f"o{sig}_{r}"
                if fast:
                    e(f"            {o} = fma2(fma2(({x}) | np.uint32(0x{_halves(act, magic):08X}), "
                      f"np.uint32(0x{_halves(act, 1.0):08X}), nz_{nm}), s2_{nm}, np.uint32(0x80008000))")
                else:
                    e(f"            x = {x}")
                    e(f"            {o} = pack((np.float32(x & np.uint32(0xFFFF)) - zf_{nm}) * sc_{nm}, "
                      f"(np.float32(x >> np.uint32(16)) - zf_{nm}) * sc_{nm})")
                outs[sig, r] = o
        for nm, ok, row, (r0, r1) in (("a", "oka", "ra", (0, 2)), ("b", "okb", "rb", (1, 3))):
            e(f"            if {ok}:")
            e(f"                base = ((({row} - n0) * K_padded + k) >> 1)")
            if group_steps >= 2:
                for sig in range(0, group_steps, 2):
                    e(f"                st_v4(out, base + {4 * (sig // 2)}, {outs[sig, r0]}, {outs[sig, r1]}, "
                      f"{outs[sig + 1, r0]}, {outs[sig + 1, r1]})")
            else:
                e(f"                st_v2(out, base, {outs[0, r0]}, {outs[0, r1]})")
    e("        item += stride")
    return "\n".join(L) + "\n"


def kernel_name(bits: int, act: str, zp_kind: str, block_size: int) -> str:
    return f"dequant_packed_w{bits}_{act}_{zp_kind}_b{block_size}"


@lru_cache(maxsize=None)
def dequant_packed_kernel(bits: int, act: str, zp_kind: str, block_size: int):
    """The compiled-on-demand kernel of one specialisation (generated source, ``NUMBA_NBITS_DUMP_SOURCE``)."""
    from numba import cuda
    from numba.cuda import types

    from ...launch import Kernel
    from ..dtypes import LOADS, array_type
    from ..intrinsics import fma_bf16x2, fma_f16x2, ldg_v4, pack_bf16x2, pack_f16x2, st_v2, st_v4

    name = kernel_name(bits, act, zp_kind, block_size)
    ns = {"cuda": cuda, "np": np, "ld": LOADS[act], "ldg_v4": ldg_v4, "st_v4": st_v4, "st_v2": st_v2,
          "pack": pack_bf16x2 if act == "bfloat16" else pack_f16x2,
          "fma2": fma_bf16x2 if act == "bfloat16" else fma_f16x2}
    fn = load_source(name, _source(bits, act, zp_kind, block_size), ns)["dequant_packed"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type(act), array_type("uint8"), array_type("uint32")) + (types.int64,) * 8
    return Kernel(fn, argtypes, name=name, fastmath=False)


def bind(weights, packed, n0: int, n_rows: int, out, max_blocks: int | None = None):
    """A ``Launch`` that writes rows ``[n0, n0 + n_rows)`` of the dequantized weights into ``out`` (a 1-D
    ``n_rows * K_padded`` view in the weights' dtype), from ``packed`` (``layout.Packed``), on at most
    ``max_blocks`` CTAs (default ``MAX_BLOCKS_PER_SM`` per SM of the device)."""
    w = weights
    if max_blocks is None:
        from .tactics import sm_count

        max_blocks = MAX_BLOCKS_PER_SM * sm_count(w.simulated)
    tile0 = n0 // 16
    tiles = -(-(n0 + n_rows) // 16) - tile0
    n_items = tiles * packed.n_super
    zpp = w.zp_packed if w.zp_kind == "packed" else w.dummy(np.uint8)
    grid = max(1, min(max_blocks, -(-n_items // WARPS)))
    k = dequant_packed_kernel(w.bits, w.dtype, w.zp_kind, w.block_size)
    args = (packed.bq, w.scales, zpp, out.view(np.uint32), n0, n_rows, w.K_padded, w.k_blocks, w.zp_row,
            packed.n_super, tile0, n_items)
    return k.bind(grid, THREADS, args)
