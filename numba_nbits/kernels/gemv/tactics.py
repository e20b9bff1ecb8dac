"""Launch shapes of the tensor-core GEMV: ``Tactic``, the default (tuned tables, rules) and the profiler's variants.

A ``Tactic`` is the compile-time launch shape of one ``mma`` kernel. ``default_tactic`` picks one per
problem: the tuned table of the GPU (JSON data in ``tuned/``) at the nearest swept shape, else rules.

Tuned tables: ``tuned_tables`` (which file a plan's tactic comes from, per GPU and compiler).

Profiler variants (spec §8; ``kernels.fpa_intb`` names them ``gemv:<route>+<variant>``)
--------------------------------------------------------------------------------------
* ``paired_k`` (``ORT_FPA_INTB_GEMV_PAIRED_K`` / ``ep.cuda.fpa_intb_gemv_paired_k``): fp16 A, 4-bit
  weights, M 5..8. Two CTAs share each tile group's K loop (``ksplit = 2``), each writes fp32
  partials to the plan's workspace, and the second to arrive sums the pair in a fixed order
  (deterministic) and stores Y: twice the CTAs of the default tactic, each streaming half of K, for
  mid-size N where the default leaves SMs idle. ORT documents an fp16 overflow limit for its paired-K
  kernel; this one sums in fp32, so it has none. ``"1"`` adds it as a candidate of the buckets 5..8,
  ``"force"`` makes it the only candidate there.
* ``wave`` (``ep.cuda.fpa_intb_gemv_wave_aware = 1``): any M < 16 the tensor-core GEMV serves. The grid
  is sized to whole waves of the device: launch bounds ``minb = R`` (``WAVE_CTAS_PER_SM``: 4 CTAs of 8
  warps per SM with one m-tile, 2 with two; one 16-row tile per CTA's item; ring depth
  ``WAVE_RING``) guarantee ``R`` resident CTAs per SM (by registers; shared memory and threads allow
  them too), and

  - with at least half a wave of tile groups (``2 * groups > R * SMs``): the ring kernel with a
    persistent grid of ``min(groups, R * SMs)`` CTAs striding over the tile groups (one wave, no
    partial last wave, pipelines never drain between groups);
  - with fewer: split-K across ``k = min(8, (R * SMs) // groups)`` CTAs per tile group (bounded by
    the super-chunks each split gets), the most that still fits in one wave.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from .layout import BITS, MMA_LAYOUTS, TAIL_SUPERS, TILE_N, n_vectors, super_chunk
from .mma_xa import applies as xa_applies
from .tuned_tables import DEFAULT_GPU, device_gpu, tuned_table

#: what the tensor-core GEMV serves (``supports``) and the SMs its grids are sized for (``sm_count``); the
#: GEMV routes take it to M = 16, the ``fused_gemm`` route (``small_gemm``) above, to ``MAX_M`` (the warpgroup
#: form to ``WG_MAX_M`` where ``wide_tactic`` serves the problem)
BLOCK_SIZES = (16, 32, 64, 128)
MAX_M = 64
#: m-tiles of the kernels past M = 16: the smallest that holds M (fewer specialisations than one per M)
GEMM_M_TILES = (3, 4, 6, 8)
#: m-tiles of the warpgroup form of the shared-activation kernel (``Tactic.wg``) past M = 64, to ``WG_MAX_M``
#: (wgmma n = 96 / 128): the ``fused_gemm`` route takes them where ``wide_tactic`` names a tactic
WG_M_TILES_BEYOND = (12, 16, 24, 32)
WG_MAX_M = 256
#: rows and K from which the 12-m-tile kernel with K split 4 ways serves long-K down projections (``wide_tactic``;
#: measured on 4096x14336 only)
WG_DOWN_MIN_N = 4096
WG_DOWN_MIN_K = 12288
#: SMs assumed by the simulator (small, so that tiny tests exercise the persistent grid-stride loop)
SIM_SM_COUNT = 2


def supports(problem) -> bool:
    """Whether the tensor-core GEMV serves ``problem`` with one kernel (module docstring: guards): M <= ``MAX_M``,
    or past it where the warpgroup kernel has a tactic (``wide_tactic``)."""
    p = problem
    return (p.bits in BITS and p.dtype in ("float16", "bfloat16") and 1 <= p.M
            and p.block_size in BLOCK_SIZES and p.zero_points in ("none", "packed") and not p.has_g_idx
            and p.N % 8 == 0 and p.K % 8 == 0 and p.K > 0 and p.N > 0
            and (p.M <= MAX_M or wide_tactic(p) is not None))


def sm_count(simulated: bool) -> int:
    """SMs of the current device (``SIM_SM_COUNT`` on the simulator)."""
    if simulated:
        return SIM_SM_COUNT
    from .core import device_info  # cached current-device query (as the CUDA-core engine's)

    return device_info()[0]


@dataclass(frozen=True)
class Tactic:
    """Launch shape (all compile-time): ``tpw`` 16-row tiles per block, ``warps`` split-K warps,
    ``unroll`` super-chunks per pipeline stage (register double buffering: the next stage is loaded
    before the current one is computed).

    The other fields (defaults: the plain double-buffered kernel):

    * ``pf``: what one pipeline stage prefetches. 0: weights only (scales, zero points and
      activations are loaded when the stage is computed, so each iteration waits one more
      memory latency); 1: scales (as 32-bit words, one or two per tile, 16 bytes at block 16) and
      zero points too; 2: activations too (everything the stage needs is in registers).
    * ``ksplit``: CTAs splitting K of one tile group (split-K across CTAs). Each writes fp32
      partials to a per-plan workspace; the last to arrive (atomic counter) sums the slices in a
      fixed order (deterministic) and stores Y. More CTAs for small N (4096 rows = 256 tiles, under
      2 CTAs per SM) and finer work units against the tail of the last wave. The workspace makes
      a plan unsafe to run concurrently on two streams (like any split-K workspace).
    * ``stages``: register pipeline depth. 2 is double buffering (``unroll`` super-chunks in flight
      while as many are computed); 3 or 4 keep 2 or 3 stages in flight (a register ring rotated
      by loop-carried copies, which the compiler turns into renames): more bytes in flight per
      register than a larger ``unroll``.
    * ``minb``: when > 0, ``launch_bounds=(32 * warps, minb)``: ptxas caps the registers so that
      ``minb`` blocks fit on an SM (65536 registers), trading registers (possibly spills) for
      occupancy and fewer waves (register counts per tactic:
      ``benchmarks/results/2026-11-30-gemv-m1-ptxas``). A bare register cap at the same count
      (``max_registers``, ``occupancy.register_cap``) gives a shorter main loop (``t1w8u1p1b4``, block
      32, two m-tiles: 138 SASS instructions against 185) but ran slower on the H200 (4096x4096 M = 16:
      12.05 us against 9.47; ``benchmarks/results/2026-12-03-h200-register-caps``), so launch bounds stay.
      Tactics without ``minb`` get occupancy snapping (``mma.SNAP_SLACK``).
    * ``ring``: when >= 2, the ring kernel (``mma_ring``): ``ring - 1`` work items in flight per warp
      across tile-group boundaries; needs ``unroll=1``, ``pf=1``, no split-K, 2 stages.
    * ``grid``: with ``ring``, a persistent launch of ``min(groups, grid * SM count)`` CTAs striding
      over the tile groups (0: one CTA per tile group).
    * ``smem``: the pipeline's ``stages`` are slots of a shared-memory ring filled by ``cp.async``
      (``mma_smem``; 2..8 stages, ``pf = 1``, not the ring kernel): ``stages - 1`` stages in flight per warp
      at the registers of one (tag suffix ``a``).
    * ``xa``: the shared-activation kernel (``mma_xa``; tag suffix ``x``): the CTA's warps take different tiles
      (``warps * tpw`` per CTA) on the same K range, reading A from a ``stages``-slot shared-memory ring
      (2..8) that also carries the weights; ``ksplit`` CTAs split K. Needs ``unroll = 1``, ``pf = 0``, no ring
      kernel or ``smem``; K a multiple of the super-chunk and block >= 32 (``mma_xa.applies``).
    * ``wg``: with ``xa``, Hopper's warpgroup MMA (tag suffix ``h``): each warpgroup of the CTA issues
      ``wgmma.mma_async`` with its four warps' decoded weights as the register operand and the super-chunk's
      activations from shared memory (``mma_xa`` module docstring); ``warps`` a multiple of 4; sm_90 only.
      With ``pf = 1`` the MMAs are waited for every second super-chunk (the next one is decoded while they run;
      the ring then copies ``stages - 2`` super-chunks ahead, so ``stages >= 3``).
    * ``pa``: with ``wg``, the activations permuted once per call (``wg_a``, tag suffix ``v``) into the super-chunks'
      wgmma core-matrix order, so the ring copies them in 16-byte pieces instead of 4-byte ones.
    * ``mb``: with ``pa``, the ring's activations arrive by one bulk copy per super-chunk (``cp.async.bulk``, issued
      by lane 0 of the last warpgroup's first warp) that completes on the slot's "full" barrier, and each thread
      releases the slot on its "empty" barrier after its MMAs (``mbarrier``, ``intrinsics_bulk``): no CTA-wide barrier in
      the loop, so the warpgroups run up to a super-chunk apart and one's MMAs overlap the other's decode (tag
      suffix ``m``; with ``pf = 1`` the pair's slots are released after its one wait).
    * ``unguarded``: the register pipeline's prefetch loads (weights, scale words and zero points of the stages
      ahead) without their bounds test (tag suffix ``n``): a stage past the warp's last super-chunk reads the next
      tile's bytes or the packed arrays' tail (``layout.TAIL_SUPERS`` super-chunks of zeros after the last tile),
      and is never computed. Without the branch the loads' addresses stay affine in the loop counter. Needs the
      plain register pipeline (no ring kernel, ``smem`` or ``xa``), ``pf <= 1`` (activations are not padded) and
      ``stages * unroll * warps * ksplit <= TAIL_SUPERS``.
    * ``prepass``: the kernel's NVVM input goes through LLVM 7's ``-O1`` pipeline before libNVVM (``nvvm_prepass``;
      tag suffix ``o``), where numba-cuda-mlir's ``libLLVM-7.so`` is installed (else it compiles without).
    """

    tpw: int = 1
    warps: int = 8
    unroll: int = 2
    pf: int = 0
    ksplit: int = 1
    stages: int = 2
    minb: int = 0
    ring: int = 0
    grid: int = 0
    smem: bool = False
    xa: bool = False
    wg: bool = False
    pa: bool = False
    mb: bool = False
    unguarded: bool = False
    prepass: bool = False

    def __post_init__(self):
        if (self.tpw < 1 or self.warps < 1 or self.unroll < 1 or self.pf not in (0, 1, 2) or self.ksplit < 1
                or not 2 <= self.stages <= (8 if self.smem or self.xa else 4) or not 0 <= self.minb <= 32
                or not 0 <= self.ring <= 16 or not 0 <= self.grid <= 32):
            raise ValueError(f"bad gemv_mma tactic {self}")
        if self.ring and (self.ring < 2 or self.unroll != 1 or self.pf != 1 or self.ksplit != 1 or self.stages != 2):
            raise ValueError(f"gemv_mma ring tactics need ring >= 2, u1, p1, no k/s: {self}")
        if self.grid and not self.ring:
            raise ValueError(f"gemv_mma: a persistent grid (g) needs the ring kernel (r): {self}")
        if self.smem and (self.ring or self.pf != 1):
            raise ValueError(f"gemv_mma: a shared-memory pipeline (a) needs pf = 1 and no ring kernel: {self}")
        if self.xa and (self.ring or self.smem or self.unroll != 1 or (self.pf and not self.wg)):
            raise ValueError(f"gemv_mma: shared activations (x) need u1, no p/r/a: {self}")
        if self.wg and self.pf and (self.pf != 1 or self.stages < 3):
            raise ValueError(f"gemv_mma: warpgroup MMAs waited for every second super-chunk (p1) need 3+ stages: {self}")
        if self.pa and not self.wg:
            raise ValueError(f"gemv_mma: permuted activations (v) need warpgroup MMAs (h): {self}")
        if self.mb and not self.pa:
            raise ValueError(f"gemv_mma: the barrier pipeline (m) needs permuted activations (v): {self}")
        if self.wg and (not self.xa or self.warps % 4):
            raise ValueError(f"gemv_mma: warpgroup MMAs (h) need shared activations (x) and whole warpgroups: {self}")
        if self.unguarded and (self.ring or self.smem or self.xa or self.pf > 1
                               or self.stages * self.unroll * self.warps * self.ksplit > TAIL_SUPERS):
            raise ValueError(f"gemv_mma: unguarded prefetch loads (n) need the register pipeline, pf <= 1 and "
                             f"stages * unroll * warps * ksplit <= {TAIL_SUPERS}: {self}")

    @property
    def tag(self) -> str:
        """Short name (kernel names, sweep tables): ``t2w8u1`` plus ``p1``/``k4`` when not default."""
        s = f"t{self.tpw}w{self.warps}u{self.unroll}"
        if self.pf:
            s += f"p{self.pf}"
        if self.ksplit > 1:
            s += f"k{self.ksplit}"
        if self.stages != 2:
            s += f"s{self.stages}"
        if self.minb:
            s += f"b{self.minb}"
        if self.ring:
            s += f"r{self.ring}"
        if self.grid:
            s += f"g{self.grid}"
        if self.smem:
            s += "a"
        if self.xa:
            s += "x"
        if self.wg:
            s += "h"
        if self.pa:
            s += "v"
        if self.mb:
            s += "m"
        if self.unguarded:
            s += "n"
        if self.prepass:
            s += "o"
        return s

    @staticmethod
    def parse(tag: str) -> "Tactic":
        """Inverse of ``tag`` (e.g. ``"t2w8u1p1k2"``)."""
        m = re.fullmatch(r"t(\d+)w(\d+)u(\d+)(?:p(\d))?(?:k(\d+))?(?:s(\d))?(?:b(\d+))?(?:r(\d+))?(?:g(\d+))?(a)?(x)?(h)?(v)?(m)?(n)?(o)?", tag)
        if not m:
            raise ValueError(f"not a gemv_mma tactic tag: {tag!r}")
        t, w, u, p, k, st, b, r, gr, a, x, h, v, mb, n, o = m.groups()
        return Tactic(int(t), int(w), int(u), int(p or 0), int(k or 1), int(st or 2), int(b or 0), int(r or 0),
                      int(gr or 0), bool(a), bool(x), bool(h), bool(v), bool(mb), bool(n), bool(o))


def m_tiles(M: int) -> int:
    """8-row m-tiles of A the kernel covers for M: 1 for M = 1..8, 2 for M = 9..16, above that the smallest of
    ``GEMM_M_TILES`` that holds M (the ``fused_gemm`` route's kernels, M = 17..64), then of ``WG_M_TILES_BEYOND``
    (the warpgroup kernel's, M = 65..256)."""
    if M <= 16:
        return 1 if M <= 8 else 2
    return next(t for t in GEMM_M_TILES + WG_M_TILES_BEYOND if 8 * t >= M)


def m_class(M: int) -> int:
    """1 for M = 1, 8 for M = 2..8 (one m-tile), 16 for M = 9..16 (two m-tiles), ``8 * m_tiles(M)`` above (no
    tuned table has those classes: ``gemm_tactic`` picks)."""
    return 1 if M <= 1 else 8 if M <= 8 else 16 if M <= 16 else 8 * m_tiles(M)


def tuned_tactic(N: int, K: int, block_size: int, M: int = 1, table: dict | None = None) -> Tactic | None:
    """The tactic of ``table`` (default: ``tuned_table(4)``) at the nearest swept shape with the same
    ``m_class`` (block 16 uses the block-32 entries, 64 the block-128 ones, when it has none of its
    own), by distance in ``log N + log K``; None when the table is empty for that class or the nearest
    shape is more than 2x away in N or in K (tiny routers etc. keep the rule)."""
    table = tuned_table(4) if table is None else table
    mc = m_class(M)
    for bs in dict.fromkeys((block_size, {16: 32, 64: 128}.get(block_size, block_size))):
        best = None
        for (n, k, b, c), tag in table.items():
            if b != bs or c != mc:
                continue
            dn, dk = abs(math.log2(N / n)), abs(math.log2(K / k))
            if dn > 1 or dk > 1:
                continue
            if best is None or dn + dk < best[0]:
                best = (dn + dk, tag)
        if best is not None:
            return Tactic.parse(best[1])
    return None


def default_tactic(N: int, K: int, block_size: int, M: int = 1, bits: int = 4, wg_ok: bool = False,
                   gpu: str = DEFAULT_GPU) -> Tactic:
    """Pick the launch shape: the tuned table of ``bits`` for ``gpu`` (``tuned_tactic``) when it covers the shape,
    else rules fitted to a sweep of all 12 tactics (tpw 1/2 x warps 4/8 x unroll 1/2/4, 4-bit g32 fp16,
    M 1/4/16, 4096x4096, 28672x8192, 8192x28672, 128256x4096; ``benchmarks/results/2026-11-30-h200-gemv-m1``),
    where they pick the best tactic or one within 2% of it, except 4096x4096 (within 7%):

    * two 16-row tiles per block once that still gives >= 1 block per SM (halves activation reads
      per weight byte);
    * unroll 1 on large N (2 for K >= 16384 at M <= 8, where fewer blocks need more loads in flight;
      two-plane 8-bit codes keep 1: registers); small N keeps 2 (1 when a tile's super-chunk is
      already two or more loads);
    * 8 split-K warps when each keeps >= 2*unroll super-chunks; 4 for M > 8 with K <= 8192 on large N
      (the two-m-tile kernel's registers).
    """
    if M > 16:
        return gemm_tactic(N, M, K, block_size, bits, wg_ok)
    tuned = tuned_tactic(N, K, block_size, M, tuned_table(bits, gpu))
    if tuned is not None:
        return tuned
    tiles = -(-N // TILE_N)
    big = tiles // 2 >= 132
    ks = super_chunk(block_size, bits)
    nv = n_vectors(bits, ks)  # 16-byte loads per lane per tile and super-chunk (4-bit: 1 or 2)
    tpw = 2 if big and nv <= 2 else 1
    n_super = -(-K // ks)
    if big:
        unroll = 2 if (K >= 16384 and M <= 8 and MMA_LAYOUTS[bits].planes == 1) else 1
    else:
        unroll = 1 if nv > 1 else 2
    warps = 8 if n_super >= 8 * 2 * unroll else 4 if n_super >= 4 * unroll else 2
    if big and M > 8 and K <= 8192 and warps == 8:
        warps = 4
    return Tactic(tpw=tpw, warps=warps, unroll=unroll)


#: the shared-activation kernel (``mma_xa``) as the default past M = 16: 4-bit weights (the bit width it was
#: measured with), at least ``XA_MIN_M_TILES`` m-tiles (at 3 the plain kernel is as fast), N of at least
#: ``XA_MIN_N`` rows; below ``XA_NOSPLIT_N`` rows (fewer than ~100 CTAs of 128 rows) K is split over
#: ``XA_KSPLIT`` CTAs, which paid only at 4 m-tiles
XA_BITS = (4,)
XA_MIN_M_TILES = 4
XA_MIN_N = 8192
XA_NOSPLIT_N = 12288
XA_KSPLIT = 4
#: Hopper's warpgroup MMAs in the shared-activation kernel (``Tactic.wg``) as the default: 4-bit, blocks
#: ``WG_BLOCKS`` (fitted at block 128; blocks 32 / 64 take the same tactics, measured on the five Llama shapes at
#: M = 32..256 against the mma.sync kernel and dequantize + cuBLAS, H200 2026-12-06,
#: ``benchmarks/results/2026-12-06-h200-wg-blocks``: 1.2-2.7x dequantize + cuBLAS past M = 64), ``WG_M_TILES``
#: m-tiles (M = 25..32 and 49..64; blocks 32 / 64 at 4 m-tiles only from ``WG_MINB_N`` rows, ``WG_MT4_BLOCKS``),
#: activations permuted per call (``pa``) where that was faster: on N >= ``WG_MIN_N`` rows (``gemm_tactic``; launch
#: bounds for two CTAs per SM at 4 m-tiles and from ``WG_MINB_N`` rows), at 8 m-tiles on
#: ``XA_MIN_N <= N < XA_NOSPLIT_N`` with K split ``XA_KSPLIT`` ways, and at 8 m-tiles on
#: ``XA_NOSPLIT_N <= N < WG_MIN_N`` with the barrier pipeline (``mb``);
#: past M = 64 ``wide_tactic``
WG_BITS = (4,)
WG_BLOCKS = (32, 64, 128)
WG_M_TILES = (4, 8)
#: at 4 m-tiles on ``WG_MIN_N <= N < WG_MINB_N`` rows only these blocks take the warpgroup tactic: blocks 32 / 64 keep
#: ``t2w4u1s4x`` (28672x8192 fp16 M = 32: 72.3 / 67.8 us against ``t2w8u1s3b2xhv``'s 79.6 / 76.6; H200 2026-12-06,
#: ``benchmarks/results/2026-12-06-h200-wg-blocks``)
WG_MT4_BLOCKS = (128,)
#: 8-bit block-128 weights take one warpgroup tactic, the barrier pipeline ``t1w8u1xhvm`` (``Tactic.mb``), at
#: ``WG_M_TILES`` and past M = 64 to ``WG8_MAX_M_TILES`` m-tiles, on N >= ``WG_MIN_N`` rows: on 28672x8192 fp16
#: (H100 2026-12-05, ``benchmarks/results/2026-12-05-h100-callB``) 102.0 / 129.2 / 199.7 us at M = 32 / 64 / 128
#: against the previous defaults' 178.0 / 289.0 (the plain kernel) / 454.9 (dequantize + cuBLAS) and fp16 dense's
#: 166.8 / 174.2 / 171.0; ``t1w8u1s3xhvm`` was within 1% at M = 32 / 64 (193.3 at 128), ``t2w8u1s3xhvm`` 5-12% slower
WG8_BITS = (8,)
WG8_BLOCKS = (128,)
WG8_MAX_M_TILES = 16
#: ``t1w8u1xhvm``: 128 rows per CTA, warpgroup MMAs, activations permuted per call, the 2-slot barrier pipeline
MB_TACTIC = Tactic(1, 8, 1, xa=True, wg=True, pa=True, mb=True)
#: ``MB_TACTIC`` with the LLVM 7 pre-pass (``Tactic.prepass``): 4-bit weights' tactic past M = 64 on N >=
#: ``XA_NOSPLIT_N``. Its main loop at 32 m-tiles (cu13 ptxas, sm_90a), block 32 / 128: numba-cuda 209 -> 198 / 284 ->
#: 281 SASS instructions, numba-cuda-mlir 225 -> 208 / 301 -> 290; on an H100 at M = 256 (each compiler's A/B in one
#: process, ``benchmarks/results/2026-12-07-gpu-wide-prepass``) 128256x4096 / 28672x8192: block 32 527.9 -> 526.0 /
#: 252.1 -> 251.1 us, block 128 415.9 -> 407.4 / 201.1 -> 196.7 under numba-cuda; 545.8 -> 531.5 / 257.8 -> 252.3 and
#: 424.0 -> 413.8 / 202.1 -> 197.6 under numba-cuda-mlir
MB_PREPASS_TACTIC = replace(MB_TACTIC, prepass=True)
WG_MIN_N = 24576
WG_MINB_N = 65536


def wg_blocks(bits: int) -> tuple:
    """The block sizes whose ``bits``-bit weights the warpgroup tactics serve (``WG_BLOCKS`` for ``WG_BITS``,
    ``WG8_BLOCKS`` for ``WG8_BITS``, none otherwise): one table for ``gemm_tactic`` and ``wide_tactic``."""
    return WG_BLOCKS if bits in WG_BITS else WG8_BLOCKS if bits in WG8_BITS else ()


def wgmma_ok(simulated: bool) -> bool:
    """Whether the ``wg`` tactics may be chosen by default: a compute-capability 9.0 GPU (``wgmma`` is sm_90a
    only; both compilers build it, ``intrinsics_sm90``)."""
    if simulated:
        return False
    from ...launch.driver import _current_cc

    return _current_cc() == (9, 0)


def gemm_tactic(N: int, M: int, K: int | None = None, block_size: int | None = None, bits: int = 4,
                wg_ok: bool = False) -> Tactic:
    """The launch shape past M = 16 (3..8 m-tiles).

    With ``wg_ok`` (``wgmma_ok``: an sm_90 GPU), 4-bit block-128 weights at 4 and 8 m-tiles
    (M = 25..32, 49..64) take the warpgroup-MMA kernel with permuted activations on N >= ``WG_MIN_N``:
    ``t2w8u1s3b2xhv`` at 4 m-tiles and from ``WG_MINB_N`` rows, else ``t2w8u1s3xhv``; at 8 m-tiles on
    ``XA_MIN_N <= N < XA_NOSPLIT_N`` ``t2w8u1k4s3xh`` (K split 4 ways; permuting A was slower there), and at 8 m-tiles
    on ``XA_NOSPLIT_N <= N < WG_MIN_N`` the barrier pipeline ``t1w8u1s3xhvm`` (``Tactic.mb``): on 14336x4096 at M = 64
    28.8 us against the previous default ``t2w4u1s4x``'s 38.0 (fp16 dense 33.5; H200 2026-12-05, run 1 and run 5 of
    ``benchmarks/results/2026-12-05-h200-next-all``). Against the
    previous default at M = 64: 82.8 us against 96.0 (28672x8192), 144.1 against 187.8 (128256x4096); at M = 32:
    62.9 against 69.3, 107.5 against 134.0; on 14336 and 4096 rows, and at 4 m-tiles on 8192 rows, the ``mma.sync``
    kernels stayed as fast or faster (``benchmarks/results/2026-12-04-h200-wg-pa``; waiting for the MMAs every
    second super-chunk, ``p1``, was no faster). 8-bit block-128 weights take ``MB_TACTIC`` at those m-tiles on
    N >= ``WG_MIN_N`` (``WG8_BITS``), the plain kernel elsewhere.
    Otherwise, with K and the block given, 4-bit weights with >= 4 m-tiles (M >= 25) take the shared-activation kernel
    ``t2w4u1s4x`` (``mma_xa``: 128 rows per CTA, 4-slot ring) on N >= ``XA_NOSPLIT_N`` rows, and at 4 m-tiles
    (M = 25..32) ``t2w4u1k4s4x`` (K split 4 ways) on ``XA_MIN_N <= N < XA_NOSPLIT_N``, where it applies (K a
    multiple of the super-chunk, block >= 32). Fitted to sweeps of its tactics against the plain kernel's
    (4-bit fp16, M = 17, 32, 48, 64, blocks 32 and 128, 28672x8192, 8192x28672, 14336x4096, 4096x14336,
    128256x4096; ``benchmarks/results/2026-12-04-h200-gemm-xa``): on 4096 rows, at 3 m-tiles, and with split-K
    past 4 m-tiles the plain kernel was as fast or faster. Otherwise (``plain_gemm_tactic``) the plain kernel."""
    mt = m_tiles(M)
    if (K is None or block_size is None or N < XA_MIN_N or mt < XA_MIN_M_TILES
            or not xa_applies(K, block_size, bits)):
        return plain_gemm_tactic(N, M)
    if bits in WG8_BITS:
        if wg_ok and block_size in wg_blocks(bits) and mt in WG_M_TILES and N >= WG_MIN_N:
            return MB_TACTIC
        return plain_gemm_tactic(N, M)
    if bits not in XA_BITS:
        return plain_gemm_tactic(N, M)
    if wg_ok and bits in WG_BITS and block_size in wg_blocks(bits) and mt in WG_M_TILES:
        if N >= WG_MIN_N and (mt != WG_M_TILES[0] or N >= WG_MINB_N or block_size in WG_MT4_BLOCKS):
            minb = 2 if (N >= WG_MINB_N or mt == WG_M_TILES[0]) else 0
            return Tactic(2, 8, 1, stages=3, minb=minb, xa=True, wg=True, pa=True)
        if mt == WG_M_TILES[1]:
            if N >= XA_NOSPLIT_N:
                return Tactic(1, 8, 1, stages=3, xa=True, wg=True, pa=True, mb=True)
            return Tactic(2, 8, 1, ksplit=XA_KSPLIT, stages=3, xa=True, wg=True)
    if N >= XA_NOSPLIT_N:
        return Tactic(2, 4, 1, stages=4, xa=True)
    if mt == XA_MIN_M_TILES:
        return Tactic(2, 4, 1, ksplit=XA_KSPLIT, stages=4, xa=True)
    return plain_gemm_tactic(N, M)


def _wide_ok(p) -> bool:
    """The needs of every kernel past M = 64 (``wide_tactic``)."""
    return (MAX_M < p.M <= WG_MAX_M and p.sm == 90 and p.block_size in wg_blocks(p.bits)
            and p.dtype in ("float16", "bfloat16") and p.zero_points in ("none", "packed") and not p.has_g_idx
            and p.N % 8 == 0 and xa_applies(p.K, p.block_size, p.bits) and p.M * p.K // 2 < 2 ** 32)


def wide_tactic(problem) -> Tactic | None:
    """The warpgroup-MMA tactic that serves M = 65..256 (12 / 16 / 24 / 32 m-tiles: wgmma n = 96 / 128 / 192 / 256), or
    None. Past M = 64 the ``fused_gemm`` route takes a problem only where this names a kernel, i.e. where one was
    measured faster than ORT's chain (dequantize + cuBLAS), which keeps the rest. It needs an sm_90 device
    (``problem.sm``), 4-bit weights of blocks ``WG_BLOCKS`` or 8-bit of ``WG8_BLOCKS`` (``WG_BITS``, ``WG8_BITS``),
    fp16/bf16 A, zero points none/packed, K a multiple of the super-chunk, and ``M * K / 2 < 2**32`` (``GemvMmaPlan``);
    then, with activations permuted per call (``pa``):

    * N >= ``XA_NOSPLIT_N``: ``t1w8u1xhvmo`` (``MB_PREPASS_TACTIC``: the pre-pass, ``o``; 128 rows per
      CTA, the barrier pipeline ``Tactic.mb`` with 2 slots: 84 KB of shared memory at 16 m-tiles, two CTAs per SM; one
      at 32). Against the previous ``t1w8u1s3xhv`` in the same run (H200 2026-12-05, run 5 of
      ``benchmarks/results/2026-12-05-h200-next-all``), M = 128 / 256: 111.8 / 200.6 us against 146.1 / 246.9
      (28672x8192), 220.4 / 409.5 against 291.7 / 493.9 (128256x4096), 37.7 / 57.4 against 42.9 / 70.7 (14336x4096); in
      run 1 the 3-slot form ``t1w8u1s3xhvm`` was within 3% of it except at M = 128 on 28672x8192 (124.9 against 113.1);
    * ``XA_MIN_N <= N < XA_NOSPLIT_N``, to 16 m-tiles: ``t2w8u1k4s3xhv`` (K split 4 ways);
    * ``WG_DOWN_MIN_N <= N < XA_MIN_N`` with K >= ``WG_DOWN_MIN_K`` (down projections), 12 m-tiles: ``t1w8u1k4s3xhv``;
    * else None.

    8-bit block-128 weights (``WG8_BITS``): ``t1w8u1xhvm`` on N >= ``WG_MIN_N`` to ``WG8_MAX_M_TILES`` m-tiles
    (M = 65..128), else None.

    The rest was fitted to the five shapes of ``benchmarks/results/2026-12-04-h200-wg-pa`` (4-bit block 128 fp16,
    ``bench_small_gemm``, with ``t1w8u1s3xhv`` on N >= ``XA_NOSPLIT_N``): at M = 96 / 128, 106.0 / 147.4 us against
    the previous default's 148.6 / 188.7 (28672x8192, where M = 97..128 ran as two launches of the M <= 64 kernels),
    159.0 / 194.7 against 169.6 /
    226.8 (8192x28672), at M = 128 42.6 against dequantize + cuBLAS's 76.0 (14336x4096); on 4096x14336
    ``t1w8u1k4s3xhv`` 64.5 against 78.7 at M = 96 (run 6), and only 75.6 against 79.2 at 128 (run 5). Default calls
    at M = 192 / 256 (run 7): 196.7 / 248.4 against 298.6 / 333.6 (28672x8192), 56.6 / 70.5 against 79.0 / 86.8
    (14336x4096), 392.1 / 500.0 against 681.4 at M = 192 (128256x4096); on 8192x28672 ``t1w8u1k4s3xhv`` lost
    (333.7 / 435.9 against 301.5 / 325.5), so 8192..12287 rows stop at 16 m-tiles."""
    p = problem
    if not _wide_ok(p):
        return None
    mt = m_tiles(p.M)
    if p.bits in WG8_BITS:
        return MB_TACTIC if (p.N >= WG_MIN_N and mt <= WG8_MAX_M_TILES) else None
    if p.N >= XA_NOSPLIT_N:
        return MB_PREPASS_TACTIC
    if p.N >= XA_MIN_N and mt <= WG_M_TILES_BEYOND[1]:
        return Tactic(2, 8, 1, ksplit=XA_KSPLIT, stages=3, xa=True, wg=True, pa=True)
    if p.N >= WG_DOWN_MIN_N and p.K >= WG_DOWN_MIN_K and mt == WG_M_TILES_BEYOND[0]:
        return Tactic(1, 8, 1, ksplit=XA_KSPLIT, stages=3, xa=True, wg=True, pa=True)
    return None


def wide_serves(problem) -> bool:
    """Whether a kernel of ours serves ``problem`` past M = 64 (``wide_tactic``)."""
    return wide_tactic(problem) is not None


def plain_gemm_tactic(N: int, M: int) -> Tactic:
    """The plain kernel's launch shape past M = 16, fitted to a sweep of 10 tactics (4-bit fp16, blocks 32 and
    128, M 17..64, 28672x8192, 8192x28672, 14336x4096, 4096x14336, 4096x4096;
    ``benchmarks/results/2026-12-03-h200-small-gemm``): 1.04x the best tactic's time in geometric mean over 66
    cases, 1.39x at worst (4096x14336 block 32, M = 17). The limit at these M is the activations' L2 traffic
    (each warp re-reads A for its own rows), so wide N takes two tiles per warp where the accumulators allow it:

    * N of >= 264 16-row tiles ("big"): 3 m-tiles ``t2w4u1``, 4 ``t1w8u1p1``, 6 ``t2w4u1p1``, 8 ``t2w4u1``;
    * smaller N: up to 4 m-tiles ``t1w8u1p1``, 6 and 8 ``t1w4u2p1``.
    """
    mt = m_tiles(M)
    big = -(-N // TILE_N) // 2 >= 132
    if mt <= 4:
        return Tactic(2, 4, 1) if (big and mt == 3) else Tactic(1, 8, 1, pf=1)
    if not big:
        return Tactic(1, 4, 2, pf=1)
    return Tactic(2, 4, 1, pf=1) if mt == 6 else Tactic(2, 4, 1)


PAIRED_K = "paired_k"
WAVE = "wave"
VARIANTS = (PAIRED_K, WAVE)
#: the problems ORT's paired-K GEMV serves: 4-bit weights, M 5..8
PAIRED_K_BITS = 4
PAIRED_K_M = (5, 8)
#: resident CTAs per SM the wave-aware tactic's launch bounds guarantee, by m-tiles (M <= 8: 1)
WAVE_CTAS_PER_SM = {1: 4, 2: 2}
WAVE_WARPS = 8
#: ring depth of the wave tactic by operand planes per code: two-plane (8-bit) items hold twice the
#: registers, so they keep one item fewer in flight under the same launch bounds
WAVE_RING = {1: 3, 2: 2}


def applies(variant: str, problem) -> bool:
    """Whether ``variant`` can serve ``problem`` (its M, dtype, bits, ...)."""
    p = problem
    if not supports(p) or p.M >= 16:
        return False
    if variant == PAIRED_K:
        return p.dtype == "float16" and p.bits == PAIRED_K_BITS and PAIRED_K_M[0] <= p.M <= PAIRED_K_M[1]
    if variant == WAVE:
        return True
    raise ValueError(f"unknown GEMV tactic variant {variant!r}; variants are {', '.join(VARIANTS)}")


def paired_k_tactic(N: int, K: int, block_size: int, M: int, bits: int = 4, gpu: str = DEFAULT_GPU) -> Tactic:
    """The default tactic's tile shape and pipeline (``gpu``'s table), K split over a pair of CTAs."""
    d = default_tactic(N, K, block_size, M, bits, gpu=gpu)
    if d.ring:  # the ring kernel has no split-K: its non-ring equivalent
        d = Tactic(tpw=d.tpw, warps=d.warps, unroll=1, pf=1, minb=d.minb)
    return Tactic(tpw=d.tpw, warps=d.warps, unroll=d.unroll, pf=d.pf, ksplit=2, stages=d.stages, minb=d.minb,
                  smem=d.smem)


def wave_tactic(N: int, K: int, block_size: int, M: int, bits: int, sm_count: int) -> Tactic:
    """The wave-aware tactic for ``sm_count`` SMs (module docstring)."""
    R = WAVE_CTAS_PER_SM[m_tiles(M)]
    wave = R * sm_count
    groups = -(-N // TILE_N)  # one 16-row tile per warp: the register budget of minb = R
    n_super = -(-K // super_chunk(block_size, bits))
    k = min(8, wave // groups, -(-n_super // WAVE_WARPS))
    if 2 * groups > wave or k < 2:
        return Tactic(tpw=1, warps=WAVE_WARPS, unroll=1, pf=1, minb=R, ring=WAVE_RING[MMA_LAYOUTS[bits].planes], grid=R)
    return Tactic(tpw=1, warps=WAVE_WARPS, unroll=1, pf=1, ksplit=k, minb=R)


def tactic(variant: str, weights, problem) -> Tactic:
    """The ``Tactic`` of ``variant`` for ``problem`` over ``weights``."""
    if not applies(variant, problem):
        raise ValueError(f"GEMV tactic {variant!r} does not serve {problem.describe()}")
    w = weights
    if variant == PAIRED_K:
        t = paired_k_tactic(w.N, w.K, w.block_size, problem.M, w.bits, device_gpu(w.simulated))
        if t.smem:  # the shared-memory pipeline fitted to this specialisation's shared memory
            from .mma_smem import fitted

            t = fitted(t, m_tiles(problem.M), w.block_size, w.zp_kind, w.bits)
        return t
    return wave_tactic(w.N, w.K, w.block_size, problem.M, w.bits, sm_count(w.simulated))
