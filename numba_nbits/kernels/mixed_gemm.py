"""Mixed-input tensor-core GEMM (the spec's fpA_intB route): fp16/bf16 A x 4-bit B, M = 16 .. thousands.

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

Prepacked weight layout (``pack_weights_for_mixed_gemm``; same byte count as B)
--------------------------------------------------------------------------------
Requires ``N % 16 == 0`` and ``K % 32 == 0`` (the route's guards are stricter: N % 64, K % block).
K is cut into 64-k chunks (the last one is a 32-k half chunk when K % 64 == 32). For each 16-row
tile and chunk, lane ``(g, t)`` owns 4 uint32 words (2 in a half chunk), word ``s`` = the codes of
MMA step ``s`` exactly as in ``gemv_mma`` (nibbles 0,4 = a0; 1,5 = a1; 2,6 = a2; 3,7 = a3) with the
k permutation of k-groups ``KG = min(block_size, 64)`` (block 32 -> KG 32; blocks 64/128 -> 64).
* ``arch=80`` (weight_prepacked=1): tile-major ``[tile][chunk][lane][words]``; a tile's row block is
  contiguous (each warp streams its own rows).
* ``arch=90`` (weight_prepacked=2, block 64/128): chunk-major ``[chunk][tile][lane][4]``: all
  tiles' words of one k-chunk are contiguous, so the blocks of one k-stage read one contiguous
  stretch (DRAM-page friendly when many blocks run the same k-stage, as on a 132-SM Hopper).
Scales, zero points (packed -> uint8, typed -> act dtype) are re-laid out once as
``[tile][k_block][16 rows]`` (``weights.derived``), not part of the prepacked B.

Kernel
------
A block has ``WN x WM`` warps; warp ``(wn, wm)`` computes ``16*TPW`` weight rows by ``8*MTW``
activation rows, so the block tile is ``BN = 16*TPW*WN`` by ``BM = 8*MTW*WM``. K advances in
64-k stages. Each stage the block stages its ``BM x 64`` activation tile in shared memory
(16-byte global loads into registers one stage ahead: register double buffering; rows padded to
33 words so the fragment reads are bank-conflict free for block >= 64), while every warp streams
its weight words straight from global memory into registers one stage ahead (16-byte
``ld.global.nc``; warps sharing rows hit L1). Weights are converted once per warp and reused for
``MTW`` MMAs. ``TACTICS`` lists the tile shapes; ``default_tactic(M)`` picks by M.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda

from ..arrays import DevArray, to_device
from ..launch import Kernel
from . import intrinsics as _I
from .dtypes import LOADS, STORES, array_type
from .gemv_mma import _CONST

ROUTE = "mixed_gemm"
BLOCK_SIZES = (32, 64, 128)
RS = 33  # shared-memory row stride of the activation tile, in uint32 words (64 halves + 1 pad)


@dataclass(frozen=True)
class Tactic:
    name: str
    wn: int  # warps along N
    wm: int  # warps along M
    tpw: int  # 16-row weight tiles per warp
    mtw: int  # 8-row activation tiles per warp

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
    )
}


def default_tactic(M: int) -> Tactic:
    for name, lim in (("m16", 16), ("m32", 32), ("m64", 64)):
        if M <= lim:
            return TACTICS[name]
    return TACTICS["m128"]


def supports(problem) -> bool:
    p = problem
    return (p.bits == 4 and p.dtype in ("float16", "bfloat16") and p.M >= 1 and p.block_size in BLOCK_SIZES
            and not p.has_g_idx and p.N % 16 == 0 and p.K % p.block_size == 0 and p.K > 0 and p.N > 0)


# ------------------------------------------------------------------------------- prepacking

def _chunks(K: int):
    """(number of full 64-k chunks, whether a 32-k half chunk follows)."""
    return K // 64, (K % 64) == 32


def pack_weights_for_mixed_gemm(B, N: int, K: int, bits: int, arch: int = 80, block_size: int = 64) -> np.ndarray:
    """ORT-layout B (``uint8 [N, K/block, blob]`` or ``[N, K*bits/8]``) -> the prepacked layout of the
    module docstring as uint8 with the same byte count (``N*K*bits/8``).

    ``block_size`` selects the in-step k permutation (32 -> groups of 32, 64/128 -> 64) and must be
    the node's block size. ``arch`` 80 -> tile-major (weight_prepacked=1), 90 -> chunk-major (=2).
    """
    if bits != 4:
        raise NotImplementedError("pack_weights_for_mixed_gemm: only bits=4 is implemented")
    if arch not in (80, 90):
        raise ValueError(f"arch must be 80 or 90, got {arch}")
    if N % 16 or K % 32 or K % block_size or block_size not in BLOCK_SIZES:
        raise ValueError(f"mixed GEMM layout needs N % 16 == 0, K % 32 == 0, K % block_size == 0, block in "
                         f"{BLOCK_SIZES}; got N={N} K={K} block_size={block_size}")
    from ..formats import _unpack_last_axis

    raw = np.ascontiguousarray(np.asarray(B, np.uint8)).reshape(N, K // 2)
    codes = _unpack_last_axis(raw, 4)  # (N, K)
    kg = min(block_size, 64)
    nfull, half = _chunks(K)
    parts = []
    if nfull:
        parts.append(_pack_chunks(codes[:, :nfull * 64], kg, 4))
    if half:
        parts.append(_pack_chunks(codes[:, nfull * 64:], 32, 2))
    T = N // 16
    if arch == 80:
        words = np.concatenate([p.reshape(T, -1) for p in parts], axis=1)
    else:
        words = np.concatenate([p.transpose(1, 0, 2, 3).reshape(-1) for p in parts])
    return np.ascontiguousarray(words).reshape(-1).view(np.uint8)


def _pack_chunks(codes, kg: int, steps: int):
    """codes (N, nch*16*steps) -> uint32 (T, nch, 32 lanes, steps)."""
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


def unpack_weights_from_mixed_gemm(P, N: int, K: int, bits: int, arch: int = 80, block_size: int = 64) -> np.ndarray:
    """Inverse of ``pack_weights_for_mixed_gemm``: prepacked bytes -> ORT's ``uint8 [N, K/2]`` rows."""
    if bits != 4:
        raise NotImplementedError("only bits=4 is implemented")
    from ..formats import _pack_last_axis

    words = np.ascontiguousarray(np.asarray(P, np.uint8).reshape(-1)).view(np.uint32)
    T = N // 16
    nfull, half = _chunks(K)
    kg = min(block_size, 64)
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

        N, K, bs = weights.N, weights.K, weights.block_size
        kb = weights.k_blocks
        pb = None if prepacked else pack_weights_for_mixed_gemm(np.asarray(weights.host["B"]), N, K, 4, arch, bs)
        sc = np.asarray(weights.host["scales"]).reshape(N, kb)
        sc_bits = sc.view(np.uint16) if weights.dtype == "bfloat16" else sc.astype(np.float16)
        zp = None
        if weights.zp_kind == "packed":
            z = unpack_zero_points(np.asarray(weights.host["zero_points"]), kb, 4, N=N)
            zp = to_device(_per_block(z, N, kb, np.uint8), weights.simulated)
        elif weights.zp_kind == "typed":
            z = np.asarray(weights.host["zero_points"]).reshape(N, kb)
            z = z.view(np.uint16) if weights.dtype == "bfloat16" else z.astype(np.float16)
            zp = to_device(_per_block(z, N, kb, z.dtype), weights.simulated)
        bq = weights.b.view(np.uint32) if prepacked else to_device(pb.view(np.uint32), weights.simulated)
        return Packed(bq=bq,
                      scales=to_device(_per_block(sc_bits, N, kb, sc_bits.dtype), weights.simulated),
                      zp=zp, arch=arch)

    return weights.derived(f"mixed_gemm_w4_sm{arch}", build)


# ------------------------------------------------------------------------------ kernel source

def _gen_source(act: str, tac: Tactic, BS: int, ZP: str, HAS_BIAS: bool, arch: int) -> str:
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
    L = []

    def e(ind, s):
        L.append("    " * ind + s)

    e(0, "def mixed_gemm(a32, bq, sc, zpk, zpt, bias, out, M, K, N, kb, n_full, half):")
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
    e(1, "tw = n_full * 128 + half * 64")  # words per tile (arch 80)
    if ZP == "none":
        e(1, f"nz_lo = np.uint32({(c['NEG'] | 8) * 0x10001})")
        e(1, "nz_hi = nz_lo")
    if TYPED:
        e(1, f"nz_lo = np.uint32({(c['NEG']) * 0x10001})")  # -(magic base): leaves q exactly
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
        for j in range(NCH):
            e(ind, f"ch = tid + {j * T}")
            e(ind, "ar = ch >> 3")
            e(ind, "am = m0 + ar")
            e(ind, f"ak = {stage} * 64 + (ch & 7) * 8")
            e(ind, f"if ch < {BM * 8} and am < M and ak < K:")
            e(ind + 1, f"{pref}_{j} = ldg_v4(a32, (am * K + ak) >> 3)")
            e(ind, "else:")
            e(ind + 1, f"{pref}_{j} = Z4")

    def load_w(ind, stage, pref):
        e(ind, f"if {stage} < n_full:")
        for i in range(TPW):
            e(ind + 1, f"if tv_{i}:")
            if arch == 80:
                e(ind + 2, f"{pref}_{i} = ldg_v4(bq, ((tile0 + {i}) * tw + {stage} * 128) // 4 + lane)")
            else:
                e(ind + 2, f"{pref}_{i} = ldg_v4(bq, ({stage} * n_tiles + tile0 + {i}) * 32 + lane)")
            e(ind + 1, "else:")
            e(ind + 2, f"{pref}_{i} = Z4")
        e(ind, f"elif {stage} < n_st:")
        for i in range(TPW):
            e(ind + 1, f"if tv_{i}:")
            if arch == 80:
                e(ind + 2, f"hx = (tile0 + {i}) * tw + n_full * 128 + 2 * lane")
            else:
                e(ind + 2, f"hx = n_full * n_tiles * 128 + (tile0 + {i}) * 64 + 2 * lane")
            e(ind + 2, f"{pref}_{i} = (np.uint32(bq[hx]), np.uint32(bq[hx + 1]), np.uint32(0), np.uint32(0))")
            e(ind + 1, "else:")
            e(ind + 2, f"{pref}_{i} = Z4")
        e(ind, "else:")
        for i in range(TPW):
            e(ind + 1, f"{pref}_{i} = Z4")

    load_a(1, "0", "ra")
    load_w(1, "0", "w")
    e(1, "st = np.int64(0)")
    e(1, "while st < n_st:")
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
    load_w(2, "nst", "v")
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
            if ZP == "packed":
                e(3, f"nz_lo_{i} = (np.uint32({c['NEG']}) | np.uint32(zpk[sb])) * np.uint32(65537)")
                e(3, f"nz_hi_{i} = (np.uint32({c['NEG']}) | np.uint32(zpk[sb + 8])) * np.uint32(65537)")
            if TYPED:
                e(3, f"z_lo_{i} = ld(zpt, sb)")
                e(3, f"z_hi_{i} = ld(zpt, sb + 8)")
            e(2, "else:")
            e(3, f"s_lo_{i} = np.float32(0)")
            e(3, f"s_hi_{i} = np.float32(0)")
            if ZP == "packed":
                e(3, f"nz_lo_{i} = np.uint32(0)")
                e(3, f"nz_hi_{i} = np.uint32(0)")
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
                e(2, f"wd = w_{i}[{s}]")
                for r in range(4):
                    nz = ("nz_lo" if r % 2 == 0 else "nz_hi") + (f"_{i}" if ZP == "packed" else "")
                    e(2, f"f{r} = fma2((np.uint32(wd >> np.uint32({4 * r})) & np.uint32(0x000F000F)) "
                         f"| np.uint32({c['MAGIC']}), np.uint32({c['ONE']}), {nz})")
                for mt in range(MTW):
                    ps = ", ".join(f"p_{i}_{mt}_{r}" for r in range(4))
                    e(2, f"{ps} = mma(f0, f1, f2, f3, b0_{mt}, b1_{mt}, {ps})")
        # flush the block's partial sums
        if BS <= 64:
            e(2, "if True:")
        else:
            e(2, f"if (st % {BS // 64}) == {BS // 64 - 1} or st == n_st - 1:")
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
        e(2, f"w_{i} = v_{i}")
    e(2, "st = nst")
    # epilogue
    for i in range(TPW):
        e(1, f"if tv_{i}:")
        e(2, f"nlo = (tile0 + {i}) * 16 + g")
        if HAS_BIAS:
            e(2, "b_lo = ld(bias, nlo)")
            e(2, "b_hi = ld(bias, nlo + 8)")
        for mt in range(MTW):
            e(2, f"mr = m0 + wm * {8 * MTW} + {8 * mt} + 2 * t")
            for r in range(4):
                n_expr = "nlo" if r < 2 else "nlo + 8"
                m_expr = "mr" if r % 2 == 0 else "mr + 1"
                bexpr = (" + b_lo" if r < 2 else " + b_hi") if HAS_BIAS else ""
                e(2, f"if {m_expr} < M:")
                e(3, f"st_(out, ({m_expr}) * N + {n_expr}, acc_{i}_{mt}_{r}{bexpr})")
    return "\n".join(L) + "\n"


@lru_cache(maxsize=None)
def mixed_gemm_kernel(act: str, tac: Tactic, BS: int, ZP: str, HAS_BIAS: bool, arch: int) -> Kernel:
    from numba.cuda import types

    src = _gen_source(act, tac, BS, ZP, HAS_BIAS, arch)
    ns = {
        "cuda": cuda, "np": np, "ldg_v4": _I.ldg_v4, "ld": LOADS[act], "st_": STORES[act],
        "mma": _I.mma_bf16 if act == "bfloat16" else _I.mma_f16,
        "fma2": _I.fma_bf16x2 if act == "bfloat16" else _I.fma_f16x2,
    }
    name = f"mixed_gemm_w4_{act}_{tac.name}_b{BS}_{ZP}{'_bias' if HAS_BIAS else ''}_sm{arch}"
    exec(compile(src, f"<{name}>", "exec"), ns)
    fn = ns["mixed_gemm"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type("uint32"), array_type(act), array_type("uint8"), array_type(act),
                array_type(act), array_type(act)) + (types.int64,) * 6
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
        k = mixed_gemm_kernel(weights.dtype, tactic, weights.block_size, weights.zp_kind, has_bias, arch)
        self.kernel = k.name
        self._kernel = k
        self._elem = np.uint16 if weights.dtype == "bfloat16" else np.float16
        du8 = weights.dummy(np.uint8)
        dact = weights.dummy(self._elem)
        zpk = pk.zp if weights.zp_kind == "packed" else du8
        zpt = pk.zp if weights.zp_kind == "typed" else dact
        bias = weights.bias.view(self._elem) if has_bias else dact
        n_full, half = _chunks(self.K)
        grid = (-(-self.N // tactic.bn), -(-M // tactic.bm))
        self._launch = k.bind(grid, tactic.threads,
                              (weights.dummy(np.uint32), pk.bq, pk.scales, zpk, zpt, bias, dact, M, self.K, self.N,
                               weights.k_blocks, n_full, int(half)))

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
    if weights.bits != 4 or weights.g_idx is not None:
        raise ValueError(f"mixed_gemm does not support these weights: {weights.describe()}")
    if isinstance(tactic, str):
        tactic = TACTICS[tactic]
    tac = tactic or default_tactic(problem.M)
    if arch is None:
        arch = 90 if problem.weight_prepacked == 2 else 80
    return MixedGemmPlan(weights, problem.M, tac, arch)
