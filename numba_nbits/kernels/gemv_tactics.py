"""The extra tensor-core GEMV tactics the fpA_intB profiler times on request (spec §8).

Both are ``gemv_mma.Tactic`` values (no kernel of their own: specialisations of ``gemv_mma``'s
generators) that a GEMV route (``gemv_w4`` / ``gemv_w8`` / ``gemv_w2``) builds instead of its
``default_tactic``. The profiler names them ``gemv:<route>+<variant>`` (``dispatch/profiler.py``).

* ``paired_k`` (``ORT_FPA_INTB_GEMV_PAIRED_K`` / ``ep.cuda.fpa_intb_gemv_paired_k``): fp16 A, 4-bit
  weights, M 5..8 (spec §8). Two CTAs share each tile group's K loop (``ksplit = 2``: the pair takes
  alternate runs of super-chunks), each writes fp32 partials to the plan's workspace, and the second
  to arrive sums the pair in a fixed order (deterministic) and stores Y: twice the CTAs of the default
  tactic, each streaming half of K, for mid-size N where the default leaves SMs idle. ORT documents an
  fp16 overflow limit for its paired-K kernel; this one sums in fp32, so it has none. ``"1"`` adds it as
  a candidate of the buckets 5..8, ``"force"`` makes it the only candidate there.
* ``wave`` (``ep.cuda.fpa_intb_gemv_wave_aware = 1``): any M < 16 the tensor-core GEMV serves. The grid
  is sized to whole waves of the device: launch bounds ``minb = R`` (``WAVE_CTAS_PER_SM``: 4 CTAs of 8
  warps per SM with one m-tile, 2 with two; one 16-row tile per CTA's item, ring depth 3, 2 for 8-bit)
  guarantee ``R`` resident CTAs per SM (by registers; shared memory and threads allow them too), and

  - with at least half a wave of tile groups (``2 * groups > R * SMs``): the ring kernel with a
    persistent grid of ``min(groups, R * SMs)`` CTAs striding over the tile groups (one wave, no
    partial last wave, pipelines never drain between groups);
  - with fewer: split-K across ``k = min(8, (R * SMs) // groups)`` CTAs per tile group (bounded by
    the super-chunks each split gets), the most that still fits in one wave.
"""
from __future__ import annotations

from . import gemv_mma as G

PAIRED_K = "paired_k"
WAVE = "wave"
VARIANTS = (PAIRED_K, WAVE)
PAIRED_K_M = (5, 8)
#: resident CTAs per SM the wave-aware tactic's launch bounds guarantee, by m-tiles (M <= 8: 1)
WAVE_CTAS_PER_SM = {1: 4, 2: 2}
WAVE_WARPS = 8


def applies(variant: str, problem) -> bool:
    """Whether ``variant`` can serve ``problem`` (its M, dtype, bits, ...)."""
    p = problem
    if not G.supports(p) or p.M >= 16:
        return False
    if variant == PAIRED_K:
        return p.dtype == "float16" and p.bits == 4 and PAIRED_K_M[0] <= p.M <= PAIRED_K_M[1]
    if variant == WAVE:
        return True
    raise ValueError(f"unknown GEMV tactic variant {variant!r}; variants are {', '.join(VARIANTS)}")


def paired_k_tactic(N: int, K: int, block_size: int, M: int, bits: int = 4) -> G.Tactic:
    """The default tactic's tile shape and pipeline, K split over a pair of CTAs."""
    d = G.default_tactic(N, K, block_size, M, bits)
    if d.ring:  # the ring kernel has no split-K: its non-ring equivalent
        d = G.Tactic(tpw=d.tpw, warps=d.warps, unroll=1, pf=1, minb=d.minb)
    return G.Tactic(tpw=d.tpw, warps=d.warps, unroll=d.unroll, pf=d.pf, ksplit=2, stages=d.stages, minb=d.minb)


def wave_tactic(N: int, K: int, block_size: int, M: int, bits: int, sm_count: int) -> G.Tactic:
    """The wave-aware tactic for ``sm_count`` SMs (module docstring)."""
    R = WAVE_CTAS_PER_SM[1 if M <= 8 else 2]
    wave = R * sm_count
    groups = -(-N // G.TILE_N)  # one 16-row tile per warp: the register budget of minb = R
    n_super = -(-K // max(G.KS_MIN[bits], block_size))
    k = min(8, wave // groups, -(-n_super // WAVE_WARPS))
    if 2 * groups > wave or k < 2:
        return G.Tactic(tpw=1, warps=WAVE_WARPS, unroll=1, pf=1, minb=R, ring=2 if bits == 8 else 3, grid=R)
    return G.Tactic(tpw=1, warps=WAVE_WARPS, unroll=1, pf=1, ksplit=k, minb=R)


def tactic(variant: str, weights, problem) -> G.Tactic:
    """The ``gemv_mma.Tactic`` of ``variant`` for ``problem`` over ``weights``."""
    if not applies(variant, problem):
        raise ValueError(f"GEMV tactic {variant!r} does not serve {problem.describe()}")
    w = weights
    if variant == PAIRED_K:
        return paired_k_tactic(w.N, w.K, w.block_size, problem.M, w.bits)
    return wave_tactic(w.N, w.K, w.block_size, problem.M, w.bits, G._sm_count(w.simulated))
