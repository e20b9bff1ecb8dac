"""benchmarks/sweep_gemv_m1.py (the H200 small-M GEMV tactic sweep): its logic end to end on tiny cases
(simulator: correctness rows, JSON/CSV output, the fitted table as a tuned-table file the package reads),
the fit rule and the tuned-table file format (``benchmarks/gemv_tuned.py``), ``gemv.tactics.tuned_tactic``."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from numba_nbits.kernels.gemv import tactics as G
from numba_nbits.kernels.gemv import tuned_tables as TT

REPO = Path(__file__).resolve().parents[1]
TINY_KEYS = {(32, 128, 32, 1), (32, 128, 32, 8)}  # (N, K, block, m_class) of the tiny cases


def _sweep():
    """The script as a fresh module each time (tests set its BITS), registered under its package name:
    its process pool pickles functions by module name and its workers run ``-m benchmarks.sweep_gemv_m1``.
    The ``benchmarks`` package (not installed) is this checkout's, so the script's ``benchmarks.gemv_tuned``
    (``fit`` and the tuned-table file format, re-exported as the script's names) resolves without the
    repository root on sys.path."""
    if "benchmarks" not in sys.modules:
        pkg = importlib.util.spec_from_file_location("benchmarks", REPO / "benchmarks" / "__init__.py",
                                                     submodule_search_locations=[str(REPO / "benchmarks")])
        sys.modules["benchmarks"] = importlib.util.module_from_spec(pkg)
        pkg.loader.exec_module(sys.modules["benchmarks"])
    spec = importlib.util.spec_from_file_location("benchmarks.sweep_gemv_m1", REPO / "benchmarks" / "sweep_gemv_m1.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks.sweep_gemv_m1"] = mod
    spec.loader.exec_module(mod)
    return mod


def _served(monkeypatch, path, bits):
    """What ``gemv.tuned_tables.tuned_table`` serves for ``bits`` from the tuned-table file ``path`` installed
    as the table of its GPU (a GPU without a table of its own in the package)."""
    data = json.loads(path.read_text())
    assert data["kernel_version"] == TT.KERNEL_VERSION and data["gpu"] != TT.DEFAULT_GPU
    assert data["columns"] == ["N", "K", "block_size", "m_class", "tactic"]
    pkg = path.parent / "package"
    pkg.mkdir(exist_ok=True)
    (pkg / f"{data['gpu']}-v{TT.KERNEL_VERSION}.json").write_text(path.read_text())
    monkeypatch.setattr(TT, "TUNED_DIR", pkg)
    TT._load_tables.cache_clear()
    try:
        return TT.tuned_table(bits, data["gpu"])
    finally:
        TT._load_tables.cache_clear()


def test_sweep_tiny_end_to_end(tmp_path, monkeypatch):
    """The whole GPU flow on tiny cases: data preparation in a process pool, two worker processes that
    compile, take the GPU lock in turn, check and time; merged rows, report and fitted table."""
    S = _sweep()
    rows = S.main(["--tiny", "--workers", "2", "--out", str(tmp_path), "--gpu", "sweep-test"])
    data = json.loads((tmp_path / "sweep_gemv_m1.json").read_text())
    assert data["rows"] == json.loads(json.dumps(rows))
    n_tags = len(set(S.TINY_CANDS) | {G.default_tactic(32, 128, 32, M).tag for M in S.TINY_MS})
    assert len(rows) == n_tags * len(S.TINY_MS)
    assert all(r["correct"] and r["us"] > 0 and not r["error"] for r in rows), rows
    assert sum(r["default"] for r in rows) == len(S.TINY_MS)
    assert (tmp_path / "sweep_gemv_m1.csv").read_text().startswith("N,K,bits,block_size")
    assert {r["bits"] for r in rows} == {4}
    data = json.loads((tmp_path / "tuned_table.json").read_text())
    assert data["gpu"] == "sweep-test" and set(data["tables"]) == {"4"}
    assert data["sources"] == {"4": str(tmp_path)}
    assert set(_served(monkeypatch, tmp_path / "tuned_table.json", 4)) == TINY_KEYS


@pytest.mark.parametrize("bits", (8, 2))
def test_sweep_tiny_low_bits(tmp_path, monkeypatch, bits):
    """``--bits 8`` / ``--bits 2``: rows checked against the oracle with those codes; the table is that
    bit width's, and ``--into`` puts it into a copy of the package's file, keeping the other bit widths."""
    S = _sweep()
    into = tmp_path / "into.json"
    package = TT.TUNED_DIR / f"{TT.DEFAULT_GPU}-v{TT.KERNEL_VERSION}.json"
    into.write_text(package.read_text())
    rows = S.main(["--tiny", "--workers", "1", "--bits", str(bits), "--out", str(tmp_path), "--into", str(into)])
    assert rows and all(r["correct"] and r["us"] > 0 and not r["error"] and r["bits"] == bits for r in rows), rows
    data = json.loads((tmp_path / f"sweep_gemv_m1_w{bits}.json").read_text())
    assert data["meta"]["bits"] == bits and len(data["rows"]) == len(rows)
    fitted = json.loads((tmp_path / f"tuned_table_w{bits}.json").read_text())
    assert set(fitted["tables"]) == {str(bits)}
    table = {tuple(r[:4]): r[4] for r in fitted["tables"][str(bits)]}
    assert set(table) == TINY_KEYS
    assert all(G.Tactic.parse(t) for t in table.values())
    merged, old = json.loads(into.read_text()), json.loads(package.read_text())
    assert merged["tables"][str(bits)] == fitted["tables"][str(bits)]
    assert merged["sources"][str(bits)] == str(tmp_path)
    assert {b: t for b, t in merged["tables"].items() if b != str(bits)} == \
        {b: t for b, t in old["tables"].items() if b != str(bits)}
    merged["gpu"] = "sweep-test"
    into.write_text(S.dump_tuned(merged))
    assert _served(monkeypatch, into, bits) == table
    other = 4  # another bit width: served as the package has it
    assert _served(monkeypatch, into, other) == {tuple(r[:4]): r[4] for r in old["tables"][str(other)]} != {}


@pytest.mark.parametrize("bits", (8, 2))
def test_low_bit_plan_is_sane(bits):
    S = _sweep()
    S.BITS = bits
    specs = S.plan_specs(False)
    assert len(specs) <= 130  # compile budget (8-bit with the shared-memory candidates: 114, about 70 s on an H200)
    for N, K in S.SHAPES:
        for bs in S.LOW_BIT[bits]["blocks"]:
            for M in S.LOW_BIT[bits]["ms"]:
                d = G.default_tactic(N, K, bs, M, bits).tag
                assert (N, K, bs, "float16", M) in specs[("float16", 1 if M <= 8 else 2, bs, d)]


def test_full_plan_is_sane():
    S = _sweep()
    specs = S.plan_specs(False)
    assert len(specs) <= 130  # compile budget (~1-3 s each over worker processes; a 4-bit sweep: ~65 s on an H200)
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


def test_fit_rule(tmp_path, monkeypatch):
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
    path = tmp_path / "t.json"
    path.write_text(S.dump_tuned(S.tuned_json(t, 4, "benchmarks/results/x", gpu="sweep-test")))
    assert _served(monkeypatch, path, 4) == t


def test_report_names_the_runner_up_and_its_margin():
    """Each case's line gives the second-fastest correct tactic and how much slower it ran (a near-tie to re-time)."""
    S = _sweep()
    rows = [dict(r, default=False, tb_s=1.0, error="") for r in (
        _row(4096, 4096, 32, 1, "t1w8u1p1", 6.00), _row(4096, 4096, 32, 1, "t1w8u2p1b4", 6.03),
        _row(4096, 4096, 32, 1, "t1w8u2p1", 5.00, correct=False), _row(4096, 4096, 32, 1, "t1w8u1", 7.5),
        _row(28672, 8192, 32, 1, "t2w8u1", 40.0))]
    lines = []
    S.report(rows, log=lines.append)
    first = next(x for x in lines if x.startswith("4096x4096 g32"))
    cols = [c.split() for c in first.split("|")]
    assert cols[0][-3] == "t1w8u1p1" and cols[3] == ["t1w8u2p1b4", "0.5"]  # not the wrong, faster one
    assert cols[4] == ["t1w8u2p1"]  # which is listed as failed
    assert next(x for x in lines if x.startswith("28672x8192")).split("|")[3].split() == ["-"]
    assert "runner-up" in lines[0]


def test_tuned_file_format():
    """``dump_tuned`` spells a table like the package's file (byte for byte); ``merge_tuned`` replaces one
    bit width and refuses a table of another GPU or kernel version."""
    S = _sweep()
    package = (TT.TUNED_DIR / f"{TT.DEFAULT_GPU}-v{TT.KERNEL_VERSION}.json").read_text()
    data = json.loads(package)
    assert S.dump_tuned(data) == package
    new = S.tuned_json({(32, 128, 32, 1): "t1w2u1"}, 8, "benchmarks/results/x")
    merged = S.merge_tuned(data, new)
    assert merged["tables"]["8"] == [[32, 128, 32, 1, "t1w2u1"]] and merged["sources"]["8"] == "benchmarks/results/x"
    assert merged["tables"]["4"] == data["tables"]["4"] and merged["tables"]["2"] == data["tables"]["2"]
    assert S.merge_tuned(data, S.tuned_json({}, 3, "s"))["tables"]["3"] == []
    for field, value in (("gpu", "other"), ("kernel_version", TT.KERNEL_VERSION + 1)):
        with pytest.raises(ValueError, match=f"different {field}"):
            S.merge_tuned(data, {**new, field: value})


def test_merge_tuned_key_by_key():
    """``--into-keys``: the fitted rows replace the file's rows of the same key (N, K, block, m-class) and join
    where it has none; every other row and bit width stays (``--into`` would have replaced the bit width's table)."""
    S = _sweep()
    data = json.loads((TT.TUNED_DIR / f"{TT.DEFAULT_GPU}-v{TT.KERNEL_VERSION}.json").read_text())
    old = {tuple(r[:-1]): r[-1] for r in data["tables"]["4"]}
    key = next(iter(old))
    new = S.tuned_json({key: "t1w2u1n", (7, 7, 32, 1): "t1w2u1o"}, 4, "benchmarks/results/y")
    merged = S.merge_tuned(data, new, keys_only=True)
    got = {tuple(r[:-1]): r[-1] for r in merged["tables"]["4"]}
    assert got == {**old, key: "t1w2u1n", (7, 7, 32, 1): "t1w2u1o"}
    assert [r[:-1] for r in merged["tables"]["4"]] == sorted(r[:-1] for r in merged["tables"]["4"])
    assert merged["sources"]["4"] == data["sources"]["4"] + " + benchmarks/results/y"
    assert {b: t for b, t in merged["tables"].items() if b != "4"} == {b: t for b, t in data["tables"].items()
                                                                          if b != "4"}
    assert S.merge_tuned(data, new)["tables"]["4"] == new["tables"]["4"]  # replacing: the swept rows only


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
    monkeypatch.setattr(G, "tuned_table", lambda bits, gpu=TT.DEFAULT_GPU: {})
    rule = G.default_tactic(4096, 4096, 32, 1)
    monkeypatch.setattr(G, "tuned_table", lambda bits, gpu=TT.DEFAULT_GPU: table)
    assert G.default_tactic(4096, 4096, 32, 1) == G.Tactic(1, 4, 1, 2, 4)
    monkeypatch.setattr(G, "tuned_table", lambda bits, gpu=TT.DEFAULT_GPU: {})
    assert G.default_tactic(4096, 4096, 32, 1) == rule
    # the committed table (fitted to the H200 sweep) serves its own shapes
    monkeypatch.undo()
    assert G.default_tactic(28672, 8192, 128, 1) == G.Tactic.parse(TT.tuned_table(4)[(28672, 8192, 128, 1)])


def test_sweep_narrows_to_the_named_shapes_ms_and_blocks(monkeypatch):
    """``--shapes`` / ``--ms`` / ``--blocks`` / ``--no-bf16`` keep those cases of the run, in its order; a value the
    sweep does not hold is an error naming it."""
    import argparse

    import benchmarks.sweep_gemv_m1 as S

    for name in ("SHAPES", "MS", "BLOCKS", "BF16_SHAPES", "BF16_MS"):
        monkeypatch.setattr(S, name, getattr(S, name))
    monkeypatch.setattr(S, "LOW_BIT", dict(S.LOW_BIT))
    ns = argparse.Namespace(shapes="28672x8192,4096x4096", ms="16,1", blocks="128", no_bf16=False)
    S.restrict(ns)
    assert S._cases(False) == [(N, K, 128, "float16", M) for N, K in [(4096, 4096), (28672, 8192)] for M in (1, 16)] \
        + [(N, K, 128, "bfloat16", 1) for N, K in [(4096, 4096), (28672, 8192)]]
    S.restrict(argparse.Namespace(shapes=None, ms=None, blocks=None, no_bf16=True))
    assert all(c[3] == "float16" for c in S._cases(False))
    with pytest.raises(SystemExit, match="4096, 4095"):
        S.restrict(argparse.Namespace(shapes="4096x4095", ms=None, blocks=None, no_bf16=False))
    monkeypatch.setattr(S, "BITS", 8)
    S.restrict(argparse.Namespace(shapes=None, ms="4", blocks=None, no_bf16=False))
    assert {c[4] for c in S._cases(False)} == {4}


def test_variants_add_the_valid_n_and_o_forms():
    """``--variants``: after each candidate its unguarded-prefetch (``n``), pre-pass (``o``) and combined forms, those
    the tactic allows only (``p2`` prefetches activations and the ring kernel has no register pipeline: no ``n``)."""
    S = _sweep()
    assert S.with_variants(["t1w8u1p1", "t1w8u1p2", "t1w8u1p1r3"]) == [
        "t1w8u1p1", "t1w8u1p1n", "t1w8u1p1o", "t1w8u1p1no", "t1w8u1p2", "t1w8u1p2o", "t1w8u1p1r3", "t1w8u1p1r3o"]
    assert S.with_variants(["t1w8u1p1o"]) == ["t1w8u1p1o", "t1w8u1p1no"]
