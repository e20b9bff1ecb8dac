"""Read ``bench_overlap.csv`` (``benchmarks/bench_overlap.py``) and say which overlapped variant to make the default.

    python -m benchmarks.fit_overlap path/to/bench_overlap.csv

Prints, per (shape, M): ORT's chain, fp16 dense (when measured), the default call and the best variant, with their
ratios; then, per variant, its geometric-mean speed-up over ORT's chain across every (shape, M) it ran on and how
many of those it lost (slower than the chain), best first. The variant to adopt is the first with no loss; where
every variant loses somewhere, the route's size guard should exclude those cases. Last, the same for the default
calls per route dispatch gave them (a run with ``--variants`` and nothing after it measures only those).
"""
from __future__ import annotations

import math
import sys


def _against_chain(speedups: list[float]) -> dict:
    """Cases, geometric mean, worst and losses (< 1) of speed-ups over ORT's chain."""
    g = speedups
    return dict(cases=len(g), geomean_vs_chain=math.exp(sum(map(math.log, g)) / len(g)), worst_vs_chain=min(g),
                losses=sum(x < 1.0 for x in g))


def fit(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(per_case, per_variant)`` summaries of bench_overlap rows (dicts of the CSV's columns)."""
    cases: dict = {}
    for r in rows:
        key = (r["shape"], r["bits"], r["dtype"], r["block"], int(r["M"]))
        cases.setdefault(key, {})[r["what"]] = float(r["us"])
    per_case, gains = [], {}
    for key, subj in cases.items():
        chain = next((us for what, us in subj.items() if what.startswith("ORT chain")), math.nan)
        dense = next((us for what, us in subj.items() if "dense" in what), math.nan)
        default = next((us for what, us in subj.items() if what.startswith("default")), math.nan)
        variants = {what.split()[1]: us for what, us in subj.items() if what.startswith("overlap ")}
        best = min(variants, key=variants.get) if variants else None
        label = next((what for what in subj if what.startswith("default")), "")
        route = label[label.find("(") + 1:].split(",")[0].rstrip(")") if "(" in label else None
        per_case.append(dict(shape=key[0], bits=key[1], dtype=key[2], block=key[3], M=key[4], chain_us=chain,
                             dense_us=dense, default_us=default, default_route=route,
                             default_vs_chain=chain / default, best=best,
                             best_us=variants.get(best, math.nan) if best else math.nan,
                             best_vs_chain=chain / variants[best] if best else math.nan,
                             best_vs_dense=dense / variants[best] if best else math.nan))
        for v, us in variants.items():
            if math.isfinite(us) and math.isfinite(chain) and us > 0:
                gains.setdefault(v, []).append(chain / us)
    per_variant = [dict(variant=v, **_against_chain(g)) for v, g in gains.items()]
    per_variant.sort(key=lambda d: (-d["geomean_vs_chain"]))
    return per_case, per_variant


def default_summary(per_case: list[dict]) -> list[dict]:
    """Per route of the default calls (``fit``'s ``default_route``): cases, geometric-mean speed-up over ORT's chain,
    worst, losses; most cases first."""
    by_route: dict = {}
    for c in per_case:
        x = c["default_vs_chain"]
        if c["default_route"] and math.isfinite(x) and x > 0:
            by_route.setdefault(c["default_route"], []).append(x)
    out = [dict(route=r, **_against_chain(g)) for r, g in by_route.items()]
    out.sort(key=lambda d: -d["cases"])
    return out


def main(argv=None) -> int:
    import csv

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m benchmarks.fit_overlap bench_overlap.csv", file=sys.stderr)
        return 2
    with open(argv[0], newline="") as f:
        rows = list(csv.DictReader(f))
    per_case, per_variant = fit(rows)
    for c in per_case:
        print(f"{c['shape']:12s} w{c['bits']} {c['dtype']:8s} b{c['block']:<4s} M={c['M']:<5d}"
              f"  chain {c['chain_us']:9.1f}  dense {c['dense_us']:9.1f}  default {c['default_us']:9.1f}"
              f"  best {c['best']} {c['best_us']:9.1f}  x{c['best_vs_chain']:.2f} chain"
              f"  x{c['best_vs_dense']:.2f} dense")
    for v in per_variant:
        print(f"{v['variant']:8s} over {v['cases']} cases: x{v['geomean_vs_chain']:.3f} of ORT's chain (geomean), "
              f"worst x{v['worst_vs_chain']:.3f}, {v['losses']} losses")
    for d in default_summary(per_case):
        print(f"default calls on {d['route']} over {d['cases']} cases: x{d['geomean_vs_chain']:.3f} of ORT's chain "
              f"(geomean), worst x{d['worst_vs_chain']:.3f}, {d['losses']} losses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
