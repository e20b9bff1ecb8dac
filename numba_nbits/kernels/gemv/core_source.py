"""Source generator of the fused CUDA-core GEMV engine shared by the routes ``gemv_w4``, ``gemv_w8``,
``gemv_w2`` and ``router_gemv`` (fp32 A, and the fallback of the tensor-core GEMV).

Math
----
``Y[m, n] = sum_k A[m, k] * (q[n, k] - zp[n, g]) * scale[n, g]``, ``g = k // block_size``, for
``k < K`` only (the padded tail of the last block is never used: A is taken as 0 there). Each lane
forms, per quantization block (or per 32/16/64-code slice of one), the exact fp32 partial sum
``p = sum_j (q_j - zp) * a_j`` and adds ``scale * p`` to an fp32 accumulator (M tile of 1); for
M tiles > 1 the dequantized weight ``(q - zp) * scale`` (one fp32 rounding, ORT's form) is formed
once per code and FMA'd into every row of the tile. Lanes are summed with a shuffle butterfly and
the result is rounded once to the output dtype (plus ``bias[n]`` in fp32 first when fused).

Decoding without I2F, zero point for free
-----------------------------------------
A code field ``q`` of ``b`` bits at bit offset ``o`` of a 32-bit word ``w`` is turned into a float
by one LOP3 and one FADD: ``u32_as_f32(0x4B000000 | (w & (MASK << o))) = 2^23 + q * 2^o`` exactly
as long as ``o + b <= 23`` (the field stays in the mantissa). Fields higher up are first brought
down by one shift of the word by ``HIGH_FIELD_SHIFT[bits]`` bits (12 for 2/4-bit, 16 for 8-bit; one
SHF per word). Subtracting the per-(row, block) constant ``cst = 2^23 + zp * 2^o`` gives ``(q - zp) * 2^o``
exactly, so the zero point (default ``2^(bits-1)`` or the packed one) costs nothing per code. The
``2^o`` factor is cancelled by pre-scaling the activation: ``a'[k] = a[k] * 2^-o(k)``, where
``o(k)`` depends only on ``k mod codes_per_word``, so it is applied once when A is staged (a power
of two: exact). Per code and row this leaves LOP3 + FADD + FFMA; the shared-memory read of
``a'`` is shared by the R rows of a warp.

Packed layout read
------------------
B is ``uint8[N, k_blocks, block_size*bits/8]``, each row ``K_padded*bits/8`` contiguous bytes,
codes low bits first (spec §2.1). The kernel reads B through its flat uint32 view in *chunks* of
``Spec.chunk_bytes`` bytes: 16 (``ld.global.nc.v4.u32``: 32 4-bit / 16 8-bit / 64 2-bit codes) when the row
length is a multiple of 16 bytes (``cuMemAlloc`` bases are 256-byte aligned, so every chunk is
16-byte aligned), else 8 or 4 bytes (plain 32-bit loads; e.g. 4-bit block 16 with odd k_blocks,
2-bit rows that are not multiples of 16 bytes). Scales are ``[N, k_blocks]`` in the activation
dtype; packed zero points ``[N, ceil(k_blocks*bits/8)]`` (spec §2.3).

Thread -> data mapping
----------------------
* A block has ``WARPS`` warps; warp ``w`` of row group ``rg`` owns the ``R`` consecutive output
  rows ``n0 = (rg*WARPS + w)*R ... n0+R-1`` (N % 8 == 0 and R | 8, so a warp's rows are all valid
  or all invalid). ``blockIdx.y`` selects the M tile (``MT`` rows of A / Y).
* Lane ``l`` handles chunks ``l, l+32, l+64, ...`` of those rows: for each it issues the ``R*U``
  independent 16-byte loads of ``U`` chunks of its ``R`` rows first (``U`` unrolled chunks,
  clamped to the last chunk and masked out when past the end so the loads stay unconditional), then
  decodes and accumulates. Consecutive lanes read consecutive 16-byte pieces of a row: each warp
  load instruction is 512 contiguous bytes.
* A (the ``MT x K`` slice) is staged once per K tile into dynamic shared memory as pre-scaled fp32,
  laid out ``[mt][chunk][Spec.ch + 1]``: the one-float pad per chunk makes the 32 lanes (which read
  element t of 32 consecutive chunks) hit 32 different banks, while the offsets t stay
  compile-time immediates. When A of the whole K fits (``core.SMEM_BUDGET``), it is staged once per
  block and the block loops over row groups (a persistent grid sized by occupancy on a GPU);
  otherwise K is cut into balanced tiles with a ``syncthreads`` pair around each staging.
* The router specialisation (``direct_a``) skips shared memory: a 32 x 2880 problem is latency
  bound, so each lane reads its A values straight from global memory (L1/L2 hits) in the same
  round trip as its B loads, and the bias (read before the main loop, in flight with the B loads, by the
  lane that stores the row) is added in fp32 before the store. With ``a_vec`` a chunk's
  A values (``ch`` contiguous elements) come in ``ch * itemsize / 16`` 16-byte loads (``ldg_v4_at``)
  instead of one load each; the plan runs it only on a 16-byte aligned A.
* Indices are 64-bit (``np.int64`` block index), so N*K beyond 2^31 is fine.

Kernels are generated as Python source per specialisation (dtype, bits, block size, zero-point
kind, chunk bytes, M tile, rows per warp, unroll, warps, A source, bias) and compiled once through
``launch.Kernel`` (``kernel_for``; planning and launch: ``core``); the generator fully unrolls the
per-chunk work into straight-line code, so every loaded word, constant and accumulator is a scalar
register (no local-memory arrays) and the loads of one iteration are all issued before the first use. The same source runs on the simulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda

from ...formats import FORMATS
from ...launch import Kernel
from ..codegen import load_source
from ..dtypes import LOADS, STORES, array_type
from ..intrinsics import f16hi_to_f32, f16lo_to_f32, ldg_v4, ldg_v4_at, prefetch_l2, u32_as_f32

#: 2^23 as float32: the magic exponent of the decode trick (0x4B000000).
MAGIC = 8388608.0
#: ``Spec.l2pf`` kernels prefetch into L2 the B chunk a lane loads this many iterations later (untuned)
L2PF_AHEAD = 2
FULL_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class Spec:
    """One kernel specialisation (every field is a compile-time constant of the generated code)."""

    act: str  # activation dtype name
    bits: int
    block_size: int
    zp_kind: str  # "none" | "packed"
    chunk_bytes: int  # 16 | 8 | 4
    mt: int  # rows of A per block (M tile)
    r: int  # output rows per warp
    u: int  # chunks per lane per iteration (unroll)
    warps: int  # warps per block
    direct_a: bool = False  # read A from global (router) instead of staged shared memory
    a_vec: bool = False  # direct_a: A read 16 bytes at a time (``ldg_v4_at``; A 16-byte aligned, K whole chunks)
    bias: bool = False  # add bias[n] before the store
    l2pf: bool = False  # prefetch_l2 the B chunks L2PF_AHEAD iterations ahead (16-byte chunks only)

    @property
    def codes_per_word(self) -> int:
        return FORMATS[self.bits].codes_per_word

    @property
    def ch(self) -> int:  # codes per chunk
        return self.chunk_bytes * 8 // self.bits

    @property
    def words(self) -> int:  # words per chunk
        return self.chunk_bytes // 4

    @property
    def pad(self) -> int:  # floats per staged chunk
        return self.ch + 1

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def name(self) -> str:
        return (f"gemv_w{self.bits}_{self.act}_g{self.block_size}_{self.zp_kind}_c{self.chunk_bytes}_m{self.mt}"
                f"_r{self.r}u{self.u}w{self.warps}{'_direct' if self.direct_a else ''}{'_av' if self.a_vec else ''}"
                f"{'_bias' if self.bias else ''}"
                f"{'_l2pf' if self.l2pf else ''}")


#: Right shift applied to a word before decoding its high fields (keeps them in the fp32 mantissa), by bits
HIGH_FIELD_SHIFT = {2: 12, 4: 12, 8: 16}


def field_offset(bits: int, j: int) -> tuple[bool, int]:
    """(from the shifted word?, bit offset) of code j of a word after the optional shift."""
    o = j * bits
    if o + bits <= 23:
        return False, o
    return True, o - HIGH_FIELD_SHIFT[bits]


def prescale_exponents(bits: int) -> tuple[int, ...]:
    """Bit offset o(j) per code position j of a word; staged A is multiplied by 2^-o(j)."""
    return tuple(field_offset(bits, j)[1] for j in range(FORMATS[bits].codes_per_word))


def _word_value(act: str, word: str, byte: int) -> str:
    """Expression: the float32 value of the activation at byte ``byte`` (0 or 2; 0 for fp32) of uint32 ``word``."""
    if act == "float32":
        return f"u32_as_f32({word})"
    if act == "float16":
        return f"f16{'hi' if byte else 'lo'}_to_f32({word})"
    return f"u32_as_f32({word} & HI16)" if byte else f"u32_as_f32({word} << SH16)"  # bfloat16: the top 16 bits


def generate_source(s: Spec) -> str:
    """Python source of the kernel for specialisation ``s`` (see the module docstring)."""
    bits, chunk_codes, words, mt, rows, unroll = s.bits, s.ch, s.words, s.mt, s.r, s.u
    codes_per_word = s.codes_per_word
    slice_codes = min(chunk_codes, s.block_size)  # codes of one chunk under one scale
    n_slices = chunk_codes // slice_codes
    log_bs = int(math.log2(s.block_size))
    zp_per_byte = FORMATS[bits].codes_per_byte  # zero points per packed byte
    offs = [field_offset(bits, j) for j in range(codes_per_word)]
    exps = sorted({o for _, o in offs})
    L: list[str] = []

    def emit(level, text):
        L.append("    " * level + text)

    emit(0, f"def {s.name}(a, bw, scales, zpp, bias, out, M, N, K, k_blocks, zp_row, row_chunks, "
            f"tile_chunks, n_groups):")
    emit(1, "tid = cuda.threadIdx.x")
    emit(1, "lane = tid & 31")
    emit(1, "warp = tid >> 5")
    emit(1, f"m0 = np.int64(cuda.blockIdx.y) * {mt}")
    emit(1, "um0 = np.uint64(m0)")
    if s.a_vec:
        emit(1, f"arow = m0 * K * {np.dtype(s.act).itemsize}  # byte offset of A's row m0")
    if not s.direct_a:
        emit(1, "sa = cuda.shared.array(0, F32T)")
        emit(1, f"stride_m = tile_chunks * {s.pad}")
        emit(1, "single = tile_chunks >= row_chunks")
        emit(1, "staged = False")
    emit(1, "rg = np.int64(cuda.blockIdx.x)")
    emit(1, "while rg < n_groups:")
    emit(2, f"n0 = (rg * {s.warps} + warp) * {rows}")
    emit(2, "active = n0 < N")
    for r in range(rows):
        emit(2, f"row{r} = n0 + {r}")
    if s.bias:  # bias[n] read before the main loop by the lane that stores row n: in flight with the B loads
        for m in range(mt):
            for r in range(rows):
                emit(2, f"bv{m}_{r} = F0")
                emit(2, f"if active and lane == {(m * rows + r) % 32}:")
                emit(3, f"bv{m}_{r} = ld(bias, row{r})")
    for m in range(mt):
        for r in range(rows):
            emit(2, f"acc{m}_{r} = np.float32(0.0)")
    emit(2, "c0 = np.int64(0)")
    emit(2, "while c0 < row_chunks:")
    emit(3, "nch = min(tile_chunks, row_chunks - c0)")
    if not s.direct_a:
        # ---- stage A[m0:m0+mt, c0*chunk_codes : (c0+nch)*chunk_codes] as pre-scaled fp32, [mt][chunk][chunk_codes+1]
        emit(3, "if not (single and staged):")
        emit(4, "cuda.syncthreads()")
        emit(4, f"tile_k = nch * {chunk_codes}")
        emit(4, f"kbase = c0 * {chunk_codes}")
        # shift / mask below
        assert chunk_codes & (chunk_codes - 1) == 0 and codes_per_word & (codes_per_word - 1) == 0, s
        # rows of A one after another, k = tid, tid + threads, ... within a row: no division by the
        # (run-time) tile length per element; chunk and code position by shift and mask
        emit(4, "mm = np.int64(0)")
        emit(4, f"while mm < {mt}:")
        emit(5, "kk = np.int64(tid)")
        emit(5, "while kk < tile_k:")
        emit(6, "kg = kbase + kk")
        emit(6, "v = np.float32(0.0)")
        emit(6, "if m0 + mm < M and kg < K:")
        emit(7, "v = ld(a, (m0 + mm, kg))")
        # 2^-o(j) with o(j) from the table, j = kk % codes_per_word; built from the exponent bits
        emit(6, f"o = PRESCALE_EXP[kk & {codes_per_word - 1}]")
        emit(6, "v = v * u32_as_f32(np.uint32((127 - o) << 23))")
        emit(6, f"sa[mm * stride_m + (kk >> {int(math.log2(chunk_codes))}) * {s.pad} + (kk & {chunk_codes - 1})] = v")
        emit(6, f"kk += {s.threads}")
        emit(5, "mm += 1")
        emit(4, "cuda.syncthreads()")
        emit(4, "staged = True")
    emit(3, "if active:")
    emit(4, "c = np.int64(lane)")
    emit(4, "while c < nch:")
    lvl = 5
    # ---- chunk indices (clamped) and validity
    for u in range(unroll):
        emit(lvl, f"cl{u} = c + {32 * u}")
        emit(lvl, f"ok{u} = cl{u} < nch")
        emit(lvl, f"if not ok{u}:")
        emit(lvl + 1, f"cl{u} = nch - 1")
        emit(lvl, f"cg{u} = c0 + cl{u}")
    # ---- B loads: all rows*unroll chunks first
    for u in range(unroll):
        for r in range(rows):
            base = f"row{r} * row_chunks + cg{u}"
            if words == 4:
                emit(lvl, f"w{r}_{u}_0, w{r}_{u}_1, w{r}_{u}_2, w{r}_{u}_3 = ldg_v4(bw, {base})")
                if s.l2pf:  # the chunk this lane loads L2PF_AHEAD iterations later, if in the row
                    emit(lvl, f"if cg{u} + {32 * unroll * L2PF_AHEAD} < row_chunks:")
                    emit(lvl + 1, f"prefetch_l2(bw, {base} + {32 * unroll * L2PF_AHEAD})")
            else:
                emit(lvl, f"bi{r}_{u} = ({base}) * {words}")
                for i in range(words):
                    emit(lvl, f"w{r}_{u}_{i} = np.uint32(bw[bi{r}_{u} + {i}])")
    # Every temporary below gets a fresh name (and constants are frozen globals, see
    # ``kernel_namespace``): numba's SSA repair and lowering are quadratic in the number of
    # re-assignments / statements of one block, so unique names keep compile times in seconds.
    cnt = [0]

    def fresh(prefix):
        cnt[0] += 1
        return f"{prefix}_{cnt[0]}"

    # ---- A values (direct mode): loaded with the B loads, pre-scaled by constants
    if s.direct_a and s.a_vec:
        # a chunk's chunk_codes A values are contiguous (chunk_codes * itemsize bytes, a multiple of 16): 16-byte
        # loads of their bytes at A's row m0, each value taken from its word (two 16-bit values per word)
        isz = np.dtype(s.act).itemsize
        for u in range(unroll):
            emit(lvl, f"kb{u} = arow + cg{u} * {chunk_codes * isz}")
            for v in range(chunk_codes * isz // 16):
                emit(lvl, f"av{u}_{v}_0, av{u}_{v}_1, av{u}_{v}_2, av{u}_{v}_3 = ldg_v4_at(a, kb{u} + {16 * v})")
            for t in range(chunk_codes):
                o = offs[t % codes_per_word][1]
                wi, half = divmod(t * isz, 4)
                word = f"av{u}_{wi // 4}_{wi % 4}"
                emit(lvl, f"a{u}_{t} = {_word_value(s.act, word, half)} * PS{o}")
    elif s.direct_a:
        for u in range(unroll):
            emit(lvl, f"ka{u} = np.uint64(cg{u} * {chunk_codes})")
            for t in range(chunk_codes):
                o = offs[t % codes_per_word][1]
                emit(lvl, f"a{u}_{t} = ld(a, (um0, ka{u} + T{t})) * PS{o}")
    # ---- scales (masked to 0 for invalid chunks) and zero-point constants
    for u in range(unroll):
        for sidx in range(n_slices):
            emit(lvl, f"g{u}_{sidx} = (cg{u} * {chunk_codes} + {sidx * slice_codes}) >> {log_bs}")
        for r in range(rows):
            for sidx in range(n_slices):
                sc = f"sc{r}_{u}_{sidx}"
                emit(lvl, f"{sc} = ld(scales, np.uint64(row{r} * k_blocks + g{u}_{sidx}))")
                if s.zp_kind == "packed":
                    g = f"g{u}_{sidx}"
                    emit(lvl, f"zb{r}_{u}_{sidx} = np.uint32(zpp[np.uint64(row{r} * zp_row + ({g} // {zp_per_byte}))])")
                    emit(lvl, f"z{r}_{u}_{sidx} = np.float32((zb{r}_{u}_{sidx} >> np.uint32(({g} % {zp_per_byte}) * {bits})) "
                             f"& ZMASK)")
                    for o in exps:
                        emit(lvl, f"k{r}_{u}_{sidx}_{o} = MAGF + z{r}_{u}_{sidx} * FM{o}")
    # ---- compute: one `if ok_u:` section per (chunk, scale slice); a clamped chunk past the end is
    # skipped (its loads were harmless duplicates). The sections also keep numba's per-block
    # analyses (quadratic in statements per block) fast.
    for u in range(unroll):
        if not s.direct_a:
            for m in range(mt):
                emit(lvl, f"ab{u}_{m} = np.uint64({m} * stride_m + cl{u} * {s.pad})" if m
                     else f"ab{u}_{m} = np.uint64(cl{u} * {s.pad})")
        for sidx in range(n_slices):
            lvl_in = lvl + 1
            acc = {(m, r): f"acc{m}_{r}" for m in range(mt) for r in range(rows)}
            part = {r: None for r in range(rows)}
            if mt == 1:
                for r in range(rows):
                    emit(lvl, f"pp{r} = F0")
                    part[r] = f"pp{r}"
            for t in range(sidx * slice_codes, (sidx + 1) * slice_codes):
                wi, j = divmod(t, codes_per_word)
                hi, o = offs[j]
                if j == 0:  # a new section per word
                    if t != sidx * slice_codes:
                        for r in range(rows):
                            if mt == 1:
                                emit(lvl_in, f"pp{r} = {part[r]}")
                                part[r] = f"pp{r}"
                            for m in range(mt if mt > 1 else 0):
                                emit(lvl_in, f"acc{m}_{r} = {acc[m, r]}")
                                acc[m, r] = f"acc{m}_{r}"
                    emit(lvl, f"if ok{u}:")
                if hi and not offs[j - 1][0]:  # first high field of this word: shift it down once
                    for r in range(rows):
                        emit(lvl_in, f"h{r}_{u}_{wi} = w{r}_{u}_{wi} >> SHU")
                xs = []
                for m in range(mt):
                    if s.direct_a:
                        xs.append(f"a{u}_{t}")
                    else:
                        x = fresh("x")
                        emit(lvl_in, f"{x} = sa[ab{u}_{m} + T{t}]")
                        xs.append(x)
                for r in range(rows):
                    src = f"{'h' if hi else 'w'}{r}_{u}_{wi}"
                    cst = f"k{r}_{u}_{sidx}_{o}" if s.zp_kind == "packed" else f"KC{o}"
                    d = fresh("d")
                    emit(lvl_in, f"{d} = u32_as_f32(({src} & MK{o}) | MAGICU) - {cst}")
                    if mt == 1:
                        p_new = fresh("p")
                        emit(lvl_in, f"{p_new} = {d} * {xs[0]}" if part[r] is None
                             else f"{p_new} = {part[r]} + {d} * {xs[0]}")
                        part[r] = p_new
                    else:
                        dq = fresh("q")
                        emit(lvl_in, f"{dq} = {d} * sc{r}_{u}_{sidx}")
                        for m in range(mt):
                            a_new = fresh("s")
                            emit(lvl_in, f"{a_new} = {acc[m, r]} + {dq} * {xs[m]}")
                            acc[m, r] = a_new
            if mt == 1:
                for r in range(rows):
                    a_new = fresh("s")
                    emit(lvl_in, f"{a_new} = {acc[0, r]} + sc{r}_{u}_{sidx} * {part[r]}")
                    acc[0, r] = a_new
            for m in range(mt):
                for r in range(rows):
                    emit(lvl_in, f"acc{m}_{r} = {acc[m, r]}")
    emit(lvl, f"c += {32 * unroll}")
    emit(3, "c0 += tile_chunks")
    # ---- reduce and store
    emit(2, "if active:")
    for m in range(mt):
        for r in range(rows):
            v = f"acc{m}_{r}"
            for off in (16, 8, 4, 2, 1):
                emit(3, f"{v} += cuda.shfl_xor_sync({FULL_MASK:#x}, {v}, {off})")
            idx = m * rows + r
            emit(3, f"if lane == {idx % 32} and m0 + {m} < M:")
            if s.bias:
                emit(4, f"{v} += bv{m}_{r}")
            emit(4, f"st(out, (m0 + {m}, row{r}), {v})")
    emit(2, "rg += cuda.gridDim.x")
    return "\n".join(L) + "\n"


def kernel_namespace(s: Spec) -> dict:
    """Globals of the generated kernel: helpers plus constants (numba freezes global scalars)."""
    from numba.cuda import types

    bits = s.bits
    mask = FORMATS[bits].code_mask
    zp = FORMATS[bits].default_zero_point
    ns = {"cuda": cuda, "np": np, "ld": LOADS[s.act], "st": STORES[s.act], "ldg_v4": ldg_v4, "prefetch_l2": prefetch_l2,
          "ldg_v4_at": ldg_v4_at, "f16lo_to_f32": f16lo_to_f32, "f16hi_to_f32": f16hi_to_f32,
          "HI16": np.uint32(0xFFFF0000), "SH16": np.uint32(16),
          "u32_as_f32": u32_as_f32, "F32T": types.float32, "PRESCALE_EXP": prescale_exponents(bits), "min": min,
          "F0": np.float32(0.0), "MAGF": np.float32(MAGIC), "MAGICU": np.uint32(0x4B000000),
          "SHU": np.uint32(HIGH_FIELD_SHIFT[bits]), "ZMASK": np.uint32(mask)}
    for o in sorted(set(prescale_exponents(bits))):
        ns[f"MK{o}"] = np.uint32(mask << o)
        ns[f"KC{o}"] = np.float32(MAGIC + zp * 2.0 ** o)
        ns[f"FM{o}"] = np.float32(2.0 ** o)
        ns[f"PS{o}"] = np.float32(2.0 ** -o)
    for t in range(s.ch):
        ns[f"T{t}"] = np.uint64(t)
    return ns


@lru_cache(maxsize=None)
def kernel_for(s: Spec) -> Kernel:
    """The (lazily compiled) kernel of one specialisation; cached for the process."""
    from numba.cuda import types

    src = generate_source(s)
    ns = kernel_namespace(s)
    fn = load_source(s.name, src, ns)[s.name]
    argtypes = (array_type(s.act, 2), array_type("uint32"), array_type(s.act), array_type("uint8"),
                array_type(s.act), array_type(s.act, 2)) + (types.int64,) * 8
    return Kernel(fn, argtypes, name=s.name, fastmath=False)

