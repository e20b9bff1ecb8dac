"""``python -m numba_nbits.perf --compile-workers N``: the precompile workers' case split, their warm-up
(what the timing process would build, on the simulator here), the subprocess protocol, and the report line."""
from __future__ import annotations

import sys

from conftest import SIMULATED

from numba_nbits.perf import precompile, report
from numba_nbits.perf.shapes import Case


def _cases():
    # small ad-hoc shapes (NxK), two groups of two M each, plus a third group
    return [Case("64x128", 4, 32, "float16", "none", "", 1), Case("64x128", 4, 32, "float16", "none", "", 4),
            Case("32x64", 8, 32, "float16", "packed", "", 1), Case("32x64", 8, 32, "float16", "packed", "", 2),
            Case("64x64", 2, 64, "float32", "none", "", 1)]


def test_split_keeps_groups_whole_and_covers_every_case():
    cases = _cases()
    for workers in (1, 2, 3, 8):
        parts = precompile.split(cases, workers)
        assert len(parts) == min(workers, 3)
        assert sorted(map(repr, sum(parts, []))) == sorted(map(repr, cases))
        for p in parts:  # a group never straddles two workers
            for q in parts:
                if p is not q:
                    assert not {c.group for c in p} & {c.group for c in q}
    assert precompile.split([], 4) == []


def test_warm_cases_builds_every_route_the_timing_process_builds():
    """On the simulator: every case warmed through dispatch's route and each forced eligible route, no error."""
    stats = precompile.warm_cases(_cases()[:2])
    assert stats["cases"] == 2 and stats["errors"] == [], stats["errors"]
    if SIMULATED:
        assert stats["kernels_compiled"] is None  # no kernel cache under the simulator


def test_workers_protocol_in_subprocesses():
    summary = precompile.run_workers(_cases()[2:], 2, timeout_s=600, python=sys.executable)
    assert summary["workers"] == 2 and summary["failed"] == [], summary["failed"]
    assert summary["cases"] == 3 and summary["errors"] == 0
    assert {r["worker"] for r in summary["results"]} == {0, 1}


def test_worker_timeout_is_reported(monkeypatch):
    summary = precompile.run_workers(_cases()[:1], 1, timeout_s=0.01, python=sys.executable)
    assert summary["results"] == [] and "killed after" in summary["failed"][0]["reason"]


def test_summary_line_names_the_precompile():
    meta = {"env": {}, "ceilings": {}, "wall_s": 300.0,
            "precompile": {"seconds": 120.0, "cases": 40, "workers": 12, "kernels_compiled": 95, "failed": []}}
    assert "(of which 120 s compiling the kernels of 40 cases in 12 parallel processes: 95 kernels)" in \
        report._precompile_text(meta)
    assert report._precompile_text({}) == ""


def test_runner_step_runs_workers_only_on_a_gpu_with_the_cache_on(monkeypatch):
    from numba_nbits.launch import cache as kcache
    from numba_nbits.perf import runner

    calls = []

    def fake_run_workers(cases, workers, **kw):
        calls.append((len(cases), workers, kw["timeout_s"]))
        return {"workers": workers, "results": [], "failed": [], "seconds": 1.0, "cases": len(cases),
                "kernels_compiled": 3, "errors": 0}

    monkeypatch.setattr(precompile, "run_workers", fake_run_workers)
    opts = runner.Options(cases=_cases(), budget_s=400.0, compile_workers=4)
    meta = {"notes": []}
    runner.precompile_step(opts, meta, simulated=True)
    assert calls == [] and "precompile" not in meta
    monkeypatch.setitem(kcache._CACHE_STATE, "cache", None)  # cache off
    runner.precompile_step(opts, meta, simulated=False)
    assert calls == [] and meta["notes"][0][0] == "precompile"
    monkeypatch.setitem(kcache._CACHE_STATE, "cache", kcache._KernelCache("/tmp/unused"))
    runner.precompile_step(opts, meta, simulated=False)
    assert calls == [(5, 4, 200.0)] and meta["precompile"]["kernels_compiled"] == 3
    runner.precompile_step(runner.Options(cases=_cases(), compile_workers=0), meta, simulated=False)
    assert len(calls) == 1
