"""Tensor-core small-M GEMV for 4-, 8- and 2-bit MatMulNBits, fp16/bf16 activations, M = 1..16.

Serves the routes ``gemv_w4``, ``gemv_w8`` and ``gemv_w2`` for fp16/bf16 A (``route_plan``); the
4-bit design is described first, then what 8-bit and 2-bit change ("Other bit widths").

Math
----
``Y[m, n] = sum_b scale[n, b] * sum_{k in block b} (q[n, k] - zp[n, b]) * A[m, k]``.

The weights are the 16-row ``A`` operand of ``mma.sync.m16n8k16`` and the activations its 8-column
``B`` operand, so one MMA computes ``D[n, m]`` for 16 weight rows and 8 activation rows:
``M <= 8`` needs one MMA per 16 rows per 16 k, ``M <= 16`` two ("m-tiles"). Since the MMA cost is
the same for M = 1 and M = 8, latency is nearly flat in M (the kernel streams the weights once).

Numerics: the integer ``q - zp`` (in [-15, 15]) is an exact fp16/bf16 operand, built without any
conversion instruction: ``(0x6400 | q)`` *is* fp16 ``1024 + q`` (bf16: ``0x4300 | q`` = ``128 + q``)
and one packed ``fma(x, 1, -(1024 + zp))`` (``0xE400 | zp`` is fp16 ``-(1024 + zp)``) leaves exactly
``q - zp`` in both halves of a register. Products with fp16/bf16 activations are exact and the
tensor core sums them in fp32 over one quantization block; the block's partial sums are then
multiplied by the block scale in fp32 and accumulated in fp32. No weight is ever rounded, so the
only roundings are the fp32 accumulations and the final store (more exact than dequantize+cuBLAS).

Packed weight layout (built once per ``Weights`` via ``weights.derived``; key ``gemv_mma_w<bits>``)
---------------------------------------------------------------------------------------
Rows are padded to ``N_pad = ceil(N/32)*32`` (zero codes, zero scales), K to
``K_pad = ceil(K / KS) * KS`` with ``KS = max(64, block_size)`` (one "super-chunk": a whole number
of 64-k chunks and of quantization blocks). Padded activations (k >= K) are never loaded (zeros),
so padded codes contribute nothing.

* ``bq`` uint32 ``[N_pad/16 tiles][K_pad/64 chunks][32 lanes][4 steps]``: lane ``(g, t)`` =
  ``(lane >> 2, lane & 3)`` reads its 16 bytes of one chunk with one 16-byte ``ld.global.nc``
  (a warp reads 512 contiguous bytes). Word ``s`` holds the 8 codes the lane needs for MMA step
  ``s`` (16 k) of the chunk: nibbles ``0,4`` = a0 (row g), ``1,5`` = a1 (row g+8), ``2,6`` = a2
  (row g), ``3,7`` = a3 (row g+8), so ``(w >> 4r) & 0x000F000F`` is fragment register ``r``.
* K order inside a step is permuted (any permutation works if A and B agree): with
  ``KG = min(block_size, 64)`` and ``SG = KG/16`` steps per k-group, the logical fragment columns
  ``2t, 2t+1, 2t+8, 2t+9`` of step ``σ`` of group ``γ`` are the physical ``k = γ*KG + 4*SG*t + 4σ
  + (0, 1, 2, 3)``. Every step stays inside one quantization block, and each lane's activations
  of a k-group are ``4*SG`` contiguous values: one or two 16-byte loads (8-byte pairs for block 16).
* ``scales`` ``[tiles][K_pad/KS][8 g][2 h][KS/block_size]`` (row ``16*tile + 8h + g``) in the
  activation dtype (bf16 as bits), so lane ``g``'s scales of rows g and g+8 are adjacent: one
  32-bit word per quantisation block pair (``pf >= 1`` reads them as words); ``zp`` uint8 in the
  same layout (packed zero points only; absent = 8).

Other bit widths (same kernels; ``bits`` is a compile-time parameter of the generators)
-----------------------------------------------------------------------------------------
* **8-bit**: each code is split into two 4-bit planes, ``q = 16 * (q >> 4) + (q & 15)``, both packed in the
  4-bit layout above (``pack_weights``: per 64-k chunk the low-nibble vector, then the high-nibble vector, so
  a super-chunk has ``2 * KS / 64`` 16-byte loads per lane and tile). The low plane decodes as in 4-bit
  with ``zp & 15``; the high plane with ``fma2(0x6400 | qh, 16.0, -(16384 + 16 * (zp >> 4)))`` (fp16;
  bf16: ``0x4300 | qh``, 16.0, ``-(2048 + 16 * (zp >> 4))``), which is exactly ``16 * (qh - zh)``: the
  product and the sum are representable (fp16 spacing 16 above 16384, bf16 above 2048), so each plane is
  an exact MMA operand and both MMAs accumulate into the same fp32 partial. Default zero point 128
  (low nibble 0, high 8).
* **2-bit**: super-chunks of ``KS = max(128, block_size)`` k; a word holds the codes of two consecutive
  16-k steps (step ``2q`` in bits ``4n, 4n + 1``, step ``2q + 1`` in bits ``4n + 2, 4n + 3`` of nibble
  ``n`` of the 4-bit layout) and a 16-byte vector two 64-k chunks, so a lane loads 16 bytes per 128 k.
  Decode: shift by ``4r`` (plus 2 for the odd step), mask ``0x00030003``. Default zero point 2.
  Block 16 gives 8 quantisation blocks per super-chunk (two 16-byte scale loads per lane).
* ``_step_planes`` maps an MMA step to (vector, word, shift, plane); ``TUNED_BITS`` holds the tactics fitted
  to ``perf/sweep_gemv_m1.py --bits 8`` / ``--bits 2`` on the H200.

Thread mapping and guards
-------------------------
A block is ``WARPS`` warps (split-K) over ``TPW`` 16-row tiles; ``KSPLIT`` consecutive blocks share
those tiles and split K further. Warp ``w`` of split ``s`` takes super-chunks ``s*WARPS + w``, then
every ``WARPS*KSPLIT``-th, in groups of ``UNROLL``; the next ``STAGES - 1`` groups are loaded before the
current group is computed (a register ring; 2 stages = double buffering). Partial results are summed
across warps through shared memory and stored (with ``KSPLIT > 1``: written to a workspace slice, and
the block that arrives last sums the slices in order and stores). Bias is not fused: the route adds
it after. Guards (``supports``):
bits 2/4/8, fp16/bf16, 1 <= M <= 16, block 16/32/64/128, zero points none/packed, no g_idx,
N % 8 == 0, K % 8 == 0, A 16-byte aligned (checked by ``run``).

Memory-level parallelism at M=1 (analysis for the "GEMV family" issue; ptxas numbers from
``perf/ptx_stats.py``, sm_90a; H200: 132 SMs, 64K registers and <= 64 warps per SM)
-----------------------------------------------------------------------------------------------
The H200 needs ~4.26 TB/s x ~0.8-1 us of loaded DRAM latency / 132 SMs = 26-32 KB in flight per
SM. What the original kernel (``pf=0``) keeps in flight per warp is one stage, ``unroll * tpw *
KS/64 * 512`` bytes (the stage being computed already arrived): 0.5-2 KB. Occupancy is set by
registers, not shared memory: the default tactics need 58-98 registers (t2w8u1: 75 at g32, 98 at
g128), i.e. 2-4 blocks of 8 warps per SM, 16-32 warps. So 28672x8192 g128 (t2w8u1) runs 16 warps
x 2 KB = 32 KB per SM and g32 24 x 1 KB = 24 KB: at or under the latency-bandwidth product.

* Scales at block 32 are 1/8 of the weight bytes; the original kernel loads them as 2-byte
  scalars (4 loads per tile per 64 k at g32, lanes of one ``g`` load the same address) *when the
  stage is computed*, not with the weights; so are the activations (L2 hits, 16-byte loads).
  Each iteration therefore waits one extra memory latency with nothing else of that warp in
  flight: the main reason g32 is slower than g128 (76 vs 54 us on 28672x8192; the weights
  differ by 12%). ``pf=1`` loads the scales with the weights (one 32-bit word per tile per
  quantisation-block pair: the layout puts a lane's rows g and g+8 side by side; 16 bytes at
  block 16) and converts fp16 bits to fp32 exactly with integer ops; ``pf=2`` prefetches the
  activations too.
* Waves: 28672 rows = 1792 tiles; at tpw 2 that is 896 blocks, at 3 blocks/SM (75 regs) 2.26
  waves (the third 26% full), at 2/SM (98 regs, g128) 3.39. ``minb`` (launch bounds) trades
  registers for occupancy (t2w8u1b4: 64 registers, no spill at g32: 4 blocks, 1.7 waves);
  ``ksplit`` makes the work units smaller (t1w8 k2: 3584 units) and fills small N (4096 rows =
  256 tiles: under 2 blocks per SM at ksplit 1, hence 7.3 us for 4096x4096). The split-K
  reduction costs ``ksplit * M * N * 4`` bytes written and read once (0.1% of the weights at M=1)
  plus one atomic per block.
* Deeper pipelines: ``stages`` 3-4 keep 2-3 stages in flight for 3-4 stages of registers
  (double buffering with a larger ``unroll`` keeps ``unroll`` in flight for 2x). Registers are the
  limit: every 512 bytes in flight per warp costs 4 registers per lane per buffered stage.
* Instruction overhead per 16 bytes (32 codes) per lane: 4 x (shift, and|or, HFMA2) for the
  exact ``q - zp`` fp16 pairs = ~12-16 instructions + 4 HMMA + 4 FFMA per quantisation block
  for the scale. Per SM the weights arrive at ~32 B/clk (4.26 TB/s / 132 / 1.98 GHz), i.e. one
  warp-load of 512 bytes per 16 clocks against ~16-20 warp instructions for it: about 1/4 of
  the SM's 4 issue slots per clock. Not the limit, but not free: 8-warp blocks at 32 warps/SM
  still have 3/4 of the issue bandwidth idle waiting on memory.
* mma at M=1 wastes 7/8 of the tensor core's N columns, but the tensor core is not the limit;
  the alternative, a CUDA-core dot product, needs per 8 codes the same 4 decode steps plus 4
  HFMA2 (fp16 accumulation, outside the fp32 contract unless partial sums are converted every few
  steps) or 8 FFMA after 8 conversions, instead of one HMMA: the mma kernel issues fewer
  instructions per byte even at M=1, and stays flat to M=8. No CUDA-core M=1 kernel was added.

Why the tactics above stop at ~2.4 TB/s (block 128) / ~2.0 TB/s (block 32), and the ring kernel
-----------------------------------------------------------------------------------------------
From the H200 sweep (``perf/results/2026-11-30-h200-gemv-m1``) joined with the ptxas occupancy
(``perf/results/2026-11-30-gemv-m1-ptxas``), 28672x8192 M=1:

* TB/s does not follow the nominal bytes in flight per SM: block 128, t1w8u1 (32 KB/SM) 2.31,
  t1w8u1p1s3 (66 KB) 2.27, t1w8u1p1s4b4 (99 KB) 2.14 TB/s. What it follows is the number of
  super-chunks each warp streams per work unit (K / 64-or-128 / warps / ksplit): at equal registers
  and occupancy, t1w8u1p1 with 8, 4, 2 iterations per warp (k1, k2, k4) takes 53.8, 59.4, 64.8 us;
  block 32 with 16, 8, 4: 68.0, 77.0, 81.0 us. Every work unit (one CTA: its tile group's K split
  over the warps) starts with an empty pipeline (``stages - 1`` groups issued, then a full memory
  latency with nothing else of that warp in flight), drains at its end (the last ``stages - 1``
  iterations issue nothing) and ends with a barrier, a shared-memory reduction and a store before
  the SM can start the next CTA. The fit: ~1.6 us per extra work unit per warp slot (k1 -> k2 adds
  3.4 units per slot and 5.6 us), so at k1 the fill/drain alone costs ~10%, and the deeper rings
  (s3/s4) lose because with 8-16 iterations per warp most of their extra depth is spent filling and
  draining (and their registers cost occupancy or ``minb`` pressure), not streaming.
* Waves: 1.7-3.4 waves of CTAs on 28672 rows; the partial last wave is a further ~5-15%.
* Not the limit: issue slots (~55-80 warp instructions per 512-byte warp load, ~1/3 of the
  SM's issue rate at 2.4 TB/s), DRAM locality (each warp reads 512 contiguous bytes; the 8 warps
  of a CTA read 4-8 KB contiguous per iteration), the tensor core.
* Block 32 additionally moves 1/8 more bytes (scales) in 64-byte requests (8 lanes' words per
  warp load), so per request it carries 576 bytes instead of 1056 at block 128: with the same
  request slots per SM, fewer bytes in flight.

The ring kernel (``Tactic.ring = D``, optional ``grid``: persistent CTAs per SM; ``_gen_ring_source``)
removes the per-unit fill/drain: each warp walks a flat list of items (tile group, super-chunk) over
all the tile groups its CTA owns, items live in ``D`` static register slots (the loop body is unrolled
``D`` times, no ring-rotation copies), and the loads of the next ``D - 1`` items (weights and scale
words) are issued before an item is computed, also across tile-group boundaries: the cross-warp
reduction of a group (double-buffered shared memory, one barrier) happens while the next group's
loads are in flight. With ``grid = g`` the launch has ``min(groups, g * SMs)`` CTAs that stride over
the tile groups: one wave, no tail (except the uneven last group per CTA). ``minb`` caps it at 64
registers (32 warps per SM) without spills for ``D`` = 3 at block 128 and ``D`` <= 5 at block 32,
i.e. 2 KB (block 128) / 2.3 KB (block 32, D 5) in flight per warp, 64-74 KB per SM, continuously.
At block 32 it loads a lane's two scale words with one 8-byte ``ldg_v2`` (``pf=1``: two 4-byte loads).

The kernel body is generated as Python source with every loop over registers unrolled (so numba
keeps accumulators and fragments in registers): see ``_gen_source``.
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

ROUTE = "gemv_mma"
BLOCK_SIZES = (16, 32, 64, 128)
TILE_N = 16
ROW_PAD = 32  # rows padded to a multiple of the largest TPW * 16
MAX_M = 16

#: weight bit widths served (8-bit as two 4-bit planes, 2-bit two 16-k steps per word: module doc)
BITS = (2, 4, 8)
#: the default zero point when the zero_points input is absent (``2^(bits-1)``)
DEFAULT_ZP = {2: 2, 4: 8, 8: 128}
#: the smallest super-chunk (k per work item) by bits: 2-bit needs 128 k for one 16-byte load per lane
KS_MIN = {2: 128, 4: 64, 8: 64}

# fp16 / bf16 bit constants: magic base (0x6400 = 1024.0, 0x4300 = 128.0), 1.0 pair, -(base) high byte;
# for the high plane of 8-bit codes: 16.0 pair and -(16 * base) high byte (fp16 -16384 = 0xF400,
# bf16 -2048 = 0xC500), whose low mantissa bits hold the high nibble of the zero point exactly
_CONST = {
    "float16": dict(MAGIC=0x64006400, ONE=0x3C003C00, NEG=0xE400, ONE16=0x4C004C00, NEG16=0xF400),
    "bfloat16": dict(MAGIC=0x43004300, ONE=0x3F803F80, NEG=0xC300, ONE16=0x41804180, NEG16=0xC500),
}


@dataclass(frozen=True)
class Tactic:
    """Launch shape (all compile-time): ``tpw`` 16-row tiles per block, ``warps`` split-K warps,
    ``unroll`` super-chunks per pipeline stage (register double buffering: the next stage is loaded
    before the current one is computed).

    Variants added for the M=1 bandwidth work (defaults = the original kernel; see "Memory-level
    parallelism" in the module docstring):

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
      ``minb`` blocks fit on an SM (65536 registers). The plain kernel needs 71-91 registers at
      M=1 (ptxas, sm_90a), i.e. 3 blocks of 8 warps per SM; 28672 rows at tpw 2 are then 896 blocks
      = 2.26 waves of 396: the third wave runs 26% full. ``minb=4`` (64 registers) makes 1.7 waves
      and 32 resident warps; it may spill (check ``perf/ptx_stats.py``).
    * ``ring``: when >= 2, the ring kernel (module docstring, "the ring kernel"): ``ring - 1`` work items
      in flight per warp across tile-group boundaries; needs ``unroll=1``, ``pf=1``, no split-K, 2 stages.
    * ``grid``: with ``ring``, a persistent launch of ``min(groups, grid * SM count)`` CTAs striding
      over the tile groups (0: one CTA per tile group).
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

    def __post_init__(self):
        if (self.tpw < 1 or self.warps < 1 or self.unroll < 1 or self.pf not in (0, 1, 2) or self.ksplit < 1
                or self.stages not in (2, 3, 4) or not 0 <= self.minb <= 32 or not 0 <= self.ring <= 16
                or not 0 <= self.grid <= 32):
            raise ValueError(f"bad gemv_mma tactic {self}")
        if self.ring and (self.ring < 2 or self.unroll != 1 or self.pf != 1 or self.ksplit != 1 or self.stages != 2):
            raise ValueError(f"gemv_mma ring tactics need ring >= 2, u1, p1, no k/s: {self}")
        if self.grid and not self.ring:
            raise ValueError(f"gemv_mma: a persistent grid (g) needs the ring kernel (r): {self}")

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
        return s

    @staticmethod
    def parse(tag: str) -> "Tactic":
        """Inverse of ``tag`` (e.g. ``"t2w8u1p1k2"``)."""
        import re

        m = re.fullmatch(r"t(\d+)w(\d+)u(\d+)(?:p(\d))?(?:k(\d+))?(?:s(\d))?(?:b(\d+))?(?:r(\d+))?(?:g(\d+))?", tag)
        if not m:
            raise ValueError(f"not a gemv_mma tactic tag: {tag!r}")
        t, w, u, p, k, st, b, r, gr = m.groups()
        return Tactic(int(t), int(w), int(u), int(p or 0), int(k or 1), int(st or 2), int(b or 0), int(r or 0),
                      int(gr or 0))


#: Tuned tactics: ``(N, K, block_size, m_class) -> tactic tag`` (``Tactic.parse``), ``m_class`` =
#: ``m_class(M)``; fitted to an H200 run of ``perf/sweep_gemv_m1.py`` (``--fit`` prints this table).
#: Shapes it does not cover use ``default_tactic``'s rule below; ``tuned_tactic`` serves other
#: shapes from the nearest swept one. Tags with ``k`` (split-K across CTAs) make a plan own a
#: workspace, so the fit takes them only when they win by a clear margin (see the sweep script).
# fitted from the H200 sweep of 2026-11-30 (perf/results/2026-11-30-h200-gemv-m1/, 663/663 rows correct;
# split-K tactics allowed only with a 10% margin, none chosen)
TUNED: dict = {
    (4096, 4096, 32, 1): 't1w8u2p1',
    (4096, 4096, 32, 8): 't1w8u2p1b4',
    (4096, 4096, 32, 16): 't1w8u1p1',
    (4096, 4096, 128, 1): 't1w8u1p1',
    (4096, 4096, 128, 8): 't1w8u1p1',
    (4096, 4096, 128, 16): 't1w8u1',
    (4096, 14336, 32, 1): 't1w8u2p1',
    (4096, 14336, 32, 8): 't1w8u2p1',
    (4096, 14336, 32, 16): 't1w8u1p1',
    (4096, 14336, 128, 1): 't1w8u1p1s3',
    (4096, 14336, 128, 8): 't1w8u1p1s3',
    (4096, 14336, 128, 16): 't1w8u1',
    (8192, 28672, 32, 1): 't2w8u2',
    (8192, 28672, 32, 8): 't1w8u1p1s3',
    (8192, 28672, 32, 16): 't2w8u1',
    (8192, 28672, 128, 1): 't2w8u1',
    (8192, 28672, 128, 8): 't2w8u1',
    (8192, 28672, 128, 16): 't2w4u1',
    (14336, 4096, 32, 1): 't1w8u2p1b4',
    (14336, 4096, 32, 8): 't1w8u1p1',
    (14336, 4096, 32, 16): 't2w4u1p1',
    (14336, 4096, 128, 1): 't1w8u1p1',
    (14336, 4096, 128, 8): 't1w8u1p1',
    (14336, 4096, 128, 16): 't2w4u1p1',
    (28672, 8192, 32, 1): 't1w4u2p1',
    (28672, 8192, 32, 8): 't1w4u2p1',
    (28672, 8192, 32, 16): 't2w4u1p1',
    (28672, 8192, 128, 1): 't2w4u1',
    (28672, 8192, 128, 8): 't2w4u1',
    (28672, 8192, 128, 16): 't2w4u1p1',
    (128256, 4096, 32, 1): 't2w4u1',
    (128256, 4096, 32, 8): 't2w8u1',
    (128256, 4096, 32, 16): 't2w4u1p1',
    (128256, 4096, 128, 1): 't2w4u1',
    (128256, 4096, 128, 8): 't2w4u1',
    (128256, 4096, 128, 16): 't2w4u1p1',
}


#: Tuned tactics for 8-bit and 2-bit weights, same keys: fitted to the H200 sweeps
#: ``perf/sweep_gemv_m1.py --bits 8`` (600/600 rows correct) and ``--bits 2`` (303/303) of 2026-11-30
#: (perf/results/2026-11-30-h200-gemv-lowbit-sweep/; split-K only with a 10% margin, none chosen)
TUNED_BITS: dict = {8: {}, 2: {}}
TUNED_BITS[8] = {
    (4096, 4096, 32, 1): 't1w8u1p1s3',
    (4096, 4096, 32, 8): 't1w8u1p1s3',
    (4096, 4096, 32, 16): 't1w8u1p1s3',
    (4096, 4096, 128, 1): 't1w8u1',
    (4096, 4096, 128, 8): 't1w8u1',
    (4096, 4096, 128, 16): 't1w8u1p1',
    (4096, 14336, 32, 1): 't1w8u1p1s3',
    (4096, 14336, 32, 8): 't1w8u1p1s3',
    (4096, 14336, 32, 16): 't2w8u1',
    (4096, 14336, 128, 1): 't1w8u1',
    (4096, 14336, 128, 8): 't1w8u1',
    (4096, 14336, 128, 16): 't1w8u1p1s3',
    (8192, 28672, 32, 1): 't2w8u1',
    (8192, 28672, 32, 8): 't2w8u1',
    (8192, 28672, 32, 16): 't2w8u1',
    (8192, 28672, 128, 1): 't1w8u1',
    (8192, 28672, 128, 8): 't1w8u1',
    (8192, 28672, 128, 16): 't1w8u1p1s3',
    (14336, 4096, 32, 1): 't1w8u1p1s3',
    (14336, 4096, 32, 8): 't1w8u1p1s3',
    (14336, 4096, 32, 16): 't2w8u1',
    (14336, 4096, 128, 1): 't1w8u1',
    (14336, 4096, 128, 8): 't1w8u1p1b4',
    (14336, 4096, 128, 16): 't1w4u1p1',
    (28672, 8192, 32, 1): 't2w8u1',
    (28672, 8192, 32, 8): 't2w4u1',
    (28672, 8192, 32, 16): 't2w8u1',
    (28672, 8192, 128, 1): 't2w4u1',
    (28672, 8192, 128, 8): 't2w4u1',
    (28672, 8192, 128, 16): 't2w4u1p1',
    (128256, 4096, 32, 1): 't2w4u1',
    (128256, 4096, 32, 8): 't2w4u1',
    (128256, 4096, 32, 16): 't2w4u1',
    (128256, 4096, 128, 1): 't2w4u1',
    (128256, 4096, 128, 8): 't2w4u1',
    (128256, 4096, 128, 16): 't2w4u1',
}
TUNED_BITS[2] = {
    (4096, 4096, 64, 1): 't1w8u2p1',
    (4096, 4096, 64, 8): 't1w8u2p1',
    (4096, 14336, 64, 1): 't1w8u2p1',
    (4096, 14336, 64, 8): 't1w8u2p1',
    (8192, 28672, 64, 1): 't2w8u1',
    (8192, 28672, 64, 8): 't2w8u1',
    (14336, 4096, 64, 1): 't2w8u1',
    (14336, 4096, 64, 8): 't2w8u1',
    (28672, 8192, 64, 1): 't2w8u1',
    (28672, 8192, 64, 8): 't2w8u1',
    (128256, 4096, 64, 1): 't2w4u1',
    (128256, 4096, 64, 8): 't2w4u1',
}


def m_class(M: int) -> int:
    """1 for M = 1, 8 for M = 2..8 (one m-tile), 16 for M = 9..16 (two m-tiles)."""
    return 1 if M <= 1 else 8 if M <= 8 else 16


def tuned_tactic(N: int, K: int, block_size: int, M: int = 1, table: dict | None = None) -> Tactic | None:
    """The ``TUNED`` tactic of the nearest swept shape with the same ``m_class`` (block 16 uses the
    block-32 entries, 64 the block-128 ones, when it has none of its own), by distance in
    ``log N + log K``; None when the table is empty for that class or the nearest shape is more than
    2x away in N or in K (tiny routers etc. keep the rule)."""
    import math

    table = TUNED if table is None else table
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


def default_tactic(N: int, K: int, block_size: int, M: int = 1, bits: int = 4) -> Tactic:
    """Pick the launch shape: the ``TUNED`` table (``tuned_tactic``) when it covers the shape, else
    rules fitted to a sweep of all 12 tactics (tpw 1/2 x warps 4/8 x unroll
    1/2/4) on the H200 (2026-11-30, 4-bit g32 fp16, M 1/4/16, 4096x4096, 28672x8192, 8192x28672,
    128256x4096), where they pick the best tactic or one within 2% of it, except 4096x4096 (within 7%):

    * two 16-row tiles per block once that still gives >= 1 block per SM (halves activation reads
      per weight byte): 28672x8192 M=16 88 us vs 99 us with one tile;
    * unroll 1 on large N (2 for K >= 16384 at M <= 8, where fewer blocks need more loads in flight:
      8192x28672 M=1 73 us vs 83 us); small N keeps 2 (1 for block 128, already two loads per tile);
    * 8 split-K warps when each keeps >= 2*unroll super-chunks; 4 for M > 8 with K <= 8192 on large N
      (the two-m-tile kernel's registers: 128256x4096 M=16 183 us with 4 warps vs 219 us with 8).
    """
    tuned = tuned_tactic(N, K, block_size, M, TUNED if bits == 4 else TUNED_BITS.get(bits, {}))
    if tuned is not None:
        return tuned
    tiles = -(-N // TILE_N)
    big = tiles // 2 >= 132
    ks = max(KS_MIN[bits], block_size)
    nv = n_vectors(bits, ks)  # 16-byte loads per lane per tile and super-chunk (4-bit: 1 or 2)
    tpw = 2 if big and nv <= 2 else 1
    n_super = -(-K // ks)
    if big:
        # (4-bit as swept; 8-bit keeps unroll 1 for its two or four loads per tile: registers)
        unroll = 2 if (K >= 16384 and M <= 8 and (bits == 4 or nv == 1)) else 1
    else:
        unroll = 1 if nv > 1 else 2
    warps = 8 if n_super >= 8 * 2 * unroll else 4 if n_super >= 4 * unroll else 2
    if big and M > 8 and K <= 8192 and warps == 8:
        warps = 4
    return Tactic(tpw=tpw, warps=warps, unroll=unroll)


def supports(problem) -> bool:
    p = problem
    return (p.bits in BITS and p.dtype in ("float16", "bfloat16") and 1 <= p.M <= MAX_M
            and p.block_size in BLOCK_SIZES and p.zero_points in ("none", "packed") and not p.has_g_idx
            and p.N % 8 == 0 and p.K % 8 == 0 and p.K > 0 and p.N > 0)


# --------------------------------------------------------------------------------- prepacking

def _geometry(K: int, block_size: int, bits: int = 4):
    ks = max(KS_MIN[bits], block_size)
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


def pack_weights(codes: np.ndarray, K_pad: int, block_size: int, bits: int) -> np.ndarray:
    """Codes ``(N, >=K)`` uint8 -> ``bq`` uint32 ``[tiles][super-chunks][vectors][32 lanes][4 words]``
    (flat) for ``bits`` (module doc): 4-bit is ``pack_codes_for_mma``; 8-bit interleaves the low-nibble
    and the high-nibble plane, each in the 4-bit layout, per 64-k chunk; 2-bit puts the 2-bit codes of
    two consecutive 16-k steps into one word (steps 2q at bit 4n, 2q + 1 at bit 4n + 2) and two 64-k
    chunks into one 16-byte vector."""
    if bits == 4:
        return pack_codes_for_mma(codes, K_pad, block_size)
    n_pad = -(-codes.shape[0] // ROW_PAD) * ROW_PAD
    T, nch = n_pad // 16, K_pad // 64
    if bits == 8:
        lo = pack_codes_for_mma(codes & np.uint8(15), K_pad, block_size).reshape(T, nch, 32, 4)
        hi = pack_codes_for_mma(codes >> np.uint8(4), K_pad, block_size).reshape(T, nch, 32, 4)
        return np.stack([lo, hi], axis=2).reshape(-1)
    if bits == 2:
        if nch % 2:
            raise ValueError(f"2-bit K_pad={K_pad} must be a multiple of 128")
        w = pack_codes_for_mma(codes & np.uint8(3), K_pad, block_size).reshape(T, nch, 32, 4)
        w2 = w[..., 0::2] | (w[..., 1::2] << np.uint32(2))  # (T, nch, lane, step pair)
        w2 = w2.reshape(T, nch // 2, 2, 32, 2).transpose(0, 1, 3, 2, 4)  # (T, vector, lane, chunk, pair)
        return np.ascontiguousarray(w2).reshape(-1)
    raise ValueError(f"gemv_mma packs bits in {BITS}, got {bits}")


def unpack_weights(words: np.ndarray, N: int, K_pad: int, block_size: int, bits: int) -> np.ndarray:
    """Inverse of ``pack_weights`` (tests): flat words -> codes ``(N, K_pad)`` uint8."""
    if bits == 4:
        return unpack_codes_from_mma(words, N, K_pad, block_size)
    n_pad = -(-N // ROW_PAD) * ROW_PAD
    T, nch = n_pad // 16, K_pad // 64
    w = np.asarray(words, np.uint32)
    if bits == 8:
        w = w.reshape(T, nch, 2, 32, 4)
        lo = unpack_codes_from_mma(np.ascontiguousarray(w[:, :, 0]).reshape(-1), N, K_pad, block_size)
        hi = unpack_codes_from_mma(np.ascontiguousarray(w[:, :, 1]).reshape(-1), N, K_pad, block_size)
        return lo | (hi << np.uint8(4))
    if bits == 2:
        w2 = w.reshape(T, nch // 2, 32, 2, 2).transpose(0, 1, 3, 2, 4).reshape(T, nch, 32, 2)
        w4 = np.zeros((T, nch, 32, 4), np.uint32)
        w4[..., 0::2] = w2 & np.uint32(0x33333333)
        w4[..., 1::2] = (w2 >> np.uint32(2)) & np.uint32(0x33333333)
        return unpack_codes_from_mma(w4.reshape(-1), N, K_pad, block_size)
    raise ValueError(f"gemv_mma packs bits in {BITS}, got {bits}")


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
    bq: DevArray
    scales: DevArray
    zp: DevArray | None
    N_pad: int
    K_pad: int
    n_super: int


def prepack(weights) -> Packed:
    """The layout of the module docstring, built once per ``Weights`` (``weights.derived``)."""
    def build():
        from ..formats import unpack_codes, unpack_zero_points

        N, K, bs, bits = weights.N, weights.K, weights.block_size, weights.bits
        ks, kg, n_super, K_pad = _geometry(K, bs, bits)
        codes = unpack_codes(np.asarray(weights.host["B"]).reshape(N, weights.k_blocks, -1), None, bits, bs)
        bq = pack_weights(codes, K_pad, bs, bits)
        kb_pad = K_pad // bs
        sc = np.asarray(weights.host["scales"]).reshape(N, weights.k_blocks)
        sc_bits = sc.view(np.uint16) if weights.dtype == "bfloat16" else sc.astype(np.float16)
        sc_l = _per_block_layout(sc_bits, N, kb_pad, ks, bs, sc_bits.dtype)
        zp_l = None
        if weights.zp_kind == "packed":
            zp = unpack_zero_points(np.asarray(weights.host["zero_points"]), weights.k_blocks, bits, N=N)
            zp_l = to_device(_per_block_layout(zp, N, kb_pad, ks, bs, np.uint8), weights.simulated)
        n_pad = -(-N // ROW_PAD) * ROW_PAD
        return Packed(bq=to_device(bq, weights.simulated), scales=to_device(sc_l, weights.simulated), zp=zp_l,
                      N_pad=n_pad, K_pad=K_pad, n_super=n_super)

    return weights.derived(f"gemv_mma_w{weights.bits}", build)


# ------------------------------------------------------------------------------ kernel source

def _step_planes(bits: int, s: int):
    """Where the codes of MMA step ``s`` (16 k) of a super-chunk live: ``(vector, word, shift, plane)``
    per operand plane (``plane`` 1 = the high nibbles of 8-bit codes, scaled by 16 in the decode)."""
    c, q = divmod(s, 4)  # 64-k chunk, step in the chunk
    if bits == 4:
        return ((c, q, 0, 0),)
    if bits == 8:
        return ((2 * c, q, 0, 0), (2 * c + 1, q, 0, 1))
    return ((c // 2, 2 * (c % 2) + q // 2, 2 * (q % 2), 0),)  # 2-bit


def _emit_zero_points(e, ind: int, bits: int, c: dict, zp) -> None:
    """The negated zero-point pairs ``nz_lo``/``nz_hi`` (rows g, g + 8; 8-bit: the low plane) and, for
    8-bit, ``nh_lo``/``nh_hi`` (the high plane: -16 * (base + zp >> 4)); ``zp``: the two zero-point
    expressions (uint32) of rows g and g + 8, or None for the default zero point."""
    if zp is None:  # the same constant for both rows
        if bits == 8:  # 128: low nibble 0, high nibble 8
            e(ind, f"nz_lo = np.uint32({c['NEG'] * 0x10001})")
            e(ind, f"nh_lo = np.uint32({(c['NEG16'] | 8) * 0x10001})")
            e(ind, "nh_hi = nh_lo")
        else:
            e(ind, f"nz_lo = np.uint32({(c['NEG'] | DEFAULT_ZP[bits]) * 0x10001})")
        e(ind, "nz_hi = nz_lo")
        return
    for h, name in ((0, "lo"), (1, "hi")):
        if bits == 8:
            e(ind, f"nz_{name} = (np.uint32({c['NEG']}) | ({zp[h]} & np.uint32(15))) * np.uint32(65537)")
            e(ind, f"nh_{name} = (np.uint32({c['NEG16']}) | ({zp[h]} >> np.uint32(4))) * np.uint32(65537)")
        else:
            e(ind, f"nz_{name} = (np.uint32({c['NEG']}) | {zp[h]}) * np.uint32(65537)")


def _emit_block_mma(e, ind: int, *, i: int, bb: int, MT: int, SPB: int, SG: int, c: dict, s_lo: str, s_hi: str,
                    zp, word, bits: int = 4) -> None:
    """Emit one quantisation block ``bb`` of tile ``i`` (both generators): its scales (``s_lo`` / ``s_hi``:
    expressions of the fp32 scales of rows g and g + 8) and, with packed zero points, the negated
    zero-point pairs (``zp``: the two uint32 zero-point expressions, else None); then, per 16-k step,
    the four decoded B fragments of each operand plane (``_step_planes``: weight word
    ``word(vector)[word]``, magic-number decode with ``fma2``) and one ``mma`` per plane and m-tile into
    fresh fp32 partials; then ``acc += scale * partial``."""
    e(ind, f"s_lo = {s_lo}")
    e(ind, f"s_hi = {s_hi}")
    if zp is not None:
        _emit_zero_points(e, ind, bits, c, zp)
    mask = "0x00030003" if bits == 2 else "0x000F000F"
    for mt in range(MT):
        for r in range(4):
            e(ind, f"p_{mt}_{r} = np.float32(0)")
    for ss in range(SPB):
        s = bb * SPB + ss
        G, sig = divmod(s, SG)
        for j, wi, sh, plane in _step_planes(bits, s):
            e(ind, f"wd = {word(j)}[{wi}]")
            one = c["ONE16"] if plane else c["ONE"]
            for r in range(4):
                nz = ("nh_" if plane else "nz_") + ("lo" if r % 2 == 0 else "hi")
                e(ind, f"f{r} = fma2((np.uint32(wd >> np.uint32({4 * r + sh})) & np.uint32({mask})) "
                       f"| np.uint32({c['MAGIC']}), np.uint32({one}), {nz})")
            for mt in range(MT):
                e(ind, f"p_{mt}_0, p_{mt}_1, p_{mt}_2, p_{mt}_3 = mma(f0, f1, f2, f3, "
                       f"b_{mt}_{G}_{2 * sig}, b_{mt}_{G}_{2 * sig + 1}, p_{mt}_0, p_{mt}_1, p_{mt}_2, p_{mt}_3)")
    for mt in range(MT):
        e(ind, f"acc_{i}_{mt}_0 += s_lo * p_{mt}_0")
        e(ind, f"acc_{i}_{mt}_1 += s_lo * p_{mt}_1")
        e(ind, f"acc_{i}_{mt}_2 += s_hi * p_{mt}_2")
        e(ind, f"acc_{i}_{mt}_3 += s_hi * p_{mt}_3")


def _gen_source(act: str, MT: int, tac: Tactic, BS: int, ZP: str, bits: int = 4, l2pf: bool = False) -> str:
    """Python source of the kernel for one specialisation (see module docstring and ``Tactic``);
    ``l2pf``: also ``prefetch_l2`` the weights ``L2PF_AHEAD`` stages beyond each loaded one."""
    TPW, W, U = tac.tpw, tac.warps, tac.unroll
    PF, KSP, S = tac.pf, tac.ksplit, tac.stages
    WS = W * KSP  # warps that share one tile group's K loop (split-K stride)
    KS = max(KS_MIN[bits], BS)
    NV = n_vectors(bits, KS)
    KG = min(BS, 64)
    SG = KG // 16
    BPS = KS // BS
    SPB = BS // 16
    NG = KS // KG  # k-groups per super-chunk
    c = _CONST[act]
    E = TPW * MT * 4 * 32
    L = []

    def e(indent, s):
        L.append("    " * indent + s)

    e(0, "def gemv_mma(a32, bq, sc, sw, zpk, out, ws, cnt, M, K, N, n_super):")
    e(1, "lane = cuda.threadIdx.x & 31")
    e(1, "warp = cuda.threadIdx.x >> 5")
    e(1, "g = lane >> 2")
    e(1, "t = lane & 3")
    if KSP == 1:
        e(1, "tile0 = np.int64(cuda.blockIdx.x) * TPW")
        e(1, "gw = np.int64(warp)")
    else:
        e(1, f"grp = np.int64(cuda.blockIdx.x) // {KSP}")
        e(1, f"split = np.int64(cuda.blockIdx.x) % {KSP}")
        e(1, "tile0 = grp * TPW")
        e(1, f"gw = split * {W} + warp")
    e(1, "Z4 = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))")
    if ZP == "none":
        _emit_zero_points(e, 1, bits, c, None)
    for i in range(TPW):
        for mt in range(MT):
            for r in range(4):
                e(1, f"acc_{i}_{mt}_{r} = np.float32(0)")
    # activation row offsets (in elements) for the lane's rows g and g + 8
    for mt in range(MT):
        e(1, f"row_{mt} = g + {8 * mt}")
        e(1, f"ok_{mt} = row_{mt} < M")
        e(1, f"rbase_{mt} = np.int64(row_{mt}) * K")

    def load_act(ind, dst, k0):
        """The lane's activations of one super-chunk (for each m-tile and k-group) into ``dst_{mt}_{G}_{x}``."""
        for mt in range(MT):
            for G in range(NG):
                e(ind, f"ka = {k0} + {G * KG} + {4 * SG} * t")
                if SG == 1:
                    e(ind, f"if ok_{mt} and ka < K:")
                    e(ind + 1, f"ix = (rbase_{mt} + ka) >> 1")
                    e(ind + 1, f"{dst}_{mt}_{G}_0 = np.uint32(a32[ix])")
                    e(ind + 1, f"{dst}_{mt}_{G}_1 = np.uint32(a32[ix + 1])")
                    e(ind, "else:")
                    e(ind + 1, f"{dst}_{mt}_{G}_0 = np.uint32(0)")
                    e(ind + 1, f"{dst}_{mt}_{G}_1 = np.uint32(0)")
                else:
                    for q in range(SG // 2):
                        e(ind, f"if ok_{mt} and ka + {8 * q} < K:")
                        e(ind + 1, f"bv = ldg_v4(a32, (rbase_{mt} + ka + {8 * q}) >> 3)")
                        e(ind, "else:")
                        e(ind + 1, "bv = Z4")
                        for x in range(4):
                            e(ind, f"{dst}_{mt}_{G}_{4 * q + x} = bv[{x}]")

    n_act = 2 if SG == 1 else 4 * (SG // 2)
    stage = []  # per-stage register suffixes (``w``/``v`` prefixed), swapped at the end of an iteration

    def load_stage(indent, p, base_expr):
        """Load one pipeline stage (``U`` super-chunks): weights; with PF >= 1 also scales (and zero
        points); with PF >= 2 also activations. Out-of-range super-chunks get zeros (never computed)."""
        for u in range(U):
            e(indent, f"scl = {base_expr} + {u * WS}")
            e(indent, "if scl < n_super:")
            zeros = []
            for i in range(TPW):
                for j in range(NV):
                    e(indent + 1, f"{p}_{u}_{i}_{j} = ldg_v4(bq, (((tile0 + {i}) * n_super + scl) * {NV} + {j}) * 32 + lane)")
                    zeros.append((f"_{u}_{i}_{j}", "Z4"))
                if PF >= 1:
                    e(indent + 1, f"tsc = (tile0 + {i}) * n_super + scl")
                    if BPS == 4:  # 4 words = one 16-byte load
                        e(indent + 1, f"sv = ldg_v4(sw, tsc * 8 + g)")
                        for q in range(4):
                            e(indent + 1, f"{p}sc_{u}_{i}_{q} = sv[{q}]")
                    elif BPS == 8:  # 2-bit block 16 (128-k super-chunks): two 16-byte loads
                        for v in range(2):
                            e(indent + 1, f"sv = ldg_v4(sw, (tsc * 8 + g) * 2 + {v})")
                            for q in range(4):
                                e(indent + 1, f"{p}sc_{u}_{i}_{4 * v + q} = sv[{q}]")
                    else:
                        for q in range(BPS):
                            e(indent + 1, f"{p}sc_{u}_{i}_{q} = np.uint32(sw[tsc * {8 * BPS} + g * {BPS} + {q}])")
                    zeros += [(f"sc_{u}_{i}_{q}", "np.uint32(0)") for q in range(BPS)]
                    if ZP == "packed":
                        for h in range(2):
                            for bb in range(BPS):
                                e(indent + 1, f"{p}zp_{u}_{i}_{h}_{bb} = np.uint32(zpk[tsc * {16 * BPS} + g * {2 * BPS} + {h * BPS + bb}])")
                                zeros.append((f"zp_{u}_{i}_{h}_{bb}", "np.uint32(0)"))
            if l2pf:
                _emit_l2_prefetch(e, indent + 1, TPW, NV, f"scl + {L2PF_AHEAD * WS * U}")
            if PF >= 2:
                load_act(indent + 1, f"{p}ac_{u}", f"scl * {KS}")
                zeros += [(f"ac_{u}_{mt}_{G}_{x}", "np.uint32(0)") for mt in range(MT) for G in range(NG)
                          for x in range(n_act)]
            e(indent, "else:")
            for suf, z in zeros:
                e(indent + 1, f"{p}{suf} = {z}")
            if p == "v":
                stage.extend(suf for suf, _ in zeros)

    # register ring: "w" (computed now), "x1".."x{S-2}" (in flight), "v" (issued this iteration)
    ring = ["w"] + [f"x{r}" for r in range(1, S - 1)] + ["v"]

    def scale_expr(u, i, jh):
        """fp32 value of half ``jh`` of the lane's prefetched scale words (exact)."""
        wd = f"wsc_{u}_{i}_{jh >> 1}"
        hi = jh & 1
        if act == "bfloat16":
            return f"u32_as_f32({wd} & np.uint32(0xFFFF0000))" if hi else f"u32_as_f32({wd} << np.uint32(16))"
        # fp16 bits -> fp32: exponent/mantissa moved into place (an fp32 2^-112 times the value, exact
        # also for subnormals and zero), then scaled by 2^112; sign bit copied.
        bits = (f"(({wd} & np.uint32(0x80000000)) | (({wd} >> np.uint32(3)) & np.uint32(0x0FFFE000)))" if hi else
                f"((({wd} & np.uint32(0x8000)) << np.uint32(16)) | (({wd} & np.uint32(0x7FFF)) << np.uint32(13)))")
        return f"u32_as_f32({bits}) * F112"

    e(1, "base = gw")
    for r in range(S - 1):
        load_stage(1, ring[r], f"base + {r * WS * U}")
    e(1, "while base < n_super:")
    e(2, f"nb = base + {WS * U}")
    load_stage(2, "v", f"base + {(S - 1) * WS * U}")
    for u in range(U):
        e(2, f"sc_ = base + {u * WS}")
        e(2, "if sc_ < n_super:")
        ind = 3
        if PF >= 2:
            for mt in range(MT):
                for G in range(NG):
                    for x in range(n_act):
                        e(ind, f"b_{mt}_{G}_{x} = wac_{u}_{mt}_{G}_{x}")
        else:
            e(ind, f"k0 = sc_ * {KS}")
            load_act(ind, "b", "k0")
        for i in range(TPW):
            if PF == 0:
                e(ind, f"sb = ((tile0 + {i}) * n_super + sc_) * {16 * BPS} + g * {2 * BPS}")
            for bb in range(BPS):
                if PF == 0:
                    sl, sh = f"ld(sc, sb + {bb})", f"ld(sc, sb + {BPS + bb})"
                    zp = (f"np.uint32(zpk[sb + {bb}])", f"np.uint32(zpk[sb + {BPS + bb}])")
                else:
                    sl, sh = scale_expr(u, i, bb), scale_expr(u, i, BPS + bb)
                    zp = (f"wzp_{u}_{i}_0_{bb}", f"wzp_{u}_{i}_1_{bb}")
                _emit_block_mma(e, ind, i=i, bb=bb, MT=MT, SPB=SPB, SG=SG, c=c, s_lo=sl, s_hi=sh,
                                zp=zp if ZP == "packed" else None, word=lambda j, u=u, i=i: f"w_{u}_{i}_{j}",
                                bits=bits)
    for r in range(S - 1):
        for suf in stage:
            e(2, f"{ring[r]}{suf} = {ring[r + 1]}{suf}")
    e(2, "base = nb")
    # cross-warp reduction and store
    e(1, f"red = cuda.shared.array({W * E}, np.float32)")
    for i in range(TPW):
        for mt in range(MT):
            for r in range(4):
                e(1, f"red[warp * {E} + {((i * MT + mt) * 4 + r) * 32} + lane] = acc_{i}_{mt}_{r}")
    e(1, "cuda.syncthreads()")

    def entries(ind, body):
        e(ind, f"for ent in range(cuda.threadIdx.x, {E}, {W * 32}):")
        body(ind + 1)

    def position(ind):
        e(ind, "slot = ent >> 5")
        e(ind, "ln = ent & 31")
        e(ind, "r = slot & 3")
        e(ind, "it = slot >> 2")
        e(ind, f"mt = it % {MT}")
        e(ind, f"i = it // {MT}")
        e(ind, "n = (tile0 + i) * 16 + (ln >> 2) + 8 * (r >> 1)")
        e(ind, "m = mt * 8 + 2 * (ln & 3) + (r & 1)")

    def reduce_store(ind):
        e(ind, "tot = np.float32(0)")
        e(ind, f"for ww in range({W}):")
        e(ind + 1, f"tot += red[ww * {E} + ent]")
        position(ind)
        e(ind, "if m < M and n < N:")
        if KSP == 1:
            e(ind + 1, "st(out, np.int64(m) * N + n, tot)")
        else:  # this split's partial sums -> workspace slice ``split``
            e(ind + 1, "ws[(split * M + m) * N + n] = tot")

    entries(1, reduce_store)
    if KSP > 1:
        # last CTA of the group to arrive sums the KSP slices in a fixed order (deterministic) and stores;
        # it resets the group's counter for the next launch (stream order makes that safe)
        e(1, "cuda.threadfence()")
        e(1, "cuda.syncthreads()")
        e(1, "flag = cuda.shared.array(1, np.int32)")
        e(1, "if cuda.threadIdx.x == 0:")
        e(2, "old = cuda.atomic.add(cnt, grp, np.int32(1))")
        e(2, f"flag[0] = np.int32(1) if old == {KSP - 1} else np.int32(0)")
        e(1, "cuda.syncthreads()")
        e(1, "if flag[0] == 1:")
        e(2, "cuda.threadfence()")

        def final(ind):
            position(ind)
            e(ind, "if m < M and n < N:")
            e(ind + 1, "tot = np.float32(0)")
            for sp in range(KSP):
                e(ind + 1, f"tot += ldcg(ws, ({sp} * M + m) * N + n)")
            e(ind + 1, "st(out, np.int64(m) * N + n, tot)")

        entries(2, final)
        e(2, "if cuda.threadIdx.x == 0:")
        e(3, "cnt[grp] = np.int32(0)")
    return "\n".join(L) + "\n"


#: ``l2pf`` kernels prefetch into L2 the weights this many pipeline stages (ring: items per warp) past the
#: ones being loaded (an untuned first choice; sweep it on the H200)
L2PF_AHEAD = 2


def _emit_l2_prefetch(e, ind: int, TPW: int, NV: int, ahead: str) -> None:
    """``prefetch_l2`` of the lane's 16-byte weight vectors of super-chunk ``ahead`` (guarded: in range)."""
    e(ind, f"pfs = {ahead}")
    e(ind, "if pfs < n_super:")
    for i in range(TPW):
        for j in range(NV):
            e(ind + 1, f"prefetch_l2(bq, (((tile0 + {i}) * n_super + pfs) * {NV} + {j}) * 32 + lane)")


def _scale_bits_expr(act: str, wd: str, hi: int) -> str:
    """fp32 value of half ``hi`` of the scale word ``wd`` (fp16/bf16 bits; exact, as ``pf >= 1``)."""
    if act == "bfloat16":
        return f"u32_as_f32({wd} & np.uint32(0xFFFF0000))" if hi else f"u32_as_f32({wd} << np.uint32(16))"
    bits = (f"(({wd} & np.uint32(0x80000000)) | (({wd} >> np.uint32(3)) & np.uint32(0x0FFFE000)))" if hi else
            f"((({wd} & np.uint32(0x8000)) << np.uint32(16)) | (({wd} & np.uint32(0x7FFF)) << np.uint32(13)))")
    return f"u32_as_f32({bits}) * F112"


def _gen_ring_source(act: str, MT: int, tac: Tactic, BS: int, ZP: str, bits: int = 4, l2pf: bool = False) -> str:
    """The ring kernel (``tac.ring = D`` >= 2; see "Ring kernel" in the module docstring).

    Each warp walks a flat list of work items (tile group, super-chunk): the CTA's tile groups
    ``blockIdx.x + q * gridDim.x`` (a persistent grid when ``tac.grid`` > 0), and within one group the
    super-chunks ``warp, warp + W, ...`` (``per = ceil(n_super / W)`` items per warp per group). Item
    ``j`` lives in register slot ``j % D``; the loop body is unrolled ``D`` times so the slots are static
    registers (no ring rotation copies): sub-step ``s`` first refills the slot computed by the previous
    sub-step with item ``j + D - 1`` and then computes item ``j``, so ``D - 1`` items (weights and scale
    words) are in flight per warp at all times, across tile-group boundaries too. When a warp finishes its
    last item of a group it writes its partial sums to one of two shared-memory buffers (parity of the
    group), one ``syncthreads``, and the CTA sums the warps' partials and stores Y: the loads already
    issued for the next group stay in flight through the barrier (no pipeline drain/refill per group, and
    no wave-quantised tail with a persistent grid)."""
    TPW, W, D = tac.tpw, tac.warps, tac.ring
    KS = max(KS_MIN[bits], BS)
    NV = n_vectors(bits, KS)
    KG = min(BS, 64)
    SG = KG // 16
    BPS = KS // BS
    SPB = BS // 16
    NG = KS // KG
    c = _CONST[act]
    E = TPW * MT * 4 * 32
    L = []

    def e(indent, s):
        L.append("    " * indent + s)

    e(0, "def gemv_mma(a32, bq, sc, sw, zpk, out, ws, cnt, M, K, N, n_super):")
    e(1, "lane = cuda.threadIdx.x & 31")
    e(1, "warp = cuda.threadIdx.x >> 5")
    e(1, "g = lane >> 2")
    e(1, "t = lane & 3")
    e(1, "Z4 = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))")
    e(1, f"ngroups = (N + {16 * TPW - 1}) // {16 * TPW}")
    e(1, "G0 = np.int64(cuda.blockIdx.x)")
    e(1, "GS = np.int64(cuda.gridDim.x)")
    e(1, f"per = (n_super + {W - 1}) // {W}")
    e(1, "my_groups = (ngroups - G0 + GS - 1) // GS")
    e(1, f"red = cuda.shared.array({2 * W * E}, np.float32)")
    if ZP == "none":
        _emit_zero_points(e, 1, bits, c, None)
    for i in range(TPW):
        for mt in range(MT):
            for r in range(4):
                e(1, f"acc_{i}_{mt}_{r} = np.float32(0)")
    for mt in range(MT):
        e(1, f"row_{mt} = g + {8 * mt}")
        e(1, f"ok_{mt} = row_{mt} < M")
        e(1, f"rbase_{mt} = np.int64(row_{mt}) * K")

    def locate(ind, cur):
        """Item of cursor ``cur`` (``l``: next to load, ``c``: next to compute): group ``{cur}gi`` of this
        CTA, item ``{cur}jj`` of this warp in it (no divisions: cursors advance by one item)."""
        e(ind, f"gi = {cur}gi")
        e(ind, f"jj = {cur}jj")
        e(ind, "tile0 = (G0 + gi * GS) * TPW")
        e(ind, f"scl = warp + jj * {W}")

    def advance(ind, cur):
        e(ind, f"{cur}jj += 1")
        e(ind, f"if {cur}jj == per:")
        e(ind + 1, f"{cur}jj = np.int64(0)")
        e(ind + 1, f"{cur}gi += 1")

    def load_item(ind, slot):
        p = f"q{slot}"
        locate(ind, "l")
        e(ind, "if gi < my_groups and scl < n_super:")
        zeros = []
        for i in range(TPW):
            for jc in range(NV):
                e(ind + 1, f"{p}_{i}_{jc} = ldg_v4(bq, (((tile0 + {i}) * n_super + scl) * {NV} + {jc}) * 32 + lane)")
                zeros.append((f"_{i}_{jc}", "Z4"))
            e(ind + 1, f"tsc = (tile0 + {i}) * n_super + scl")
            if BPS == 4:
                e(ind + 1, "sv = ldg_v4(sw, tsc * 8 + g)")
                for q in range(4):
                    e(ind + 1, f"{p}sc_{i}_{q} = sv[{q}]")
            elif BPS == 8:  # 2-bit block 16 (128-k super-chunks): two 16-byte loads
                for v in range(2):
                    e(ind + 1, f"sv = ldg_v4(sw, (tsc * 8 + g) * 2 + {v})")
                    for q in range(4):
                        e(ind + 1, f"{p}sc_{i}_{4 * v + q} = sv[{q}]")
            elif BPS == 2:  # block 32: the lane's two scale words as one 8-byte request (pf=1 issues two)
                e(ind + 1, "sv2 = ldg_v2(sw, tsc * 8 + g)")
                for q in range(2):
                    e(ind + 1, f"{p}sc_{i}_{q} = sv2[{q}]")
            elif BPS == 1:
                e(ind + 1, f"{p}sc_{i}_0 = np.uint32(sw[tsc * 8 + g])")
            else:
                raise ValueError(f"gemv_mma ring: {BPS} quantisation blocks per super-chunk")
            zeros += [(f"sc_{i}_{q}", "np.uint32(0)") for q in range(BPS)]
            if ZP == "packed":
                for h in range(2):
                    for bb in range(BPS):
                        e(ind + 1, f"{p}zp_{i}_{h}_{bb} = np.uint32(zpk[tsc * {16 * BPS} + g * {2 * BPS} + {h * BPS + bb}])")
                        zeros.append((f"zp_{i}_{h}_{bb}", "np.uint32(0)"))
        if l2pf:
            _emit_l2_prefetch(e, ind + 1, TPW, NV, f"scl + {L2PF_AHEAD * W}")
        e(ind, "else:")
        for suf, z in zeros:
            e(ind + 1, f"{p}{suf} = {z}")
        advance(ind, "l")

    def load_act(ind, k0):
        for mt in range(MT):
            for G in range(NG):
                e(ind, f"ka = {k0} + {G * KG} + {4 * SG} * t")
                if SG == 1:
                    e(ind, f"if ok_{mt} and ka < K:")
                    e(ind + 1, f"ix = (rbase_{mt} + ka) >> 1")
                    e(ind + 1, f"b_{mt}_{G}_0 = np.uint32(a32[ix])")
                    e(ind + 1, f"b_{mt}_{G}_1 = np.uint32(a32[ix + 1])")
                    e(ind, "else:")
                    e(ind + 1, f"b_{mt}_{G}_0 = np.uint32(0)")
                    e(ind + 1, f"b_{mt}_{G}_1 = np.uint32(0)")
                else:
                    for q in range(SG // 2):
                        e(ind, f"if ok_{mt} and ka + {8 * q} < K:")
                        e(ind + 1, f"bv = ldg_v4(a32, (rbase_{mt} + ka + {8 * q}) >> 3)")
                        e(ind, "else:")
                        e(ind + 1, "bv = Z4")
                        for x in range(4):
                            e(ind, f"b_{mt}_{G}_{4 * q + x} = bv[{x}]")

    def position(ind):
        e(ind, "slot = ent >> 5")
        e(ind, "ln = ent & 31")
        e(ind, "r = slot & 3")
        e(ind, "it = slot >> 2")
        e(ind, f"mt = it % {MT}")
        e(ind, f"i = it // {MT}")
        e(ind, "n = (tile0 + i) * 16 + (ln >> 2) + 8 * (r >> 1)")
        e(ind, "m = mt * 8 + 2 * (ln & 3) + (r & 1)")

    def compute_item(ind, slot):
        p = f"q{slot}"
        locate(ind, "c")
        e(ind, "if gi < my_groups:")
        ind += 1
        e(ind, "if scl < n_super:")
        ind2 = ind + 1
        load_act(ind2, f"scl * {KS}")
        for i in range(TPW):
            for bb in range(BPS):
                _emit_block_mma(e, ind2, i=i, bb=bb, MT=MT, SPB=SPB, SG=SG, c=c,
                                s_lo=_scale_bits_expr(act, f"{p}sc_{i}_{bb >> 1}", bb & 1),
                                s_hi=_scale_bits_expr(act, f"{p}sc_{i}_{(BPS + bb) >> 1}", (BPS + bb) & 1),
                                zp=(f"{p}zp_{i}_0_{bb}", f"{p}zp_{i}_1_{bb}") if ZP == "packed" else None,
                                word=lambda j, i=i: f"{p}_{i}_{j}", bits=bits)
        # end of this warp's items of the group: partials -> shared buffer (group parity), barrier, store
        e(ind, "if jj == per - 1:")
        ind2 = ind + 1
        e(ind2, f"rb = (gi & 1) * {W * E}")
        for i in range(TPW):
            for mt in range(MT):
                for r in range(4):
                    e(ind2, f"red[rb + warp * {E} + {((i * MT + mt) * 4 + r) * 32} + lane] = acc_{i}_{mt}_{r}")
                    e(ind2, f"acc_{i}_{mt}_{r} = np.float32(0)")
        e(ind2, "cuda.syncthreads()")
        e(ind2, f"for ent in range(cuda.threadIdx.x, {E}, {W * 32}):")
        e(ind2 + 1, "tot = np.float32(0)")
        e(ind2 + 1, f"for ww in range({W}):")
        e(ind2 + 2, f"tot += red[rb + ww * {E} + ent]")
        position(ind2 + 1)
        e(ind2 + 1, "if m < M and n < N:")
        e(ind2 + 2, "st(out, np.int64(m) * N + n, tot)")
        advance(ind - 1, "c")

    e(1, "lgi = np.int64(0)")
    e(1, "ljj = np.int64(0)")
    e(1, "cgi = np.int64(0)")
    e(1, "cjj = np.int64(0)")
    for s in range(D - 1):
        load_item(1, s)
    e(1, "while cgi < my_groups:")
    for s in range(D):
        load_item(2, (s + D - 1) % D)
        compute_item(2, s)
    return "\n".join(L) + "\n"


@lru_cache(maxsize=None)
def gemv_mma_kernel(act: str, MT: int, tac: Tactic, BS: int, ZP: str, bits: int = 4, l2pf: bool = False) -> Kernel:
    """The compiled-on-demand kernel for one specialisation (``l2pf``: the L2-prefetching variant, name
    suffix ``_l2pf``)."""
    from numba.cuda import types

    src = (_gen_ring_source if tac.ring else _gen_source)(act, MT, tac, BS, ZP, bits, l2pf)
    ns = {
        "cuda": cuda, "np": np, "ldg_v4": _I.ldg_v4, "ldg_v2": _I.ldg_v2, "ld": LOADS[act], "st": STORES[act], "TPW": tac.tpw,
        "mma": _I.mma_bf16 if act == "bfloat16" else _I.mma_f16,
        "fma2": _I.fma_bf16x2 if act == "bfloat16" else _I.fma_f16x2,
        "u32_as_f32": _I.u32_as_f32, "ldcg": _I.ldcg, "F112": np.float32(2.0 ** 112),
        "prefetch_l2": _I.prefetch_l2,
    }
    name = f"gemv_mma_w{bits}_{act}_mt{MT}_{tac.tag}_b{BS}_{ZP}" + ("_l2pf" if l2pf else "")
    exec(compile(src, f"<{name}>", "exec"), ns)
    fn = ns["gemv_mma"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type("uint32"), array_type(act), array_type("uint32"), array_type("uint8"),
                array_type(act), array_type("float32"), array_type("int32"),
                types.int64, types.int64, types.int64, types.int64)
    opts = {"launch_bounds": (32 * tac.warps, tac.minb)} if tac.minb else {}
    return Kernel(fn, argtypes, name=name, fastmath=False, **opts)


# -------------------------------------------------------------------------------------- plan

#: SMs assumed by the simulator (small, so that tiny tests exercise the persistent grid-stride loop)
SIM_SM_COUNT = 2


def _sm_count(simulated: bool) -> int:
    if simulated:
        return SIM_SM_COUNT
    from .gemv_common import _device_info  # cached current-device query (as the CUDA-core engine's)

    return _device_info()[0]


class GemvMmaPlan:
    """Pre-built launch for one (weights, M); ``run`` rewrites A/Y pointers and launches."""

    route = ROUTE

    def __init__(self, weights, M: int, tactic: Tactic, packed: Packed | None = None, l2pf: bool = False):
        self.M, self.N, self.K = M, weights.N, weights.K
        self.dtype = weights.dtype
        self.tactic = tactic
        self.l2pf = l2pf
        pk = packed if packed is not None else prepack(weights)  # ``packed``: another copy (benchmarks)
        self.packed = pk
        MT = 1 if M <= 8 else 2
        k = gemv_mma_kernel(weights.dtype, MT, tactic, weights.block_size, weights.zp_kind, weights.bits, l2pf)
        self.kernel = k.name
        self._kernel = k
        zp = pk.zp if pk.zp is not None else weights.dummy(np.uint8)
        self._elem = np.uint16 if weights.dtype == "bfloat16" else np.float16
        dummy_a = weights.dummy(np.uint32)
        dummy_y = weights.dummy(self._elem)
        sc = pk.scales
        sw = sc.view(np.uint32, (sc.shape[0] // 2,))
        groups = -(-self.N // (TILE_N * tactic.tpw))
        grid = groups * tactic.ksplit
        if tactic.grid:  # persistent ring kernel: ``grid`` CTAs per SM, grid-stride over the tile groups
            grid = min(groups, tactic.grid * _sm_count(weights.simulated))
        self.grid = grid
        if tactic.ksplit > 1:  # per-plan split-K workspace; counters start at 0 and are reset by the kernel
            self._ws = to_device(np.zeros(tactic.ksplit * M * self.N, np.float32), weights.simulated)
            self._cnt = to_device(np.zeros(groups, np.int32), weights.simulated)
        else:
            self._ws = weights.dummy(np.float32)
            self._cnt = weights.dummy(np.int32)
        self._launch = k.bind(grid, 32 * tactic.warps,
                              (dummy_a, pk.bq, sc, sw, zp, dummy_y, self._ws, self._cnt, M, self.K, self.N,
                               pk.n_super))

        # the per-call views' layouts (GPU): run() only moves their pointers when A and Y have the
        # byte counts these views take (what DevArray.view would check), else it builds the views
        self._views = None
        if not weights.simulated:
            self._views = (DevArray(0, (M * self.K // 2,), (4,), np.uint32, None),
                           DevArray(0, (M * self.N,), (2,), self._elem, None))

    def run(self, a: DevArray, out: DevArray, stream: int = 0) -> None:
        M, K, N = self.M, self.K, self.N
        if a.ptr % 16:
            raise ValueError("gemv_mma: A must be 16-byte aligned")
        L = self._launch
        v = self._views
        if (v is not None and a.c_contiguous and out.c_contiguous and a.nbytes == 2 * M * K
                and out.nbytes == 2 * M * N):
            L.set_array_ptr(0, a.ptr, v[0])
            L.set_array_ptr(5, out.ptr, v[1])
        else:
            L.set_array(0, a.view(np.uint32, (M * K // 2,)))
            L.set_array(5, out.view(self._elem, (M * N,)))
        L.launch(stream)


def build(weights, problem, config=None, tactic: Tactic | None = None, packed: Packed | None = None,
          l2pf: bool = False) -> GemvMmaPlan:
    """Plan for ``problem`` (must satisfy ``supports``); ``tactic`` overrides ``default_tactic``;
    ``packed`` replaces ``prepack(weights)`` (a copy of it at another address: L2-cold benchmarks);
    ``l2pf`` builds the L2-prefetching kernel variant (``gemv_w8.l2_prefetch`` decides when)."""
    if not supports(problem):
        raise ValueError(f"gemv_mma does not support {problem.describe()}")
    if weights.bits not in BITS or weights.zp_kind not in ("none", "packed") or weights.g_idx is not None:
        raise ValueError(f"gemv_mma does not support these weights: {weights.describe()}")
    if problem.bits != weights.bits:
        raise ValueError(f"gemv_mma: problem bits={problem.bits} but weights bits={weights.bits}")
    tac = tactic or default_tactic(weights.N, weights.K, weights.block_size, problem.M, weights.bits)
    return GemvMmaPlan(weights, problem.M, tac, packed, l2pf)


class TensorCorePlan:
    """The plan a fused-GEMV route (``gemv_w4`` / ``gemv_w8`` / ``gemv_w2``) runs for fp16/bf16 A when
    ``supports`` the problem: this tensor-core GEMV, flat in M (the H200 measured it faster than the
    CUDA-core engine at every M for 4-bit, 2026-11-30: 4096x4096 g32 fp16 9.6 vs 19.6 us at M=1, 9.3 vs
    61.8 us at M=4).

    It needs A 16-byte aligned; an unaligned A (e.g. a sliced tensor) is served by the route's CUDA-core
    plan (``cuda_core()`` builds it), built on first need (outside graph capture).
    """

    def __init__(self, weights, problem, route: str, cuda_core, tactic: Tactic | None = None, l2pf: bool = False):
        self.route = route
        self.mma = build(weights, problem, tactic=tactic, l2pf=l2pf)
        self.kernel = self.mma.kernel
        self.tactic = self.mma.tactic
        self._cuda_core = cuda_core
        self._fallback = None

    def run(self, a, out, stream: int) -> None:
        if a.ptr % 16 == 0:
            self.mma.run(a, out, stream)
            return
        if self._fallback is None:
            from ..launch import CaptureError, is_capturing

            if is_capturing(stream):
                raise CaptureError(f"{self.route}: A is not 16-byte aligned and the CUDA-core fallback is not built "
                                   "yet; run a warmup inference with the same A layout outside capture first.")
            self._fallback = self._cuda_core()
        self._fallback.run(a, out, stream)


def route_plan(weights, problem, route: str, cuda_core, kernel: str = "auto", tactic: Tactic | None = None,
               l2pf: bool = False):
    """A fused-GEMV route's plan: ``kernel`` "auto" (this tensor-core GEMV for fp16/bf16 when ``supports``
    the problem, else the CUDA-core engine), "cuda_core" or "mma"; ``cuda_core()`` builds the CUDA-core
    plan. ``tactic`` / ``l2pf`` are passed to the tensor-core plan (profiler tactics, L2 prefetch)."""
    if kernel not in ("auto", "cuda_core", "mma"):
        raise ValueError(f"kernel must be 'auto', 'cuda_core' or 'mma', got {kernel!r}")
    if kernel == "cuda_core" or (kernel == "auto" and not supports(problem)):
        return cuda_core()
    return TensorCorePlan(weights, problem, route, cuda_core, tactic, l2pf)
