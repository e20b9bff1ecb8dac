"""The dequantize kernel without g_idx: the same outputs as ``dequant._make_dequant_vec``, far fewer instructions.

The universal route's dequantize is a streaming kernel (4 bytes of codes in, 16 bytes of fp16 out per
thread for 4-bit), so it should run at the memory's speed; ``_make_dequant_vec`` spends most of its issue
slots elsewhere: two 64-bit divisions per thread (row ``w // row_words`` and block ``k0 // block_size``) and
per code a shift, a mask and an integer-to-float conversion in 64-bit arithmetic, then fp32 math and a pack.
This kernel (generated source, one specialisation per bit width, dtype and zero-point kind; the code it
runs can be dumped with ``NUMBA_NBITS_DUMP_SOURCE``):

* **row without dividing**: ``n = (w * m) >> s`` with ``(m, s) = division_magic(row_words)`` (Granlund and
  Montgomery's round-up method for 31-bit dividends: exact for every ``w < 2**31``; the plan uses the
  ``_vec`` kernel for larger matrices), one 64-bit multiply; the block is ``k0 >> log2(block_size)``
  (block sizes are powers of two) and a zero-point byte ``g >> log2(codes per byte)``;
* **two codes per instruction** (fp16, and bf16 for 2- and 4-bit codes, with no or packed zero points):
  the codes of output word ``p`` (elements ``2p`` and ``2p + 1``) are moved into the low and high halves
  with constant shifts and masks, OR-ed into the mantissa of ``MAGIC`` (1024.0 in fp16, 128.0 in bf16:
  ``MAGIC | q`` is ``MAGIC + q`` exactly), then ``fma.rn.{f16,bf16}x2(x, 1, -(MAGIC + zp))`` is ``q - zp``
  exactly and ``fma.rn(q - zp, scale, -0)`` is the product rounded once. The fp32 path computes the same
  exact product (an integer of at most 9 bits times a scale of at most 11 significant bits) and rounds
  it once to the output dtype, so the bytes are identical (the ``-0`` addend keeps the sign of a zero
  product as the fp32 path does);
* array indices are non-negative and passed as unsigned, so numba emits no negative-index wraparound;
* the other cases (fp32 output, bf16 with 8-bit codes, typed zero points: ``q - zp`` is not an exact
  small integer there) compute ``(q - zp) * scale`` in fp32 as the ``_vec`` kernel does.

Outputs leave as in ``_vec``: 16-byte ``st.global.v4`` stores (8-byte for 8-bit codes into 16-bit
dtypes).
"""
from __future__ import annotations

import numpy as np

from ..formats import quant_format
from .codegen import load_source

THREADS = 256
MAX_WORDS = 1 << 31  # division_magic is exact for dividends below this


def division_magic(d: int) -> tuple[int, int]:
    """``(m, s)`` with ``n // d == (n * m) >> s`` for every ``0 <= n < 2**31`` (``m < 2**32``, so ``n * m``
    fits in 64 bits): ``s = 31 + ceil(log2 d)``, ``m = ceil(2**s / d)``."""
    d = int(d)
    if not 1 <= d < MAX_WORDS:
        raise ValueError(f"division_magic: divisor must be in [1, 2**31), got {d}")
    s = 31 + (d - 1).bit_length()
    return -(-(1 << s) // d), s


def fast_decode(bits: int, act: str, zp_kind: str) -> bool:
    """Whether the packed-pair decode (module docstring) is exact for this specialisation."""
    return zp_kind in ("none", "packed") and (act == "float16" or (act == "bfloat16" and bits < 8))


def _halves(act: str, value: float) -> int:
    """``value`` (exactly representable) in both 16-bit halves of a word, in ``act``'s format."""
    if act == "float16":
        h = int(np.float16(value).view(np.uint16))
    else:
        h = int(np.float32(value).view(np.uint32)) >> 16
    return h * 0x10001


def _source(bits: int, act: str, zp_kind: str) -> str:
    fmt = quant_format(bits)
    codes, mask, cpb = fmt.codes_per_word, fmt.code_mask, fmt.codes_per_byte
    isz = 4 if act == "float32" else 2
    nu32 = codes * isz // 4  # uint32 output words per B word: 2, 4, 8 or 16
    fast = fast_decode(bits, act, zp_kind)
    magic = 1024.0 if act == "float16" else 128.0
    L = ["def dequant_fast(bw, scales, zp_packed, zp_typed, gidx, out, n_words, row_words, k_blocks, zp_row,",
         "                 block_shift, div_m, div_s):",
         f"    w = np.int64(cuda.blockIdx.x) * {THREADS} + cuda.threadIdx.x",
         "    if w >= n_words:",
         "        return",
         "    n = np.int64((np.uint64(w) * np.uint64(div_m)) >> np.uint64(div_s))",
         f"    k0 = (w - n * row_words) * {codes}",
         "    word = np.uint32(bw[np.uint64(w)])",
         "    g = k0 >> block_shift",
         "    scale = ld(scales, np.uint64(n * k_blocks + g))"]
    if zp_kind == "packed":
        L.append(f"    zb = np.uint32(zp_packed[np.uint64(n * zp_row + (g >> {cpb.bit_length() - 1}))])")
        L.append(f"    zq = np.uint32(zb >> np.uint32((g & {cpb - 1}) * {bits})) & np.uint32({mask})")
        zp = "np.float32(zq)"
    elif zp_kind == "typed":
        zp = "ld(zp_typed, np.uint64(n * k_blocks + g))"
    else:
        zp = f"np.float32({float(fmt.default_zero_point)!r})"
    outs = []
    if fast:
        L.append("    s2 = pack(scale, scale)")
        if zp_kind == "packed":
            L.append(f"    nz = pack(np.float32({-magic!r}) - {zp}, np.float32({-magic!r}) - {zp})")
        else:
            L.append(f"    nz = np.uint32(0x{_halves(act, -(magic + fmt.default_zero_point)):08X})")
        for p in range(nu32):
            lo, hi = 2 * p * bits, (2 * p + 1) * bits
            lo_e = f"(word >> np.uint32({lo}))" if lo else "word"
            hi_e = f"np.uint32(word << np.uint32({16 - hi}))" if hi <= 16 else f"(word >> np.uint32({hi - 16}))"
            L.append(f"    x{p} = (np.uint32({lo_e}) & np.uint32({mask})) | ({hi_e} & np.uint32(0x{mask << 16:08X}))")
            L.append(f"    o{p} = fma2(fma2(x{p} | np.uint32(0x{_halves(act, magic):08X}), "
                     f"np.uint32(0x{_halves(act, 1.0):08X}), nz), s2, np.uint32(0x80008000))")
            outs.append(f"o{p}")
    else:
        L.append(f"    zp = {zp}")
        per = 4 // isz
        for p in range(nu32):
            vals = []
            for j in range(per):
                sh = (p * per + j) * bits
                src = f"(word >> np.uint32({sh}))" if sh else "word"
                vals.append(f"(np.float32(np.uint32({src}) & np.uint32({mask})) - zp) * scale")
            L.append(f"    o{p} = " + (f"pack({vals[0]}, {vals[1]})" if per == 2 else f"f32_as_u32({vals[0]})"))
            outs.append(f"o{p}")
    L.append(f"    base = w * {nu32}")
    if nu32 >= 4:
        for q in range(nu32 // 4):
            L.append(f"    st_v4(out, base + {4 * q}, {', '.join(outs[4 * q:4 * q + 4])})")
    else:
        L.append(f"    st_v2(out, base, {outs[0]}, {outs[1]})")
    return "\n".join(L) + "\n"


def make_dequant_fast(bits: int, act: str, zp_kind: str):
    """The kernel's Python function (generated source, loaded under its name)."""
    from numba import cuda

    from .dtypes import LOADS
    from .intrinsics import f32_as_u32, fma_bf16x2, fma_f16x2, pack_bf16x2, pack_f16x2, st_v2, st_v4

    name = f"dequant_w{bits}_{act}_{zp_kind}_fast"
    ns = {"cuda": cuda, "np": np, "ld": LOADS[act], "st_v4": st_v4, "st_v2": st_v2, "f32_as_u32": f32_as_u32,
          "pack": pack_bf16x2 if act == "bfloat16" else pack_f16x2,
          "fma2": fma_bf16x2 if act == "bfloat16" else fma_f16x2}
    fn = load_source(name, _source(bits, act, zp_kind), ns)["dequant_fast"]
    fn.__name__ = name
    return fn
