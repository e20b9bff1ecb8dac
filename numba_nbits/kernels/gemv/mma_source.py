"""Source generator of the tensor-core GEMV kernel (``mma``; the ring variant is ``mma_ring``).

Math
----
``Y[m, n] = sum_b scale[n, b] * sum_{k in block b} (q[n, k] - zp[n, b]) * A[m, k]``. One
``mma.sync.m16n8k16`` computes ``D[n, m]`` for 16 weight rows (the ``A`` operand, ``layout``) and 8
activation rows (the ``B`` operand): ``M <= 8`` is one m-tile, ``M <= 16`` two, and the cost is the
same for M = 1 and M = 8 (the kernel streams the weights once).

The integer ``q - zp`` is an exact fp16/bf16 operand, built without a conversion instruction:
``0x6400 | q`` *is* fp16 ``1024 + q`` (bf16: ``0x4300 | q`` = ``128 + q``) and one packed ``fma2(x,
1, -(1024 + zp))`` (``0xE400 | zp`` is fp16 ``-(1024 + zp)``) leaves exactly ``q - zp`` in both halves
of a register. The high plane of an 8-bit code decodes with ``fma2(0x6400 | qh, 16.0, -(16384 + 16 *
(zp >> 4)))`` (bf16: ``0x4300 | qh``, 16.0, ``-(2048 + 16 * (zp >> 4))``), exactly ``16 * (qh - zh)``
(fp16 spacing is 16 above 16384, bf16 above 2048); both planes' MMAs accumulate into the same fp32
partial. fp16 decodes registers 1 and 3 of a word without their shift, as ``0x6400 | 16 q`` (``_CONST``).
Each decode is one ``lop3`` ((w & mask) | magic) and one ``fma2``. Products with fp16/bf16 activations
are exact, the tensor core sums them in fp32 over one quantisation block, and the block's partial sums
are multiplied by the block scale and accumulated in fp32: no weight is ever rounded, the only roundings
are fp32 sums and the final store.

Thread -> data mapping
----------------------
A block is ``warps`` warps (split-K) over ``tpw`` 16-row tiles; ``ksplit`` consecutive blocks share
those tiles and split K further. Warp ``w`` of split ``s`` takes super-chunks ``s*warps + w``, then
every ``warps*ksplit``-th, in groups of ``unroll``; the next ``stages - 1`` groups are loaded before
the current one is computed (a register ring; 2 stages = double buffering). With ``pf >= 1`` a stage
also loads its scale words (one 32-bit word per tile per quantisation-block pair, 16 bytes at block 16)
and zero points, with ``pf = 2`` its activations; otherwise those are loaded when the stage is
computed. With ``smem`` the stages are slots of a shared-memory ring filled by ``cp.async`` instead
(``mma_smem``: deeper pipelines at the registers of one stage). Partial results are summed across warps
through shared memory and stored; with ``ksplit > 1`` each block writes its slice of a workspace and the
last to arrive (atomic counter) sums the slices in a fixed order and stores. Lane ``(g, t)`` holds fragment
rows ``g`` / ``g + 8`` and columns ``2t, 2t + 1`` (+8) of each step (``layout``). Every loop over registers is unrolled in the generated
source, so numba keeps accumulators and fragments in registers. Bias is not fused: the route adds it.

Activation loads
----------------
A lane loads the activations of rows ``g`` (+8) of its m-tiles. For K a multiple of the super-chunk (every
model shape we know; kernel name suffix ``_kf``) the loads are unguarded: a row >= M is read as row M - 1,
whose products only reach output columns >= M, which are never stored. Otherwise each load compares its k
offset with a per-lane limit (``K - 4 group_steps t``, 0 for a row >= M) and reads zeros past it. The guards
cost ~25 SASS instructions per main-loop iteration of the M = 1 kernels (``benchmarks.ptx_stats --sass``
with and without ``--k-tail``).

Unguarded, ptxas was free to issue a stage's second 16-byte activation load after the first HMMA pair
(``t1w8u2p1``, block 32): one more memory latency per iteration, +15-22% on the H200 for 4096-row M = 1
problems. So the K-full kernels with ``unroll >= 2`` without activation prefetch (``pf < 2``, register
pipeline) load the activations of all ``unroll`` super-chunks of a stage at the top of its compute, the index
clamped to the last super-chunk (a chunk past it is loaded but never computed), and ptxas issues them
together. Unroll-1 kernels load them where they are used: hoisted there, the block-128 M = 1 kernel ran 9-18%
slower at 4096 rows (``benchmarks/results/2026-12-03-h200-gemv-kfull``; ``benchmarks.ptx_stats --sass``
counts such loads as ``late_loads``).
"""
from __future__ import annotations

from ...formats import FORMATS
from .layout import MMA_LAYOUTS, sizes, step_planes
from .mma_smem import SmemRing, check_static

# fp16 / bf16 bit constants: magic base (0x6400 = 1024.0, 0x4300 = 128.0), 1.0 pair, -(base) high byte;
# for the high plane of 8-bit codes: 16.0 pair and -(16 * base) high byte (fp16 -16384 = 0xF400,
# bf16 -2048 = 0xC500), whose low mantissa bits hold the high nibble of the zero point exactly
# fp16 only (``ODD``): registers 1 and 3 of a word are decoded in place, unshifted, as ``16 * q``:
# ``0x6400 | (q << 4)`` is 1024 + 16q (the 10-bit mantissa has room; bf16's 7 bits have not), and
# ``fma2(x, 1/16, -(64 + zp))`` (``0xD400 | zp << 4`` is -(64 + zp)) is exactly q - zp; for the high
# plane of 8-bit codes ``fma2(x, 1, -(1024 + 16 zh))`` (``0xE400 | zh << 4``) is exactly 16 (qh - zh)
_CONST = {
    "float16": dict(MAGIC=0x64006400, ONE=0x3C003C00, NEG=0xE400, ONE16=0x4C004C00, NEG16=0xF400,
                    ODD=True, SIXTEENTH=0x2C002C00, NEGO=0xD400, NEG16O=0xE400),
    "bfloat16": dict(MAGIC=0x43004300, ONE=0x3F803F80, NEG=0xC300, ONE16=0x41804180, NEG16=0xC500, ODD=False),
}


def emit_zero_points(e, ind: int, bits: int, c: dict, zp) -> None:
    """The negated zero-point pairs ``nz_lo``/``nz_hi`` (rows g, g + 8; 8-bit: the low plane) and, for
    two-plane (8-bit) codes, ``nh_lo``/``nh_hi`` (the high plane: -16 * (base + zp >> 4)); with ``c["ODD"]``
    (fp16) also those of the in-place odd registers, ``nzo_*`` (-(64 + zp)) and ``nho_*`` (-(1024 + 16 zh));
    ``zp``: the two zero-point expressions (uint32) of rows g and g + 8, or None for the format's default
    zero point."""
    two_planes = MMA_LAYOUTS[bits].planes == 2
    # (name, base high bits, the zero point's part as a constant of the default zero point dz, as an
    # expression of the zero point z); the same order for both forms
    low_c, low_x = ((lambda dz: dz & 15), (lambda z: f"({z} & np.uint32(0xF))")) if two_planes else \
        ((lambda dz: dz), (lambda z: z))  # the (low-plane) zero point
    planes = [("nz", c["NEG"], low_c, low_x)]
    if c["ODD"]:
        planes.append(("nzo", c["NEGO"], lambda dz: low_c(dz) << 4, lambda z: f"({low_x(z)} << np.uint32(4))"))
    if two_planes:  # 8-bit 128: low nibble 0, high nibble 8
        planes.append(("nh", c["NEG16"], lambda dz: dz >> 4, lambda z: f"({z} >> np.uint32(4))"))
        if c["ODD"]:
            planes.append(("nho", c["NEG16O"], lambda dz: (dz >> 4) << 4, lambda z: f"({z} & np.uint32(0xF0))"))
    if zp is None:  # the same constant for both rows
        dz = FORMATS[bits].default_zero_point
        for name, base, const, _ in planes:
            e(ind, f"{name}_lo = np.uint32(0x{(base | const(dz)) * 0x10001:08X})")
        for name, *_ in planes:
            e(ind, f"{name}_hi = {name}_lo")
        return
    for h, row in ((0, "lo"), (1, "hi")):
        for name, base, _, expr in planes:
            e(ind, f"{name}_{row} = (np.uint32(0x{base:04X}) | {expr(zp[h])}) * np.uint32(0x10001)")


def emit_block_mma(e, ind: int, *, i: int, bb: int, m_tiles: int, block_steps: int, group_steps: int, c: dict,
                    s_lo: str, s_hi: str,
                    zp, word, bits: int = 4) -> None:
    """Emit one quantisation block ``bb`` of tile ``i`` (both generators): its scales (``s_lo`` / ``s_hi``:
    expressions of the fp32 scales of rows g and g + 8) and, with packed zero points, the negated
    zero-point pairs (``zp``: the two uint32 zero-point expressions, else None); then, per 16-k step,
    the four decoded B fragments of each operand plane (``layout.step_planes``: weight word
    ``word(vector)[word]``, magic-number decode with ``fma2``) and one ``mma`` per plane and m-tile into
    fresh fp32 partials; then ``acc += scale * partial``."""
    e(ind, f"s_lo = {s_lo}")
    e(ind, f"s_hi = {s_hi}")
    if zp is not None:
        emit_zero_points(e, ind, bits, c, zp)
    mask = MMA_LAYOUTS[bits].decode_mask
    for mt in range(m_tiles):
        for r in range(4):
            e(ind, f"p_{mt}_{r} = np.float32(0)")
    for ss in range(block_steps):
        s = bb * block_steps + ss
        G, sig = divmod(s, group_steps)
        for j, wi, sh, plane in step_planes(bits, s):
            e(ind, f"wd = {word(j)}[{wi}]")
            for r in range(4):
                e(ind, f"f{r} = {decode_expr(c, mask, r, sh, plane)}")
            for mt in range(m_tiles):
                e(ind, f"p_{mt}_0, p_{mt}_1, p_{mt}_2, p_{mt}_3 = mma(f0, f1, f2, f3, "
                       f"b_{mt}_{G}_{2 * sig}, b_{mt}_{G}_{2 * sig + 1}, p_{mt}_0, p_{mt}_1, p_{mt}_2, p_{mt}_3)")
    for mt in range(m_tiles):
        e(ind, f"acc_{i}_{mt}_0 += s_lo * p_{mt}_0")
        e(ind, f"acc_{i}_{mt}_1 += s_lo * p_{mt}_1")
        e(ind, f"acc_{i}_{mt}_2 += s_hi * p_{mt}_2")
        e(ind, f"acc_{i}_{mt}_3 += s_hi * p_{mt}_3")


def decode_expr(c: dict, mask: int, r: int, sh: int, plane: int, zp_suffix: str = "") -> str:
    """The exact ``q - zp`` pair of fragment register ``r`` of the weight word ``wd`` (``sh``: the step's extra
    shift, ``plane`` 1: the x16 high plane of 8-bit codes): one ``lop3`` and one ``fma2`` (module docstring);
    ``zp_suffix`` ends the negated zero-point names (``emit_zero_points``)."""
    row = "lo" if r % 2 == 0 else "hi"
    if c["ODD"] and r % 2:  # in place: 16 * q, one shift fewer (see _CONST)
        shift, msk = 4 * (r - 1) + sh, mask << 4
        one, nz = (c["ONE"], "nho_") if plane else (c["SIXTEENTH"], "nzo_")
    else:
        shift, msk = 4 * r + sh, mask
        one, nz = (c["ONE16"], "nh_") if plane else (c["ONE"], "nz_")
    src = f"np.uint32(wd >> np.uint32({shift}))" if shift else "wd"
    return (f"fma2(lop3({src}, np.uint32(0x{msk:08X}), np.uint32(0x{c['MAGIC']:08X})), np.uint32(0x{one:08X}), "
            f"{nz}{row}{zp_suffix})")


def emit_split_k_arrival(e, ksplit: int) -> None:
    """After a CTA wrote its split's partial sums to the workspace: count it in ``cnt[grp]``; the body the caller
    emits under ``if flag[0] == 1:`` (indent 2) runs in the last CTA of the group to arrive."""
    e(1, "threadfence()")
    e(1, "cuda.syncthreads()")
    e(1, "flag = cuda.shared.array(1, np.int32)")
    e(1, "if cuda.threadIdx.x == 0:")
    e(2, "old = cuda.atomic.add(cnt, grp, np.int32(1))")
    e(2, f"flag[0] = np.int32(1) if old == {ksplit - 1} else np.int32(0)")
    e(1, "cuda.syncthreads()")
    e(1, "if flag[0] == 1:")
    e(2, "threadfence()")


def emit_split_k_sum(e, ind: int, ksplit: int) -> None:
    """Output ``(m, n)`` as the sum of the ``ksplit`` workspace slices in a fixed order (deterministic)."""
    e(ind, "tot = np.float32(0)")
    for sp in range(ksplit):
        e(ind, f"tot += ldcg(ws, ({sp} * M + m) * N + n)")
    e(ind, "st(out, np.int64(m) * N + n, tot)")


def emit_counter_reset(e) -> None:
    """The last CTA resets its group's counter for the next launch (stream order makes that safe)."""
    e(2, "if cuda.threadIdx.x == 0:")
    e(3, "cnt[grp] = np.int32(0)")


def emit_head(opaque_lane: bool = False):
    """Start a kernel's source: ``(lines, e)`` with ``e(indent, text)`` appending a line, after the kernel's
    signature and the lane's coordinates (MMA fragment row group ``g`` and column pair ``t``). ``opaque_lane``:
    the lane index through ``opaque_i64``, so the compiler cannot fold ``x * 64 + lane`` into an ``or`` (it knows the
    lane's high bits are zero): NVVM's strength reduction reads an ``or`` with a variable as no induction expression,
    and numba-cuda-mlir's two-m-tile loops then recomputed every weight address
    (``benchmarks/results/2026-12-07-cpu-mlir-layout``; the register-ring kernels only: ``t2w4u1s4x`` took 6 more
    registers with it)."""
    L = []

    def e(indent, s):
        L.append("    " * indent + s)

    e(0, "def gemv_mma(a32, bq, sc, sw, zpk, out, ws, cnt, M, K, N, n_super):")
    e(1, "lane = opaque_i64(cuda.threadIdx.x & 31)" if opaque_lane else "lane = cuda.threadIdx.x & 31")
    e(1, "warp = cuda.threadIdx.x >> 5")
    e(1, "g = lane >> 2")
    e(1, "t = lane & 3")
    return L, e


def emit_setup(e, bits: int, c: dict, zp_kind: str, TPW: int, m_tiles: int, group_steps: int,
               kfull: bool = False) -> None:
    """Default zero-point constants, zeroed accumulators, and per m-tile the lane's activation base
    ``aix_{mt}`` (its first value of a k-group, row ``g + 8 mt``, column ``4 group_steps t``, in units of the
    activation load: 16 bytes, 8 at block 16) and its limit ``klim_{mt}``: a k-group offset ``kk`` is in
    range when ``kk < klim`` (``K - 4 group_steps t``, 0 for a row >= M), one comparison per load. Both go
    through ``opaque_i64``, so they are computed here once rather than next to every load in the loop.

    ``kfull`` (K a multiple of the super-chunk, so every super-chunk below ``n_super`` lies inside A's rows):
    no limit; a lane whose row is >= M reads row M - 1 instead. Its products land only in output columns
    >= M, which are never stored (an MMA's output column depends on that activation row alone), so the
    loads need no guard."""
    if zp_kind == "none":
        emit_zero_points(e, 1, bits, c, None)
    for i in range(TPW):
        for mt in range(m_tiles):
            for r in range(4):
                e(1, f"acc_{i}_{mt}_{r} = np.float32(0)")
    for mt in range(m_tiles):
        if kfull:
            e(1, f"row_{mt} = g + {8 * mt} if g + {8 * mt} < M else M - 1")
        else:
            e(1, f"row_{mt} = g + {8 * mt}")
        shift = 2 if group_steps == 1 else 3
        e(1, f"aix_{mt} = opaque_i64((np.int64(row_{mt}) * K + {4 * group_steps} * t) >> {shift})")
        if not kfull:
            e(1, f"klim_{mt} = opaque_i64(K - {4 * group_steps} * t if row_{mt} < M else np.int64(0))")


def emit_load_act(e, ind, dst, sc, super_k, m_tiles, super_groups, group_k, group_steps,
                  kfull: bool = False) -> None:
    """The lane's activations of super-chunk ``sc`` (for each m-tile and k-group) into ``dst_{mt}_{G}_{x}``:
    16-byte loads (block 16: one 8-byte load) at ``aix`` plus the k offset ``kk`` in load units, zeros where
    ``kk`` is not below ``klim`` (``emit_setup``); with ``kfull`` every load is in range and unguarded."""
    unit = 4 if group_steps == 1 else 8  # activations per load
    if not kfull:
        e(ind, f"k0_ = {sc} * {super_k}")
    e(ind, f"kq_ = {sc} * {super_k // unit}")

    def guarded(mt, kk, load, zero):
        if kfull:
            e(ind, load)
            return
        e(ind, f"if {kk} < klim_{mt}:")
        e(ind + 1, load)
        e(ind, "else:")
        e(ind + 1, zero)

    for mt in range(m_tiles):
        for G in range(super_groups):
            if group_steps == 1:
                guarded(mt, f"k0_ + {G * group_k}", f"bv2 = ldg_v2(a32, aix_{mt} + kq_ + {G * group_k // unit})",
                        "bv2 = (np.uint32(0), np.uint32(0))")
                for x in range(2):
                    e(ind, f"{dst}_{mt}_{G}_{x} = bv2[{x}]")
            else:
                for q in range(group_steps // 2):
                    guarded(mt, f"k0_ + {G * group_k + 8 * q}",
                            f"bv = ldg_v4(a32, aix_{mt} + kq_ + {(G * group_k + 8 * q) // unit})", "bv = Z4")
                    for x in range(4):
                        e(ind, f"{dst}_{mt}_{G}_{4 * q + x} = bv[{x}]")


def emit_weight_loads(e, ind, p, tag, TPW, vectors, super_blocks, zp_kind, scales: bool) -> list:
    """Loads of one work item's weight vectors into ``{p}_{tag}{i}_{j}`` (tile ``i``, vector ``j``) and, with
    ``scales``, its scale words and zero points (``emit_scale_loads``); returns the ``(suffix, zero)`` pairs
    that clear them."""
    zeros = []
    for i in range(TPW):
        for j in range(vectors):
            e(ind, f"{p}_{tag}{i}_{j} = ldg_v4(bq, (((tile0 + {i}) * n_super + scl) * {vectors} + {j}) * 32 + lane)")
            zeros.append((f"_{tag}{i}_{j}", "Z4"))
        if scales:
            zeros += emit_scale_loads(e, ind, p, tag, i, super_blocks, zp_kind, "scl")
    return zeros


def emit_scale_loads(e, ind, p, tag, i, super_blocks, zp_kind, chunk: str) -> list:
    """Tile ``i``'s scale words ``{p}sc_{tag}{i}_{q}`` and packed zero points ``{p}zp_{tag}{i}_{h}_{bb}`` of
    super-chunk ``chunk``; returns the ``(suffix, zero)`` pairs that clear them. Two scale words are one 8-byte
    request; scalar loads index with an unsigned integer (no negative-index wraparound code)."""
    zeros = []
    e(ind, f"tsc = (tile0 + {i}) * n_super + {chunk}")
    sc = f"{p}sc_{tag}{i}"
    if super_blocks == 4:  # 4 words = one 16-byte load
        e(ind, "sv = ldg_v4(sw, tsc * 8 + g)")
        for q in range(4):
            e(ind, f"{sc}_{q} = sv[{q}]")
    elif super_blocks == 8:  # 2-bit block 16 (128-k super-chunks): two 16-byte loads
        for v in range(2):
            e(ind, f"sv = ldg_v4(sw, (tsc * 8 + g) * 2 + {v})")
            for q in range(4):
                e(ind, f"{sc}_{4 * v + q} = sv[{q}]")
    elif super_blocks == 2:  # block 32: the lane's two scale words as one 8-byte request
        e(ind, "sv2 = ldg_v2(sw, tsc * 8 + g)")
        for q in range(2):
            e(ind, f"{sc}_{q} = sv2[{q}]")
    elif super_blocks == 1:
        e(ind, f"{sc}_0 = np.uint32(sw[np.uint64(tsc * 8 + g)])")
    else:
        raise ValueError(f"gemv_mma: {super_blocks} quantisation blocks per super-chunk")
    zeros += [(f"sc_{tag}{i}_{q}", "np.uint32(0)") for q in range(super_blocks)]
    if zp_kind == "packed":
        for h in range(2):
            for bb in range(super_blocks):
                e(ind, f"{p}zp_{tag}{i}_{h}_{bb} = np.uint32(zpk[np.uint64(tsc * {16 * super_blocks} + g * "
                       f"{2 * super_blocks} + {h * super_blocks + bb})])")
                zeros.append((f"zp_{tag}{i}_{h}_{bb}", "np.uint32(0)"))
    return zeros


def emit_position(e, ind, m_tiles) -> None:
    """Output (row ``n``, column ``m``) of reduction entry ``ent``: warp slot ``(i, mt, r)``, lane ``ln``."""
    e(ind, "slot = ent >> 5")
    e(ind, "ln = ent & 31")
    e(ind, "r = slot & 3")
    e(ind, "it = slot >> 2")
    e(ind, f"mt = it % {m_tiles}")
    e(ind, f"i = it // {m_tiles}")
    e(ind, "n = (tile0 + i) * 16 + (ln >> 2) + 8 * (r >> 1)")
    e(ind, "m = mt * 8 + 2 * (ln & 3) + (r & 1)")


def gen_source(act: str, m_tiles: int, tac, block_size: int, zp_kind: str, bits: int = 4,
               l2pf: bool = False, kfull: bool = False) -> str:
    """Python source of the kernel for one specialisation (see module docstring and ``Tactic``);
    ``l2pf``: also ``prefetch_l2`` the weights ``L2PF_AHEAD`` stages beyond each loaded one; ``kfull``: K is a
    multiple of the super-chunk, the activation loads are unguarded (``emit_setup``)."""
    TPW, warps, unroll = tac.tpw, tac.warps, tac.unroll
    prefetch, ksplit, stages = tac.pf, tac.ksplit, tac.stages
    split_warps = warps * ksplit  # warps that share one tile group's K loop (split-K stride)
    super_k, vectors, group_k, group_steps, super_blocks, block_steps, super_groups = \
        sizes(block_size, bits)
    c = _CONST[act]
    red_entries = TPW * m_tiles * 4 * 32  # partial sums per warp (shared-memory reduction)
    L, e = emit_head(opaque_lane=not tac.smem)
    if ksplit == 1:
        e(1, "tile0 = np.int64(cuda.blockIdx.x) * TPW")
        e(1, "gw = np.int64(warp)")
    else:
        e(1, f"grp = np.int64(cuda.blockIdx.x) // {ksplit}")
        e(1, f"split = np.int64(cuda.blockIdx.x) % {ksplit}")
        e(1, "tile0 = grp * TPW")
        e(1, f"gw = split * {warps} + warp")
    e(1, "Z4 = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))")
    emit_setup(e, bits, c, zp_kind, TPW, m_tiles, group_steps, kfull)
    ring = None
    if tac.smem:  # stages in a shared-memory ring filled by cp.async (``mma_smem``)
        check_static(tac, m_tiles, block_size, zp_kind, bits)
        ring = SmemRing(e, tac, m_tiles, block_size, zp_kind, bits)
        ring.setup(1)

    def load_act(ind, dst, sc):
        emit_load_act(e, ind, dst, sc, super_k, m_tiles, super_groups, group_k, group_steps, kfull)

    n_act = 2 if group_steps == 1 else 4 * (group_steps // 2)

    def load_stage(indent, p, base_expr, off=None):
        """Load one pipeline stage (``unroll`` super-chunks): weights; with prefetch >= 1 also scales (and zero
        points); with prefetch >= 2 also activations. Out-of-range super-chunks get zeros (never computed), or with
        ``tac.unguarded`` are loaded from past the tile's last super-chunk (``layout.TAIL_SUPERS``).
        With the shared-memory ring: cp.async of the stage into the slot at byte offset ``off``, one commit."""
        names = []
        for u in range(unroll):
            e(indent, f"scl = {base_expr} + {u * split_warps}")
            if tac.unguarded:  # past the last super-chunk: the next tile's bytes or the arrays' tail, never computed
                zeros = emit_weight_loads(e, indent, p, f"{u}_", TPW, vectors, super_blocks, zp_kind, prefetch >= 1)
                if l2pf:
                    emit_l2_prefetch(e, indent, TPW, vectors, f"scl + {L2PF_AHEAD * split_warps * unroll}")
                names.extend(suf for suf, _ in zeros)
                continue
            e(indent, "if scl < n_super:")
            if ring is not None:
                for i in range(TPW):
                    ring.copy(indent + 1, u, i, off)
                if l2pf:
                    emit_l2_prefetch(e, indent + 1, TPW, vectors, f"scl + {L2PF_AHEAD * split_warps * unroll}")
                continue
            zeros = emit_weight_loads(e, indent + 1, p, f"{u}_", TPW, vectors, super_blocks, zp_kind, prefetch >= 1)
            if l2pf:
                emit_l2_prefetch(e, indent + 1, TPW, vectors, f"scl + {L2PF_AHEAD * split_warps * unroll}")
            if prefetch >= 2:
                load_act(indent + 1, f"{p}ac_{u}", "scl")
                zeros += [(f"ac_{u}_{mt}_{G}_{x}", "np.uint32(0)") for mt in range(m_tiles) for G in range(super_groups)
                          for x in range(n_act)]
            e(indent, "else:")
            for suf, z in zeros:
                e(indent + 1, f"{p}{suf} = {z}")
            names.extend(suf for suf, _ in zeros)
        if ring is not None:
            e(indent, "cp_async_commit()")
        return names

    def emit_compute(p):
        """The ``unroll`` super-chunks of slot ``p``: activations (prefetched with ``pf = 2``), then each tile's
        quantisation blocks (``emit_block_mma``). K-full kernels with ``unroll >= 2`` without prefetched
        activations load those of every super-chunk first (module docstring: activation loads)."""
        early = kfull and prefetch < 2 and ring is None and unroll >= 2
        if early:
            for u in range(unroll):
                e(2, f"sca_ = min(base + {u * split_warps}, n_super - 1)")
                load_act(2, f"ka{u}", "sca_")
        for u in range(unroll):
            e(2, f"sc_ = base + {u * split_warps}")
            e(2, "if sc_ < n_super:")
            ind = 3
            if ring is not None:
                for i in range(TPW):
                    ring.read(ind, p, u, i, "coff")
            if prefetch >= 2 or early:
                src = f"ka{u}" if early else f"{p}ac_{u}"
                for mt in range(m_tiles):
                    for G in range(super_groups):
                        for x in range(n_act):
                            e(ind, f"b_{mt}_{G}_{x} = {src}_{mt}_{G}_{x}")
            else:
                load_act(ind, "b", "sc_")
            for i in range(TPW):
                q = p
                if prefetch == 0:  # this stage's scale words and zero points, loaded as pf >= 1 loads them ahead
                    q = "c"
                    emit_scale_loads(e, ind, q, f"{u}_", i, super_blocks, zp_kind, "sc_")
                for bb in range(super_blocks):
                    sl = scale_bits_expr(act, f"{q}sc_{u}_{i}_{bb >> 1}", bb & 1)
                    sh = scale_bits_expr(act, f"{q}sc_{u}_{i}_{(super_blocks + bb) >> 1}", (super_blocks + bb) & 1)
                    zp = (f"{q}zp_{u}_{i}_0_{bb}", f"{q}zp_{u}_{i}_1_{bb}")
                    emit_block_mma(e, ind, i=i, bb=bb, m_tiles=m_tiles, block_steps=block_steps,
                                   group_steps=group_steps, c=c, s_lo=sl, s_hi=sh,
                                   zp=zp if zp_kind == "packed" else None, word=lambda j, u=u, i=i: f"{p}_{u}_{i}_{j}",
                                   bits=bits)

    step = split_warps * unroll
    e(1, "base = gw")
    if ring is not None:  # shared-memory ring: slot ``coff`` is computed, the next stages - 1 are in flight
        sb = ring.slot_bytes
        for r in range(stages - 1):
            load_stage(1, None, f"base + {r * step}", f"np.uint32({r * sb})")
        e(1, f"loff = np.uint32({(stages - 1) * sb})")
        e(1, "coff = np.uint32(0)")
        e(1, "while base < n_super:")
        load_stage(2, None, f"base + {(stages - 1) * step}", "loff")
        e(2, "cp_async_wait()")
        emit_compute("q")
        e(2, "loff = coff")
        e(2, f"coff = coff + np.uint32({sb}) if coff < np.uint32({(stages - 1) * sb}) else np.uint32(0)")
        e(2, f"base += {step}")
    else:  # register ring: slot s0 is computed, s1 .. s{stages-1} are in flight; rotated at the end of an iteration
        slots = [f"s{r}" for r in range(stages)]
        for r in range(stages - 1):
            load_stage(1, slots[r], f"base + {r * step}")
        e(1, "while base < n_super:")
        names = load_stage(2, slots[-1], f"base + {(stages - 1) * step}")
        emit_compute(slots[0])
        for r in range(stages - 1):
            for suf in names:
                e(2, f"{slots[r]}{suf} = {slots[r + 1]}{suf}")
        e(2, f"base += {step}")
    # cross-warp reduction and store
    e(1, f"red = cuda.shared.array({warps * red_entries}, np.float32)")
    for i in range(TPW):
        for mt in range(m_tiles):
            for r in range(4):
                e(1, f"red[warp * {red_entries} + {((i * m_tiles + mt) * 4 + r) * 32} + lane] = acc_{i}_{mt}_{r}")
    e(1, "cuda.syncthreads()")

    def entries(ind, body):
        e(ind, f"for ent in range(cuda.threadIdx.x, {red_entries}, {warps * 32}):")
        body(ind + 1)

    def reduce_store(ind):
        e(ind, "tot = np.float32(0)")
        e(ind, f"for ww in range({warps}):")
        e(ind + 1, f"tot += red[ww * {red_entries} + ent]")
        emit_position(e, ind, m_tiles)
        e(ind, "if m < M and n < N:")
        if ksplit == 1:
            e(ind + 1, "st(out, np.int64(m) * N + n, tot)")
        else:  # this split's partial sums -> workspace slice ``split``
            e(ind + 1, "ws[(split * M + m) * N + n] = tot")

    entries(1, reduce_store)
    if ksplit > 1:
        # last CTA of the group to arrive sums the ksplit slices and stores
        emit_split_k_arrival(e, ksplit)

        def final(ind):
            emit_position(e, ind, m_tiles)
            e(ind, "if m < M and n < N:")
            emit_split_k_sum(e, ind + 1, ksplit)

        entries(2, final)
        emit_counter_reset(e)
    return "\n".join(L) + "\n"


#: ``l2pf`` kernels prefetch into L2 the weights this many pipeline stages (ring: items per warp) past the
#: ones being loaded (an untuned first choice)
L2PF_AHEAD = 2


def emit_l2_prefetch(e, ind: int, TPW: int, vectors: int, ahead: str) -> None:
    """``prefetch_l2`` of the lane's 16-byte weight vectors of super-chunk ``ahead`` (guarded: in range)."""
    e(ind, f"pfs = {ahead}")
    e(ind, "if pfs < n_super:")
    for i in range(TPW):
        for j in range(vectors):
            e(ind + 1, f"prefetch_l2(bq, (((tile0 + {i}) * n_super + pfs) * {vectors} + {j}) * 32 + lane)")


def scale_bits_expr(act: str, wd: str, hi: int) -> str:
    """fp32 value of half ``hi`` of the scale word ``wd`` (fp16/bf16 bits; exact, as ``pf >= 1``): fp16 is
    one ``cvt.f32.f16`` of the half, bf16 the high half of an fp32 (one mask or shift)."""
    if act == "bfloat16":
        return f"u32_as_f32({wd} & np.uint32(0xFFFF0000))" if hi else f"u32_as_f32({wd} << np.uint32(16))"
    return f"f16hi_to_f32({wd})" if hi else f"f16lo_to_f32({wd})"

