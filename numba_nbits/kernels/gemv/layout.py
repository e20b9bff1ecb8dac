"""The packed weight layout of the tensor-core GEMV (``mma``), one per bit width, built once per ``Weights``.

Math
----
The weights are the 16-row ``A`` operand of ``mma.sync.m16n8k16`` and the activations its 8-column
``B`` operand: one MMA computes ``D[n, m]`` for 16 weight rows and 8 activation rows. Codes are
stored so that each lane loads, with one 16-byte ``ld.global.nc`` per 16-row tile, the fragment
registers of its MMA steps, and decodes a register with one shift and one mask.

Layout (built by ``repack.prepack``: key ``gemv_mma_w<bits>`` of ``weights.derived``)
--------------------------------------------------------------------------------------
Rows are padded to ``N_pad = ceil(N/32)*32`` (zero codes, zero scales), K to ``K_pad = ceil(K / KS) *
KS`` with ``KS = max(ks_min, block_size)`` (one *super-chunk*: a whole number of 64-k chunks and of
quantisation blocks; ``ks_min`` is 64, 128 for 2-bit so that a lane loads 16 bytes per super-chunk).
Padded activations (k >= K) are never loaded, so padded codes contribute nothing.

* ``bq`` uint32 ``[N_pad/16 tiles][K_pad/64 chunks][32 lanes][4 steps]`` (4-bit): lane ``(g, t)`` =
  ``(lane >> 2, lane & 3)`` reads its 16 bytes of one chunk with one 16-byte load (a warp reads 512
  contiguous bytes). Word ``s`` holds the 8 codes the lane needs for MMA step ``s`` (16 k) of the
  chunk: nibbles ``0,4`` = a0 (row g), ``1,5`` = a1 (row g+8), ``2,6`` = a2 (row g), ``3,7`` = a3
  (row g+8), so ``(w >> 4r) & 0x000F000F`` is fragment register ``r``.
* K order inside a step is permuted (any permutation works if A and B agree): with ``KG =
  min(block_size, 64)`` and ``group_steps = KG/16``, the logical fragment columns ``2t, 2t+1,
  2t+8, 2t+9`` of step ``σ`` of k-group ``γ`` are the physical ``k = γ*KG + 4*group_steps*t + 4σ +
  (0, 1, 2, 3)``. Every step stays inside one quantisation block, and each lane's activations of a
  k-group are ``4*group_steps`` contiguous values: one or two 16-byte loads (8-byte pairs for
  block 16).
* 8-bit: each code is split into two 4-bit planes, ``q = 16 * (q >> 4) + (q & 15)``, both in the
  4-bit layout, per 64-k chunk the low-plane vector then the high-plane vector (``2 * KS / 64``
  16-byte loads per lane, tile and super-chunk).
* 2-bit: a word holds the codes of two consecutive 16-k steps (step ``2q`` in bits ``4n, 4n + 1``,
  step ``2q + 1`` in bits ``4n + 2, 4n + 3`` of nibble ``n`` of the 4-bit layout) and a 16-byte
  vector two 64-k chunks: decode is a shift by ``4r`` (plus 2 for the odd step) and mask ``0x00030003``.
* ``scales`` ``[tiles][K_pad/KS][8 g][2 h][KS/block_size]`` (row ``16*tile + 8h + g``) in the
  activation dtype (bf16 as bits), so lane ``g``'s scales of rows g and g+8 are adjacent: one
  32-bit word per quantisation-block pair; ``zp`` uint8 in the same layout (packed zero points only;
  absent: the format's default zero point, a compile-time constant of the kernel).

Each array ends with a tail of ``TAIL_SUPERS`` super-chunks of zeros after the last tile (``tail_words``), so a
kernel whose prefetch loads run up to that many super-chunks past a tile's last one without a bounds test
(``Tactic.unguarded``) stays inside the allocation; those stages are never computed.

``MMA_LAYOUTS`` holds, per bit width, what of this differs (``MmaLayout``); ``step_planes`` maps an
MMA step to the registers that hold its codes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...arrays import DevArray
from ...formats import FORMATS, QuantFormat

TILE_N = 16
ROW_PAD = 32  # rows padded to a multiple of the largest TPW * 16
#: super-chunks of zeros after the last tile of each packed array (module docstring)
TAIL_SUPERS = 64


@dataclass(frozen=True)
class MmaLayout:
    """What the packed layout of one bit width changes against the 4-bit one."""

    fmt: QuantFormat
    #: the smallest super-chunk (k per work item): 2-bit needs 128 k for one 16-byte load per lane
    ks_min: int
    #: 4-bit operand planes per code: 8-bit codes are a low and a high (x16) plane
    planes: int = 1
    #: consecutive 16-k MMA steps whose codes share one word (2-bit: two)
    steps_per_word: int = 1

    @property
    def plane_bits(self) -> int:
        """Bits of one code field of a plane (4, or 2 for 2-bit)."""
        return self.fmt.bits // self.planes

    @property
    def decode_mask(self) -> int:
        """Mask of one plane's code in both halves of a shifted word (``0x000F000F``, 2-bit ``0x00030003``)."""
        return FORMATS[self.plane_bits].pair_mask


MMA_LAYOUTS = {
    2: MmaLayout(FORMATS[2], ks_min=128, steps_per_word=2),
    4: MmaLayout(FORMATS[4], ks_min=64),
    8: MmaLayout(FORMATS[8], ks_min=64, planes=2),
}
#: weight bit widths served
BITS = tuple(sorted(MMA_LAYOUTS))


def step_planes(bits: int, s: int):
    """Where the codes of MMA step ``s`` (16 k) of a super-chunk live: ``(vector, word, shift, plane)``
    per operand plane (``plane`` 1 = the high nibbles of 8-bit codes, scaled by 16 in the decode).

    Step ``s`` is step ``q`` of 64-k chunk ``c``; a chunk's ``planes`` vectors follow each other, and
    ``steps_per_word`` chunks share a vector (their steps share words, ``plane_bits`` apart)."""
    lay = MMA_LAYOUTS[bits]
    c, q = divmod(s, 4)  # 64-k chunk, step in the chunk
    spw = lay.steps_per_word
    word = (4 // spw) * (c % spw) + q // spw
    shift = lay.plane_bits * (q % spw)
    return tuple(((lay.planes * c + p) // spw, word, shift, p) for p in range(lay.planes))


def tail_words(array: str, block_size: int, bits: int = 4) -> int:
    """Elements of the zero tail (``TAIL_SUPERS`` super-chunks of one tile) after ``array``: ``"bq"`` (uint32 words),
    ``"scales"`` (16-bit) or ``"zp"`` (uint8)."""
    ks = super_chunk(block_size, bits)
    if array == "bq":
        return TAIL_SUPERS * n_vectors(bits, ks) * 32 * 4
    if array in ("scales", "zp"):
        return TAIL_SUPERS * 16 * (ks // block_size)
    raise ValueError(f"tail_words: array must be bq, scales or zp, got {array!r}")


def with_tail(a: np.ndarray, array: str, block_size: int, bits: int = 4) -> np.ndarray:
    """Flat ``a`` followed by its zero tail (``tail_words``)."""
    a = np.ascontiguousarray(a).reshape(-1)
    return np.concatenate([a, np.zeros(tail_words(array, block_size, bits), a.dtype)])


def super_chunk(block_size: int, bits: int = 4) -> int:
    """``KS``: k per super-chunk, ``max(MMA_LAYOUTS[bits].ks_min, block_size)``."""
    return max(MMA_LAYOUTS[bits].ks_min, block_size)


def sizes(block_size: int, bits: int):
    """Compile-time sizes of a specialisation: k per super-chunk, its 16-byte weight vectors per lane and
    tile, k per k-group, 16-k steps per k-group, quantisation blocks per super-chunk, steps per block,
    k-groups per super-chunk."""
    super_k = super_chunk(block_size, bits)
    group_k = min(block_size, 64)
    return (super_k, n_vectors(bits, super_k), group_k, group_k // 16, super_k // block_size, block_size // 16,
            super_k // group_k)


def geometry(K: int, block_size: int, bits: int = 4):
    """``(KS, KG, n_super, K_pad)`` of a problem: super-chunk, k-group, super-chunks per row, padded K."""
    ks = super_chunk(block_size, bits)
    kg = min(block_size, 64)
    n_super = -(-K // ks)
    return ks, kg, n_super, n_super * ks


def pack_codes_for_mma(codes: np.ndarray, K_pad: int, block_size: int) -> np.ndarray:
    """Codes ``(N, >=K)`` uint8 (values < 16) -> the ``bq`` uint32 layout (flat); see module doc."""
    N = codes.shape[0]
    n_pad = -(-N // ROW_PAD) * ROW_PAD
    full = np.zeros((n_pad, K_pad), np.uint8)
    kk = min(codes.shape[1], K_pad)
    full[:N, :kk] = codes[:, :kk]
    kg = min(block_size, 64)
    sg = kg // 16
    nch = K_pad // 64
    # k = 64c + KG*γ + 4*SG*t + 4σ + j ; rows = 16*T + 8h + g
    x = full.reshape(n_pad // 16, 2, 8, nch, 4 // sg, 4, sg, 4)  # T h g c γ t σ j
    x = x.transpose(0, 3, 2, 5, 4, 6, 1, 7)  # T c g t γ σ h j
    x = x.reshape(n_pad // 16, nch, 32, 4, 8)  # (T, c, lane, step, h*4+j)
    nib_src = np.array([0, 4, 2, 6, 1, 5, 3, 7])  # nibble n holds (h, j) = divmod(src, 4)
    words = np.zeros(x.shape[:-1], np.uint32)
    for n in range(8):
        words |= x[..., nib_src[n]].astype(np.uint32) << np.uint32(4 * n)
    return words.reshape(-1)


def unpack_codes_from_mma(words: np.ndarray, N: int, K_pad: int, block_size: int) -> np.ndarray:
    """Inverse of ``pack_codes_for_mma`` (tests): flat words -> codes ``(N, K_pad)`` uint8."""
    n_pad = -(-N // ROW_PAD) * ROW_PAD
    nch = K_pad // 64
    kg = min(block_size, 64)
    sg = kg // 16
    w = np.asarray(words, np.uint32).reshape(n_pad // 16, nch, 32, 4)
    nib_src = np.array([0, 4, 2, 6, 1, 5, 3, 7])
    x = np.zeros(w.shape + (8,), np.uint8)
    for n in range(8):
        x[..., nib_src[n]] = (w >> np.uint32(4 * n)) & np.uint32(15)
    x = x.reshape(n_pad // 16, nch, 8, 4, 4 // sg, sg, 2, 4)  # T c g t γ σ h j
    x = x.transpose(0, 6, 2, 1, 4, 3, 5, 7)  # T h g c γ t σ j
    return np.ascontiguousarray(x.reshape(n_pad, K_pad)[:N])


def n_vectors(bits: int, ks: int) -> int:
    """16-byte loads per lane per 16-row tile per super-chunk of ``ks`` k (``ks * 16 * bits / 8 / 512``)."""
    return ks * bits // 256


def _pack_w8(codes, K_pad, block_size, T, nch):
    """8-bit: the low-nibble and the high-nibble plane, each in the 4-bit layout, interleaved per 64-k chunk."""
    lo = pack_codes_for_mma(codes & np.uint8(15), K_pad, block_size).reshape(T, nch, 32, 4)
    hi = pack_codes_for_mma(codes >> np.uint8(4), K_pad, block_size).reshape(T, nch, 32, 4)
    return np.stack([lo, hi], axis=2).reshape(-1)


def _unpack_w8(w, N, K_pad, block_size, T, nch):
    w = w.reshape(T, nch, 2, 32, 4)
    lo = unpack_codes_from_mma(np.ascontiguousarray(w[:, :, 0]).reshape(-1), N, K_pad, block_size)
    hi = unpack_codes_from_mma(np.ascontiguousarray(w[:, :, 1]).reshape(-1), N, K_pad, block_size)
    return lo | (hi << np.uint8(4))


def _pack_w2(codes, K_pad, block_size, T, nch):
    """2-bit: the codes of two consecutive 16-k steps in one word (step 2q at bit 4n, 2q + 1 at bit
    4n + 2), two 64-k chunks in one 16-byte vector."""
    if nch % 2:
        raise ValueError(f"2-bit K_pad={K_pad} must be a multiple of 128")
    w = pack_codes_for_mma(codes & np.uint8(3), K_pad, block_size).reshape(T, nch, 32, 4)
    w2 = w[..., 0::2] | (w[..., 1::2] << np.uint32(2))  # (T, nch, lane, step pair)
    w2 = w2.reshape(T, nch // 2, 2, 32, 2).transpose(0, 1, 3, 2, 4)  # (T, vector, lane, chunk, pair)
    return np.ascontiguousarray(w2).reshape(-1)


def _unpack_w2(w, N, K_pad, block_size, T, nch):
    w2 = w.reshape(T, nch // 2, 32, 2, 2).transpose(0, 1, 3, 2, 4).reshape(T, nch, 32, 2)
    w4 = np.zeros((T, nch, 32, 4), np.uint32)
    w4[..., 0::2] = w2 & np.uint32(0x33333333)
    w4[..., 1::2] = (w2 >> np.uint32(2)) & np.uint32(0x33333333)
    return unpack_codes_from_mma(w4.reshape(-1), N, K_pad, block_size)


#: bits -> (pack, unpack) of the formats that are not the plain 4-bit layout
_PACKERS = {8: (_pack_w8, _unpack_w8), 2: (_pack_w2, _unpack_w2)}


def pack_weights(codes: np.ndarray, K_pad: int, block_size: int, bits: int) -> np.ndarray:
    """Codes ``(N, >=K)`` uint8 -> ``bq`` uint32 ``[tiles][super-chunks][vectors][32 lanes][4 words]``
    (flat) for ``bits`` (module doc): 4-bit is ``pack_codes_for_mma``; 8-bit and 2-bit rearrange it."""
    if bits not in MMA_LAYOUTS:
        raise ValueError(f"gemv_mma packs bits in {BITS}, got {bits}")
    if bits not in _PACKERS:
        return pack_codes_for_mma(codes, K_pad, block_size)
    n_pad = -(-codes.shape[0] // ROW_PAD) * ROW_PAD
    return _PACKERS[bits][0](codes, K_pad, block_size, n_pad // 16, K_pad // 64)


def unpack_weights(words: np.ndarray, N: int, K_pad: int, block_size: int, bits: int) -> np.ndarray:
    """Inverse of ``pack_weights`` (tests): flat words -> codes ``(N, K_pad)`` uint8."""
    if bits not in MMA_LAYOUTS:
        raise ValueError(f"gemv_mma packs bits in {BITS}, got {bits}")
    if bits not in _PACKERS:
        return unpack_codes_from_mma(words, N, K_pad, block_size)
    n_pad = -(-N // ROW_PAD) * ROW_PAD
    return _PACKERS[bits][1](np.asarray(words, np.uint32), N, K_pad, block_size, n_pad // 16, K_pad // 64)


def _per_block_layout(vals: np.ndarray, N: int, kb_pad: int, ks: int, block_size: int, dtype) -> np.ndarray:
    """(N, k_blocks) -> [tiles][supers][8 g][2 h][KS/bs] flat (row 16T + 8h + g), zero padded."""
    n_pad = -(-N // ROW_PAD) * ROW_PAD
    full = np.zeros((n_pad, kb_pad), dtype)
    full[:N, :vals.shape[1]] = vals
    bps = ks // block_size
    # rows 16T + 8h + g -> [T][super][g][h][bb]: lane g's scales of rows g and g+8 are adjacent
    x = full.reshape(n_pad // 16, 2, 8, kb_pad // bps, bps).transpose(0, 3, 2, 1, 4)
    return np.ascontiguousarray(x).reshape(-1)


@dataclass
class Packed:
    """One ``Weights``' packed tensor-core layout on the device (module docstring), with its padded sizes."""

    bq: DevArray
    scales: DevArray
    zp: DevArray | None
    N_pad: int
    K_pad: int
    n_super: int

