"""The shared-activation tensor-core kernel (``Tactic.xa``, tag suffix ``x``): ``mma_source``'s math with the
activations of a K step staged once per CTA in shared memory, for the ``fused_gemm`` route's M = 17..64 (its
warpgroup form also M = 65..96, and 97..128 with K split: ``tactics.wide_tactic``).

Why
---
The plain kernel splits one tile group's K across the warps of a CTA, so every warp reads, from L2, the
activations of its own K range for its own 16 rows: per weight byte ``4 M`` activation bytes cross L2 (16x
the weights at M = 64), and past M = 16 that traffic, not HBM, bounds it. Here the warps of a CTA take
*different* rows on the *same* K range: the CTA copies each super-chunk of A (all ``8 * m_tiles`` rows) into
shared memory once with ``cp.async`` and every warp reads its MMA fragments from there, so L2 carries A once
per ``16 * tpw * warps`` rows (128 or 256) instead of once per 16.

Numerics
--------
The decode is ``mma_source``'s (``q - zp`` exact in fp16/bf16), then one packed multiply by the block's scale
pair: the weight enters the MMA as the fp16/bf16 value ``(q - zp) * scale``, rounded once, as dequantize +
cuBLAS (ORT's chain) rounds it, and the tensor core accumulates in fp32 across blocks. This drops the plain
kernel's fp32 per-block partial sums (``4 * m_tiles`` registers per tile and their FMAs), which is what makes
two tiles per warp (each activation fragment read from shared memory feeds two MMAs) affordable at 8 m-tiles.

Thread -> data mapping
----------------------
CTA ``b`` is tile group ``b // ksplit`` (``warps * tpw`` 16-row tiles: warp ``w`` owns tiles ``(grp * warps +
w) * tpw + i``) and K split ``b % ksplit``: super-chunks ``[split * n_super // ksplit, (split + 1) * n_super //
ksplit)``, one per iteration. Lane ``(g, t)`` decodes and multiplies exactly as in ``mma_source`` (weights:
the A operand, 16 rows; activations: the B operand, 8 tokens per m-tile); a fragment of the activations is
read with one ``ld.shared.v4`` and reused by the warp's ``tpw`` tiles. A warp whose tiles lie past N (the last
group) reads the last valid tiles instead and stores nothing.

Shared memory (dynamic; ``stages`` slots, each ``a_bytes + w_bytes``)
--------------------------------------------------------------------
* the A area: ``8 * m_tiles`` rows of ``KS`` activations (row ``r`` holds A row ``min(r, M - 1)``: rows past M
  feed only output columns that are never stored), each row ``row_stride`` bytes: ``2 KS`` plus a pad that
  puts rows ``g`` and ``g + 1`` on different banks for one quarter-warp's 16-byte reads (16 bytes when a lane's
  k-group slice is 32 bytes, block >= 64; 64 bytes at block 32). Thread ``tid`` copies the 16-byte pieces
  ``tid, tid + threads, ...``.
* the weights area: ``mma_smem``'s per-thread fields (the lane's weight vectors, scale words, zero points of
  each of its tiles), copied and read back by the same lane.

Pipeline: the first ``stages - 1`` super-chunks are copied before the loop (one commit group each). Each
iteration waits until its super-chunk has landed (``stages - 2`` newer groups may pend), synchronises the CTA
(every thread's copies visible; every warp done with the slot computed last iteration), copies the super-chunk
``stages - 1`` ahead into that slot, commits, and computes. One ``bar.sync`` per super-chunk.

Epilogue: without split-K each warp stores its accumulators (it owns its rows' whole sums). With ``ksplit > 1``
each warp writes its partial sums to the workspace slice ``split`` (the node's, per thread: ``mma.ThreadWorkspace``);
the last CTA of the group to arrive (atomic counter) sums the slices in a fixed order (deterministic), stores, and
resets the counter.

Warpgroup MMAs (``Tactic.wg``, tag suffix ``h``; sm_90a)
-----------------------------------------------------
Each warpgroup (4 warps, ``warps`` a multiple of 4) issues, per 16-k step and tile ``i``, one
``wgmma.mma_async.m64n{8 m_tiles}k16`` (``intrinsics_sm90``): the A operand is the four warps' decoded, scaled
weight fragments of their tiles (the same registers as ``mma``'s A fragments: warp ``w % 4`` supplies rows
``16 (w % 4) ..``), the B operand the step's activations in the slot, read through a shared-memory descriptor.
Their fp32 accumulators (``acc_i``, ``4 m_tiles`` per thread) are ``mma``'s, in the same order (entry ``4 j + r``
is m-tile ``j``'s register ``r``), so the epilogue is shared. The A area is then ``wgmma``'s K-major core-matrix
layout (no swizzle): per step a region of ``8 m_tiles`` rows x 16 k, core matrix (row block ``rb``, k block
``kb``) at ``256 rb + 128 kb`` bytes, 8 rows of 16 bytes. The packed weights' k permutation (``layout``: logical
columns ``2t, 2t + 1, 2t + 8, 2t + 9`` of a step are four consecutive physical k) puts the two halves of each
8-byte run of A in different core matrices, so A is copied in 4-byte ``cp.async`` pieces, word ``d`` of the area
(``d`` = (step, rb, kb, row, word), word fastest) by thread ``d % threads``: consecutive shared addresses per warp.
Each thread fences its landed copies to the async proxy (``fence.proxy.async``) before the barrier; the
super-chunk's MMAs are waited for (commit + ``wait_group 0``) before the next barrier lets the slot be refilled.
With ``pf = 1`` the MMAs are waited for every second super-chunk: the loop body is emitted twice (two super-chunks
per iteration, the second guarded), the second super-chunk is decoded while the first one's MMAs run, and the ring
copies ``stages - 2`` super-chunks ahead, into the slot of two super-chunks before, whose MMAs the last wait
completed. (Waiting with ``wait_group 1`` instead, one super-chunk's MMAs left running while the next is decoded,
made ptxas serialise every ``wgmma``: "non wgmma instructions defining input registers of a wgmma between start
and end of the pipeline stage", C7513; with one body per iteration it reused the running MMAs' A registers.)

With ``pa`` the activations arrive already in the slots' order (``wg_a``, one kernel per call), and the ring copies
each slot's A area as contiguous 16-byte pieces, piece ``tid + j threads``.

Barrier pipeline (``Tactic.mb``, tag suffix ``m``; with ``pa``)
------------------------------------------------------------
The loop above couples the CTA's warpgroups at every super-chunk: one ``bar.sync``, so both decode at the same
time and both wait for their MMAs at the same time. With ``mb`` each slot has two ``mbarrier``s after the ring
(``intrinsics_bulk``): "full" (one arrival plus ``a_bytes`` of transactions) and "empty" (one arrival per
thread). Lane 0 of the last warpgroup's first warp fills a slot's A area with one ``cp.async.bulk`` that completes
on the slot's full barrier; it refills the slot of the previous super-chunk (``stages - 1`` ahead) after
waiting on that slot's empty barrier, i.e. once every thread released it. Each thread waits on the full barrier
of its super-chunk (phase parity = slot uses so far, mod 2), then for its own weight copies (``cp.async``: only
the copying lane reads them, so no barrier), decodes and issues its MMAs, waits for them, and arrives on the
slot's empty barrier (with ``p1``, both slots of a pair after the pair's one wait; the ring then refills the slot
of two super-chunks before). No CTA-wide barrier is left in the loop (one after the barriers' initialisation): a
warpgroup may run up to about a super-chunk ahead of the other, so one's MMAs can overlap the other's decode,
and no thread issues the activation copies but one. The A area is written through the async proxy and read by
``wgmma`` through it, so no proxy fence is needed.

K must be a multiple of the super-chunk and the block 32, 64 or 128 (``applies``); the plan takes the plain
kernel otherwise.
"""
from __future__ import annotations

import re

from ..intrinsics_bulk import MBAR_BYTES
from .layout import MMA_LAYOUTS, sizes, step_planes
from .mma_smem import RING_ALIGN_PAD, SmemRing, slot_fields
from .mma_source import (
    _CONST,
    decode_expr,
    emit_counter_reset,
    emit_head,
    emit_split_k_arrival,
    emit_split_k_sum,
    emit_zero_points,
)

#: dynamic shared memory one CTA may use (bytes; sm_80 has 163 KiB, sm_90 227 KiB): ``mma.sync`` kernels run on
#: both, the warpgroup kernels (``wg``) on sm_90 only
SMEM_LIMIT = 160 * 1024
SMEM_LIMIT_WG = 227 * 1024


def applies(K: int, block_size: int, bits: int) -> bool:
    """Whether the shared-activation kernel can serve this K and block (module docstring)."""
    super_k, _, _, group_steps, _, _, _ = sizes(block_size, bits)
    return K % super_k == 0 and group_steps >= 2


def row_stride(block_size: int, bits: int) -> int:
    """Bytes per activation row of the A area (module docstring: the bank pad)."""
    super_k, _, _, group_steps, _, _, _ = sizes(block_size, bits)
    return 2 * super_k + (16 if group_steps >= 4 else 64)


def layout(tac, m_tiles: int, block_size: int, zp_kind: str, bits: int) -> tuple[int, int, int]:
    """``(a_bytes, w_bytes, total)``: one slot's A area and weights area, and the dynamic shared memory of the
    whole ring (with its alignment pad)."""
    super_k, vectors, _, _, super_blocks, _, _ = sizes(block_size, bits)
    a_bytes = 8 * m_tiles * (2 * super_k if tac.wg else row_stride(block_size, bits))
    w_bytes = 32 * tac.warps * sum(w for _, w in slot_fields(tac.tpw, 1, vectors, super_blocks, zp_kind))
    bars = 2 * MBAR_BYTES * tac.stages if tac.mb else 0  # a "full" and an "empty" barrier per slot
    return a_bytes, w_bytes, tac.stages * (a_bytes + w_bytes) + bars + RING_ALIGN_PAD


def copies_ahead(tac) -> int:
    """Super-chunks the ring copies ahead of the one computed: ``stages - 1``, or ``stages - 2`` when the warpgroup
    kernel waits for its MMAs every second super-chunk (``wg`` + ``pf``: two super-chunks' MMAs hold their slots)."""
    return tac.stages - (2 if tac.wg and tac.pf else 1)


def gen_source_xa(act: str, m_tiles: int, tac, block_size: int, zp_kind: str, bits: int = 4) -> str:
    """Python source of the shared-activation kernel for one specialisation (module docstring)."""
    TPW, warps, ksplit, S = tac.tpw, tac.warps, tac.ksplit, tac.stages
    super_k, _, group_k, group_steps, super_blocks, block_steps, _ = sizes(block_size, bits)
    if group_steps < 2:
        raise ValueError(f"gemv_mma {tac.tag}: shared activations need block >= 32, got {block_size}")
    c = _CONST[act]
    threads = 32 * warps
    rows = 8 * m_tiles
    RS = row_stride(block_size, bits)
    a_bytes, w_bytes, total = layout(tac, m_tiles, block_size, zp_kind, bits)
    limit = SMEM_LIMIT_WG if tac.wg else SMEM_LIMIT
    if total > limit:
        raise ValueError(f"gemv_mma {tac.tag}: {total} B of shared memory > {limit} B (fewer stages)")
    slot = a_bytes + w_bytes
    rows_cta = 16 * TPW * warps
    WG = tac.wg
    if WG:
        from ..intrinsics_sm90 import WGMMA_N

        if 8 * m_tiles not in WGMMA_N:
            raise ValueError(f"gemv_mma {tac.tag}: wgmma has no n = {8 * m_tiles} ({WGMMA_N})")
    L, e = emit_head()
    e(1, "tid = np.uint32(cuda.threadIdx.x)")
    if ksplit == 1:
        e(1, "grp = np.int64(cuda.blockIdx.x)")
        e(1, "split = np.int64(0)")
    else:
        e(1, f"grp = np.int64(cuda.blockIdx.x) // {ksplit}")
        e(1, f"split = np.int64(cuda.blockIdx.x) % {ksplit}")
    e(1, f"tout = (grp * {warps} + warp) * {TPW}  # the warp's first tile (stores)")
    e(1, "n_tiles = ((N + 31) >> 5) * 2  # 16-row tiles of the packed weights (rows padded to 32)")
    e(1, f"tile0 = tout if tout + {TPW} <= n_tiles else n_tiles - {TPW}  # its loads: valid tiles")
    e(1, f"c0 = (split * n_super) // {ksplit}")
    e(1, f"c1 = ((split + 1) * n_super) // {ksplit}")
    if zp_kind == "none":
        emit_zero_points(e, 1, bits, c, None)
    if WG:  # one tuple of 4 m_tiles fp32 accumulators per tile (wgmma's fragment order)
        # tuple displays of more than 30 items compile to list appends, which numba's bytecode pass rejects
        parts = [min(16, 4 * m_tiles - k) for k in range(0, 4 * m_tiles, 16)]
        init = " + ".join("(" + ", ".join(["np.float32(0)"] * p) + ",)" for p in parts)
        for i in range(TPW):
            e(1, f"acc_{i} = {init}")
    else:
        for i in range(TPW):
            for mt in range(m_tiles):
                for r in range(4):
                    e(1, f"acc_{i}_{mt}_{r} = np.float32(0)")
    e(1, "sm = cuda.shared.array(0, U32T)")
    e(1, "rbase = (smem_addr(sm) + np.uint32(15)) & np.uint32(0xFFFFFFF0)")
    ring = SmemRing(e, tac, m_tiles, block_size, zp_kind, bits)  # the weights area: mma_smem's fields
    ring.bases(1, f"rbase + np.uint32({a_bytes})")
    MB = tac.mb
    if MB:
        # one bulk copy per slot by lane 0 of the last warpgroup's first warp; the slots' barriers after the ring
        pieces = per = 0
        e(1, f"fbar = rbase + np.uint32({S * slot})  # full[k] at fbar + 8 k, empty[k] at fbar + 8 (S + k)")
        e(1, "if tid == 0:")
        for k in range(S):
            e(2, f"mbar_init(fbar + np.uint32({8 * k}), 1)")
            e(2, f"mbar_init(fbar + np.uint32({8 * (S + k)}), {threads})")
        e(2, "mbar_fence_init()")
        e(1, "cuda.syncthreads()")
        e(1, "desc0 = smem_desc(sm, rbase - smem_addr(sm), 128, 256)")
    elif WG and tac.pa:
        # A arrives permuted into the slots' order (``wg_a``): a slot's A area is a contiguous block, 16-byte pieces
        pieces = a_bytes // 16
        per = -(-pieces // threads)
        for j in range(per):
            e(1, f"asrc_{j} = np.int64(tid) + {j * threads}")
        e(1, "adst = rbase + tid * np.uint32(16)")
        e(1, "desc0 = smem_desc(sm, rbase - smem_addr(sm), 128, 256)")
    elif WG:
        # the thread's A words (module docstring: wgmma's core-matrix layout): word d of a slot's A area is
        # (step s, row block rb, k block kb, row r8, word tt), tt fastest, so destinations are consecutive
        pieces = rows * super_k // 2
        per = -(-pieces // threads)
        for j in range(per):
            e(1, f"d = np.int64(tid) + {j * threads}")
            e(1, "q = d >> 6")
            e(1, f"s = q // {m_tiles}")
            e(1, f"kp = (s // {group_steps}) * {group_k} + (d & 3) * {4 * group_steps} + (s % {group_steps}) * 4 + "
                 "((d >> 5) & 1) * 2")
            e(1, f"asrc_{j} = np.uint32(min((q % {m_tiles}) * 8 + ((d >> 2) & 7), np.int64(M) - 1) * (K >> 1) + "
                 "(kp >> 1))")
        e(1, "adst = rbase + tid * np.uint32(4)")
        e(1, "desc0 = smem_desc(sm, rbase - smem_addr(sm), 128, 256)")
    else:
        # the thread's A pieces: 16 bytes each, row-major over (row, 16-byte column) of one super-chunk
        ppr = 2 * super_k // 16
        pieces = rows * ppr
        per = -(-pieces // threads)
        for j in range(per):
            e(1, f"pc = np.int64(tid) + {j * threads}")
            e(1, f"pr = pc // {ppr}")
            e(1, f"asrc_{j} = (min(pr, np.int64(M) - 1) * K >> 3) + pc % {ppr}")
            e(1, f"adst_{j} = rbase + np.uint32(pr * {RS} + (pc % {ppr}) * 16)")
        # the lane's fragment base per m-tile: row g + 8 mt, its k-group slice 4 group_steps t
        for mt in range(m_tiles):
            e(1, f"abase_{mt} = rbase + np.uint32((g + {8 * mt}) * {RS}) + np.uint32(t * {8 * group_steps})")

    PW = warps - 4  # MB: the producer, lane 0 of the last warpgroup's first warp

    def bulk_copy(ind, chunk, off, kslot):
        """MB: the slot's A area, one bulk copy completed on the slot's full barrier (``kslot``: its index)."""
        e(ind, f"mbar_arrive_tx(fbar + np.uint32(8) * {kslot}, {a_bytes})")
        e(ind, f"bulk_g2s(rbase + {off}, a32, np.int64({chunk}) * {a_bytes // 16}, {a_bytes}, "
               f"fbar + np.uint32(8) * {kslot})")

    def copy_stage(ind, chunk, off):
        e(ind, f"if {chunk} < c1:")
        for j in range(per):
            guard = (j + 1) * threads > pieces
            jj = ind + 1
            if guard:
                e(jj, f"if np.int64(tid) + {j * threads} < {pieces}:")
                jj += 1
            if WG and tac.pa:
                e(jj, f"cp_async_16(adst + {off} + np.uint32({16 * j * threads}), a32, asrc_{j} + "
                      f"np.int64({chunk}) * {a_bytes // 16})")
            elif WG:
                e(jj, f"cp_async_4(adst + {off} + np.uint32({4 * j * threads}), a32, asrc_{j} + "
                      f"np.uint32({chunk}) * np.uint32({super_k // 2}))")
            else:
                e(jj, f"cp_async_16(adst_{j} + {off}, a32, asrc_{j} + ({chunk}) * {super_k // 8})")
        e(ind + 1, f"scl = {chunk}")
        for i in range(TPW):
            ring.copy(ind + 1, 0, i, off)
        e(ind, "cp_async_commit()")

    INFLIGHT = WG and tac.pf  # MMAs waited for every second super-chunk (module docstring)
    P = copies_ahead(tac)
    for r in range(P):
        if MB:
            e(1, f"if tid == {32 * PW} and c0 + {r} < c1:")
            bulk_copy(2, f"c0 + {r}", f"np.uint32({r * slot})", f"np.uint32({r})")
        copy_stage(1, f"c0 + {r}", f"np.uint32({r * slot})")
    e(1, f"loff = np.uint32({P * slot})")
    e(1, "coff = np.uint32(0)")
    if MB:  # slot index and phase parity of the current super-chunk (ci, cph) and of super-chunk cc + P - S, whose
        # slot the producer refills (ti, tph: the previous one, or with p1 the one before): (P, 1) until it is >= c0
        e(1, "ci = np.uint32(0)")
        e(1, "cph = np.uint32(0)")
        e(1, f"ti = np.uint32({P})")
        e(1, "tph = np.uint32(1)")
    e(1, "cc = c0")
    e(1, "while cc < c1:")

    def body(x):
        """One super-chunk, ``x`` levels deeper than the loop body."""
        ex = (lambda ind, text: e(ind + x, text)) if x else e
        if MB:
            ex(2, "while mbar_try_wait(fbar + np.uint32(8) * ci, cph) == 0:  # the slot's A landed")
            ex(3, "pass")
            ex(2, "cuda.syncwarp()  # lanes leave the wait loop apart: converged again for the aligned wgmma")
            ex(2, "cp_async_wait()  # the thread's own weights landed")
            ex(2, f"if warp == {PW} and cc + {P} < c1:  # (warp-uniform) the producer refills slot ti")
            ex(3, "if lane == 0:")
            ex(4, f"if cc >= c0 + {S - P}:  # once every thread is done with its last super-chunk")
            ex(5, f"while mbar_try_wait(fbar + np.uint32({8 * S}) + np.uint32(8) * ti, tph) == 0:")
            ex(6, "pass")
            bulk_copy(4 + x, f"cc + {P}", "loff", "ti")
            ex(3, "cuda.syncwarp()  # converged again before the warpgroup's aligned wgmma instructions")
            copy_stage(2 + x, f"cc + {P}", "loff")
        else:
            ex(2, "cp_async_wait()")
            if WG:  # the copies (generic proxy) made visible to wgmma's reads (async proxy) before the barrier
                ex(2, "fence_proxy_async()")
            ex(2, "cuda.syncthreads()")
            copy_stage(2 + x, f"cc + {P}", "loff")
        for i in range(TPW):
            ring.read(2 + x, "q", 0, i, "coff")
        emit_compute(ex, c, bits, zp_kind, TPW, m_tiles, super_blocks, block_steps, group_steps, group_k, WG)
        if WG and (x or not INFLIGHT):  # this slot's (and the pair's) MMAs done before a barrier lets copies in
            for i in range(TPW):
                ex(2, f"acc_{i} = wgmma_wait(acc_{i})")
        if MB:  # this thread is done with the slot (with p1: both slots of the pair, once their MMAs are waited for)
            if INFLIGHT and x:
                ex(2, f"mbar_arrive(fbar + np.uint32({8 * S}) + np.uint32(8) * (ci + np.uint32({S - 1}) if ci == "
                      f"np.uint32(0) else ci - np.uint32(1)))")
            if x or not INFLIGHT:
                ex(2, f"mbar_arrive(fbar + np.uint32({8 * S}) + np.uint32(8) * ci)")
            for v, ph in (("ci", "cph"), ("ti", "tph")):  # on to the next super-chunk
                ex(2, f"{v} = {v} + np.uint32(1) if {v} < np.uint32({S - 1}) else np.uint32(0)")
                ex(2, f"{ph} = {ph} ^ np.uint32(1) if {v} == np.uint32(0) else {ph}")
        last = f"np.uint32({(S - 1) * slot})"
        if INFLIGHT:
            ex(2, f"loff = loff + np.uint32({slot}) if loff < {last} else np.uint32(0)")
        else:
            ex(2, "loff = coff")
        ex(2, f"coff = coff + np.uint32({slot}) if coff < {last} else np.uint32(0)")
        ex(2, "cc += 1")

    body(0)
    if INFLIGHT:  # two super-chunks per iteration, one wait: the second is decoded while the first's MMAs run
        e(2, "if cc < c1:")
        body(1)
    if INFLIGHT:  # the MMAs of an odd last super-chunk (the pair's second body did not run)
        for i in range(TPW):
            e(1, f"acc_{i} = wgmma_wait(acc_{i})")
    if WG:  # wgmma's accumulator (4 j + r) is mma's (m-tile j, register r): rows g (+8), tokens 8 j + 2 t (+1)
        for i in range(TPW):
            for mt in range(m_tiles):
                for r in range(4):
                    e(1, f"acc_{i}_{mt}_{r} = acc_{i}[{4 * mt + r}]")
    emit_epilogue(e, TPW, m_tiles, ksplit, threads, rows_cta)
    return "\n".join(L) + "\n"


def _tile_names(i: int):
    """A line filter that gives the zero-point pairs of ``emit_zero_points`` tile ``i``'s suffix."""
    pat = re.compile(r"\b(nzo?|nho?)_(lo|hi)\b")
    return lambda s: pat.sub(lambda m: f"{m.group(1)}_{m.group(2)}_{i}", s)


def emit_compute(e, c, bits, zp_kind, TPW, m_tiles, super_blocks, block_steps, group_steps, group_k, wg=False):
    """One super-chunk: per quantisation block, each tile's scale pairs (and zero points); per 16-k step the
    activation fragments of every m-tile (one ``lds_v4`` per two steps), then per tile the decoded weight
    fragments, scaled (module docstring: numerics), and one ``mma`` per m-tile into the accumulators. ``wg``:
    per step and tile one ``wgmma`` (issued, not waited for) on the step's core matrices in the slot instead."""
    mask = MMA_LAYOUTS[bits].decode_mask
    for bb in range(super_blocks):
        for i in range(TPW):
            # the scales of rows g and g + 8 as pairs (both halves), from their scale words (fp16 / bf16 bits)
            for nm, k in (("lo", bb), ("hi", super_blocks + bb)):
                wd = f"qsc_0_{i}_{k >> 1}"
                half = f"({wd} >> np.uint32(16))" if k & 1 else f"({wd} & np.uint32(0xFFFF))"
                e(2, f"s2{nm}_{i} = {half} * np.uint32(0x10001)")
            if zp_kind == "packed":
                ren = _tile_names(i)
                emit_zero_points(lambda ind, s, ren=ren: e(ind, ren(s)), 2, bits, c,
                                 (f"qzp_0_{i}_0_{bb}", f"qzp_0_{i}_1_{bb}"))
        for ss in range(block_steps):
            s = bb * block_steps + ss
            G, sig = divmod(s, group_steps)
            if wg:
                e(2, f"dsc = desc0 + np.uint64((coff + np.uint32({s * 32 * 8 * m_tiles})) >> np.uint32(4))")
            elif sig % 2 == 0:  # the lane's 16 bytes of k-group G for two steps, every m-tile
                off = 2 * (G * group_k) + 16 * (sig // 2)
                for mt in range(m_tiles):
                    e(2, f"bv = lds_v4(abase_{mt} + coff + np.uint32({off}))")
                    for x in range(4):
                        e(2, f"b_{mt}_{x} = bv[{x}]")
            x0 = 2 * (sig % 2)
            for j, wi, sh, plane in step_planes(bits, s):
                for i in range(TPW):
                    sfx = "" if zp_kind == "none" else f"_{i}"
                    e(2, f"wd = q_0_{i}_{j}[{wi}]")
                    for r in range(4):
                        row = "lo" if r % 2 == 0 else "hi"
                        e(2, f"f{r} = fma2({decode_expr(c, mask, r, sh, plane, sfx)}, s2{row}_{i}, np.uint32(0))")
                    if wg:
                        e(2, f"acc_{i} = wgmma(acc_{i}, f0, f1, f2, f3, dsc)")
                        continue
                    for mt in range(m_tiles):
                        e(2, f"acc_{i}_{mt}_0, acc_{i}_{mt}_1, acc_{i}_{mt}_2, acc_{i}_{mt}_3 = mma(f0, f1, f2, f3, "
                             f"b_{mt}_{x0}, b_{mt}_{x0 + 1}, acc_{i}_{mt}_0, acc_{i}_{mt}_1, acc_{i}_{mt}_2, "
                             f"acc_{i}_{mt}_3)")


def emit_epilogue(e, TPW, m_tiles, ksplit, threads, rows_cta) -> None:
    """Stores (no split-K), or workspace slices and the last CTA's fixed-order sum (module docstring)."""
    dst = "st(out, np.int64(m) * N + n, {})" if ksplit == 1 else "ws[(split * M + m) * N + n] = {}"
    for i in range(TPW):
        for mt in range(m_tiles):
            for r in range(4):
                e(1, f"n = (tout + {i}) * 16 + g + {8 * (r >> 1)}")
                e(1, f"m = {mt * 8 + (r & 1)} + 2 * t")
                e(1, "if m < M and n < N:")
                e(2, dst.format(f"acc_{i}_{mt}_{r}"))
    if ksplit == 1:
        return
    emit_split_k_arrival(e, ksplit)
    e(2, f"for ent in range(cuda.threadIdx.x, {rows_cta} * M, {threads}):")
    e(3, f"m = ent // {rows_cta}")
    e(3, f"n = grp * {rows_cta} + ent % {rows_cta}")
    e(3, "if n < N:")
    emit_split_k_sum(e, 4, ksplit)
    emit_counter_reset(e)
