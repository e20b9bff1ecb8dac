"""The ``fpa_intb`` route's plan (spec §7): the mixed GEMM of ``kernels/mixed_gemm/`` behind the tactic profiler.

No kernel lives here. ``build(weights, problem, config, route)`` asks the node's ``TacticProfiler``
(``dispatch/profiler.py``; one per node, kept with the weights: ``profiler``) which candidate serves
this M's bucket (profiling the bucket on first use, outside capture) and builds it:

* ``mixed_gemm:<tactic>`` — the tensor-core mixed GEMM with that tile shape, bias fused, over the
  prepacked B (offline-packed ``weight_prepacked`` 1/2 used in place, or the runtime prepack of an
  ONNX-layout B, spec §7.5);
* ``gemv:<route>`` / ``dequant_cublas`` / ``dequant_cublas_chunked`` — an existing route's plan, plus the
  bias-add launch attached (``Plan.add_bias``) when that route does not fuse bias, so to the caller
  the route always serves bias itself; ``gemv:<route>+<variant>`` — that route's tensor-core plan with a
  ``kernels/gemv/tactics.py`` tactic (paired-K, wave-aware).

Packing SM (spec §7.4): ``packing_sm(device_sm, weight_prepacked)`` is 90 only for an SM90 device with
``weight_prepacked == 2``, else 80; it picks the prepacked layout (``arch`` of
``pack_weights_for_mixed_gemm``) and is part of the tactic key. ``required_weight_prepacked_format``
is 2 for packing SM 90, else 1 (the "does not match the format" check of §7.3).

What the family's kernel needs (``supports``) is the mixed GEMM's ``supports``; the spec's N alignment of
the route (``dispatch.routes.FPA_N_ALIGN``: N % 64 for 4-bit, N % 32 for 8-bit, as ORT's fpA_intB kernels
need) is a route guard.

An A that is not 16-byte aligned (the mixed GEMM loads 16 bytes at a time) is served by dequantize +
cuBLAS, built on first need; with a prepacked B there is no such fallback and the call fails clearly.

M chunking (spec §7.7, ``ep.cuda.matmul_nbits_m_chunk_size`` / ``ORT_MATMULNBITS_M_CHUNK_SIZE``):
``build`` splits a call into ``ceil(M / Mc)`` row chunks when ``m_chunk_rows`` says so (Mc > 0, M > Mc
and M above the 256 MiB cutoff, or ``ORT_MATMULNBITS_FORCE_CHUNKED``); each chunk runs the plan of its
own row count on row slices of A and Y (``ChunkedFpaIntbPlan``).

If a GEMV candidate was chosen for a bucket that M falls in but the GEMV (or its tactic variant) cannot
serve M (``profiler.serves``: e.g. M above the max profiled M, so the bucket was clamped), the mixed
GEMM's ``default_tactic(M)`` serves instead.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..dispatch.profiler import Candidate, TacticProfiler
from . import get_family
from .family import KernelFamily, Plan
from .mixed_gemm.tactics import supports

ROUTE = "fpa_intb"
PROFILER_KEY = "fpa_intb_profiler"


def packing_sm(device_sm: int, weight_prepacked: int) -> int:
    """ORT's ``EffectiveFpAIntBWorkspaceSm``: 90 iff device sm == 90 and weight_prepacked == 2, else 80."""
    return 90 if device_sm == 90 and weight_prepacked == 2 else 80


def required_weight_prepacked_format(packing: int) -> int:
    """ORT's ``RequiredWeightPrepackedFormat``: 2 for packing SM 90, else 1."""
    return 2 if packing == 90 else 1


def build_candidate(weights, problem, config, cand: Candidate, arch: int):
    """The plan of one profiler candidate for ``problem`` (fixed M); bias always served."""
    from ..dispatch.routes import route_named

    if cand.kind == "mixed_gemm":
        from . import mixed_gemm

        mixed_gemm.prepack(weights, arch, prepacked=problem.weight_prepacked != 0)  # the layout, once per node
        return mixed_gemm.build(weights, problem, config, cand.name, arch)
    if problem.weight_prepacked:
        raise ValueError(f"{cand.label} cannot read a prepacked B (weight_prepacked={problem.weight_prepacked})")
    if cand.kind == "dequant_cublas":
        from . import dequant

        plan, bias = dequant.build(weights, problem, config, route=cand.name), "add"
    elif cand.kind == "gemv":
        route = route_named(cand.route)
        family = get_family(route.family)
        if cand.variant:  # a knob-gated tensor-core tactic (kernels/gemv/tactics.py)
            from .gemv import tactics as gemv_tactics

            tac = gemv_tactics.tactic(cand.variant, weights, problem)
            plan = family.build(weights, problem, config, route.name, kernel="mma", tactic=tac)
        else:
            plan = family.build(weights, problem, config, route.name)
        bias = route.bias
    else:
        raise ValueError(f"unknown fpA_intB candidate {cand!r}")
    if weights.bias is not None and bias == "add":
        plan.add_bias(weights, problem.M)
    return plan


def profiler(weights, problem, config, timer=None) -> TacticProfiler:
    """The node's tactic profiler, created once per node from ``(weights, problem at M=1, config)`` and
    kept with the weights (``weights.derived``); ``timer`` applies only when this call creates it."""
    return weights.derived(PROFILER_KEY, lambda: make_profiler(weights, replace(problem, M=1), config, timer))


def make_profiler(weights, problem, config, timer=None) -> TacticProfiler:
    """A new tactic profiler for the node; its runners build candidates with their own A / Y buffers."""
    from ..arrays import device_empty, to_device

    arch = packing_sm(problem.sm, problem.weight_prepacked)

    def make_runner(cand: Candidate, m: int):
        def factory():
            p = replace(problem, M=m)
            plan = build_candidate(weights, p, config, cand, arch)
            rng = np.random.default_rng(m)
            a = to_device((rng.standard_normal((m, weights.K)) * 0.5).astype(np.float32).astype(weights.np_dtype),
                          weights.simulated)
            out = device_empty((m, weights.N), weights.np_dtype, weights.simulated)
            return lambda stream: plan.run(a, out, stream)

        return factory

    return TacticProfiler(problem, config, packing_sm=arch, prepacked=problem.weight_prepacked != 0,
                          make_runner=make_runner, timer=timer)


#: the size gate of M chunking (spec §7.7): chunk only when M > 256 MiB / ((N + K) * sizeof(T)) rows
M_CHUNK_GATE_BYTES = 256 * 1024 * 1024
#: row counts from this one up are used as they are (below it they round down to a bucket)
M_CHUNK_BUCKET_CAP = 8192


def floor_bucket(rows: int, buckets) -> int:
    """``rows`` rounded down to a profile bucket (spec §7.7) when below 8192: the largest of the node's
    buckets and the powers of two below 8192 that is <= rows (at least 1); else ``rows``."""
    if rows >= M_CHUNK_BUCKET_CAP:
        return rows
    cands = [b for b in set(buckets) | {1 << i for i in range(13)} if b <= rows]
    return max(cands) if cands else 1


def m_chunk_rows(M: int, N: int, K: int, itemsize: int, config, buckets) -> int:
    """Rows per M chunk of an fpa_intb call (spec §7.7), 0 for one call: ``m_chunk_size`` Mc > 0 (rounded
    down to a bucket below 8192), ``M > Mc``, and ``M`` above the cutoff ``floor(256 MiB / ((N + K) *
    sizeof(T)))`` (rounded down to a bucket below 8192) unless ``ORT_MATMULNBITS_FORCE_CHUNKED``."""
    mc = int(getattr(config, "m_chunk_size", 0) or 0)
    if mc <= 0:
        return 0
    mc = floor_bucket(mc, buckets)
    cutoff = floor_bucket(max(1, M_CHUNK_GATE_BYTES // ((N + K) * itemsize)), buckets)
    if M > mc and (getattr(config, "force_chunked", False) or M > cutoff):
        return mc
    return 0


class FpaIntbPlan(Plan):
    """The route's plan for one M: the candidate the profiler chose for M's bucket (module docstring);
    with M chunking (``m_chunk_rows`` > 0) ``ChunkedFpaIntbPlan`` runs one per chunk size."""

    route = ROUTE

    def __init__(self, weights, problem, config, profiler: TacticProfiler, stream: int = 0):
        from ..dispatch.profiler import serves
        from . import mixed_gemm

        self.m_chunk_size = 0  # not chunked: one chunk of all M rows
        self.chunks = ((0, problem.M),)
        cand = profiler.get(problem.M, stream)
        if not serves(cand, problem, config):
            cand = Candidate("mixed_gemm", mixed_gemm.default_tactic(problem.M).name)
        self.M = problem.M
        self.candidate = cand
        self.bucket = profiler.bucket(problem.M)
        self.tactic = cand.label
        self.packing_sm = profiler.packing_sm
        wp = problem.weight_prepacked
        if cand.kind != "mixed_gemm":
            self.weight_format = "onnx"
        elif wp:
            self.weight_format = f"prepacked_sm{self.packing_sm}(weight_prepacked={wp})"
        else:
            self.weight_format = f"runtime_prepack_sm{self.packing_sm}"
        self.inner = build_candidate(weights, problem, config, cand, self.packing_sm)
        self.kernel = getattr(self.inner, "kernel", cand.label)
        self._args = (weights, problem, config)
        self._unaligned = None

    def enqueue(self, a, out, stream: int) -> None:
        if a.ptr % 16 and self.candidate.kind == "mixed_gemm":  # the mixed GEMM loads A 16 bytes at a time
            self._unaligned_plan(stream).run(a, out, stream)
            return
        self.inner.run(a, out, stream)

    def _unaligned_plan(self, stream: int):
        """An A that is not 16-byte aligned (a sliced tensor): dequantize + cuBLAS, built on first need."""
        if self._unaligned is None:
            from ..launch import CaptureError, is_capturing

            weights, problem, config = self._args
            if problem.weight_prepacked:
                raise ValueError("input A must be 16-byte aligned for the fpA_intB mixed GEMM over a prepacked B "
                                 f"(weight_prepacked={problem.weight_prepacked}); pass an aligned contiguous copy")
            if is_capturing(stream):
                raise CaptureError("fpa_intb: A is not 16-byte aligned and the dequantize + cuBLAS fallback is not "
                                   "built yet; run a warmup inference with the same A layout outside capture first.")
            self._unaligned = build_candidate(weights, problem, config,
                                              Candidate("dequant_cublas", "dequant_cublas"), self.packing_sm)
        return self._unaligned


class ChunkedFpaIntbPlan(Plan):
    """M chunking (spec §7.7): ``ceil(M / Mc)`` row slices of A and Y, each run by the ``FpaIntbPlan`` of
    its own row count (so the tactic of its own bucket: one plan for the full chunks, one for the rest).
    ``run`` only offsets pointers (no allocation, no sync: graph-capturable once built). ``chunks``,
    ``m_chunk_size`` and the ``tactic`` / ``kernel`` text (``...;m_chunks=<n>x<Mc>``) show the split."""

    route = ROUTE

    def __init__(self, weights, problem, config, profiler: TacticProfiler, rows: int, stream: int = 0):
        M = problem.M
        self.M = M
        self.m_chunk_size = rows
        self.chunks = tuple((r0, min(rows, M - r0)) for r0 in range(0, M, rows))
        self.plans = {}
        for _, n in self.chunks:
            if n not in self.plans:
                self.plans[n] = FpaIntbPlan(weights, replace(problem, M=n), config, profiler, stream)
        first = self.plans[rows]
        self.candidate, self.bucket = first.candidate, first.bucket
        self.packing_sm, self.weight_format = first.packing_sm, first.weight_format
        tail = ",".join(p.tactic for n, p in self.plans.items() if n != rows)
        self.tactic = f"{first.tactic}{',' + tail if tail else ''};m_chunks={len(self.chunks)}x{rows}"
        self.kernel = f"{first.kernel};m_chunks={len(self.chunks)}x{rows}"
        self._row_bytes = (weights.K * weights.np_dtype.itemsize, weights.N * weights.np_dtype.itemsize)

    def enqueue(self, a, out, stream: int) -> None:
        if not (a.c_contiguous and out.c_contiguous):
            raise ValueError("fpa_intb M chunking needs C-contiguous A and Y")
        ka, ny = self._row_bytes
        K, N = a.shape[-1], out.shape[-1]
        for r0, n in self.chunks:
            self.plans[n].run(a.offset(r0 * ka, (n, K)), out.offset(r0 * ny, (n, N)), stream)


def build(weights, problem, config, route: str = ROUTE):
    """The route's plan for ``problem`` with the node's ``profiler``: chunked along M when ``m_chunk_rows``
    says so (spec §7.7)."""
    prof = profiler(weights, problem, config)
    rows = m_chunk_rows(problem.M, weights.N, weights.K, weights.np_dtype.itemsize, config, prof.buckets)
    if rows:
        return ChunkedFpaIntbPlan(weights, problem, config, prof, rows)
    return FpaIntbPlan(weights, problem, config, prof)


FAMILY = KernelFamily(ROUTE, supports, build, ("fpa_intb.py", "mixed_gemm/"))
