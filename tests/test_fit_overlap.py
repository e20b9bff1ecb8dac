"""benchmarks/fit_overlap.py on a small hand-made bench_overlap table: best variant per case and the variant ranking."""
from __future__ import annotations

import math


def _row(shape, M, what, us):
    return dict(shape=shape, bits="4", dtype="float16", block="128", M=str(M), what=what, us=str(us))


ROWS = [
    _row("28672x8192", 1024, "float16 dense (torch)", 640.0),
    _row("28672x8192", 1024, "ORT chain (dequant_cublas)", 800.0),
    _row("28672x8192", 1024, "default (dequant_overlap, rows7168r8)", 700.0),
    _row("28672x8192", 1024, "overlap 4r8 (rows7168r8)", 700.0),
    _row("28672x8192", 1024, "overlap 4r0 (rows7168r0)", 640.0),
    _row("14336x4096", 256, "ORT chain (dequant_cublas)", 100.0),
    _row("14336x4096", 256, "default (dequant_overlap, rows3584r8)", 125.0),
    _row("14336x4096", 256, "overlap 4r8 (rows3584r8)", 125.0),
    _row("14336x4096", 256, "overlap 4r0 (rows3584r0)", 80.0),
]


def test_fit_picks_the_best_variant_per_case_and_ranks_variants():
    from benchmarks.fit_overlap import fit

    per_case, per_variant = fit(ROWS)
    big = next(c for c in per_case if c["shape"] == "28672x8192")
    assert big["best"] == "4r0" and big["best_us"] == 640.0
    assert big["best_vs_chain"] == 800.0 / 640.0 and big["best_vs_dense"] == 1.0
    small = next(c for c in per_case if c["shape"] == "14336x4096")
    assert small["best"] == "4r0" and math.isnan(small["dense_us"]) and math.isnan(small["best_vs_dense"])
    assert [v["variant"] for v in per_variant] == ["4r0", "4r8"]
    v0, v8 = per_variant
    assert v0["cases"] == 2 and v0["losses"] == 0 and math.isclose(v0["geomean_vs_chain"], math.sqrt(1.25 * 1.25))
    assert v8["losses"] == 1 and v8["worst_vs_chain"] == 0.8
    assert big["default_route"] == "dequant_overlap" and big["default_vs_chain"] == 800.0 / 700.0


def test_default_summary_groups_the_default_calls_by_route():
    from benchmarks.fit_overlap import default_summary, fit

    rows = ROWS + [_row("4096x14336", 256, "ORT chain (dequant_cublas)", 100.0),
                   _row("4096x14336", 256, "default (dequant_cublas, n/a)", 101.0)]
    per_case, _ = fit(rows)
    overlap, chain = default_summary(per_case)
    assert overlap["route"] == "dequant_overlap" and overlap["cases"] == 2 and overlap["losses"] == 1
    assert math.isclose(overlap["geomean_vs_chain"], math.sqrt(800.0 / 700.0 * 100.0 / 125.0))
    assert overlap["worst_vs_chain"] == 0.8
    assert chain == dict(route="dequant_cublas", cases=1, geomean_vs_chain=100.0 / 101.0,
                         worst_vs_chain=100.0 / 101.0, losses=1)


def test_main_reads_a_csv(tmp_path, capsys):
    import csv

    from benchmarks.fit_overlap import main

    p = tmp_path / "bench_overlap.csv"
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, list(ROWS[0]))
        w.writeheader()
        w.writerows(ROWS)
    assert main([str(p)]) == 0
    out = capsys.readouterr().out
    assert "best 4r0" in out and "4r8      over 2 cases" in out and "1 losses" in out
    assert "default calls on dequant_overlap over 2 cases" in out
    assert main([]) == 2
