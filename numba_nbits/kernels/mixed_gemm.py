"""Mixed-input tensor-core GEMM (the spec's fpA_intB route): fp16/bf16 A x 4-bit or 8-bit B, M = 1 .. thousands.

Math
----
``Y[m, n] = bias[n] + sum_b scale[n, b] * sum_{k in block b} (q[n, k] - zp[n, b]) * A[m, k]``

As in ``gemv_mma.py`` the weights are the 16-row ``A`` operand of ``mma.sync.m16n8k16`` and the
activations the 8-column ``B`` operand (``D[n, m]``). With zero points absent (8) or packed, each
code becomes the exact fp16/bf16 integer ``q - zp`` with one packed fma on the magic number
``0x6400 | q`` (= 1024 + q); the tensor core sums one quantization block exactly-in-fp32 and the
block's partial sums are scaled in fp32. With typed (fractional) zero points the code is fed as
the exact integer ``q`` and ``zp * sum_k A[m, k]`` is subtracted per block in fp32; the activation
block sums come from one extra MMA with an all-ones weight fragment. The bias is added in fp32 in
the epilogue; Y is rounded once.

8-bit codes (``q`` in 0..255, default zero point 128) follow the same contract, every operand
still an exact integer: fp16 uses the same magic base (``0x6400 | q`` = 1024 + q: the ulp of
[1024, 2048) is 1, so all 256 codes fit the 10-bit mantissa) and ``0xE400 | zp`` = -(1024 + zp),
giving the exact ``q - zp`` in [-255, 255] (11 significant bits). bf16 has no binade holding 256
consecutive integers (7-bit mantissa), so its codes go through fp32: ``0x4B000000 | q`` is the
float32 ``2^23 + q``, minus ``2^23 + zp`` is exactly ``q - zp`` (packed / default zp 128) or ``q``
(typed), and every integer of magnitude <= 256 is exact in bf16, so the ``cvt.rn.bf16x2.f32``
pack is exact. Products with fp16/bf16 activations fit fp32 exactly (<= 8 + 11 significant bits).

Prepacked weight layout (``pack_weights_for_mixed_gemm``; same byte count as B)
--------------------------------------------------------------------------------
Requires ``N % 16 == 0``, ``K % 32 == 0`` and ``K % block_size == 0`` (the spec's route guards are
stricter: N % 64 for 4-bit, N % 32 for 8-bit; ``supports`` accepts every problem they accept).

4-bit:
K is cut into 64-k chunks (the last one is a 32-k half chunk when K % 64 == 32). For each 16-row
tile and chunk, lane ``(g, t)`` owns 4 uint32 words (2 in a half chunk), word ``s`` = the codes of
MMA step ``s`` exactly as in ``gemv_mma`` (nibbles 0,4 = a0; 1,5 = a1; 2,6 = a2; 3,7 = a3) with the
k permutation of k-groups ``KG = min(block_size, 64)`` (block 32 -> KG 32; blocks 64/128 -> 64).
* ``arch=80`` (weight_prepacked=1): tile-major ``[tile][chunk][lane][words]``; a tile's row block is
  contiguous (each warp streams its own rows).
* ``arch=90`` (weight_prepacked=2, block 64/128): chunk-major ``[chunk][tile][lane][4]``: all
  tiles' words of one k-chunk are contiguous, so the blocks of one k-stage read one contiguous
  stretch (DRAM-page friendly when many blocks run the same k-stage, as on a 132-SM Hopper).
8-bit (one byte per code, so a lane owns 8 words = 32 bytes of a 64-k chunk, 16 bytes of a half
chunk): same chunks, tiles, lanes and k permutation. Step ``s`` of lane ``(g, t)`` is 8 bytes = 2
words: with ``k0`` the physical k of the step's logical columns ``2t`` (see ``gemv_mma``), word 0 =
bytes ``[q(g, k0), q(g+8, k0), q(g, k0+1), q(g+8, k0+1)]`` and word 1 the same at ``k0+2, k0+3``, so
``(word >> 8*(r%2)) & 0x00FF00FF`` is fragment register ``r`` of word ``r//2`` (a0/a1 from word 0,
a2/a3 from word 1): one AND + OR per register, no byte permute. A chunk is two 16-byte loads per
lane, load ``v`` holding steps ``2v, 2v+1``, each load a contiguous 512 bytes per warp:
* ``arch=80``: ``[tile][chunk][v: 2][lane: 32][16 bytes]`` (+ ``[tile][lane][16 bytes]`` for a half
  chunk, one load), a tile's bytes contiguous;
* ``arch=90``: ``[chunk][tile][v][lane][16 bytes]``, then the half chunk as ``[tile][lane][16]``.

Scales, zero points (packed -> uint8, typed -> act dtype) are re-laid out once as
``[tile][k_block][16 rows]`` (``weights.derived``), not part of the prepacked B.

Kernel
------
A block has ``WN x WM`` warps; warp ``(wn, wm)`` computes ``16*TPW`` weight rows by ``8*MTW``
activation rows, so the block tile is ``BN = 16*TPW*WN`` by ``BM = 8*MTW*WM``. K advances in
64-k stages. Each stage the block stages its ``BM x 64`` activation tile in shared memory
(16-byte global loads into registers one stage ahead: register double buffering; rows padded to
33 words so the fragment reads are bank-conflict free for block >= 64), while every warp streams
its weight words straight from global memory into registers one stage ahead (two for tactics
with ``wpre=2``; 16-byte ``ld.global.nc``, two per tile for 8-bit; warps sharing rows hit L1).
Weights are converted once per warp and reused for ``MTW`` MMAs. ``TACTICS`` lists the tile shapes; ``default_tactic(M)``
picks by M.

Split-K tactics (``splitk != 1``; grid z = splits, see ``split_count``): block ``z`` runs its own
range of k-stages (whole quantization blocks), stores its fp32 tile into its own slice of an fp32
``splits x M x N`` workspace, fences, and bumps the tile's arrival counter; the last block to
arrive sums the slices in split order (0, 1, ...; ``ld.global.cg`` reads, through L2), resets the counter
for the next launch, adds the bias and stores Y. The contract is unchanged (fp32 block sums scaled
in fp32, Y rounded once), and the result is bitwise the same whichever split finishes last.
Workspace and counters belong to the plan: one plan must not run on two streams at once. A plan whose problem
leaves nothing to split (``split_count`` -> 1) uses the plain kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from numba import cuda

from ..arrays import DevArray, to_device
from ..launch import Kernel
from . import intrinsics as _I
from .dtypes import LOADS, STORES, array_type
from .gemv.mma_source import _CONST

ROUTE = "mixed_gemm"
BLOCK_SIZES = (32, 64, 128)
BITS = (4, 8)
F32_MAGIC_BITS = 0x4B000000  # float32 2^23: its ulp is 1, so (bits | q) is exactly 2^23 + q (8-bit bf16 path)
F32_MAGIC = 8388608
RS = 33  # shared-memory row stride of the activation tile, in uint32 words (64 halves + 1 pad)


@dataclass(frozen=True)
class Tactic:
    name: str
    wn: int  # warps along N
    wm: int  # warps along M
    tpw: int  # 16-row weight tiles per warp
    mtw: int  # 8-row activation tiles per warp
    splitk: int = 1  # K splits (grid z): 1 = none, 0 = chosen per problem by ``split_count``
    wpre: int = 1  # 64-k stages of weights loaded ahead of the MMAs (1 or 2; 2: twice the weight registers)

    def __post_init__(self):
        if self.wpre not in (1, 2) or self.splitk < 0:
            raise ValueError(f"Tactic {self.name}: wpre must be 1 or 2 and splitk >= 0, got {self.wpre}, {self.splitk}")

    @property
    def bm(self) -> int:
        return 8 * self.mtw * self.wm

    @property
    def bn(self) -> int:
        return 16 * self.tpw * self.wn

    @property
    def threads(self) -> int:
        return 32 * self.wn * self.wm


TACTICS = {
    t.name: t for t in (
        Tactic("m16", wn=4, wm=1, tpw=2, mtw=2),  # BM 16, BN 128
        Tactic("m32", wn=4, wm=2, tpw=2, mtw=2),  # BM 32, BN 128
        Tactic("m64", wn=2, wm=2, tpw=2, mtw=4),  # BM 64, BN 64
        Tactic("m128", wn=2, wm=4, tpw=2, mtw=4),  # BM 128, BN 64
        # Candidates for the H200 benchmark to decide (not yet in default_tactic). The H200 figures
        # (perf/results/2026-11-30-h200-kernels) show small M starved of blocks: 4096x4096 M=16 is
        # 32 blocks of m16 for 132 SMs, each streaming all of K (66 us vs 29 us for dequant+cuBLAS).
        # Split-K multiplies the blocks (``split_count``); "m64w" doubles BN of m64 (8 warps, half the
        # activation re-reads per weight byte, twice the warps to hide latency).
        Tactic("m16sk", wn=4, wm=1, tpw=2, mtw=2, splitk=0),
        Tactic("m32sk", wn=4, wm=2, tpw=2, mtw=2, splitk=0),
        Tactic("m64sk", wn=2, wm=2, tpw=2, mtw=4, splitk=0),
        Tactic("m64w", wn=4, wm=2, tpw=2, mtw=4),  # BM 64, BN 128
        # two weight stages in flight (the kernel is latency-bound: one 16-byte load per lane per
        # tile per stage, consumed right after one stage of MMAs)
        Tactic("m16skp2", wn=4, wm=1, tpw=2, mtw=2, splitk=0, wpre=2),
        Tactic("m64p2", wn=2, wm=2, tpw=2, mtw=4, wpre=2),
    )
}

SMS = 132  # H200 SMs: split-K aims at SPLIT_WAVES blocks per SM
SPLIT_WAVES = 4
MIN_SPLIT_STAGES = 4  # each split streams at least 4 64-k stages (256 k)


def split_count(tac: Tactic, blocks: int, n_st: int, block_size: int) -> tuple[int, int]:
    """(number of K splits, 64-k stages per split) for ``blocks`` output tiles and ``n_st`` stages.

    ``tac.splitk`` 1: no split; > 1: that many (at most one per stage); 0 (auto): enough for
    ``SPLIT_WAVES * SMS`` blocks, with at least ``MIN_SPLIT_STAGES`` stages per split. Splits hold a
    whole number of quantization blocks (block 128 spans two stages), so no block's partial sum
    straddles two splits.
    """
    if tac.splitk == 1:
        return 1, max(n_st, 1)
    if tac.splitk > 1:
        want = min(tac.splitk, n_st)
    else:
        want = min(-(-SPLIT_WAVES * SMS // max(blocks, 1)), n_st // MIN_SPLIT_STAGES)
    want = max(1, want)
    align = max(1, block_size // 64)
    sps = -(-n_st // want)
    sps = -(-sps // align) * align
    return -(-n_st // sps), sps


def default_tactic(M: int) -> Tactic:
    for name, lim in (("m16", 16), ("m32", 32), ("m64", 64)):
        if M <= lim:
            return TACTICS[name]
    return TACTICS["m128"]


def supports(problem) -> bool:
    p = problem
    return (p.bits in BITS and p.dtype in ("float16", "bfloat16") and p.M >= 1 and p.block_size in BLOCK_SIZES
            and not p.has_g_idx and p.N % 16 == 0 and p.K % p.block_size == 0 and p.K > 0 and p.N > 0)


# ------------------------------------------------------------------------------- prepacking

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
    from ..formats import _unpack_last_axis

    raw = np.asarray(B, np.uint8)
    if raw.size != N * K * bits // 8:
        raise ValueError(f"B must hold N*K*bits/8 = {N * K * bits // 8} bytes, got {raw.size}")
    raw = np.ascontiguousarray(raw).reshape(N, K * bits // 8)
    codes = _unpack_last_axis(raw, bits) if bits == 4 else raw  # (N, K)
    kg = min(block_size, 64)
    nfull, half = _chunks(K)
    pack = _pack_chunks if bits == 4 else _pack_chunks8
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


def _pack_chunks(codes, kg: int, steps: int):
    """4-bit codes (N, nch*16*steps) -> uint32 (T, nch, 32 lanes, steps)."""
    N, Kc = codes.shape
    sg = kg // 16
    width = 16 * steps
    nch = Kc // width
    x = codes.reshape(N // 16, 2, 8, nch, steps // sg, 4, sg, 4)  # T h g c γ t σ j
    x = x.transpose(0, 3, 2, 5, 4, 6, 1, 7).reshape(N // 16, nch, 32, steps, 8)
    nib_src = (0, 4, 2, 6, 1, 5, 3, 7)
    words = np.zeros(x.shape[:-1], np.uint32)
    for n in range(8):
        words |= x[..., nib_src[n]].astype(np.uint32) << np.uint32(4 * n)
    return words


# 8-bit: the axes of one chunk's codes (T h g c γ t σ j, see _pack_chunks) -> (T c v g t γ' σ j h) where
# the steps (γ σ) are split into v (16-byte load: steps 2v, 2v+1) and the step within the load.
def _pack_chunks8(codes, kg: int, steps: int):
    """8-bit codes (N, nch*16*steps) -> uint8 (T, nch, steps/2 loads, 32 lanes, 16 bytes)."""
    N, Kc = codes.shape
    sg = kg // 16
    nch = Kc // (16 * steps)
    T = N // 16
    x = codes.reshape(T, 2, 8, nch, steps // sg, 4, sg, 4)  # T h g c γ t σ j
    x = x.transpose(0, 3, 2, 5, 4, 6, 7, 1)  # T c g t γ σ j h: bytes of a step = (j, h)
    x = x.reshape(T, nch, 32, steps // 2, 16).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(x)


def _unpack_chunks8(x, kg: int, steps: int):
    """Inverse of ``_pack_chunks8``: uint8 (T, nch, steps/2, 32, 16) -> codes (T*16, nch*16*steps)."""
    T, nch = x.shape[:2]
    sg = kg // 16
    x = x.transpose(0, 1, 3, 2, 4).reshape(T, nch, 8, 4, steps // sg, sg, 4, 2)  # T c g t γ σ j h
    x = x.transpose(0, 7, 2, 1, 4, 3, 5, 6)  # T h g c γ t σ j
    return x.reshape(T * 16, nch * 16 * steps)


def unpack_weights_from_mixed_gemm(P, N: int, K: int, bits: int, arch: int = 80, block_size: int = 64) -> np.ndarray:
    """Inverse of ``pack_weights_for_mixed_gemm``: prepacked bytes -> ORT's ``uint8 [N, K*bits/8]`` rows."""
    _check_layout_args(N, K, bits, arch, block_size)
    from ..formats import _pack_last_axis

    flat = np.ascontiguousarray(np.asarray(P, np.uint8).reshape(-1))
    if flat.size != N * K * bits // 8:
        raise ValueError(f"prepacked B must hold N*K*bits/8 = {N * K * bits // 8} bytes, got {flat.size}")
    T = N // 16
    nfull, half = _chunks(K)
    kg = min(block_size, 64)
    if bits == 8:
        cw = 16 * 64  # bytes per tile per full chunk
        if arch == 80:
            b = flat.reshape(T, -1)
            full = b[:, :nfull * cw].reshape(T, nfull, 2, 32, 16)
            hb = b[:, nfull * cw:].reshape(T, int(half), 1, 32, 16)
        else:
            full = flat[:T * nfull * cw].reshape(nfull, T, 2, 32, 16).swapaxes(0, 1)
            hb = flat[T * nfull * cw:].reshape(int(half), T, 1, 32, 16).swapaxes(0, 1)
        cols = [_unpack_chunks8(arr, g_, st) for arr, g_, st in ((full, kg, 4), (hb, 32, 2)) if arr.shape[1]]
        return np.ascontiguousarray(np.concatenate(cols, axis=1))
    words = flat.view(np.uint32)
    if arch == 80:
        w = words.reshape(T, -1)
        full = w[:, :nfull * 128].reshape(T, nfull, 32, 4)
        hw = w[:, nfull * 128:].reshape(T, int(half), 32, 2)
    else:
        full = words[:T * nfull * 128].reshape(nfull, T, 32, 4).transpose(1, 0, 2, 3)
        hw = words[T * nfull * 128:].reshape(int(half), T, 32, 2).transpose(1, 0, 2, 3)
    cols = []
    for arr, steps, g_ in ((full, 4, kg), (hw, 2, 32)):
        if arr.shape[1] == 0:
            continue
        sg = g_ // 16
        x = np.zeros(arr.shape + (8,), np.uint8)
        for n, src in enumerate((0, 4, 2, 6, 1, 5, 3, 7)):
            x[..., src] = (arr >> np.uint32(4 * n)) & np.uint32(15)
        nch = arr.shape[1]
        x = x.reshape(T, nch, 8, 4, steps // sg, sg, 2, 4).transpose(0, 6, 2, 1, 4, 3, 5, 7)
        cols.append(x.reshape(N, nch * 16 * steps))
    codes = np.concatenate(cols, axis=1)
    return _pack_last_axis(codes, 4)


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
        from ..formats import unpack_zero_points

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
        bq = weights.b.view(np.uint32) if prepacked else to_device(pb.view(np.uint32), weights.simulated)
        return Packed(bq=bq,
                      scales=to_device(_per_block(sc_bits, N, kb, sc_bits.dtype), weights.simulated),
                      zp=zp, arch=arch)

    if weights.bits not in BITS:
        raise ValueError(f"mixed_gemm prepack: bits must be one of {BITS}, got {weights.bits}")
    return weights.derived(f"mixed_gemm_w{weights.bits}_sm{arch}", build)


# ------------------------------------------------------------------------------ kernel source

# _half_chunk_note: every global load of the generated kernel sits behind a guard that keeps it in
# bounds; none may run unguarded. On the H200 the 8-bit arch-80 kernels faulted
# (CUDA_ERROR_ILLEGAL_ADDRESS) because the half-chunk load ``ldg_v4(bq, (tile * tw + n_full * 256) // 4
# + lane)`` did not depend on the stage: NVVM, which then treated the inline asm as pure, hoisted it
# unguarded into the loop preheader, and with K % 64 == 0 (no half chunk) the last tile's address is
# the end of B (up to 512 bytes past it). ``ldg_v4`` is now side-effecting (never speculated), and the
# half-chunk addresses are written with the stage (== n_full where they run) so they are not
# loop-invariant either. tests/test_guarded_loads.py checks the PTX.

def _gen_source(act: str, tac: Tactic, BS: int, ZP: str, HAS_BIAS: bool, arch: int, bits: int = 4) -> str:
    TPW, MTW, WN, WM = tac.tpw, tac.mtw, tac.wn, tac.wm
    BM = tac.bm
    T = tac.threads
    KG = min(BS, 64)
    SG = KG // 16
    BPS = max(1, 64 // BS)  # quantization blocks per 64-k stage (block 128 spans 2 stages)
    SPB = min(BS, 64) // 16  # MMA steps per block within a stage
    c = _CONST[act]
    NCH = -(-BM * 8 // T)  # 16-byte activation chunks per thread per stage
    TYPED = ZP == "typed"
    W8 = bits == 8
    BF = act == "bfloat16"
    NV = 2 if W8 else 1  # 16-byte weight loads per tile per stage
    L = []

    def e(ind, s):
        L.append("    " * ind + s)

    e(0, "def mixed_gemm(a32, bq, sc, zpk, zpt, bias, out, M, K, N, kb, n_full, half, ws, cnt, sps):")
    e(1, "tid = cuda.threadIdx.x")
    e(1, "lane = tid & 31")
    e(1, "warp = tid >> 5")
    e(1, f"wn = warp % {WN}")
    e(1, f"wm = warp // {WN}")
    e(1, "g = lane >> 2")
    e(1, "t = lane & 3")
    e(1, "n_tiles = N >> 4")
    e(1, f"tile0 = (np.int64(cuda.blockIdx.x) * {WN} + wn) * {TPW}")
    e(1, f"m0 = np.int64(cuda.blockIdx.y) * {BM}")
    e(1, f"sA = cuda.shared.array({BM * RS}, np.uint32)")
    e(1, "Z4 = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))")
    e(1, "n_st = n_full + half")
    e(1, "st_beg = np.int64(cuda.blockIdx.z) * sps")  # this block's k-stages (split-K; one split: all)
    e(1, "st_end = min(n_st, st_beg + sps)")
    e(1, f"tw = n_full * {128 * NV} + half * {64 * NV}")  # words per tile (arch 80)
    if W8 and BF:  # 8-bit bf16: fp32 magic 2^23 + q, minus (2^23 + zp), exact; rounded to bf16 exactly
        if ZP in ("none", "typed"):
            e(1, f"nz_lo = np.float32({float(F32_MAGIC + (128 if ZP == 'none' else 0))!r})")
            e(1, "nz_hi = nz_lo")
    elif ZP in ("none", "typed"):  # typed: -(magic base) leaves q exactly
        dz = 0 if TYPED else (128 if W8 else 8)
        e(1, f"nz_lo = np.uint32({(c['NEG'] | dz) * 0x10001})")
        e(1, "nz_hi = nz_lo")
    for i in range(TPW):
        e(1, f"tv_{i} = tile0 + {i} < n_tiles")
        for mt in range(MTW):
            for r in range(4):
                e(1, f"acc_{i}_{mt}_{r} = np.float32(0)")
                e(1, f"p_{i}_{mt}_{r} = np.float32(0)")
    if TYPED:
        for mt in range(MTW):
            e(1, f"as_{mt}_0 = np.float32(0)")
            e(1, f"as_{mt}_1 = np.float32(0)")
    # per-lane shared-memory word offsets of the B fragments, per m-tile
    for mt in range(MTW):
        e(1, f"srow_{mt} = (wm * {8 * MTW} + {8 * mt} + g) * {RS}")

    def load_a(ind, stage, pref):
        stage = f"({stage})"  # an expression: keep it one operand
        for j in range(NCH):
            e(ind, f"ch = tid + {j * T}")
            e(ind, "ar = ch >> 3")
            e(ind, "am = m0 + ar")
            e(ind, f"ak = {stage} * 64 + (ch & 7) * 8")
            e(ind, f"if ch < {BM * 8} and am < M and ak < K and {stage} < st_end:")
            e(ind + 1, f"{pref}_{j} = ldg_v4(a32, (am * K + ak) >> 3)")
            e(ind, "else:")
            e(ind + 1, f"{pref}_{j} = Z4")

    def load_w(ind, stage, pref):
        stage = f"({stage})"  # an expression: keep it one operand
        if W8:
            return load_w8(ind, stage, pref)
        e(ind, f"if {stage} < n_full and {stage} < st_end:")
        for i in range(TPW):
            e(ind + 1, f"if tv_{i}:")
            if arch == 80:
                e(ind + 2, f"{pref}_{i} = ldg_v4(bq, ((tile0 + {i}) * tw + {stage} * 128) // 4 + lane)")
            else:
                e(ind + 2, f"{pref}_{i} = ldg_v4(bq, ({stage} * n_tiles + tile0 + {i}) * 32 + lane)")
            e(ind + 1, "else:")
            e(ind + 2, f"{pref}_{i} = Z4")
        # the half chunk (stage == n_full here): its address is written with the stage, not n_full, so
        # it is not loop-invariant and cannot be hoisted out of this guard (see _half_chunk_note)
        e(ind, f"elif {stage} < st_end:")
        for i in range(TPW):
            e(ind + 1, f"if tv_{i}:")
            if arch == 80:
                e(ind + 2, f"hx = (tile0 + {i}) * tw + {stage} * 128 + 2 * lane")
            else:
                e(ind + 2, f"hx = {stage} * n_tiles * 128 + (tile0 + {i}) * 64 + 2 * lane")
            e(ind + 2, f"{pref}_{i} = (np.uint32(bq[hx]), np.uint32(bq[hx + 1]), np.uint32(0), np.uint32(0))")
            e(ind + 1, "else:")
            e(ind + 2, f"{pref}_{i} = Z4")
        e(ind, "else:")
        for i in range(TPW):
            e(ind + 1, f"{pref}_{i} = Z4")

    def load_w8(ind, stage, pref):
        stage = f"({stage})"  # an expression: keep it one operand
        # 8-bit: a tile's full chunk is two 512-byte warp loads (16 bytes per lane each), a half chunk one
        e(ind, f"if {stage} < n_full and {stage} < st_end:")
        for i in range(TPW):
            e(ind + 1, f"if tv_{i}:")
            if arch == 80:
                e(ind + 2, f"wx = ((tile0 + {i}) * tw + {stage} * 256) // 4 + lane")
            else:
                e(ind + 2, f"wx = ({stage} * n_tiles + tile0 + {i}) * 64 + lane")
            e(ind + 2, f"{pref}_{i}_0 = ldg_v4(bq, wx)")
            e(ind + 2, f"{pref}_{i}_1 = ldg_v4(bq, wx + 32)")
            e(ind + 1, "else:")
            e(ind + 2, f"{pref}_{i}_0 = Z4")
            e(ind + 2, f"{pref}_{i}_1 = Z4")
        e(ind, f"elif {stage} < st_end:")  # the half chunk: stage == n_full (see _half_chunk_note)
        for i in range(TPW):
            e(ind + 1, f"if tv_{i}:")
            if arch == 80:
                e(ind + 2, f"{pref}_{i}_0 = ldg_v4(bq, ((tile0 + {i}) * tw + {stage} * 256) // 4 + lane)")
            else:
                e(ind + 2, f"{pref}_{i}_0 = ldg_v4(bq, {stage} * n_tiles * 64 + (tile0 + {i}) * 32 + lane)")
            e(ind + 1, "else:")
            e(ind + 2, f"{pref}_{i}_0 = Z4")
            e(ind + 1, f"{pref}_{i}_1 = Z4")
        e(ind, "else:")
        for i in range(TPW):
            e(ind + 1, f"{pref}_{i}_0 = Z4")
            e(ind + 1, f"{pref}_{i}_1 = Z4")

    load_a(1, "st_beg", "ra")
    load_w(1, "st_beg", "w")
    if tac.wpre == 2:  # weights two stages ahead: w (this stage), v (next), u (loaded each stage)
        load_w(1, "st_beg + 1", "v")
    e(1, "st = st_beg")
    e(1, "while st < st_end:")
    # stage the activation tile
    for j in range(NCH):
        e(2, f"ch = tid + {j * T}")
        e(2, f"if ch < {BM * 8}:")
        e(3, f"sw = (ch >> 3) * {RS} + (ch & 7) * 4")
        for x in range(4):
            e(3, f"sA[sw + {x}] = ra_{j}[{x}]")
    e(2, "cuda.syncthreads()")
    e(2, "nst = st + 1")
    load_a(2, "nst", "ra")
    load_w(2, "nst" if tac.wpre == 1 else "st + 2", "v" if tac.wpre == 1 else "u")
    # compute
    for bb in range(BPS):
        if BS <= 64:
            e(2, f"blk = st * {BPS} + {bb}")
        else:
            e(2, f"blk = st // {BS // 64}")
        e(2, "bok = blk < kb")
        for i in range(TPW):
            e(2, f"if bok and tv_{i}:")
            e(3, f"sb = ((tile0 + {i}) * kb + blk) * 16 + g")
            e(3, f"s_lo_{i} = ld(sc, sb)")
            e(3, f"s_hi_{i} = ld(sc, sb + 8)")
            if ZP == "packed" and W8 and BF:
                e(3, f"nz_lo_{i} = u32_as_f32(np.uint32({F32_MAGIC_BITS}) | np.uint32(zpk[sb]))")
                e(3, f"nz_hi_{i} = u32_as_f32(np.uint32({F32_MAGIC_BITS}) | np.uint32(zpk[sb + 8]))")
            elif ZP == "packed":
                e(3, f"nz_lo_{i} = (np.uint32({c['NEG']}) | np.uint32(zpk[sb])) * np.uint32(65537)")
                e(3, f"nz_hi_{i} = (np.uint32({c['NEG']}) | np.uint32(zpk[sb + 8])) * np.uint32(65537)")
            if TYPED:
                e(3, f"z_lo_{i} = ld(zpt, sb)")
                e(3, f"z_hi_{i} = ld(zpt, sb + 8)")
            e(2, "else:")
            e(3, f"s_lo_{i} = np.float32(0)")
            e(3, f"s_hi_{i} = np.float32(0)")
            if ZP == "packed":
                zero = "np.float32(0)" if (W8 and BF) else "np.uint32(0)"
                e(3, f"nz_lo_{i} = {zero}")
                e(3, f"nz_hi_{i} = {zero}")
            if TYPED:
                e(3, f"z_lo_{i} = np.float32(0)")
                e(3, f"z_hi_{i} = np.float32(0)")
        for ss in range(SPB):
            s = bb * SPB + ss
            G, sig = divmod(s, SG)
            off = G * KG // 2 + sig * 2  # words; + 2*SG*t per lane
            for mt in range(MTW):
                e(2, f"bw = srow_{mt} + {off} + {2 * SG} * t")
                e(2, f"b0_{mt} = sA[bw]")
                e(2, f"b1_{mt} = sA[bw + 1]")
            if TYPED:
                for mt in range(MTW):
                    e(2, f"o0, o1, o2, o3 = mma(np.uint32({c['ONE']}), np.uint32({c['ONE']}), np.uint32({c['ONE']}), "
                         f"np.uint32({c['ONE']}), b0_{mt}, b1_{mt}, as_{mt}_0, as_{mt}_1, np.float32(0), np.float32(0))")
                    e(2, f"as_{mt}_0 = o0")
                    e(2, f"as_{mt}_1 = o1")
            for i in range(TPW):
                if not W8:
                    e(2, f"wd = w_{i}[{s}]")
                for r in range(4):
                    nz = ("nz_lo" if r % 2 == 0 else "nz_hi") + (f"_{i}" if ZP == "packed" else "")
                    if not W8:
                        e(2, f"f{r} = fma2((np.uint32(wd >> np.uint32({4 * r})) & np.uint32(0x000F000F)) "
                             f"| np.uint32({c['MAGIC']}), np.uint32({c['ONE']}), {nz})")
                        continue
                    # 8-bit: word 2*(s%2) + r//2 of load s//2; bytes 0/2 -> register r even, 1/3 -> odd
                    wd = f"w_{i}_{s // 2}[{2 * (s % 2) + r // 2}]"
                    sh = 8 * (r % 2)
                    if BF:
                        e(2, f"f{r} = pack2(u32_as_f32((np.uint32({wd} >> np.uint32({sh})) & np.uint32(0xFF)) "
                             f"| np.uint32({F32_MAGIC_BITS})) - {nz}, "
                             f"u32_as_f32((np.uint32({wd} >> np.uint32({sh + 16})) & np.uint32(0xFF)) "
                             f"| np.uint32({F32_MAGIC_BITS})) - {nz})")
                    else:
                        e(2, f"f{r} = fma2((np.uint32({wd} >> np.uint32({sh})) & np.uint32(0x00FF00FF)) "
                             f"| np.uint32({c['MAGIC']}), np.uint32({c['ONE']}), {nz})")
                for mt in range(MTW):
                    ps = ", ".join(f"p_{i}_{mt}_{r}" for r in range(4))
                    e(2, f"{ps} = mma(f0, f1, f2, f3, b0_{mt}, b1_{mt}, {ps})")
        # flush the block's partial sums
        if BS <= 64:
            e(2, "if True:")
        else:
            e(2, f"if (st % {BS // 64}) == {BS // 64 - 1} or st == st_end - 1:")
        for i in range(TPW):
            for mt in range(MTW):
                if TYPED:
                    e(3, f"acc_{i}_{mt}_0 += s_lo_{i} * (p_{i}_{mt}_0 - z_lo_{i} * as_{mt}_0)")
                    e(3, f"acc_{i}_{mt}_1 += s_lo_{i} * (p_{i}_{mt}_1 - z_lo_{i} * as_{mt}_1)")
                    e(3, f"acc_{i}_{mt}_2 += s_hi_{i} * (p_{i}_{mt}_2 - z_hi_{i} * as_{mt}_0)")
                    e(3, f"acc_{i}_{mt}_3 += s_hi_{i} * (p_{i}_{mt}_3 - z_hi_{i} * as_{mt}_1)")
                else:
                    e(3, f"acc_{i}_{mt}_0 += s_lo_{i} * p_{i}_{mt}_0")
                    e(3, f"acc_{i}_{mt}_1 += s_lo_{i} * p_{i}_{mt}_1")
                    e(3, f"acc_{i}_{mt}_2 += s_hi_{i} * p_{i}_{mt}_2")
                    e(3, f"acc_{i}_{mt}_3 += s_hi_{i} * p_{i}_{mt}_3")
                for r in range(4):
                    e(3, f"p_{i}_{mt}_{r} = np.float32(0)")
        if TYPED:
            for mt in range(MTW):
                e(3, f"as_{mt}_0 = np.float32(0)")
                e(3, f"as_{mt}_1 = np.float32(0)")
    e(2, "cuda.syncthreads()")
    for i in range(TPW):
        for x in (("_0", "_1") if W8 else ("",)):
            e(2, f"w_{i}{x} = v_{i}{x}")
            if tac.wpre == 2:
                e(2, f"v_{i}{x} = u_{i}{x}")
    e(2, "st = nst")
    # epilogue

    def fragment(ind, header=()):
        """Walk this thread's accumulator fragment: emits ``if tv_i:`` / ``nlo`` (+ ``header`` lines) per
        tile, ``mr`` per m-tile and ``if <m> < M:`` per register; yields ``(name, m, n, indent)``: the
        register ``acc_i_mt_r``, its output row and column expressions and the indent of the guarded
        body, which the caller emits."""
        for i in range(TPW):
            e(ind, f"if tv_{i}:")
            e(ind + 1, f"nlo = (tile0 + {i}) * 16 + g")
            for h in header:
                e(ind + 1, h)
            for mt in range(MTW):
                e(ind + 1, f"mr = m0 + wm * {8 * MTW} + {8 * mt} + 2 * t")
                for r in range(4):
                    m_expr = "mr" if r % 2 == 0 else "mr + 1"
                    e(ind + 1, f"if {m_expr} < M:")
                    yield f"acc_{i}_{mt}_{r}", m_expr, ("nlo" if r < 2 else "nlo + 8"), ind + 2

    if tac.splitk != 1:
        # split-K: every split stores its fp32 partial tile into its own workspace slice
        # ws[z, m, n] (plain stores, no atomics); the block that finishes a tile last (per-tile
        # arrival counter) reads the slices back in split order z = 0, 1, ... (ld.global.cg: from L2),
        # so the fp32 sum, and Y, do not depend on the order in which the splits ran; it resets the
        # counter for the next launch, adds the bias and stores Y (rounded once).
        e(1, "zoff = np.int64(cuda.blockIdx.z) * M * N")
        for acc, m_expr, n_expr, ind in fragment(1):
            e(ind, f"ws[zoff + ({m_expr}) * N + {n_expr}] = {acc}")
        e(1, "cuda.threadfence()")
        e(1, "cuda.syncthreads()")
        e(1, "arrived = cuda.shared.array(1, np.int32)")
        e(1, "tile_id = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x")
        e(1, "if tid == 0:")
        e(2, "arrived[0] = cuda.atomic.add(cnt, tile_id, 1)")
        e(1, "cuda.syncthreads()")
        e(1, "if arrived[0] != cuda.gridDim.z - 1:")
        e(2, "return")
        e(1, "cuda.threadfence()")
        for i in range(TPW):
            for mt in range(MTW):
                for r in range(4):
                    e(1, f"acc_{i}_{mt}_{r} = np.float32(0)")
        e(1, "mn = M * N")
        e(1, "z = 0")
        e(1, "while z < cuda.gridDim.z:")
        for acc, m_expr, n_expr, ind in fragment(2):
            # ld.global.cg: served by L2, where the other splits' stores are (not a stale L1 line)
            e(ind, f"{acc} += ldcg(ws, z * mn + ({m_expr}) * N + {n_expr})")
        e(2, "z += 1")
        e(1, "if tid == 0:")
        e(2, "cnt[tile_id] = 0")
    bias_lines = ("b_lo = ld(bias, nlo)", "b_hi = ld(bias, nlo + 8)") if HAS_BIAS else ()
    for acc, m_expr, n_expr, ind in fragment(1, bias_lines):
        bexpr = ((" + b_lo" if n_expr == "nlo" else " + b_hi") if HAS_BIAS else "")
        e(ind, f"st_(out, ({m_expr}) * N + {n_expr}, {acc}{bexpr})")
    return "\n".join(L) + "\n"


@lru_cache(maxsize=None)
def mixed_gemm_kernel(act: str, tac: Tactic, BS: int, ZP: str, HAS_BIAS: bool, arch: int, bits: int = 4) -> Kernel:
    from numba.cuda import types

    if bits not in BITS:
        raise ValueError(f"mixed_gemm_kernel: bits must be one of {BITS}, got {bits}")
    src = _gen_source(act, tac, BS, ZP, HAS_BIAS, arch, bits)
    ns = {
        "cuda": cuda, "np": np, "ldg_v4": _I.ldg_v4, "ld": LOADS[act], "st_": STORES[act],
        "mma": _I.mma_bf16 if act == "bfloat16" else _I.mma_f16,
        "fma2": _I.fma_bf16x2 if act == "bfloat16" else _I.fma_f16x2,
        "pack2": _I.pack_bf16x2, "u32_as_f32": _I.u32_as_f32, "ldcg": _I.ldcg,
    }
    name = f"mixed_gemm_w{bits}_{act}_{tac.name}_b{BS}_{ZP}{'_bias' if HAS_BIAS else ''}_sm{arch}"
    exec(compile(src, f"<{name}>", "exec"), ns)
    fn = ns["mixed_gemm"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type("uint32"), array_type(act), array_type("uint8"), array_type(act),
                array_type(act), array_type(act)) + (types.int64,) * 6 + (
                array_type("float32"), array_type("int32"), types.int64)
    return Kernel(fn, argtypes, name=name, fastmath=False)


# -------------------------------------------------------------------------------------- plan

class MixedGemmPlan:
    route = ROUTE

    def __init__(self, weights, M: int, tactic: Tactic, arch: int):
        self.M, self.N, self.K = M, weights.N, weights.K
        self.tactic = tactic
        pk = prepack(weights, arch)
        self.packed = pk
        has_bias = weights.bias is not None
        n_full, half = _chunks(self.K)
        gx, gy = -(-self.N // tactic.bn), -(-M // tactic.bm)
        self.splits, sps = split_count(tactic, gx * gy, n_full + int(half), weights.block_size)
        ktac = tactic
        if tactic.splitk != 1 and self.splits == 1:  # nothing to split: the plain kernel, no workspace
            ktac = replace(tactic, name=tactic.name + "1", splitk=1)
        k = mixed_gemm_kernel(weights.dtype, ktac, weights.block_size, weights.zp_kind, has_bias, arch,
                              weights.bits)
        self.kernel = k.name
        self._kernel = k
        self._elem = np.uint16 if weights.dtype == "bfloat16" else np.float16
        du8 = weights.dummy(np.uint8)
        dact = weights.dummy(self._elem)
        zpk = pk.zp if weights.zp_kind == "packed" else du8
        zpt = pk.zp if weights.zp_kind == "typed" else dact
        bias = weights.bias.view(self._elem) if has_bias else dact
        if ktac.splitk != 1:  # one fp32 slice per split (overwritten every launch); counters zeroed once
            # here, the last block of each tile resets its counter after every launch
            ws = to_device(np.zeros(self.splits * M * self.N, np.float32), weights.simulated)
            cnt = to_device(np.zeros(gx * gy, np.int32), weights.simulated)
        else:
            ws, cnt = weights.dummy(np.float32), weights.dummy(np.int32)
        self.workspace, self.counters = ws, cnt
        self._launch = k.bind((gx, gy, self.splits), tactic.threads,
                              (weights.dummy(np.uint32), pk.bq, pk.scales, zpk, zpt, bias, dact, M, self.K, self.N,
                               weights.k_blocks, n_full, int(half), ws, cnt, sps))

    def run(self, a: DevArray, out: DevArray, stream: int = 0) -> None:
        M, K, N = self.M, self.K, self.N
        if a.ptr % 16:
            raise ValueError("mixed_gemm: A must be 16-byte aligned")
        self._launch.set_array(0, a.view(np.uint32, (M * K // 2,)))
        self._launch.set_array(6, out.view(self._elem, (M * N,)))
        self._launch.launch(stream)


def build(weights, problem, config=None, tactic=None, arch: int | None = None) -> MixedGemmPlan:
    """Plan for ``problem``; ``tactic`` is a ``TACTICS`` name or ``Tactic`` (default by M);
    ``arch`` 80/90 picks the prepacked layout (default: 90 when ``problem.weight_prepacked == 2``)."""
    if not supports(problem):
        raise ValueError(f"mixed_gemm does not support {problem.describe()}")
    if weights.bits != problem.bits or weights.bits not in BITS or weights.g_idx is not None:
        raise ValueError(f"mixed_gemm does not support these weights: {weights.describe()}")
    if isinstance(tactic, str):
        tactic = TACTICS[tactic]
    tac = tactic or default_tactic(problem.M)
    if arch is None:
        arch = 90 if problem.weight_prepacked == 2 else 80
    return MixedGemmPlan(weights, problem.M, tac, arch)
