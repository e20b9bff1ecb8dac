"""CPU-only tests of the perf suite: counting, rotation sizing, plans, CLI, report shaping, README.

No GPU and no kernel launch: these exercise the pure parts of ``numba_nbits.perf``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from numba_nbits.perf import cli, metrics, report, shapes
from numba_nbits.perf.reference_rows import SOURCE, reference_rows

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ counting

@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("zp", ["none", "packed", "typed"])
@pytest.mark.parametrize("bias", [False, True])
def test_nbits_bytes(bits, zp, bias):
    M, N, K, block = 3, 40, 100, 32  # K not a multiple of the block: 4 blocks, padded
    b = metrics.nbits_bytes(M, N, K, bits, block, "float16", zp, bias)
    kb = 4
    assert b.weights == N * kb * block * bits // 8
    assert b.scales == N * kb * 2
    assert b.zero_points == {"none": 0, "packed": N * -(-kb * bits // 8), "typed": N * kb * 2}[zp]
    assert b.A == M * K * 2 and b.Y == M * N * 2
    assert b.bias == (N * 2 if bias else 0)
    assert b.total == b.weights + b.scales + b.zero_points + b.A + b.Y + b.bias
    assert b.constant == b.total - b.A - b.Y


def test_bytes_fp32_and_peers():
    b = metrics.nbits_bytes(1, 4096, 4096, 4, 128, "float32")
    assert b.scales == 4096 * 32 * 4 and b.A == 4096 * 4
    d = metrics.dense_bytes(2, 8, 16, "bfloat16", bias=True)
    assert (d.weights, d.A, d.Y, d.bias) == (8 * 16 * 2, 2 * 16 * 2, 2 * 8 * 2, 16)
    t = metrics.tinygemm_bytes(1, 8, 256, 128)
    assert t.weights == 8 * 128 and t.scales == 2 * 8 * 4
    with pytest.raises(ValueError):
        metrics.nbits_bytes(1, 8, 32, 4, 32, "float16", "bogus")


def test_flops_and_derived():
    assert metrics.flops(2, 3, 5) == 60
    d = metrics.derived(1.0, 4_000_000, 200_000_000, bw_tb_s=4.0, peak_tflops=1000.0)  # 1 us
    assert d["tb_s"] == pytest.approx(4.0) and d["tflops"] == pytest.approx(200.0)
    assert d["pct_bw"] == pytest.approx(100.0)
    assert d["pct_flops"] == pytest.approx(20.0)
    assert d["pct_roofline"] == pytest.approx(100.0)
    nan = metrics.derived(float("nan"), 1, 1, 4.0, 1.0)
    assert all(v != v for v in nan.values())
    assert np.isnan(metrics.derived(1.0, 1, 1, float("nan"), float("nan"))["pct_roofline"])


def test_quantiles():
    assert metrics.quantiles([5, 1, 3, 2, 4]) == pytest.approx((1.8, 3.0, 4.2))
    assert np.isnan(metrics.quantiles([])[1])


# ---------------------------------------------------------------------------------- rotation

def test_rotation_copies_exceed_l2():
    l2 = 60 << 20
    for per in (1, 4096, 8 << 20, 59 << 20, 60 << 20, 61 << 20, 1 << 30):
        n = metrics.rotation_copies(per, l2, factor=2.0, max_copies=10**9)
        assert n * per >= 2 * l2 or n == 1
        assert n == 1 or (n - 1) * per < 2 * l2  # the fewest that do
        assert metrics.l2_cold(n, per, l2) or per * n > l2
    assert metrics.rotation_copies(8 << 20, l2) == 15  # 4096x4096 4-bit weights: ceil(120 / 8)


def test_rotation_caps():
    l2 = 60 << 20
    assert metrics.rotation_copies(1000, l2, max_copies=64) == 64
    assert not metrics.l2_cold(64, 1000, l2)
    assert metrics.rotation_copies(100 << 20, l2, mem_budget_bytes=50 << 20) == 1
    assert metrics.rotation_copies(10 << 20, l2, mem_budget_bytes=30 << 20) == 3
    assert metrics.rotation_copies(0, l2) == 1
    assert metrics.rotation_copies(100, 0) == 1


def test_batch_and_sample_sizing():
    from numba_nbits.perf.harness import Budget, batch_size, host_calls, sample_count

    b = Budget()
    assert batch_size(15, 2.0, b) == 20  # 40 us of work at 2 us per call
    assert batch_size(15, 100.0, b) == 15  # a whole rotation at least
    assert batch_size(5000, 1.0, b) == 5000
    assert batch_size(1, 1e-6, b) == b.max_batch
    assert b.min_samples <= sample_count(20, 2.0, b) <= b.max_samples
    assert sample_count(1, 1e5, b) == b.min_samples
    assert sample_count(1, float("nan"), b) == b.min_samples
    assert host_calls(1.0, b) == b.host_max_calls and host_calls(1e5, b) == b.host_min_calls


# ------------------------------------------------------------------------------------ shapes

def test_shape_lists():
    want = {(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (128256, 4096),
            (200064, 3072), (32, 2880), (256, 7168)}
    assert {(s.N, s.K) for s in shapes.SHAPES.values()} == want
    assert len({s.name for s in shapes.SHAPES.values()}) == len(shapes.SHAPES)
    for s in shapes.SHAPES.values():
        assert s.N % 8 == 0 and s.K % 32 == 0 and s.role in ("proj", "lm_head", "router")
    assert shapes.SHAPES["router-gptoss"].bias
    for plan in (shapes.FULL_PLAN, shapes.QUICK_PLAN):
        for t in plan:
            assert set(t.shapes) <= set(shapes.SHAPES), t.name
            assert set(t.bits) <= set(shapes.ALL_BITS) and set(t.dtypes) <= set(shapes.ALL_DTYPES)
            assert set(t.Ms) <= set(shapes.ALL_M) and set(t.blocks) <= set(shapes.ALL_BLOCKS)
            assert set(t.zps) <= set(shapes.ZERO_POINTS)
    assert shapes.ALL_M == (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)


def test_full_plan_covers_the_grid_with_pruning():
    cases = shapes.expand(shapes.FULL_PLAN)
    keys = [(c.group, c.M) for c in cases]
    assert len(keys) == len(set(keys))
    assert {c.bits for c in cases} == {2, 4, 8}
    assert {c.block for c in cases} == {32, 64, 128}
    assert {c.dtype for c in cases} == {"float16", "bfloat16", "float32"}
    assert {c.M for c in cases} == set(shapes.ALL_M)
    assert {c.shape for c in cases} == set(shapes.SHAPES)
    assert any(c.variant == shapes.ROUTER_AB_VARIANT for c in cases)
    assert all(shapes.shape_named(c.shape).role == "router" for c in cases if c.variant)
    assert len(cases) < 400
    assert cases[0].tier == shapes.FULL_PLAN[0].name  # priority order


def test_quick_plan():
    cases = shapes.expand(shapes.QUICK_PLAN)
    assert {c.M for c in cases} == {1, 16, 256}
    assert {c.bits for c in cases} == {4} and {c.block for c in cases} == {32, 128}
    assert {c.dtype for c in cases} == {"float16"}
    assert len(cases) <= 30


def test_expand_overrides_and_sweeps():
    cases = shapes.expand(shapes.FULL_PLAN, shapes=["4096x4096"], Ms=[1, 64], bits=[8], blocks=[32],
                          dtypes=["float32"])
    assert {(c.shape, c.M, c.bits, c.block, c.dtype) for c in cases} == {
        ("l3-8b-attn", 1, 8, 32, "float32"), ("l3-8b-attn", 64, 8, 32, "float32")} | (
        {("l3-8b-attn", m, 8, 32, "float32") for m in ()})
    adhoc = shapes.expand(shapes.QUICK_PLAN, shapes=["48x96"], Ms=[3])
    assert {(c.shape, c.M) for c in adhoc} == {("48x96", 3)}
    assert shapes.shape_named("48x96").N == 48
    gemv = shapes.expand(shapes.FULL_PLAN, sweep="gemv")
    assert gemv and all(c.M <= 16 and shapes.shape_named(c.shape).role != "router" for c in gemv)
    gemm = shapes.expand(shapes.FULL_PLAN, sweep="gemm")
    assert gemm and all(c.M > 16 for c in gemm)
    router = shapes.expand(shapes.FULL_PLAN, sweep="router")
    assert router and all(shapes.shape_named(c.shape).role == "router" for c in router)
    with pytest.raises(ValueError):
        shapes.expand(shapes.FULL_PLAN, sweep="bogus")
    with pytest.raises(ValueError):
        shapes.shape_named("llama")


def test_groups_sorted_by_M():
    gs = shapes.groups(shapes.expand(shapes.QUICK_PLAN))
    for _, cs in gs:
        assert [c.M for c in cs] == sorted(c.M for c in cs)
        assert len({c.group for c in cs}) == 1


# --------------------------------------------------------------------------------------- CLI

def test_cli_defaults():
    a = cli.parse([])
    assert a.budget_s == cli.FULL_BUDGET_S and a.sweep == "all" and a.routes == ["auto", "forced"]
    assert len(a.cases) == len(shapes.expand(shapes.FULL_PLAN))
    assert not a.no_peers and a.out is None


def test_cli_options(tmp_path):
    a = cli.parse(["--quick", "--sweep", "gemv", "--shapes", "l3-8b-attn,lmhead-l3", "--M", "1,4",
                   "--bits", "4,8", "--block-sizes", "64", "--dtypes", "bf16,fp16", "--routes", "auto",
                   "--out", str(tmp_path), "--no-peers", "--budget-s", "30"])
    assert a.quick and a.no_peers and a.routes == ["auto"] and a.out == tmp_path and a.budget_s == 30
    assert {c.shape for c in a.cases} == {"l3-8b-attn", "lmhead-l3"}
    assert {c.M for c in a.cases} == {1, 4} and {c.bits for c in a.cases} == {4, 8}
    assert {c.dtype for c in a.cases} == {"bfloat16", "float16"} and {c.block for c in a.cases} == {64}
    assert cli.parse(["--quick"]).budget_s == cli.QUICK_BUDGET_S


@pytest.mark.parametrize("argv", [["--bits", "3"], ["--M", "x"], ["--dtypes", "int8"], ["--shapes", "nope"],
                                  ["--sweep", "moe"]])
def test_cli_rejects(argv):
    with pytest.raises(SystemExit):
        cli.parse(argv)


def test_default_out_dir():
    import datetime

    d = cli.default_out("NVIDIA H200", datetime.date(2026, 12, 1))
    assert d.parts[-3:] == ("benchmarks", "results", "2026-12-01-h200")


def test_dry_run_imports_no_torch_or_numba():
    code = ("import sys; from numba_nbits.perf.cli import main; main(['--dry-run', '--quick']); "
            "import numba_nbits.perf.report, numba_nbits.perf.peers, numba_nbits.perf.runner; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'numba.cuda' not in sys.modules, 'numba.cuda imported'")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "cases in" in r.stdout


# ------------------------------------------------------------------------------------ report

def _rows():
    env = {"gpu": "NVIDIA H200", "sm_count": 132, "driver": "580", "numba_cuda": "0.30.4", "cuda_core": "1.2.0",
           "torch": "2.11", "git_commit": "abc", "date": "2026-12-01 10:00"}
    base = {"shape": "l3-8b-attn", "N": 4096, "K": 4096, "bits": 4, "block": 128, "dtype": "float16", "zp": "none",
            "bias": False, "variant": "", **env}
    out = []
    for M, auto, fast, dense in ((1, 3.0, 2.5, 14.0), (256, 30.0, 30.0, 18.7)):
        out += [
            {**base, "M": M, "kind": "ours", "route": "gemv_w4" if M == 1 else "dequant_cublas", "forced": False,
             "us": auto, "correct": True, "rel_err": 1e-4, "pct_roofline": 50.0, "pct_bw": 50.0},
            {**base, "M": M, "kind": "ours", "route": "fast_but_wrong", "forced": True, "us": 0.5, "correct": False,
             "rel_err": 0.5},
            {**base, "M": M, "kind": "ours", "route": "other", "forced": True, "us": fast, "correct": True,
             "rel_err": 1e-4, "pct_roofline": 60.0, "pct_bw": 60.0},
            {**base, "M": M, "kind": "peer", "route": "torch_dense", "forced": False, "us": dense, "correct": True},
        ]
    out.append({**base, "M": 1, "kind": "ours", "route": "gemv_w4", "forced": True, "error": "RuntimeError: boom",
                "correct": False})
    for r in reference_rows():
        if (r["N"], r["K"], r["block"]) == (4096, 4096, 128) and r["M"] in (1, 256):
            out.append({**r, "shape": "l3-8b-attn", "variant": ""})
    router = {**base, "shape": "router-gptoss", "N": 32, "K": 2880, "block": 32, "bias": True, "M": 1,
              "kind": "ours", "forced": False, "correct": True}
    out += [{**router, "route": "router_gemv", "us": 2.0, "host_us": 9.0},
            {**router, "route": "gemv_w4", "us": 2.6, "host_us": 10.0, "variant": shapes.ROUTER_AB_VARIANT}]
    return out


def test_best_table_and_speedups():
    bt = report.best_table(report.to_frame(_rows()))
    r1 = bt[(bt["shape"] == "l3-8b-attn") & (bt["M"] == 1)].iloc[0]
    assert r1["best_route"] == "other" and r1["best_us"] == 2.5  # the wrong one is never "best"
    assert r1["auto_route"] == "gemv_w4" and r1["auto_us"] == 3.0
    assert r1["vs torch_dense"] == pytest.approx(14.0 / 2.5)
    assert r1["vs ref:ort_default"] == pytest.approx(6.31 / 2.5)
    r256 = bt[(bt["shape"] == "l3-8b-attn") & (bt["M"] == 256)].iloc[0]
    assert r256["vs torch_dense"] == pytest.approx(18.7 / 30.0)  # < 1: a miss
    assert not (bt["variant"] == shapes.ROUTER_AB_VARIANT).any()


def test_summary_markdown_shows_misses_wrong_and_router_ab():
    df = report.to_frame(_rows())
    meta = {"env": {"gpu": "NVIDIA H200", "l2_bytes": 60 << 20}, "ceilings": {"bw_tb_s": 4.3},
            "skipped": [{"tier": "fp32", "shape": "l3-70b-up", "M": 1, "reason": "time budget exhausted"}],
            "notes": [("tinygemm", "bf16 only")]}
    md = report.summary_markdown(df, meta)
    assert "## Best route per case" in md and "MISS" in md and "0.62x" in md
    assert "fast_but_wrong" in md and "RuntimeError: boom" in md  # wrong and failed rows are shown
    assert "Router A/B" in md and "router_gemv" in md
    rows = _rows()
    router = [r for r in rows if r["shape"] == "router-gptoss"]
    rows += [{**r, "M": 2, "route": "gemv_w4", "us": us} for r, us in zip(router, (2.61, 2.60))]  # gate rejects M=2
    ab = report.summary_markdown(report.to_frame(rows), meta).split("## Router A/B")[1].split("\n## ")[0]
    assert "| 1.30x |" in ab  # M=1: the router GEMV (2.0 us) vs gemv_w4 (2.6 us)
    assert "| same route |" in ab and "MISS" not in ab  # M=2: one kernel both ways, 2.61 vs 2.60 is noise
    assert "time budget exhausted" in md and "tinygemm: bf16 only" in md
    assert "Dispatch did not pick the fastest route" in md


def test_ort_ratios_are_kernel_time_over_the_default_calls_kernel_time(tmp_path):
    """Where a run has the default call's CUPTI kernel time (``us_kernel``), ORT's columns (kernel time, measured
    or reference) are divided by it, not by the graph time; other peers keep the graph-time ratio; the README
    table shows the kernel time beside the graph time."""
    rows = _rows()
    for r in rows:
        if r["kind"] == "ours" and not r.get("forced") and r["shape"] == "l3-8b-attn":
            r["us_kernel"] = 2.0 if r["M"] == 1 else 25.0
    rows.append({**next(r for r in rows if r["kind"] == "peer" and r["M"] == 1), "route": "ort_default",
                 "us": 7.0, "timing": "cupti"})
    df = report.to_frame(rows)
    ort = df[(df["route"] == "ort_default") & (df["M"] == 1)]  # ORT's time (measured or reference) is kernel time
    assert sorted(ort["us_kernel"].tolist()) == [6.31, 7.0]
    bt = report.best_table(df)
    r1 = bt[(bt["shape"] == "l3-8b-attn") & (bt["M"] == 1)].iloc[0]
    assert r1["auto_us_kernel"] == 2.0
    assert r1["vs ort_default"] == pytest.approx(7.0 / 2.0) and r1["vs ref:ort_default"] == pytest.approx(6.31 / 2.0)
    assert r1["vs torch_dense"] == pytest.approx(14.0 / 2.5)  # graph time against graph time, as before
    report.write_results(tmp_path, rows, {"env": {"gpu": "NVIDIA H200"}}, plots=False)
    text = report.readme_summary(tmp_path)
    assert "| shape | M | default route | us | kernel us |" in text and "kernel time over kernel time" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| l3-8b-attn | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:5] == ["gemv_w4", "3.00", "2.00"]
    assert f"{14.0 / 3.0:.2f}x" in cells and f"{7.0 / 2.0:.2f}x" in cells and f"{6.31 / 2.0:.2f}x" in cells


def test_runner_kernel_time_of_a_default_call(monkeypatch):
    """``kernel_time_of_ours``: copy 0 of the subject, each call after a read flush, timed by CUPTI; nothing
    on the simulator or without the profiler."""
    from numba_nbits.perf import ort_peer

    calls = []

    class Subj:
        def launch(self, i, stream):
            calls.append((i, stream))

    class Flush:
        def sum(self):
            calls.append("flush")

    bk = type("Bk", (), {"simulated": False, "stream": 7, "d": type("D", (), {"cuCtxSynchronize": lambda s: None})()})()
    monkeypatch.setattr(ort_peer, "cupti_available", lambda: None)
    monkeypatch.setattr(ort_peer, "flush_buffer", lambda n: Flush())
    per = iter([3.0, 2.0, 4.0])

    def events(runs):
        calls.clear()
        runs()
        return [("gemv", 0.0, next(per) * ort_peer.RUNS_PER_SAMPLE), ("Memcpy HtoD", 0.0, 50.0)]

    monkeypatch.setattr(ort_peer, "cupti_events", events)
    assert ort_peer.kernel_time_of_ours(bk, Subj(), 1 << 20) == {"us_kernel": 3.0}
    assert calls == ["flush", (0, 7)] * ort_peer.RUNS_PER_SAMPLE
    assert ort_peer.kernel_time_of_ours(type("S", (), {"simulated": True})(), Subj(), 1) == {}
    monkeypatch.setattr(ort_peer, "cupti_available", lambda: "no CUPTI")
    assert ort_peer.kernel_time_of_ours(bk, Subj(), 1) == {}


def test_csv_round_trip(tmp_path):
    df = report.write_results(tmp_path, _rows(), {"env": {"gpu": "x"}}, plots=False)
    back, meta = report.read_results(tmp_path)
    assert list(back.columns) == list(df.columns)
    assert len(back) == len(df) and meta["env"]["gpu"] == "x"
    assert set(report.COLUMNS) <= set(back.columns)
    ref = back[back["kind"] == "reference"]
    assert len(ref) and (ref["source"] == SOURCE).all() and ref["us"].notna().all()
    pd.testing.assert_series_equal(back["us"].astype(float), df["us"].astype(float), check_names=False)
    assert (tmp_path / "summary.md").read_text().startswith("# numba_nbits perf")


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    made = report.make_plots(report.to_frame(_rows()), tmp_path)
    assert "latency_l3-8b-attn_4b_g128_fp16_none.png" in made
    assert all((tmp_path / m).stat().st_size > 1000 for m in made)


def test_readme_summary(tmp_path):
    rows = _rows()
    report.write_results(tmp_path, rows, {"env": {"gpu": "NVIDIA H200", "date": "2026-12-01", "git_commit": "abc"},
                                          "ceilings": {"bw_tb_s": 4.31, "tflops_float16": 755.0}}, plots=False)
    text = report.readme_summary(tmp_path)
    assert "NVIDIA H200" in text and "abc" in text and "4.31 TB/s" in text
    assert "| shape | M | default route | us |" in text
    # l3-8b-attn M=1: dispatch's default (gemv_w4, 3.0 us) is the row shown and the speedups are over it; the
    # faster forced route (other, 2.5 us) appears only in its labelled column.
    line = next(ln for ln in text.splitlines() if ln.startswith("| l3-8b-attn | 1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:4] == ["gemv_w4", "3.00"]
    assert f"{14.0 / 3.0:.2f}x" in cells and f"{14.0 / 2.5:.2f}x" not in cells
    assert cells[-1] == "other (2.50)"
    assert "vs torch_dense" in text and "best forced route (us)" in text
    r = subprocess.run([sys.executable, "-m", "numba_nbits.perf.report", "--readme", str(tmp_path)], cwd=REPO,
                       capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == text


def test_reference_rows():
    rows = reference_rows()
    assert len(rows) == 2 * 63
    assert all(r["kind"] == "reference" and r["source"] == SOURCE for r in rows)
    one = [r for r in rows if (r["N"], r["K"], r["block"], r["M"], r["route"]) == (28672, 8192, 32, 1, "ort_fpA_intB")]
    assert one and one[0]["us_p50"] == 38.01
    assert all(r["bias"] == ((r["N"], r["K"]) == (32, 2880)) for r in rows)


def test_runner_reference_rows_only_for_measured_cases():
    from numba_nbits.perf.runner import reference_rows_for

    measured = [{"kind": "ours", "variant": "", "shape": "l3-8b-attn", "tier": "t", "N": 4096, "K": 4096, "bits": 4,
                 "block": 128, "dtype": "float16", "zp": "none", "M": 16}]
    refs = reference_rows_for(measured)
    assert {(r["route"], r["M"]) for r in refs} == {("ort_default", 16), ("ort_fpA_intB", 16)}
    assert all(r["kind"] == "reference" and r["shape"] == "l3-8b-attn" for r in refs)


@pytest.mark.parametrize("gpu,served", [("NVIDIA H200", True), ("NVIDIA H100 80GB HBM3", False),
                                        ("simulator", False), ("", False)])
def test_reference_rows_serve_only_the_gpu_they_were_measured_on(gpu, served):
    from numba_nbits.perf import reference_rows as R

    assert R.serves(gpu) is served


def test_cli_adds_reference_rows_only_on_their_gpu(monkeypatch, tmp_path):
    """Without ORT's CUDA EP a run on the reference table's GPU gets its rows; a run on another GPU gets none and
    a note that says why (ORT's H200 times are no baseline for another GPU)."""
    from numba_nbits.perf import runner

    ours = {"kind": "ours", "variant": "", "shape": "l3-8b-attn", "tier": "t", "N": 4096, "K": 4096, "bits": 4,
            "block": 128, "dtype": "float16", "zp": "none", "M": 16, "route": "gemv_w4", "us": 5.0}
    seen = {}

    def fake_run(opts, backend, gpu):
        return [dict(ours)], {"env": {"gpu": gpu}, "notes": [], "ort_cuda": False}

    def fake_write(d, rows, meta, plots=True):
        seen["rows"], seen["meta"] = rows, meta
        (d / "summary.md").write_text("x")

    monkeypatch.setattr(cli, "device_problem", lambda: None)  # the CLI refuses the simulator; run is faked
    for gpu, n_ref in (("NVIDIA H200", 2), ("NVIDIA H100 80GB HBM3", 0)):
        monkeypatch.setattr(runner, "run", lambda opts, backend, gpu=gpu: fake_run(opts, backend, gpu))
        monkeypatch.setattr(report, "write_results", fake_write)
        out = tmp_path / gpu.replace(" ", "_")
        assert cli.main(["--quick", "--no-plots", "--no-progress", "--no-peers", "--budget-s", "1", "--out",
                         str(out)]) == 0
        assert sum(r["kind"] == "reference" for r in seen["rows"]) == n_ref, gpu
        notes = [n for n in seen["meta"]["notes"] if n[0] == "ort_reference"]
        assert bool(notes) == (n_ref == 0) and (not notes or "H100" in notes[0][1])


def test_meta_is_json(tmp_path):
    report.write_results(tmp_path, _rows(), {"env": {}, "notes": [("a", "b")]}, plots=False)
    assert json.loads((tmp_path / "meta.json").read_text())["notes"] == [["a", "b"]]


# ------------------------------------------------------------------------------ peers (CPU)

@pytest.mark.parametrize("zp,bias", [("none", False), ("packed", True)])
def test_ort_model_matches_oracle_on_cpu(zp, bias):
    """The one-node model the ORT CUDA peer runs is well-formed: ORT's CPU EP reproduces the oracle."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from numba_nbits.perf.ort_peer import matmulnbits_model
    from numba_nbits.perf.subjects import random_activation, random_weights
    from numba_nbits.reference import matmul_nbits_ref, relative_error

    rng = np.random.default_rng(0)
    w = random_weights(24, 64, 4, 32, "float32", zp, bias, rng)
    sess = ort.InferenceSession(matmulnbits_model(w), providers=["CPUExecutionProvider"])
    A = random_activation(3, 64, "float32", rng)
    (Y,) = sess.run(None, {"A": A})
    ref = matmul_nbits_ref(A, w.B, w.scales, w.zero_points, None, w.bias, K=64, N=24, bits=4, block_size=32)
    assert relative_error(Y, ref) < 1e-5


def test_ort_kernel_time_counts_ort_kernels_not_memsets_or_copies():
    from numba_nbits.perf.ort_peer import kernel_us

    ev = [("gemv_kernel", 0.0, 2.0), ("Memset (Device)", 2.0, 5.0), ("Memcpy DtoD (Device -> Device)", 7.0, 1.0),
          ("cutlass", 10.0, 3.5),
          ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half> >(...)", 20.0, 40.0),
          ("_ZN2at6native13reduce_kernelILi512ELi1E", 60.0, 40.0)]
    assert kernel_us(ev) == 5.5 and kernel_us([]) == 0.0


def test_kernel_time_is_the_union_of_kernel_intervals():
    """Kernels overlapping on two streams count once; gaps between kernels do not count; a kernel inside
    another adds nothing."""
    from numba_nbits.perf.ort_peer import kernel_us

    ev = [("dequant_chunk1", 10.0, 4.0), ("gemm_chunk0", 8.0, 5.0), ("gemm_chunk1", 14.0, 5.0),
          ("inside", 15.0, 1.0), ("later", 30.0, 2.0)]
    assert kernel_us(ev) == pytest.approx((19.0 - 8.0) + 2.0)


def test_ort_environ_sets_then_restores(monkeypatch):
    from numba_nbits.perf.ort_peer import FPA_INTB_ENV, environ

    monkeypatch.delenv(FPA_INTB_ENV, raising=False)
    monkeypatch.setenv("NB_TEST_KEEP", "a")
    with environ({FPA_INTB_ENV: "1", "NB_TEST_KEEP": "b"}):
        assert os.environ[FPA_INTB_ENV] == "1" and os.environ["NB_TEST_KEEP"] == "b"
    assert FPA_INTB_ENV not in os.environ and os.environ["NB_TEST_KEEP"] == "a"


def test_ort_peer_times_each_run_after_an_l2_flush_with_its_mode_set(monkeypatch):
    """``OrtCuda.time``: per sample, RUNS_PER_SAMPLE runs each after a read of the whole flush buffer, ORT's
    kernel time per run (the flush's kernel not counted), the mode's environment set while ORT runs; no kernel: an
    error."""
    from numba_nbits.perf import ort_peer

    log = []

    class Drv:
        def cuCtxSynchronize(self):
            pass

    class Flush:
        def sum(self):
            log.append(("flush",))

    class Sess:
        def run_with_iobinding(self, io):
            log.append(("run", os.environ.get(ort_peer.FPA_INTB_ENV)))

    peer = object.__new__(ort_peer.OrtCuda)
    peer.route, peer.env, peer.sess, peer.io = "ort_fpA_intB", ort_peer.MODES["ort_fpA_intB"], Sess(), None
    peer._flush = Flush()
    per_run = iter([2.0, 2.5, 3.0, 2.25, 2.75])

    def fake_events(runs):
        log.clear()
        runs()
        us = next(per_run) * ort_peer.RUNS_PER_SAMPLE
        return [("void at::native::reduce_kernel<...>", 0.0, 100.0), ("fpA_intB_gemv", 100.0, us - 1.0),
                ("bias", 100.0 + us - 1.0, 1.0)]

    monkeypatch.setattr(ort_peer, "cupti_events", fake_events)
    monkeypatch.delenv(ort_peer.FPA_INTB_ENV, raising=False)
    out = peer.time(type("Bk", (), {"d": Drv()})())
    assert log == [("flush",), ("run", "1")] * ort_peer.RUNS_PER_SAMPLE
    assert out["us_p50"] == 2.5 and out["timing"] == "cupti" and out["samples"] == ort_peer.SAMPLES
    assert ort_peer.FPA_INTB_ENV not in os.environ
    monkeypatch.setattr(ort_peer, "cupti_events", lambda runs: [("Memset (Device)", 0.0, 3.0)])
    with pytest.raises(RuntimeError, match="no kernel of the timed call"):
        peer.time(type("Bk", (), {"d": Drv()})())


def test_ort_flush_buffer_is_one_per_process(monkeypatch):
    """Every ORT peer and case shares one flush buffer; it is made again only when a larger one is asked for."""
    from numba_nbits.perf import ort_peer

    made = []
    monkeypatch.setattr(ort_peer, "_FLUSH", {})
    monkeypatch.setattr(ort_peer, "_alloc_flush", lambda n: made.append(n) or object())
    a = ort_peer.flush_buffer(120 << 20)
    assert ort_peer.flush_buffer(120 << 20) is a and ort_peer.flush_buffer(1 << 20) is a and made == [120 << 20]
    b = ort_peer.flush_buffer(240 << 20)
    assert b is not a and made == [120 << 20, 240 << 20] and ort_peer.flush_buffer(120 << 20) is b


def test_ort_subjects_note_why_they_are_absent(monkeypatch):
    from numba_nbits.perf import ort_peer

    notes = []
    monkeypatch.setattr(ort_peer, "ort_cuda_available", lambda: False)
    assert ort_peer.ort_subjects(None, 1, None, None, notes, 1) == [] and "reference rows" in notes[-1][1]
    monkeypatch.setattr(ort_peer, "ort_cuda_available", lambda: True)
    monkeypatch.setattr(ort_peer, "cupti_available", lambda: "torch's CUDA profiler (CUPTI) not available")
    assert ort_peer.ort_subjects(None, 1, None, None, notes, 1) == [] and "CUPTI" in notes[-1][1]


def test_random_weights_layouts():
    from numba_nbits.perf.subjects import Oracle, random_weights, sample_indices

    rng = np.random.default_rng(1)
    w = random_weights(16, 100, 2, 64, "bfloat16", "packed", True, rng)
    assert w.B.shape == (16, 2, 16) and w.scales.shape == (16, 2) and w.zero_points.shape == (16, 1)
    assert w.scales.dtype.name == "bfloat16" and w.bias.shape == (16,)
    idx = sample_indices(10_000, 16, rng)
    assert len(idx) == 16 and idx[0] == 0 and idx[-1] == 9_999 and np.all(np.diff(idx) > 0)
    o = Oracle(w, 40, rng)
    assert o.ref.shape == (16, 16) and o.A.shape == (40, 100)


def test_torch_dequant_matches_oracle():
    """The composite peer's torch dequantization decodes ORT's layouts (CPU torch is enough)."""
    torch = pytest.importorskip("torch")
    from numba_nbits.perf.peers import dequant_torch
    from numba_nbits.perf.subjects import random_weights
    from numba_nbits.reference import dequantize_ref

    rng = np.random.default_rng(2)
    for bits in (2, 4, 8):
        for zp in ("none", "packed"):
            w = random_weights(8, 96, bits, 32, "float32", zp, False, rng)
            got = dequant_torch(torch, torch.from_numpy(w.B), torch.from_numpy(w.scales),
                                None if w.zero_points is None else torch.from_numpy(w.zero_points),
                                bits, 32, 96, torch.float64).numpy()
            ref = dequantize_ref(w.B, w.scales, w.zero_points, None, K=96, N=8, bits=bits, block_size=32)
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------ shards (CPU)

@pytest.mark.parametrize("plan,n", [(shapes.FULL_PLAN, 1), (shapes.FULL_PLAN, 2), (shapes.FULL_PLAN, 3),
                                    (shapes.FULL_PLAN, 4), (shapes.FULL_PLAN, 7), (shapes.QUICK_PLAN, 3)])
def test_shards_cover_every_case_once_balanced_and_deterministic(plan, n):
    from numba_nbits.perf import shard

    cases = shapes.expand(plan)
    parts = shard.partition(cases, n)
    assert len(parts) == n and all(parts)
    keys = [(c.group, c.M) for p in parts for c in p]
    assert len(keys) == len(set(keys)) == len(cases)  # every case exactly once
    assert set(keys) == {(c.group, c.M) for c in cases}
    pos = {(c.group, c.M): i for i, c in enumerate(cases)}
    for p in parts:  # plan (priority) order inside a shard
        assert [pos[(c.group, c.M)] for c in p] == sorted(pos[(c.group, c.M)] for c in p)
    loads = [shard.estimate_s(p, overhead=False) for p in parts]
    mean = shard.estimate_s(cases, overhead=False) / n
    assert max(loads) <= shard.BALANCE_FACTOR * mean, loads
    assert shard.partition(list(cases), n) == parts  # deterministic
    assert [shard.shard_cases(cases, shard.ShardSpec(i, n)) for i in range(1, n + 1)] == parts


def test_shard_cli_and_dry_run(capsys):
    import datetime

    from numba_nbits.perf import shard

    a = cli.parse(["--shard", "2/3"])
    assert a.shard.label == "2/3" and len(a.all_cases) == len(shapes.expand(shapes.FULL_PLAN))
    assert a.cases == shard.partition(a.all_cases, 3)[1]
    assert cli.shard_meta(a)["shard"]["count"] == 3 and cli.shard_meta(cli.parse([])) == {}
    q = cli.parse(["--quick", "--sweep", "gemv", "--shard", "1/2"])
    assert set(q.cases) <= set(q.all_cases) and 0 < len(q.cases) < len(q.all_cases)
    for bad in (["--shard", "0/3"], ["--shard", "4/3"], ["--shard", "3"], ["--shard", "a/b"],
                ["--quick", "--shapes", "l3-8b-attn", "--M", "1", "--shard", "1/9"]):
        with pytest.raises(SystemExit):
            cli.parse(bad)
    c = a.cases[0]
    rows = [{"kind": "ours", "shape": c.shape, "bits": c.bits, "block": c.block, "dtype": c.dtype, "zp": c.zp,
             "variant": c.variant, "M": c.M, "git_commit": "c6c53bfa9228-dirty"},
            {"kind": "reference", "shape": c.shape, "M": c.M, "git_commit": ""}]
    meta = {"env": {"git_commit": "c6c53bfa9228-dirty"}}  # a device copy's git describing another tree
    a2 = cli.parse(["--shard", "2/3", "--commit", "0123abcd"])
    cli.annotate(a2, rows, meta, ["--shard", "2/3"])
    assert rows[0]["case_index"] == a.all_cases.index(c) and rows[0]["shard"] == "2/3"
    assert rows[0]["git_commit"] == meta["env"]["git_commit"] == "0123abcd" and meta["shard"]["label"] == "2/3"
    assert rows[1]["git_commit"] == ""  # reference rows (published figures) get no commit
    d = cli.default_out("NVIDIA H200", datetime.date(2026, 12, 1), shard.ShardSpec(2, 3))
    assert d.name == "2026-12-01-h200-shard2of3"
    assert cli.main(["--dry-run", "--shard", "2/3"]) == 0
    out = capsys.readouterr().out
    assert all(f"shard {i}/3:" in out for i in (1, 2, 3)) and " s" in out and "cases in" in out


# ------------------------------------------------------------------------------- merge (CPU)

_ENV = {"gpu": "NVIDIA H200", "sm_count": 132, "l2_bytes": 60 << 20, "driver": "580", "numba_cuda": "0.30.4",
        "cuda_core": "1.2.0", "torch": "2.11", "git_commit": "abc", "date": "2026-12-01 10:00"}
_CEIL = {"bw_tb_s": 4.3, "tflops_float16": 750.0, "ceiling_note": "GEMM ceilings via torch"}


def _indexed_rows():
    """``_rows()`` in the order one run writes them (cases in plan order, reference rows last)."""
    index = {("l3-8b-attn", "", 1): 0, ("l3-8b-attn", "", 256): 1, ("router-gptoss", "", 1): 2,
             ("router-gptoss", shapes.ROUTER_AB_VARIANT, 1): 3}
    rows = [{**r, "case_index": index[(r["shape"], r.get("variant", ""), r["M"])]} for r in _rows()]
    return sorted(rows, key=lambda r: (r["kind"] == "reference", r["case_index"]))


def _shard_dirs(tmp_path, env_b=None, ceil_b=None, rows_b=None):
    rows = _indexed_rows()
    skip = {"tier": "fp32", "shape": "l3-70b-up", "bits": 4, "block": 128, "dtype": "float32", "zp": "none",
            "variant": "", "reason": "time budget exhausted"}
    notes = [("tinygemm", "bf16 only")]
    parts = {1: [r for r in rows if r["case_index"] == 0], 2: [r for r in rows if r["case_index"] != 0]}
    dirs = []
    for i in (1, 2):
        env = dict(_ENV, **(env_b or {})) if i == 2 else dict(_ENV)
        part = [{**r, "shard": f"{i}/2", **({k: env[k] for k in ("gpu", "git_commit")} if r["kind"] != "reference"
                                           else {})} for r in parts[i]]
        meta = {"env": env, "ceilings": dict(_CEIL, **((ceil_b or {}) if i == 2 else {})), "graph_api": "cuda.core",
                "skipped": [dict(skip, M=i)], "notes": notes, "wall_s": 100.0 * i, "ort_cuda": False,
                "shard": {"index": i, "count": 2, "label": f"{i}/2"}}
        d = tmp_path / f"2026-12-01-h200-shard{i}of2"
        report.write_results(d, rows_b if (i == 2 and rows_b is not None) else part, meta, plots=False)
        dirs.append(d)
    whole = tmp_path / "whole"
    report.write_results(whole, rows, {"env": dict(_ENV), "ceilings": dict(_CEIL), "graph_api": "cuda.core",
                                       "skipped": [dict(skip, M=1), dict(skip, M=2)], "notes": notes,
                                       "wall_s": 300.0, "ort_cuda": False}, plots=False)
    return dirs, whole


def test_merge_equals_one_directory_with_all_rows(tmp_path):
    from numba_nbits.perf import merge

    (d1, d2), whole = _shard_dirs(tmp_path)
    df, meta = merge.merge([d2, d1], plots=False)  # any order; default out: the name without -shardIofN
    out = tmp_path / "2026-12-01-h200"
    mdf, mmeta = report.read_results(out)
    wdf, wmeta = report.read_results(whole)
    assert len(mdf) == len(wdf) and mmeta["merge_warnings"] == []
    assert [s["shard"] for s in mmeta["shards"]] == ["1/2", "2/2"] and [s["cases"] for s in mmeta["shards"]] == [1, 3]
    assert len(mmeta["skipped"]) == 2 and {s["shard"] for s in mmeta["skipped"]} == {"1/2", "2/2"}
    # the same report as one run holding every row; provenance is extra
    assert report.summary_markdown(mdf, mmeta, provenance=False) == (whole / "summary.md").read_text()
    assert report.summary_markdown(wdf, wmeta) == (whole / "summary.md").read_text()
    cols = [c for c in report.best_table(wdf).columns if c not in ("shard", "commit")]
    pd.testing.assert_frame_equal(report.best_table(mdf)[cols], report.best_table(wdf)[cols])
    md = (out / "summary.md").read_text()
    assert "## Shards" in md and "shard1of2" in md and "| shard |" in md.split("## Best route per case")[1]
    assert "Merge warnings" not in md and "| shard | tier | shape | reason | cases |" in md and "MISS" in md
    bt = report.best_table(mdf)
    assert bt.loc[bt["M"] == 1, "shard"].iloc[0] == "1/2" and bt.loc[bt["M"] == 256, "shard"].iloc[0] == "2/2"
    assert "merged from 2 shards" in report.readme_summary(out)
    from numba_nbits import readme

    assert readme._is_shard(d1) and not readme._is_shard(out) and not readme._is_shard(whole)


def test_merge_supersede_replaces_remeasured_cases(tmp_path):
    """``--supersede``: the later input's rows of a case replace all the earlier input's rows of it
    (ours and peers); other cases and the reference rows stay; without it both are kept (and warned)."""
    from numba_nbits.perf import merge

    _, whole = _shard_dirs(tmp_path)
    base = {k: v for k, v in _rows()[0].items() if k not in ("route", "us", "forced", "kind")}
    again = [{**base, "M": 1, "kind": "ours", "route": "gemv_w4", "forced": False, "us": 2.0, "correct": True,
              "rel_err": 1e-4},
             {**base, "M": 1, "kind": "peer", "route": "torch_dense", "forced": False, "us": 13.0, "correct": True}]
    new = tmp_path / "remeasured"
    report.write_results(new, again, {"env": dict(_ENV), "ceilings": dict(_CEIL), "skipped": [], "notes": [],
                                      "wall_s": 1.0}, plots=False)
    old_df, _ = report.read_results(whole)
    df, meta = merge.merge_frames([whole, new], supersede=True)
    m1 = df[(df["shape"] == "l3-8b-attn") & (df["M"] == 1) & (df["kind"] != "reference")]
    assert sorted(m1["us"].tolist()) == [2.0, 13.0] and set(m1["shard"]) == {"remeasured"}
    keep = old_df[~((old_df["shape"] == "l3-8b-attn") & (old_df["M"] == 1) & (old_df["kind"] != "reference"))]
    assert len(df) == len(keep) + 2
    assert any("1 case(s) re-measured" in w for w in meta["merge_warnings"])
    df2, meta2 = merge.merge_frames([whole, new])
    assert len(df2) == len(old_df) + 2 and any("more than one shard" in w for w in meta2["merge_warnings"])
    assert cli.main(["merge", str(whole), str(new), "--supersede", "--out", str(tmp_path / "m"), "--no-plots"]) == 0


def test_merge_rejects_mismatched_gpu(tmp_path):
    from numba_nbits.perf import merge

    (d1, d2), _ = _shard_dirs(tmp_path, env_b={"gpu": "NVIDIA A100-SXM4-80GB"})
    with pytest.raises(merge.MergeError, match="different GPUs.*A100.*H200|different GPUs.*H200.*A100"):
        merge.merge_frames([d1, d2])
    with pytest.raises(SystemExit) as e:
        merge.main([str(d1), str(d2), "--out", str(tmp_path / "m"), "--no-plots"])
    assert e.value.code == 2 and not (tmp_path / "m" / "results.csv").exists()
    with pytest.raises(merge.MergeError, match="--out"):
        merge.default_out([d1, tmp_path / "whole"])


def test_merge_reports_differing_commits_ceilings_and_missing_shards(tmp_path):
    from numba_nbits.perf import merge

    (d1, d2), _ = _shard_dirs(tmp_path, env_b={"git_commit": "def", "numba_cuda": "0.31.0"},
                              ceil_b={"bw_tb_s": 3.8})
    assert cli.main(["merge", str(d1), str(d2), "--out", str(tmp_path / "m"), "--no-plots"]) == 0
    md = (tmp_path / "m" / "summary.md").read_text()
    warn = md.split("## Merge warnings")[1].split("## ")[0]
    assert "different commits" in warn and "`abc`" in warn and "`def`" in warn
    assert "numba_cuda differs" in warn and "ceiling bw_tb_s" in warn
    assert "| commit |" in md.split("## Best route per case")[1]  # which commit each case came from
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["env"]["git_commit"] == "abc, def" and meta["ceilings"]["bw_tb_s"] == pytest.approx(4.05)
    _, meta1 = merge.merge_frames([d1])
    assert any("2/2 not given" in w for w in meta1["merge_warnings"])
    (d2 / "results.csv").rename(d2 / "results.partial.csv")
    (d2 / "meta.json").unlink()
    df, meta2 = merge.merge_frames([d1, d2])
    assert any("interrupted" in w for w in meta2["merge_warnings"]) and set(df["shard"]) == {"1/2", d2.name}


def test_missing_from_runs_only_what_a_results_dir_lacks(tmp_path, capsys):
    """``--missing-from DIR`` finishes a sweep: the plan minus DIR's measured cases, sharded on its own,
    case_index still the full plan's position; then a merge lists nothing twice and nothing as skipped."""
    from numba_nbits.perf import merge

    full = cli.parse(["--quick"])
    done = full.all_cases[: len(full.all_cases) // 2]
    rows = [{"kind": "ours", "shape": c.shape, "N": c.spec.N, "K": c.spec.K, "M": c.M, "bits": c.bits,
             "block": c.block, "dtype": c.dtype, "zp": c.zp, "variant": c.variant, "route": "gemv_w4",
             "us": 10.0, "correct": True, "gpu": "NVIDIA H200", "git_commit": "abc",
             "case_index": full.all_cases.index(c)} for c in done]
    skipped = [{"shape": c.shape, "M": c.M, "bits": c.bits, "block": c.block, "dtype": c.dtype, "zp": c.zp,
                "variant": c.variant, "tier": c.tier, "reason": "time budget exhausted"}
               for c in full.all_cases[len(done):]]
    first = tmp_path / "first"
    report.write_results(first, rows, {"env": dict(_ENV), "ceilings": dict(_CEIL), "skipped": skipped,
                                       "notes": [], "wall_s": 1.0}, plots=False)
    a = cli.parse(["--quick", "--missing-from", str(first)])
    assert a.cases == full.all_cases[len(done):] and a.all_cases == full.all_cases
    parts = [cli.parse(["--quick", "--missing-from", str(first), "--shard", f"{i}/2"]).cases for i in (1, 2)]
    assert sorted(parts[0] + parts[1], key=full.all_cases.index) == a.cases
    c = a.cases[0]
    row = {"kind": "ours", "shape": c.shape, "bits": c.bits, "block": c.block, "dtype": c.dtype, "zp": c.zp,
           "variant": c.variant, "M": c.M, "git_commit": ""}
    cli.annotate(a, [row], {"env": {}}, [])
    assert row["case_index"] == full.all_cases.index(c)  # the full plan's position, not the pool's
    assert cli.main(["--quick", "--dry-run", "--missing-from", str(first), "--shard", "1/2"]) == 0
    assert f"2 shards of {len(a.cases)} cases" in capsys.readouterr().out
    # the second run measured the rest: merged, nothing is listed as skipped, one warning says why
    rest = [dict(r, shape=k.shape, N=k.spec.N, K=k.spec.K, M=k.M, bits=k.bits, block=k.block, dtype=k.dtype,
                 zp=k.zp, variant=k.variant, git_commit="def", case_index=full.all_cases.index(k))
            for r, k in zip([rows[0]] * len(a.cases), a.cases)]
    second = tmp_path / "second"
    report.write_results(second, rest, {"env": dict(_ENV, git_commit="def"), "ceilings": dict(_CEIL),
                                        "skipped": [], "notes": [], "wall_s": 1.0}, plots=False)
    df, meta = merge.merge_frames([first, second])
    assert meta["skipped"] == [] and len(df[df["kind"] == "ours"]) == len(full.all_cases)
    assert any(f"{len(skipped)} case(s) skipped by one input were measured by another" in w
               for w in meta["merge_warnings"])
    # a rerun whose budget again skipped its last case: that case is listed once, with the rerun's entry
    again = [dict(skipped[-1], reason="time budget exhausted (rerun)")]
    third = tmp_path / "third"
    report.write_results(third, rest[:-1], {"env": dict(_ENV, git_commit="def"), "ceilings": dict(_CEIL),
                                            "skipped": again, "notes": [], "wall_s": 1.0}, plots=False)
    df3, meta3 = merge.merge_frames([first, third])
    assert [s["reason"] for s in meta3["skipped"]] == ["time budget exhausted (rerun)"]
    assert meta3["skipped"][0]["shard"] == third.name
    assert any("1 skipped case(s) were skipped by more than one input" in w for w in meta3["merge_warnings"])
    with pytest.raises(SystemExit):  # everything measured: nothing to run
        cli.parse(["--quick", "--missing-from", str(_write_all(tmp_path, rows + rest))])
    with pytest.raises(SystemExit):
        cli.parse(["--quick", "--missing-from", str(tmp_path / "nowhere")])


def _write_all(tmp_path, rows):
    d = tmp_path / "all"
    report.write_results(d, rows, {"env": dict(_ENV), "ceilings": dict(_CEIL), "skipped": [], "notes": [],
                                          "wall_s": 1.0}, plots=False)
    return d


def test_host_time_is_the_steady_state_pass():
    """``measure``'s host time comes from a second pass over the same calls: a call that is slow only the
    first time after capture (per-copy state built once) does not inflate it."""
    import time

    from numba_nbits.perf.harness import Budget, SimBackend, measure

    class Subject:
        copies = 4

        def __init__(self, slow_after=None):
            self.slow_after, self.calls, self.seen = slow_after, 0, set()

        def launch(self, i, stream):
            self.calls += 1
            if self.slow_after is not None and self.calls > self.slow_after and i not in self.seen:
                self.seen.add(i)
                time.sleep(0.02)

    b = Budget(min_samples=5, max_samples=5, min_batch_us=0.0, host_min_calls=8, host_max_calls=8)
    counting = Subject()
    measure(SimBackend(), counting, b, graphs=False, host=False)  # the calls before the host-time loop
    sub = Subject(slow_after=counting.calls)
    row = measure(SimBackend(), sub, b, graphs=False)
    assert sub.seen == {0, 1, 2, 3}  # the slow first calls all happened inside the host-time loop
    assert row["host_us"] < 5000  # timed in the first pass, 4 x 20 ms over 8 calls would read 10,000 us


def test_gemv_grid_plan_is_the_gemv_issue_grid():
    cases = shapes.expand(shapes.GEMV_GRID_PLAN)
    assert len(cases) == 280
    assert {c.shape for c in cases} == {"l3-8b-attn", "l3-8b-up", "l3-8b-down", "l3-70b-up", "l3-70b-down",
                                        "lmhead-l3", "router-gptoss"}
    assert {c.M for c in cases} == {1, 2, 4, 8, 16}
    assert {(c.bits, c.block) for c in cases} == {(4, 32), (4, 128), (8, 128), (2, 64)}
    assert {c.dtype for c in cases} == {"float16", "bfloat16"} and {c.zp for c in cases} == {"none"}
    assert {(s.N, s.K) for s in map(shapes.shape_named, {c.shape for c in cases})} == {
        (4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (128256, 4096), (32, 2880)}
    a = cli.parse(["--plan", "gemv-grid"])
    assert a.all_cases == cases and a.plan_name == "gemv-grid" and not a.quick
    assert a.budget_s == cli.FULL_BUDGET_S
    q = cli.parse(["--plan", "quick"])
    assert q.quick and q.budget_s == cli.QUICK_BUDGET_S and q.all_cases == shapes.expand(shapes.QUICK_PLAN)
    assert cli.parse(["--quick"]).all_cases == q.all_cases
    with pytest.raises(SystemExit):
        cli.parse(["--quick", "--plan", "gemv-grid"])
    s = cli.parse(["--plan", "gemv-grid", "--shard", "1/4"])
    assert cli.shard_meta(s)["shard"]["plan"] == "gemv-grid"


def test_readme_plan_is_what_the_readme_section_shows():
    from numba_nbits.perf.report import README_MS

    cases = shapes.expand(shapes.README_PLAN)
    assert len(cases) == 76 and {c.M for c in cases} == set(README_MS) == {1, 16, 256, 4096}
    assert {(c.bits, c.dtype, c.zp) for c in cases} == {(4, "float16", "none")}
    assert [c.block for c in cases[:36]] == [128] * 36 and {c.block for c in cases[36:]} == {32}
    assert {c.variant for c in cases if c.block == 128} == {""}
    assert sum(c.variant == shapes.ROUTER_AB_VARIANT for c in cases) == 4  # two routers x M <= 16
    assert cli.parse(["--plan", "readme"]).all_cases == cases


def test_case_key_is_one_identity_for_cases_rows_and_skip_entries():
    """``--missing-from`` (cli.measured_cases) and merge's skip bookkeeping both use ``shapes.case_key``:
    a Case, its CSV row (variant written empty, read back as "" or NaN) and a skip entry (no N/K) agree."""
    from dataclasses import asdict

    from numba_nbits.perf.shapes import Case, case_key

    c = Case("l3-8b-up", 4, 128, "float16", "none", "", 8)
    row = {**asdict(c), "N": 14336, "K": 4096, "route": "gemv_w4", "us": 18.0}
    assert case_key(row) == c.key == (c.group, 8)
    assert case_key({**row, "variant": float("nan")}) == c.key
    assert case_key({**row, "variant": None}) == c.key
    skip = {k: row[k] for k in ("shape", "M", "bits", "block", "dtype", "zp")}  # no variant, no N/K
    assert case_key(skip) == c.key
    assert case_key({**row, "M": 16}) != c.key
    assert case_key({**row, "variant": "router_gemv_disabled"}) != c.key
    assert case_key({**row, "bits": "4", "block": 128.0, "M": "8"}) == c.key  # numbers as CSV text / floats
