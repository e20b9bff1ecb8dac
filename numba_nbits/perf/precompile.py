"""Compile a sweep's kernels ahead of timing, in parallel worker processes, into the kernel cache.

A sweep is compile-bound: every case specialises kernels (dtype, bits, block, zero-point kind, tile
shape, the fpA_intB profiler's candidate tactics), ~1.5-7 s each through numba, one after another in
the timing process. With ``--compile-workers N`` the runner first starts N processes (this module's
``main``), each building the operators of every N-th group of cases at its real shape and calling
``warmup(M)`` for dispatch's route and every forced eligible route — exactly what the timing process
does before it times — so each kernel is compiled once, in parallel, and written to the compiled-
kernel cache (``launch/cache.py``). The timing process then loads cubins instead of compiling. Workers do
no timing; they finish before the timing starts, so they never share the GPU with a measurement. A
worker's error is only counted: the timing process meets the same error and reports it in its row.
The cache counters come from ``numba_nbits.precompile.cache_stats`` (the model-level precompile's).

Worker command line (the runner builds it): ``python -m numba_nbits.perf.precompile CASES.json I N``
prints one JSON line ``{"worker": I, "cases": n, "kernels_compiled": c, "kernels_loaded": l,
"seconds": s, "errors": [...]}``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict

import numpy as np

from .shapes import Case, groups


def case_rng(seed: int, *key) -> np.random.Generator:
    """The generator of a case group's random data, seeded by the run's seed and ``key`` (a group's
    weights: ``Case.group``; its activations: ``(Case.group, M)``). The timing process (``runner.py``)
    and the workers here draw from it, so a worker builds the operators the timing process builds."""
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


def _groups_of(cases: list[Case]) -> list[list[Case]]:
    """The cases of each ``Case.group`` (``shapes.groups``: the timing process's grouping and M order)."""
    return [cs for _, cs in groups(cases)]


def warm_cases(cases: list[Case], seed: int = 0, routes=("auto", "forced")) -> dict:
    """Build and warm up (compile) every operator the timing process will build for ``cases``."""
    from ..precompile import cache_stats
    from .shapes import ROUTER_AB_VARIANT, shape_named
    from .subjects import OpSet, eligible_routes, random_weights

    t0 = time.time()
    stats = {"cases": 0, "errors": []}
    for group in _groups_of(cases):
        c0 = group[0]
        try:
            spec = shape_named(c0.shape)
            w = random_weights(spec.N, spec.K, c0.bits, c0.block, c0.dtype, c0.zp, spec.bias,
                               case_rng(seed, c0.group))
            auto = OpSet(w, None, c0.variant, 1)
            for c in group:
                todo = [auto] if ("auto" in routes or c.variant == ROUTER_AB_VARIANT) else []
                if c.variant != ROUTER_AB_VARIANT:
                    chosen = auto.route_for(c.M)
                    todo += [OpSet(w, r, c.variant, 1) for r in eligible_routes(auto.ops[0], c.M, c.variant)
                             if r != chosen and ("forced" in routes or r in routes)]
                for ops in todo:
                    try:
                        ops.warmup(c.M)
                    except Exception as e:  # noqa: BLE001 - the timing process reports it
                        stats["errors"].append(f"{c.shape} M={c.M} {ops.route}: {type(e).__name__}: {e}"[:300])
                stats["cases"] += 1
        except Exception as e:  # noqa: BLE001
            stats["errors"].append(f"{c0.group}: {type(e).__name__}: {e}"[:300])
    c = cache_stats()
    stats.update((k, c[k]) for k in ("kernels_compiled", "kernels_loaded", "cache_errors", "cache_last_error"))
    stats["seconds"] = round(time.time() - t0, 1)
    return stats


def split(cases: list[Case], workers: int) -> list[list[Case]]:
    """Groups dealt round-robin to ``workers`` lists (largest groups first, so the loads even out)."""
    by_size = sorted(_groups_of(cases), key=lambda g: -len(g))
    parts: list[list[Case]] = [[] for _ in range(max(1, workers))]
    for i, g in enumerate(by_size):
        parts[i % len(parts)].extend(g)
    return [p for p in parts if p]


def run_workers(cases: list[Case], workers: int, *, seed: int = 0, routes=("auto", "forced"),
                timeout_s: float = 600.0, python: str = sys.executable) -> dict:
    """Run ``workers`` precompile processes over ``cases``; returns a summary for the run's meta."""
    t0 = time.time()
    parts = split(cases, workers)
    summary = {"workers": len(parts), "results": [], "failed": []}
    if not parts:
        return summary
    with tempfile.TemporaryDirectory(prefix="nbits-precompile-") as tmp:
        path = os.path.join(tmp, "cases.json")
        with open(path, "w") as f:
            json.dump({"seed": seed, "routes": list(routes), "parts": [[asdict(c) for c in p] for p in parts]}, f)
        procs = [subprocess.Popen([python, "-m", "numba_nbits.perf.precompile", path, str(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(len(parts))]
        deadline = t0 + timeout_s
        for i, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(0.001, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                summary["failed"].append({"worker": i, "reason": f"killed after {timeout_s:.0f} s"})
                continue
            line = next((x for x in reversed(out.splitlines()) if x.startswith("{")), None)
            if p.returncode != 0 or line is None:
                summary["failed"].append({"worker": i, "reason": f"exit {p.returncode}: {err[-300:]}"})
                continue
            summary["results"].append(json.loads(line))
    summary["seconds"] = round(time.time() - t0, 1)
    summary["cases"] = sum(r["cases"] for r in summary["results"])
    summary["kernels_compiled"] = sum(r.get("kernels_compiled") or 0 for r in summary["results"])
    summary["errors"] = sum(len(r["errors"]) for r in summary["results"])
    summary["cache_errors"] = sum(r.get("cache_errors") or 0 for r in summary["results"])
    summary["cache_last_error"] = next((r["cache_last_error"] for r in summary["results"]
                                        if r.get("cache_last_error")), None)
    return summary


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path, i = argv[0], int(argv[1])
    with open(path) as f:
        job = json.load(f)
    cases = [Case(**d) for d in job["parts"][i]]
    stats = warm_cases(cases, seed=job["seed"], routes=tuple(job["routes"]))
    print(json.dumps({"worker": i, **stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
