"""Splitting a sweep into shards of about equal device time (pure Python, no device work).

The full sweep takes about 50 minutes on one H200, most of it compiling the kernels each case
specialises. Sharding runs it as N independent processes, on as many GPUs at once or one after
another, each of a bounded length, whose outputs ``merge`` joins into one report.
``python -m numba_nbits.perf --shard I/N`` runs part ``I`` (1-based) of ``N``. The partition depends
only on the expanded case list (same plan, same filters → same shards on any machine), and shards
``1..N`` together hold every case exactly once.

**Units.** A case group (``Case.group``: everything but M) shares its random weights and its built
operators, so a group is kept whole when it can be. A group whose estimated cost exceeds half a
shard's share (``total / N / 2``) is cut into consecutive-M chunks (each chunk pays the group's setup
again in the estimate, as it will on the device).

**Cost model** (seconds on one H200, deliberately coarse; ``estimate_s``):

* per unit (group or chunk): ``GROUP_S`` (random weights, operator build, peers' dense copy) plus
  ``WEIGHT_S_PER_GB`` per GB of packed weights + scales (host generation, upload, rotated copies),
  plus ``FAMILY_COMPILE_S`` for 2- and 8-bit groups (their GEMV/dequantize kernel families compile
  on first use: one 8-bit M=1 case takes ~40 s of warm-up on an H200);
* per case: ``CASE_S`` (timing every route and peer, the oracle check) plus ``COMPILE_S`` when
  M <= 16 (the GEMV/MMA kernels specialise by M) or ``GEMM_COMPILE_S`` above it (the fpA_intB
  profiler's mixed-GEMM tactics), plus ``CALL_S_PER_GB`` per GB one call moves (bytes moved:
  weights + scales + zero points + A + Y; matters only for the LM heads at large M);
* per shard: ``SHARD_OVERHEAD_S`` (process start, imports, the ceiling measurements, plots).

Calibration: the constants below are fitted to the four shards of the full sweep in
``benchmarks/results/2026-11-30-h200-x2-full`` (258 of 363 cases in 2142 s of shard wall time,
~60% of it compilation: ~7 s per case at M <= 16, ~2.5 s above; estimate / measured wall 0.83-1.16
per shard) and put the full plan at ~50 min; they only need to be right relatively. On the
``--missing-from`` shards of ``benchmarks/results/2026-11-30-h200-x2-session2`` the model is ~5-10%
optimistic for the 2/8-bit, g64 and zero-point tiers.

**Partition:** longest-processing-time greedy — units sorted by
estimated cost (descending, ties by plan position) each go to the shard with the smallest load so
far (ties: lowest index). That bounds the largest shard by ``mean + largest unit``, i.e. within
``BALANCE_FACTOR`` (1.5) of the mean whenever every unit is splittable; a single case is never cut.
Inside a shard the cases keep the plan's priority order, so a shard's budget still skips the
lowest-priority cases first.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from .metrics import nbits_bytes
from .shapes import GEMV_MAX_M, Case

GROUP_S = 3.0
WEIGHT_S_PER_GB = 12.0
FAMILY_COMPILE_S = 30.0
CASE_S = 2.5
COMPILE_S = 6.5
GEMM_COMPILE_S = 2.5
CALL_S_PER_GB = 1.0
SHARD_OVERHEAD_S = 25.0
BALANCE_FACTOR = 1.5

_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def slug(self) -> str:
        return f"shard{self.index}of{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """``"I/N"`` with ``1 <= I <= N`` (ValueError otherwise)."""
    m = _SHARD_RE.match(str(text))
    if not m:
        raise ValueError(f"--shard must look like I/N (e.g. 2/3), got {text!r}")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= i <= n:
        raise ValueError(f"--shard {text}: need 1 <= I <= N")
    return ShardSpec(i, n)


def _weight_gb(c: Case) -> float:
    s = c.spec
    return nbits_bytes(0, s.N, s.K, c.bits, c.block, c.dtype, c.zp, s.bias).constant / 1e9


def case_cost(c: Case) -> float:
    """Estimated seconds of one case (without its group's setup)."""
    s = c.spec
    moved = nbits_bytes(c.M, s.N, s.K, c.bits, c.block, c.dtype, c.zp, s.bias).total / 1e9
    return CASE_S + (COMPILE_S if c.M <= GEMV_MAX_M else GEMM_COMPILE_S) + CALL_S_PER_GB * moved


def unit_cost(cases: Sequence[Case]) -> float:
    """Estimated seconds of one unit: a group (or a chunk of one) run as a block."""
    if not cases:
        return 0.0
    family = FAMILY_COMPILE_S if cases[0].bits != 4 else 0.0
    return GROUP_S + family + WEIGHT_S_PER_GB * _weight_gb(cases[0]) + sum(case_cost(c) for c in cases)


def estimate_s(cases: Sequence[Case], *, overhead: bool = True) -> float:
    """Estimated seconds to run ``cases`` in one process (groups as the runner forms them)."""
    by_group: dict = {}
    for c in cases:
        by_group.setdefault(c.group, []).append(c)
    return (SHARD_OVERHEAD_S if overhead and cases else 0.0) + sum(unit_cost(cs) for cs in by_group.values())


def _units(cases: Sequence[Case], n: int) -> list[list[int]]:
    """Case indices per unit: whole groups, big groups cut into consecutive-M chunks."""
    by_group: dict = {}
    for i, c in enumerate(cases):
        by_group.setdefault(c.group, []).append(i)
    groups = [sorted(ix, key=lambda i: (cases[i].M, i)) for ix in by_group.values()]
    total = sum(unit_cost([cases[i] for i in g]) for g in groups)
    cap = total / n / 2
    units = []
    for g in groups:
        cost = unit_cost([cases[i] for i in g])
        k = min(len(g), max(1, math.ceil(cost / cap))) if cap > 0 else 1
        size, extra = divmod(len(g), k)
        start = 0
        for j in range(k):
            end = start + size + (1 if j < extra else 0)
            units.append(g[start:end])
            start = end
    return units


def partition(cases: Sequence[Case], n: int) -> list[list[Case]]:
    """``n`` disjoint lists covering ``cases`` (each in plan order), balanced by ``unit_cost``."""
    if n < 1:
        raise ValueError("need at least one shard")
    units = _units(cases, n)
    order = sorted(range(len(units)), key=lambda u: (-unit_cost([cases[i] for i in units[u]]), min(units[u])))
    loads = [0.0] * n
    parts: list[list[int]] = [[] for _ in range(n)]
    for u in order:
        k = min(range(n), key=lambda s: (loads[s], s))
        parts[k].extend(units[u])
        loads[k] += unit_cost([cases[i] for i in units[u]])
    return [[cases[i] for i in sorted(p)] for p in parts]


def shard_cases(cases: Sequence[Case], spec: ShardSpec) -> list[Case]:
    return partition(cases, spec.count)[spec.index - 1]


def plan_table(cases: Sequence[Case], n: int, budget_s: float | None = None) -> str:
    """The ``--dry-run`` view of a partition: cases, groups and estimated seconds per shard."""
    parts = partition(cases, n)
    ests = [estimate_s(p) for p in parts]
    lines = [f"{n} shards of {len(cases)} cases (estimated {estimate_s(cases, overhead=False) / 60:.1f} min of "
             f"cases + {SHARD_OVERHEAD_S:.0f} s per shard; see numba_nbits/perf/shard.py):"]
    for i, (p, e) in enumerate(zip(parts, ests), 1):
        warn = f"  > --budget-s {budget_s:.0f}: the tail would be skipped" if budget_s and e > budget_s else ""
        lines.append(f"  shard {i}/{n}: {len(p):4d} cases, {len({c.group for c in p}):3d} groups, "
                     f"~{e:5.0f} s{warn}")
    return "\n".join(lines)
