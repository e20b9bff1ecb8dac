"""The fpA_intB tactic profiler (spec §7.6): which kernel serves each M bucket of an fpa_intb node.

Buckets
-------
Default buckets ``{1, 2, 4, ..., 2048}`` (max profiled M 2048). ``ORT_FPA_INTB_PROFILE_M`` /
``ep.cuda.fpa_intb_profile_m`` (parsed by ``config.py``: positive ints, de-duplicated, sorted) replaces
them: the max is the list's last value, every value is clamped into ``[1, max]`` and ``1`` and the max
are always added. ``bucket(m)`` is ``m`` itself when ``m`` is a listed bucket or was profiled, else
``min(max(1, next_pow2(m)), max_m)`` (ORT's ``getBestConfig``). ORT profiles the listed buckets when
the node is built; here a bucket is profiled on its first use outside capture (or by ``op.warmup``),
so a node only pays for the buckets it meets.

Candidates (``candidates``)
---------------------------
* every ``kernels.mixed_gemm.TACTICS`` tile shape, when ``mixed_gemm.supports`` the problem;
* for B in ONNX layout (``weight_prepacked == 0``) only: the fused GEMV routes (router / 4-, 8-,
  2-bit GEMV, CUDA-core or tensor-core) when ``m < 16`` and that route's own guards accept the problem
  at ``M = m`` (ORT's ``checkTactic``), and ``dequant_cublas`` (dequantize + cuBLAS);
* and, also for ONNX-layout B, **the route dispatch would pick for ``M = m`` without fpA_intB**
  (``baseline``: ``select`` with ``fpa_intb_gemm`` off), so enabling the route never makes a call
  slower than leaving it off. A deliberate difference from ORT: at ``m = 16`` this adds the 4-bit GEMV
  (its route serves M <= 16) although ``checkTactic`` keeps GEMV tactics to ``m < 16`` (ORT measured
  its mixed GEMM at 2.2x the GEMV's time there, 18944x3584 block 32), and the N-chunked dequantize +
  cuBLAS (``dequant_cublas_chunked``) where that is the default route;
* the knob-gated GEMV tactics of ``kernels/gemv/tactics.py`` (candidate ``gemv:<route>+<variant>``):
  ``gemv_paired_k`` ``"on"`` adds ``+paired_k`` for each GEMV route that can run it at ``m`` in 5..8
  (fp16, 4-bit), and ``"force"`` makes it the only candidate of those buckets (chosen without timing:
  nothing to compare); ``gemv_wave_aware`` adds ``+wave`` next to each tensor-core GEMV route at ``m < 16``.

Prepacked B is not in ONNX layout: only the mixed GEMM reads it.

Profiling (``TacticProfiler.profile``)
--------------------------------------
Each candidate's plan is built for ``M = bucket`` with its own A / Y buffers, run a few times to warm
up, then timed with CUDA events (``EventTimer``: 3 warm-up runs, 10 timed runs, the median); the
fastest wins. The timer is injectable (``TacticProfiler(..., timer=)`` or ``default_timer``):
``timer(candidate, m, make_runner, stream) -> seconds``, where ``make_runner()`` builds the plan and
buffers and returns ``run(stream)``. A candidate whose build or timing raises is skipped; with none
left the call fails with ORT's text "No valid fpA_intB MatMulNBits tactic for M=…, N=…, K=…".

A bucket with one candidate takes it untimed. Under numba's CUDA simulator nothing can be timed, so
``default_timer()`` is ``None`` and the choice is deterministic: ``mixed_gemm.default_tactic(bucket)`` (the simulator therefore always tests the mixed
GEMM kernel on this route). Kernels contain no simulator branch; only this choice differs.

Capture
-------
``TacticProfiler.get(m, stream)`` asks ``launch.is_capturing(stream)`` every call. While capturing it
only looks up; a missing bucket raises ``CaptureError`` with ORT's text ("... The M bucket was not
profiled before CUDA graph capture; run a warmup inference outside capture first.").

Sharing and the persistent cache
--------------------------------
Choices are kept process-wide per key (ORT's GEMM id plus the TSV key of §7.6: ``n_16b`` =
``N / (16 / bits)``, K, dtype, weight type, bits, block size, zero points, GEMV-candidate flag,
packing SM), so layers of one shape profile once. The GEMV flag is ORT's 0/1 plus the knob-gated
tactics' bits (2: paired-K on, 4: paired-K force, 8: wave-aware), so a node never reuses a choice made
from another candidate set. When ``ORT_CUDA_GEMM_TACTIC_CACHE_DIR`` /
``ep.cuda.gemm_tactic_cache_dir`` is set, choices are also read from and written to
``<dir>/<prefix>.matmulnbits_fpa_intb.tsv`` (prefix from ``..._PREFIX`` / ``ep.cuda.gemm_tactic_cache_prefix``,
else ``ep.cuda.gemm_tactic_cache_tuning_results_prefix``, else ``numba_nbits``); the file is rewritten
after each newly profiled bucket (ORT flushes once at EP teardown). Lines that do not parse are ignored.
"""
from __future__ import annotations

import math
import os
import statistics
import threading
from dataclasses import dataclass, replace
from typing import Callable, Optional

from .. import launch
from .problem import Problem

DEFAULT_BUCKETS = tuple(1 << i for i in range(12))  # 1 .. 2048
DEFAULT_MAX_M = 2048
GEMV_MAX_M = 16  # ORT's checkTactic: the CUDA GEMV tactic only for m < 16
GEMV_ROUTES = ("router_gemv", "gemv_w4", "gemv_w8", "gemv_w2")
TSV_SUFFIX = ".matmulnbits_fpa_intb.tsv"


DEQUANT_ROUTES = ("dequant_cublas", "dequant_cublas_chunked")


@dataclass(frozen=True)
class Candidate:
    """One way to serve the route: ``kind`` "mixed_gemm" (``name`` a TACTICS key), "gemv" (``name``
    a GEMV route, optionally ``+variant`` of ``kernels/gemv/tactics.py``) or "dequant_cublas" (``name``
    "dequant_cublas" or "dequant_cublas_chunked")."""

    kind: str
    name: str

    @property
    def label(self) -> str:
        return self.name if self.kind == "dequant_cublas" else f"{self.kind}:{self.name}"

    @property
    def route(self) -> str:
        """The dispatch route this candidate runs (``name`` without a tactic variant)."""
        return self.name.partition("+")[0]

    @property
    def variant(self) -> str:
        return self.name.partition("+")[2]

    @staticmethod
    def parse(label: str) -> "Candidate":
        if label in DEQUANT_ROUTES:
            return Candidate("dequant_cublas", label)
        kind, sep, name = label.partition(":")
        if not sep or kind not in ("mixed_gemm", "gemv") or not name:
            raise ValueError(f"bad fpA_intB tactic label {label!r}")
        return Candidate(kind, name)


def next_pow2(m: int) -> int:
    return 1 if m <= 1 else 1 << (int(m) - 1).bit_length()


def initial_buckets(profile_m: Optional[tuple]) -> tuple[int, ...]:
    """The buckets a node starts with (spec §7.6): default powers of two, or the override list clamped
    into ``[1, max]`` with 1 and the max added."""
    lo = 1
    hi = int(profile_m[-1]) if profile_m else DEFAULT_MAX_M
    vals = set(profile_m) if profile_m else set(DEFAULT_BUCKETS)
    vals = {min(max(int(v), lo), hi) for v in vals} | {lo, hi}
    return tuple(sorted(vals))


def baseline(problem: Problem, config) -> Candidate:
    """The route ``select`` picks for ``problem`` (ONNX-layout B) with fpA_intB turned off, as a candidate."""
    from .select import select

    d = select(replace(problem, weight_prepacked=0), config.replace(fpa_intb_gemm=False, force_route=None))
    return Candidate("dequant_cublas" if d.name in DEQUANT_ROUTES else "gemv", d.name)


def serves(cand: Candidate, problem: Problem, config) -> bool:
    """Whether ``cand`` (chosen for a bucket) can run ``problem`` (its own M): its route's guards, and
    its tactic variant's conditions."""
    from ..kernels.gemv import tactics as gemv_tactics
    from .routes import route_named

    if cand.kind == "mixed_gemm":
        return True
    if route_named(cand.route).first_failure(problem, config) is not None:
        return False
    return not cand.variant or gemv_tactics.applies(cand.variant, problem)


def gemv_flag(config, prepacked: bool) -> int:
    """The TSV key's GEMV flag: ORT's ``int(not prepacked)`` plus the knob-gated tactic bits."""
    if prepacked:
        return 0
    pk = getattr(config, "gemv_paired_k", "off")
    return 1 | (2 if pk == "on" else 4 if pk == "force" else 0) | (8 if getattr(config, "gemv_wave_aware", False) else 0)


def candidates(problem: Problem, config, prepacked: bool) -> list[Candidate]:
    """The candidates for ``problem`` (its ``M`` is the bucket being profiled), in a fixed order."""
    from ..kernels import mixed_gemm
    from ..kernels.gemv import tactics as gemv_tactics
    from .routes import route_named

    out = []
    if mixed_gemm.supports(problem):
        out += [Candidate("mixed_gemm", name) for name in mixed_gemm.TACTICS]
    if not prepacked:
        gemv_ok = [name for name in GEMV_ROUTES if route_named(name).first_failure(problem, config) is None]
        paired_k = [Candidate("gemv", f"{name}+{gemv_tactics.PAIRED_K}") for name in gemv_ok
                    if name != "router_gemv" and gemv_tactics.applies(gemv_tactics.PAIRED_K, problem)]
        if config.gemv_paired_k == "force" and paired_k:
            return paired_k
        if problem.M < GEMV_MAX_M:
            for name in gemv_ok:
                out.append(Candidate("gemv", name))
                if name == "router_gemv":
                    continue
                if config.gemv_paired_k == "on":
                    out += [c for c in paired_k if c.route == name]
                if config.gemv_wave_aware and gemv_tactics.applies(gemv_tactics.WAVE, problem):
                    out.append(Candidate("gemv", f"{name}+{gemv_tactics.WAVE}"))
        out.append(Candidate("dequant_cublas", "dequant_cublas"))
        base = baseline(problem, config)
        if base not in out:
            out.append(base)
    return out


# ------------------------------------------------------------------------------------------ timing

class EventTimer:
    """Median of ``reps`` CUDA-event timings after ``warmup`` untimed runs, on the caller's stream."""

    def __init__(self, warmup: int = 3, reps: int = 10):
        self.warmup, self.reps = warmup, reps

    def __call__(self, candidate: Candidate, m: int, make_runner, stream: int) -> float:
        drv = launch._drv()
        run = make_runner()
        for _ in range(self.warmup):
            run(stream)
        cs = drv.CUstream(stream)
        start = launch.check(drv.cuEventCreate(0), "cuEventCreate")
        end = launch.check(drv.cuEventCreate(0), "cuEventCreate")
        try:
            times = []
            for _ in range(self.reps):
                launch.check(drv.cuEventRecord(start, cs), "cuEventRecord")
                run(stream)
                launch.check(drv.cuEventRecord(end, cs), "cuEventRecord")
                launch.check(drv.cuEventSynchronize(end), "cuEventSynchronize")
                times.append(float(launch.check(drv.cuEventElapsedTime(start, end), "cuEventElapsedTime")))
        finally:
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(end)
        return statistics.median(times) * 1e-3


def default_timer():
    """``EventTimer()`` on a GPU; ``None`` under the simulator (deterministic choice, module docstring)."""
    return None if launch.simulated() else EventTimer()


# ------------------------------------------------------------------------------------------ caches

_SHARED: dict = {}  # key -> {bucket: Candidate}
_SHARED_LOCK = threading.Lock()
_TSV_LOADED: set = set()


def clear_shared_cache() -> None:
    """Forget every profiled choice of this process (tests; after changing the GPU clocks)."""
    with _SHARED_LOCK:
        _SHARED.clear()
        _TSV_LOADED.clear()


def tactic_key(problem: Problem, packing_sm: int, prepacked: bool, config=None) -> tuple:
    """ORT's TSV key (spec §7.6): n_16b, K, dtype, weight type, bits, block size, zp, gemv flag, packing SM."""
    p = problem
    n_16b = p.N // (16 // p.bits)  # N over the codes in 16 bits: N / 4 for 4-bit, N / 2 for 8-bit
    wtype = f"int{p.bits}_groupwise"
    return (n_16b, p.K, p.dtype, wtype, p.bits, p.block_size, p.zero_points, gemv_flag(config, prepacked),
            packing_sm)


def tsv_path(config) -> Optional[str]:
    d = getattr(config, "tactic_cache_dir", None)
    if not d:
        return None
    prefix = (getattr(config, "tactic_cache_prefix", None) or getattr(config, "tuning_results_prefix", None)
              or "numba_nbits")
    return os.path.join(d, prefix + TSV_SUFFIX)


_TSV_HEADER = "n_16b\tk\tdtype\tweight_type\tbits\tblock_size\tzero_points\tgemv\tpacking_sm\tm\ttactic"


def _load_tsv(path: str) -> None:
    if path in _TSV_LOADED:
        return
    _TSV_LOADED.add(path)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        cols = line.split("\t")
        if len(cols) != 11 or cols[0] == "n_16b":
            continue
        try:
            key = (int(cols[0]), int(cols[1]), cols[2], cols[3], int(cols[4]), int(cols[5]), cols[6], int(cols[7]),
                   int(cols[8]))
            m = int(cols[9])
            cand = Candidate.parse(cols[10])
        except ValueError:
            continue
        if m > 0:
            _SHARED.setdefault(key, {}).setdefault(m, cand)


def _save_tsv(path: str) -> None:
    rows = [_TSV_HEADER]
    for key in sorted(_SHARED, key=repr):
        for m in sorted(_SHARED[key]):
            rows.append("\t".join(map(str, key + (m, _SHARED[key][m].label))))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(rows) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------- profiler

class TacticProfiler:
    """Per-node bucket -> candidate choices (shared per ``tactic_key``); see the module docstring.

    ``make_runner(candidate, m)`` returns a zero-argument factory building ``run(stream)`` for
    timing; ``timer`` is ``default_timer()`` when not given (resolved at profiling time).
    """

    def __init__(self, problem: Problem, config, *, packing_sm: int, prepacked: bool,
                 make_runner: Callable[[Candidate, int], Callable[[], Callable[[int], None]]],
                 timer=None):
        self.problem = replace(problem, M=1)
        self.config = config
        self.packing_sm = packing_sm
        self.prepacked = prepacked
        self.make_runner = make_runner
        self.timer = timer
        self.buckets = initial_buckets(getattr(config, "fpa_intb_profile_m", None))
        self.max_m = self.buckets[-1]
        self._listed = frozenset(self.buckets)
        self.key = tactic_key(self.problem, packing_sm, prepacked, config)
        self.timings: dict[int, dict[str, float]] = {}  # bucket -> label -> seconds (inf: failed)
        self.errors: dict[int, dict[str, str]] = {}  # bucket -> label -> why it failed
        self._tsv = tsv_path(config)
        with _SHARED_LOCK:
            if self._tsv:
                _load_tsv(self._tsv)
            self._best = _SHARED.setdefault(self.key, {})
        self._lock = threading.Lock()

    @property
    def profiled(self) -> dict[int, Candidate]:
        """bucket -> chosen candidate, for the buckets profiled so far (a copy)."""
        return dict(self._best)

    def bucket(self, m: int) -> int:
        """The bucket serving ``m``: ``m`` if listed or profiled, else ``min(max(1, next_pow2(m)), max_m)``."""
        if m in self._best or m in self._listed:
            return m
        return min(max(1, next_pow2(m)), self.max_m)

    def lookup(self, m: int) -> Optional[Candidate]:
        return self._best.get(self.bucket(m))

    def _fail(self, m: int, capture: bool):
        text = (f"No valid fpA_intB MatMulNBits tactic for M={m}, N={self.problem.N}, K={self.problem.K}")
        if capture:
            raise launch.CaptureError(text + ". The M bucket was not profiled before CUDA graph capture; run a "
                                      "warmup inference outside capture first.")
        raise RuntimeError(text)

    def get(self, m: int, stream: int = 0) -> Candidate:
        """The candidate for a call with ``m`` rows: lookup only while ``stream`` captures, else lookup
        or profile the bucket (ORT's ``getBestConfigOrProfile``)."""
        if launch.is_capturing(stream):
            c = self.lookup(m)
            if c is None:
                self._fail(m, capture=True)
            return c
        c = self.lookup(m)
        return c if c is not None else self.profile(self.bucket(m), stream)

    def profile(self, m: int, stream: int = 0) -> Candidate:
        """Time every candidate at ``M = m`` and record the fastest for bucket ``m``."""
        with self._lock:
            done = self._best.get(m)
            if done is not None:
                return done
            timer = self.timer if self.timer is not None else default_timer()
            cands = candidates(replace(self.problem, M=m), self.config, self.prepacked)
            if len(cands) == 1:  # nothing to compare (paired-K "force")
                best = cands[0]
            elif timer is None:  # simulator: nothing to time (module docstring)
                from ..kernels import mixed_gemm

                best = Candidate("mixed_gemm", mixed_gemm.default_tactic(m).name)
            else:
                times: dict[str, float] = {}
                for cand in cands:
                    try:
                        t = float(timer(cand, m, self.make_runner(cand, m), stream))
                    except launch.CaptureError:
                        raise
                    except Exception as exc:  # a candidate that cannot run is not a candidate
                        times[cand.label] = math.inf
                        self.errors.setdefault(m, {})[cand.label] = repr(exc)
                        continue
                    times[cand.label] = t if t == t else math.inf  # NaN never wins
                self.timings[m] = {**self.timings.get(m, {}), **times}
                finite = [(t, i, lab) for i, (lab, t) in enumerate(times.items()) if math.isfinite(t)]
                if not finite:
                    self._fail(m, capture=False)
                best = Candidate.parse(min(finite)[2])  # fastest; ties go to the earlier candidate
            with _SHARED_LOCK:
                self._best[m] = best
                if self._tsv:
                    try:
                        _save_tsv(self._tsv)
                    except OSError:
                        pass  # the cache is an optimisation; an unwritable directory must not fail inference
            return best
