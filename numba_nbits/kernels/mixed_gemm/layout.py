"""The mixed GEMM's weight layouts: the prepacked B (``weight_prepacked`` 1 / 2) and the per-node device copies.

Prepacked weight layout (``pack_weights_for_mixed_gemm``; same byte count as B)
--------------------------------------------------------------------------------
Requires ``N % 16 == 0``, ``K % 32 == 0`` and ``K % block_size == 0``.

4-bit:
K is cut into 64-k chunks (the last one is a 32-k half chunk when K % 64 == 32). For each 16-row
tile and chunk, lane ``(g, t)`` owns 4 uint32 words (2 in a half chunk), word ``s`` = the codes of
MMA step ``s`` exactly as in the tensor-core GEMV (nibbles 0,4 = a0; 1,5 = a1; 2,6 = a2; 3,7 = a3)
with the k permutation of k-groups ``KG = min(block_size, 64)`` (block 32 -> KG 32; blocks 64/128 -> 64).
* ``arch=80`` (weight_prepacked=1): tile-major ``[tile][chunk][lane][words]``; a tile's row block is
  contiguous (each warp streams its own rows).
* ``arch=90`` (weight_prepacked=2, block 64/128): chunk-major ``[chunk][tile][lane][4]``: all
  tiles' words of one k-chunk are contiguous, so the blocks of one k-stage read one contiguous
  stretch (DRAM-page friendly when many blocks run the same k-stage, as on a 132-SM Hopper).
8-bit (one byte per code, so a lane owns 8 words = 32 bytes of a 64-k chunk, 16 bytes of a half
chunk): same chunks, tiles, lanes and k permutation. Step ``s`` of lane ``(g, t)`` is 8 bytes = 2
words: with ``k0`` the physical k of the step's logical columns ``2t``, word 0 = bytes
``[q(g, k0), q(g+8, k0), q(g, k0+1), q(g+8, k0+1)]`` and word 1 the same at ``k0+2, k0+3``, so
``(word >> 8*(r%2)) & 0x00FF00FF`` is fragment register ``r`` of word ``r//2`` (a0/a1 from word 0,
a2/a3 from word 1): one AND + OR per register, no byte permute. A chunk is two 16-byte loads per
lane, load ``v`` holding steps ``2v, 2v+1``, each load a contiguous 512 bytes per warp:
* ``arch=80``: ``[tile][chunk][v: 2][lane: 32][16 bytes]`` (+ ``[tile][lane][16 bytes]`` for a half
  chunk, one load), a tile's bytes contiguous;
* ``arch=90``: ``[chunk][tile][v][lane][16 bytes]``, then the half chunk as ``[tile][lane][16]``.

Each bit width's layout is a ``CodeLayout`` in ``LAYOUTS`` (keyed by ``formats.QuantFormat``): its
chunk packer and unpacker, and what the kernel source reads from it (the bytes of a tile's chunk,
whether codes are bytes or nibbles, whether bf16 decodes through fp32).

Device layouts (``prepack``)
----------------------------
Scales, zero points (packed -> uint8, typed -> act dtype) are re-laid out once per node as
``[tile][k_block][16 rows]`` (``weights.derived``), not part of the prepacked B, so lane ``(g, t)``
reads the scale of its rows ``g`` and ``g + 8`` at ``(tile * k_blocks + block) * 16 + g (+ 8)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...arrays import DevArray, to_device
from ...formats import FORMATS, QuantFormat, _pack_last_axis, _unpack_last_axis

#: block sizes the k permutation serves (k-groups of min(block_size, 64))
BLOCK_SIZES = (32, 64, 128)
#: the nibble of a 4-bit step word that holds fragment element n (nibbles 0,4 = a0; 1,5 = a1; ...)
NIBBLE_SRC = (0, 4, 2, 6, 1, 5, 3, 7)


def _pack4(codes, kg: int, steps: int):
    """4-bit codes (N, nch*16*steps) -> uint32 (T, nch, 32 lanes, steps)."""
    N, Kc = codes.shape
    sg = kg // 16
    width = 16 * steps
    nch = Kc // width
    x = codes.reshape(N // 16, 2, 8, nch, steps // sg, 4, sg, 4)  # T h g c γ t σ j
    x = x.transpose(0, 3, 2, 5, 4, 6, 1, 7).reshape(N // 16, nch, 32, steps, 8)
    words = np.zeros(x.shape[:-1], np.uint32)
    for n in range(8):
        words |= x[..., NIBBLE_SRC[n]].astype(np.uint32) << np.uint32(4 * n)
    return words


def _unpack4(chunks, kg: int, steps: int):
    """Inverse of ``_pack4``: the bytes of each tile's chunks (T, nch, 128*steps) -> codes (T*16, nch*16*steps)."""
    T, nch = chunks.shape[:2]
    words = np.ascontiguousarray(chunks).view(np.uint32).reshape(T, nch, 32, steps)
    sg = kg // 16
    x = np.zeros(words.shape + (8,), np.uint8)
    for n, src in enumerate(NIBBLE_SRC):
        x[..., src] = (words >> np.uint32(4 * n)) & np.uint32(0xF)
    x = x.reshape(T, nch, 8, 4, steps // sg, sg, 2, 4).transpose(0, 6, 2, 1, 4, 3, 5, 7)
    return x.reshape(T * 16, nch * 16 * steps)


# 8-bit: the axes of one chunk's codes (T h g c γ t σ j, see _pack4) -> (T c v g t γ' σ j h) where
# the steps (γ σ) are split into v (16-byte load: steps 2v, 2v+1) and the step within the load.
def _pack8(codes, kg: int, steps: int):
    """8-bit codes (N, nch*16*steps) -> uint8 (T, nch, steps/2 loads, 32 lanes, 16 bytes)."""
    N, Kc = codes.shape
    sg = kg // 16
    nch = Kc // (16 * steps)
    T = N // 16
    x = codes.reshape(T, 2, 8, nch, steps // sg, 4, sg, 4)  # T h g c γ t σ j
    x = x.transpose(0, 3, 2, 5, 4, 6, 7, 1)  # T c g t γ σ j h: bytes of a step = (j, h)
    x = x.reshape(T, nch, 32, steps // 2, 16).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(x)


def _unpack8(chunks, kg: int, steps: int):
    """Inverse of ``_pack8``: the bytes of each tile's chunks (T, nch, 256*steps) -> codes (T*16, nch*16*steps)."""
    T, nch = chunks.shape[:2]
    sg = kg // 16
    x = chunks.reshape(T, nch, steps // 2, 32, 16)
    x = x.transpose(0, 1, 3, 2, 4).reshape(T, nch, 8, 4, steps // sg, sg, 4, 2)  # T c g t γ σ j h
    x = x.transpose(0, 7, 2, 1, 4, 3, 5, 6)  # T h g c γ t σ j
    return x.reshape(T * 16, nch * 16 * steps)


@dataclass(frozen=True)
class CodeLayout:
    """How one bit width's codes sit in the prepacked B and reach an MMA fragment register."""

    fmt: QuantFormat
    #: codes (N, nch*16*steps) -> the chunks' words or bytes, tile-major ``(T, nch, ...)``
    pack_chunks: Callable
    #: the bytes of each tile's chunks ``(T, nch, bytes)`` -> codes (N, nch*16*steps)
    unpack_chunks: Callable

    @property
    def tile_chunk_bytes(self) -> int:
        """Bytes of one 16-row tile's 64-k chunk: ``16 * 64 * bits / 8``."""
        return 128 * self.fmt.bits

    @property
    def byte_codes(self) -> bool:
        """One code per byte: a fragment register is two bytes of a step word, not nibbles of a step."""
        return self.fmt.codes_per_byte == 1

    @property
    def bf16_via_f32(self) -> bool:
        """bf16's widest run of consecutive integers in one binade is 128 ([128, 256)): codes beyond
        it are decoded through the float32 magic ``2^23 + q`` and rounded to bf16 exactly."""
        return self.fmt.max_code >= 128


#: the mixed GEMM's layout per bit width it serves
LAYOUTS = {f: CodeLayout(f, p, u) for f, p, u in ((FORMATS[4], _pack4, _unpack4), (FORMATS[8], _pack8, _unpack8))}
BITS = tuple(f.bits for f in LAYOUTS)


def code_layout(bits: int) -> CodeLayout:
    """The ``CodeLayout`` of ``bits`` (4 or 8)."""
    return LAYOUTS[FORMATS[bits]]


def _chunks(K: int):
    """(number of full 64-k chunks, whether a 32-k half chunk follows)."""
    return K // 64, (K % 64) == 32


def _check_layout_args(N: int, K: int, bits: int, arch: int, block_size: int) -> None:
    if bits not in BITS:
        raise NotImplementedError(f"mixed GEMM layout: bits must be one of {BITS}, got {bits}")
    if arch not in (80, 90):
        raise ValueError(f"arch must be 80 or 90, got {arch}")
    if N % 16 or K % 32 or block_size not in BLOCK_SIZES or K % block_size:
        raise ValueError(f"mixed GEMM layout needs N % 16 == 0, K % 32 == 0, K % block_size == 0, block in "
                         f"{BLOCK_SIZES}; got N={N} K={K} block_size={block_size}")


def pack_weights_for_mixed_gemm(B, N: int, K: int, bits: int, arch: int = 80, block_size: int = 64) -> np.ndarray:
    """ORT-layout B (``uint8 [N, K/block, blob]`` or ``[N, K*bits/8]``) -> the prepacked layout of the
    module docstring as uint8 with the same byte count (``N*K*bits/8``).

    ``bits`` 4 or 8. ``block_size`` selects the in-step k permutation (32 -> groups of 32, 64/128 ->
    64) and must be the node's block size. ``arch`` 80 -> tile-major (weight_prepacked=1), 90 ->
    chunk-major (=2).
    """
    _check_layout_args(N, K, bits, arch, block_size)
    raw = np.asarray(B, np.uint8)
    if raw.size != N * K * bits // 8:
        raise ValueError(f"B must hold N*K*bits/8 = {N * K * bits // 8} bytes, got {raw.size}")
    raw = np.ascontiguousarray(raw).reshape(N, K * bits // 8)
    codes = _unpack_last_axis(raw, bits)  # (N, K)
    kg = min(block_size, 64)
    nfull, half = _chunks(K)
    pack = code_layout(bits).pack_chunks
    parts = []
    if nfull:
        parts.append(pack(codes[:, :nfull * 64], kg, 4))
    if half:
        parts.append(pack(codes[:, nfull * 64:], 32, 2))
    T = N // 16
    if arch == 80:
        words = np.concatenate([p.reshape(T, -1) for p in parts], axis=1)
    else:
        words = np.concatenate([p.swapaxes(0, 1).reshape(-1) for p in parts])
    return np.ascontiguousarray(words).reshape(-1).view(np.uint8)


def unpack_weights_from_mixed_gemm(P, N: int, K: int, bits: int, arch: int = 80, block_size: int = 64) -> np.ndarray:
    """Inverse of ``pack_weights_for_mixed_gemm``: prepacked bytes -> ORT's ``uint8 [N, K*bits/8]`` rows."""
    _check_layout_args(N, K, bits, arch, block_size)
    flat = np.ascontiguousarray(np.asarray(P, np.uint8).reshape(-1))
    if flat.size != N * K * bits // 8:
        raise ValueError(f"prepacked B must hold N*K*bits/8 = {N * K * bits // 8} bytes, got {flat.size}")
    T = N // 16
    nfull, half = _chunks(K)
    lay = code_layout(bits)
    cb = lay.tile_chunk_bytes  # a half chunk is cb // 2
    if arch == 80:
        b = flat.reshape(T, -1)
        full = b[:, :nfull * cb].reshape(T, nfull, cb)
        hb = b[:, nfull * cb:].reshape(T, int(half), cb // 2)
    else:
        full = flat[:T * nfull * cb].reshape(nfull, T, cb).swapaxes(0, 1)
        hb = flat[T * nfull * cb:].reshape(int(half), T, cb // 2).swapaxes(0, 1)
    kg = min(block_size, 64)
    cols = [lay.unpack_chunks(arr, g_, st) for arr, g_, st in ((full, kg, 4), (hb, 32, 2)) if arr.shape[1]]
    return _pack_last_axis(np.concatenate(cols, axis=1), bits)


@dataclass
class Packed:
    bq: DevArray  # uint32 words
    scales: DevArray
    zp: DevArray | None
    arch: int


def _per_block(vals, N, kb, dtype):
    return np.ascontiguousarray(np.asarray(vals).reshape(N // 16, 16, kb).transpose(0, 2, 1)).reshape(-1).astype(dtype)


def prepack(weights, arch: int = 80, prepacked: bool = False) -> Packed:
    """The kernel's device layouts of ``weights`` (built once per arch). ``prepacked=True``: B already is
    ``pack_weights_for_mixed_gemm(..., arch)`` output (``weight_prepacked`` 1/2) and is used in place."""
    def build():
        from ...formats import unpack_zero_points

        N, K, bs, bits = weights.N, weights.K, weights.block_size, weights.bits
        kb = weights.k_blocks
        pb = None if prepacked else pack_weights_for_mixed_gemm(np.asarray(weights.host["B"]), N, K, bits, arch, bs)
        sc = np.asarray(weights.host["scales"]).reshape(N, kb)
        sc_bits = sc.view(np.uint16) if weights.dtype == "bfloat16" else sc.astype(np.float16)
        zp = None
        if weights.zp_kind == "packed":
            z = unpack_zero_points(np.asarray(weights.host["zero_points"]), kb, bits, N=N)
            zp = to_device(_per_block(z, N, kb, np.uint8), weights.simulated)
        elif weights.zp_kind == "typed":
            z = np.asarray(weights.host["zero_points"]).reshape(N, kb)
            z = z.view(np.uint16) if weights.dtype == "bfloat16" else z.astype(np.float16)
            zp = to_device(_per_block(z, N, kb, z.dtype), weights.simulated)
        bq = weights.onnx_b().view(np.uint32) if prepacked else to_device(pb.view(np.uint32), weights.simulated)
        return Packed(bq=bq,
                      scales=to_device(_per_block(sc_bits, N, kb, sc_bits.dtype), weights.simulated),
                      zp=zp, arch=arch)

    if weights.bits not in BITS:
        raise ValueError(f"mixed_gemm prepack: bits must be one of {BITS}, got {weights.bits}")
    return weights.derived(f"mixed_gemm_w{weights.bits}_sm{arch}", build)
