"""The mixed GEMM kernel's source, generated per (dtype, tactic, block size, zero-point kind, bias, arch, bits).

Decode
------
With zero points absent or packed, each code becomes the exact fp16/bf16 integer ``q - zp`` with one
packed fma on the magic number ``0x6400 | q`` (= 1024 + q). 8-bit codes (``q`` in 0..255, default zero
point 128) follow the same contract, every operand still an exact integer: fp16 uses the same magic
base (``0x6400 | q`` = 1024 + q: the ulp of [1024, 2048) is 1, so all 256 codes fit the 10-bit
mantissa) and ``0xE400 | zp`` = -(1024 + zp), giving the exact ``q - zp`` in [-255, 255] (11
significant bits). bf16 has no binade holding 256 consecutive integers (7-bit mantissa), so its codes
go through fp32: ``0x4B000000 | q`` is the float32 ``2^23 + q``, minus ``2^23 + zp`` is exactly
``q - zp`` (packed / default zp 128) or ``q`` (typed), and every integer of magnitude <= 256 is exact
in bf16, so the ``cvt.rn.bf16x2.f32`` pack is exact. Products with fp16/bf16 activations fit fp32
exactly (<= 8 + 11 significant bits).

Thread -> data mapping and pipeline
-----------------------------------
K advances in 64-k stages. Each stage the block stages its ``BM x 64`` activation tile in shared
memory (16-byte global loads into registers one stage ahead: register double buffering; rows padded
to ``RS`` = 33 words so the fragment reads are bank-conflict free for block >= 64), while every warp
streams its weight words straight from global memory into registers one stage ahead (two for tactics
with ``wpre=2``; 16-byte ``ld.global.nc``, two per tile for 8-bit; warps sharing rows hit L1).
Weights are converted once per warp and reused for ``MTW`` MMAs. Lane ``(g, t)`` of a warp holds the
accumulators of weight rows ``g`` / ``g + 8`` of each of its tiles and activation rows ``2t`` /
``2t + 1`` of each of its 8-row m-tiles.

Guarded loads
-------------
Every global load of the generated kernel sits behind a guard that keeps it in bounds; none may run
unguarded. ``ldg_v4`` is side-effecting inline asm, so NVVM never speculates it out of its guard, and
the half-chunk addresses are written with the stage (== n_full where they run), so they are not
loop-invariant either: a hoisted half-chunk load of a K % 64 == 0 problem would read the end of B (up
to 512 bytes past it). tests/test_guarded_loads.py checks the PTX.
"""
from __future__ import annotations

from ..gemv.mma_source import _CONST
from .layout import code_layout
from .tactics import Tactic

F32_MAGIC_BITS = 0x4B000000  # float32 2^23: its ulp is 1, so (bits | q) is exactly 2^23 + q (bf16 via fp32)
F32_MAGIC = 1 << 23  # the value of F32_MAGIC_BITS
PAIR = 0x10001  # a 16-bit pattern times PAIR: the same pattern in both halves of a uint32
RS = 33  # shared-memory row stride of the activation tile, in uint32 words (64 halves + 1 pad)


def _hex(value: int, digits: int = 8) -> str:
    """A bit pattern as it is written in the generated source: ``0x`` and upper-case hex digits."""
    return f"0x{value:0{digits}X}"


def gen_source(act: str, tac: Tactic, BS: int, ZP: str, HAS_BIAS: bool, arch: int, bits: int = 4) -> str:
    TPW, MTW, WN = tac.tpw, tac.mtw, tac.wn
    BM = tac.bm
    T = tac.threads
    KG = min(BS, 64)
    SG = KG // 16
    BPS = max(1, 64 // BS)  # quantization blocks per 64-k stage (block 128 spans 2 stages)
    SPB = min(BS, 64) // 16  # MMA steps per block within a stage
    c = _CONST[act]
    NCH = -(-BM * 8 // T)  # 16-byte activation chunks per thread per stage
    TYPED = ZP == "typed"
    lay = code_layout(bits)
    fmt = lay.fmt
    BYTES = lay.byte_codes  # one code per byte (two 16-byte loads per tile per stage), else nibbles
    BF = act == "bfloat16"
    F32 = BF and lay.bf16_via_f32  # codes decoded through the float32 magic 2^23 + q
    CW = lay.tile_chunk_bytes // 4  # uint32 words of one tile's 64-k chunk
    MAGIC, ONE, NEG = _hex(c["MAGIC"]), _hex(c["ONE"]), _hex(c["NEG"], 4)
    PAIR_MASK, CODE_MASK = _hex(fmt.pair_mask), _hex(fmt.code_mask, 2)  # a code in both halves / one byte
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
    e(1, f"tw = n_full * {CW} + half * {CW // 2}")  # words per tile (arch 80)
    if F32:  # fp32 magic 2^23 + q, minus (2^23 + zp), exact; rounded to bf16 exactly
        if ZP in ("none", "typed"):
            e(1, f"nz_lo = np.float32({float(F32_MAGIC + (fmt.default_zero_point if ZP == 'none' else 0))!r})")
            e(1, "nz_hi = nz_lo")
    elif ZP in ("none", "typed"):  # typed: -(magic base) leaves q exactly
        dz = 0 if TYPED else fmt.default_zero_point
        e(1, f"nz_lo = np.uint32({_hex((c['NEG'] | dz) * PAIR)})")
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

    # a tile's weight registers: one 16-byte load per 64-k stage for nibble codes, two for byte codes
    # (a tile's full chunk is then two 512-byte warp loads, a half chunk one)
    regs = ("_0", "_1") if BYTES else ("",)

    def w_full(i, stage, pref):
        """Lines loading tile ``i``'s full chunk of stage ``stage`` into ``pref_i*``."""
        if arch == 80:
            at = f"((tile0 + {i}) * tw + {stage} * {CW}) // 4 + lane"
        else:
            at = f"({stage} * n_tiles + tile0 + {i}) * {CW // 4} + lane"
        if not BYTES:
            return [f"{pref}_{i} = ldg_v4(bq, {at})"]
        return [f"wx = {at}", f"{pref}_{i}_0 = ldg_v4(bq, wx)", f"{pref}_{i}_1 = ldg_v4(bq, wx + 32)"]

    def w_half(i, stage, pref):
        """Lines loading tile ``i``'s half chunk (stage == n_full) into the first of its registers."""
        if BYTES:
            if arch == 80:
                return [f"{pref}_{i}_0 = ldg_v4(bq, ((tile0 + {i}) * tw + {stage} * {CW}) // 4 + lane)"]
            return [f"{pref}_{i}_0 = ldg_v4(bq, {stage} * n_tiles * {CW // 4} + (tile0 + {i}) * {CW // 8} + lane)"]
        if arch == 80:
            hx = f"hx = (tile0 + {i}) * tw + {stage} * {CW} + 2 * lane"
        else:
            hx = f"hx = {stage} * n_tiles * {CW} + (tile0 + {i}) * {CW // 2} + 2 * lane"
        return [hx, f"{pref}_{i} = (np.uint32(bq[hx]), np.uint32(bq[hx + 1]), np.uint32(0), np.uint32(0))"]

    def load_w(ind, stage, pref):
        stage = f"({stage})"  # an expression: keep it one operand
        # the half chunk (stage == n_full there): its address is written with the stage, not n_full, so
        # it is not loop-invariant and cannot be hoisted out of its guard (see "Guarded loads")
        for cond, lines, filled in ((f"if {stage} < n_full and {stage} < st_end:", w_full, regs),
                                    (f"elif {stage} < st_end:", w_half, regs[:1])):
            e(ind, cond)
            for i in range(TPW):
                e(ind + 1, f"if tv_{i}:")
                for line in lines(i, stage, pref):
                    e(ind + 2, line)
                e(ind + 1, "else:")
                for x in filled:
                    e(ind + 2, f"{pref}_{i}{x} = Z4")
                for x in regs[len(filled):]:
                    e(ind + 1, f"{pref}_{i}{x} = Z4")
        e(ind, "else:")
        for i in range(TPW):
            for x in regs:
                e(ind + 1, f"{pref}_{i}{x} = Z4")

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
            if ZP == "packed" and F32:
                e(3, f"nz_lo_{i} = u32_as_f32(np.uint32({_hex(F32_MAGIC_BITS)}) | np.uint32(zpk[sb]))")
                e(3, f"nz_hi_{i} = u32_as_f32(np.uint32({_hex(F32_MAGIC_BITS)}) | np.uint32(zpk[sb + 8]))")
            elif ZP == "packed":
                e(3, f"nz_lo_{i} = (np.uint32({NEG}) | np.uint32(zpk[sb])) * np.uint32({_hex(PAIR, 0)})")
                e(3, f"nz_hi_{i} = (np.uint32({NEG}) | np.uint32(zpk[sb + 8])) * np.uint32({_hex(PAIR, 0)})")
            if TYPED:
                e(3, f"z_lo_{i} = ld(zpt, sb)")
                e(3, f"z_hi_{i} = ld(zpt, sb + 8)")
            e(2, "else:")
            e(3, f"s_lo_{i} = np.float32(0)")
            e(3, f"s_hi_{i} = np.float32(0)")
            if ZP == "packed":
                zero = "np.float32(0)" if F32 else "np.uint32(0)"
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
                    e(2, f"o0, o1, o2, o3 = mma(np.uint32({ONE}), np.uint32({ONE}), np.uint32({ONE}), "
                         f"np.uint32({ONE}), b0_{mt}, b1_{mt}, as_{mt}_0, as_{mt}_1, np.float32(0), np.float32(0))")
                    e(2, f"as_{mt}_0 = o0")
                    e(2, f"as_{mt}_1 = o1")
            for i in range(TPW):
                if not BYTES:
                    e(2, f"wd = w_{i}[{s}]")
                for r in range(4):
                    nz = ("nz_lo" if r % 2 == 0 else "nz_hi") + (f"_{i}" if ZP == "packed" else "")
                    if not BYTES:
                        e(2, f"f{r} = fma2((np.uint32(wd >> np.uint32({fmt.bits * r})) & np.uint32({PAIR_MASK})) "
                             f"| np.uint32({MAGIC}), np.uint32({ONE}), {nz})")
                        continue
                    # 8-bit: word 2*(s%2) + r//2 of load s//2; bytes 0/2 -> register r even, 1/3 -> odd
                    wd = f"w_{i}_{s // 2}[{2 * (s % 2) + r // 2}]"
                    sh = 8 * (r % 2)
                    if F32:
                        e(2, f"f{r} = pack2(u32_as_f32((np.uint32({wd} >> np.uint32({sh})) & np.uint32({CODE_MASK})) "
                             f"| np.uint32({_hex(F32_MAGIC_BITS)})) - {nz}, "
                             f"u32_as_f32((np.uint32({wd} >> np.uint32({sh + 16})) & np.uint32({CODE_MASK})) "
                             f"| np.uint32({_hex(F32_MAGIC_BITS)})) - {nz})")
                    else:
                        e(2, f"f{r} = fma2((np.uint32({wd} >> np.uint32({sh})) & np.uint32({PAIR_MASK})) "
                             f"| np.uint32({MAGIC}), np.uint32({ONE}), {nz})")
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
        for x in regs:
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
        e(1, "threadfence()")
        e(1, "cuda.syncthreads()")
        e(1, "arrived = cuda.shared.array(1, np.int32)")
        e(1, "tile_id = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x")
        e(1, "if tid == 0:")
        e(2, "arrived[0] = cuda.atomic.add(cnt, tile_id, 1)")
        e(1, "cuda.syncthreads()")
        e(1, "if arrived[0] != cuda.gridDim.z - 1:")
        e(2, "return")
        e(1, "threadfence()")
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
