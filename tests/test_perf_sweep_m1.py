"""benchmarks/sweep_gemv_m1.py (the H200 small-M GEMV tactic sweep): its logic end to end on tiny cases
(simulator: correctness rows, JSON/CSV/table output), the fit rule and ``gemv.tactics.tuned_tactic``."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from numba_nbits.kernels.gemv import tactics as G

REPO = Path(__file__).resolve().parents[1]


def _sweep():
    """The script as a fresh module each time (tests set its BITS), registered under its package name:
    its process pool pickles functions by module name and its workers run ``-m benchmarks.sweep_gemv_m1``."""
    spec = importlib.util.spec_from_file_location("benchmarks.sweep_gemv_m1", REPO / "benchmarks" / "sweep_gemv_m1.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks.sweep_gemv_m1"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_sweep_tiny_end_to_end(tmp_path):
    """The whole GPU flow on tiny cases: data preparation in a process pool, two worker processes that
    compile, take the GPU lock in turn, check and time; merged rows, report and fitted table."""
    S = _sweep()
    rows = S.main(["--tiny", "--workers", "2", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "sweep_gemv_m1.json").read_text())
    assert data["rows"] == json.loads(json.dumps(rows))
    n_tags = len(set(S.TINY_CANDS) | {G.default_tactic(32, 128, 32, M).tag for M in S.TINY_MS})
    assert len(rows) == n_tags * len(S.TINY_MS)
    assert all(r["correct"] and r["us"] > 0 and not r["error"] for r in rows), rows
    assert sum(r["default"] for r in rows) == len(S.TINY_MS)
    assert (tmp_path / "sweep_gemv_m1.csv").read_text().startswith("N,K,bits,block_size")
    assert {r["bits"] for r in rows} == {4}
    ns = {}
    exec((tmp_path / "tuned_table.py").read_text(), ns)
    assert set(ns["TUNED"]) == {(32, 128, 32, 1), (32, 128, 32, 8)}


@pytest.mark.parametrize("bits", (8, 2))
def test_sweep_tiny_low_bits(tmp_path, bits):
    """``--bits 8`` / ``--bits 2``: rows checked against the oracle with those codes; the table is TUNED_BITS[bits]."""
    S = _sweep()
    rows = S.main(["--tiny", "--workers", "1", "--bits", str(bits), "--out", str(tmp_path)])
    assert rows and all(r["correct"] and r["us"] > 0 and not r["error"] and r["bits"] == bits for r in rows), rows
    data = json.loads((tmp_path / f"sweep_gemv_m1_w{bits}.json").read_text())
    assert data["meta"]["bits"] == bits and len(data["rows"]) == len(rows)
    ns = {"TUNED_BITS": {bits: {}}}
    exec((tmp_path / f"tuned_table_w{bits}.py").read_text(), ns)
    assert set(ns["TUNED_BITS"][bits]) == {(32, 128, 32, 1), (32, 128, 32, 8)}
    assert all(G.Tactic.parse(t) for t in ns["TUNED_BITS"][bits].values())


@pytest.mark.parametrize("bits", (8, 2))
def test_low_bit_plan_is_sane(bits):
    S = _sweep()
    S.BITS = bits
    specs = S.plan_specs(False)
    assert len(specs) <= 110
    for N, K in S.SHAPES:
        for bs in S.LOW_BIT[bits]["blocks"]:
            for M in S.LOW_BIT[bits]["ms"]:
                d = G.default_tactic(N, K, bs, M, bits).tag
                assert (N, K, bs, "float16", M) in specs[("float16", 1 if M <= 8 else 2, bs, d)]


def test_full_plan_is_sane():
    S = _sweep()
    specs = S.plan_specs(False)
    assert len(specs) <= 110  # compile budget (~1-3 s each, spread over worker processes)
    for (dtype, MT, bs, tag), cases in specs.items():
        assert G.Tactic.parse(tag).tag == tag  # canonical spelling (field order p, k, s, b)
        assert all((c[4] <= 8) == (MT == 1) and c[2] == bs and c[3] == dtype for c in cases)
    for N, K in S.SHAPES:  # today's default is always measured
        for bs in S.BLOCKS:
            for M in S.MS:
                d = G.default_tactic(N, K, bs, M).tag
                assert (N, K, bs, "float16", M) in specs[("float16", 1 if M <= 8 else 2, bs, d)]


def _row(N, K, bs, M, tag, us, dtype="float16", correct=True):
    return {"N": N, "K": K, "block_size": bs, "dtype": dtype, "M": M, "tactic": tag, "us": us, "correct": correct}


def test_fit_rule():
    S = _sweep()
    rows = [
        _row(4096, 4096, 32, 1, "t1w8u2", 6.0), _row(4096, 4096, 32, 1, "t1w4u1p2k4", 5.0),  # k wins by 20%
        _row(4096, 4096, 32, 1, "t1w8u1p2", 5.0, correct=False),  # wrong: never picked
        _row(28672, 8192, 32, 1, "t2w8u1", 40.0), _row(28672, 8192, 32, 1, "t2w8u1p1k2", 38.0),  # 5%: plain kept
        _row(28672, 8192, 32, 4, "t2w8u1p2", 41.0), _row(28672, 8192, 32, 4, "t2w8u1", 45.0),
        _row(28672, 8192, 128, 1, "t1w8u1", 30.0, dtype="bfloat16"),  # bf16 fills a class fp16 left empty
        _row(28672, 8192, 32, 1, "t1w8u1", 1.0, dtype="bfloat16"),  # but never overrides fp16
    ]
    t = S.fit(rows)
    assert t == {(4096, 4096, 32, 1): "t1w4u1p2k4", (28672, 8192, 32, 1): "t2w8u1",
                 (28672, 8192, 32, 8): "t2w8u1p2", (28672, 8192, 128, 1): "t1w8u1"}
    ns = {}
    exec(S.table_source(t), ns)
    assert ns["TUNED"] == t


def test_tuned_tactic_nearest_and_fallback(monkeypatch):
    table = {(4096, 4096, 32, 1): "t1w4u1p2k4", (28672, 8192, 32, 1): "t2w8u1p1", (28672, 8192, 128, 16): "t2w4u1"}
    tt = lambda *a: G.tuned_tactic(*a, table=table)  # noqa: E731
    assert tt(4096, 4096, 32, 1) == G.Tactic(1, 4, 1, 2, 4)
    assert tt(5120, 4096, 32, 1) == G.Tactic(1, 4, 1, 2, 4)  # nearest
    assert tt(4096, 4096, 16, 1) == G.Tactic(1, 4, 1, 2, 4)  # block 16 -> the block-32 entries
    assert tt(28672, 8192, 64, 9) == G.Tactic(2, 4, 1)  # block 64 -> 128, M 9..16 class
    assert tt(28672, 8192, 32, 2) is None  # no M 2..8 entry
    assert tt(32, 2880, 32, 1) is None  # far from every swept shape: the rule decides
    assert tt(4096, 4096, 128, 1) is None
    # default_tactic consults the tuned table first, the rule otherwise (here with a stand-in table, then with none)
    monkeypatch.setattr(G, "tuned_table", lambda bits, gpu=G.DEFAULT_GPU: {})
    rule = G.default_tactic(4096, 4096, 32, 1)
    monkeypatch.setattr(G, "tuned_table", lambda bits, gpu=G.DEFAULT_GPU: table)
    assert G.default_tactic(4096, 4096, 32, 1) == G.Tactic(1, 4, 1, 2, 4)
    monkeypatch.setattr(G, "tuned_table", lambda bits, gpu=G.DEFAULT_GPU: {})
    assert G.default_tactic(4096, 4096, 32, 1) == rule
    # the committed table (fitted to the H200 sweep) serves its own shapes
    monkeypatch.undo()
    assert G.default_tactic(28672, 8192, 128, 1) == G.Tactic.parse(G.tuned_table(4)[(28672, 8192, 128, 1)])
