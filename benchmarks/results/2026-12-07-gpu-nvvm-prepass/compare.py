"""Join the four quick perf runs of callC.sh (pp-<backend>-<level>/results.csv): GPU time per default call without and
with the LLVM 7 pre-pass, per compiler, and numba-cuda-mlir / numba-cuda for each. python compare.py DIR"""
import csv
import statistics
import sys
from pathlib import Path

KEY = ("shape", "M", "bits", "block", "dtype", "zp", "bias", "variant", "route")
d = Path(sys.argv[1])
runs = {}
for name in ("numba-0", "numba-1", "mlir-0", "mlir-1"):
    p = d / f"pp-{name}" / "results.csv"
    if p.exists():
        runs[name] = {tuple(r[k] for k in KEY): r for r in csv.DictReader(open(p))}
keys = sorted(set().union(*[set(r) for r in runs.values()]), key=lambda k: (k[0], int(k[1]), k[2:]))


def us(name, k):
    r = runs.get(name, {}).get(k)
    return float(r["us"]) if r and r.get("correct") == "True" else None


ratios = {"numba pp/off": [], "mlir pp/off": [], "mlir/numba off": [], "mlir+pp/numba off": [], "mlir+pp/numba+pp": []}
print(f"{'case':58s} {'numba':>8s} {'numba+pp':>9s} {'mlir':>8s} {'mlir+pp':>8s}   pp/off n  pp/off m  m/n  m+pp/n")
for k in keys:
    a, b, c, e = (us(n, k) for n in ("numba-0", "numba-1", "mlir-0", "mlir-1"))
    f = lambda x: f"{x:8.2f}" if x else "       -"
    q = lambda x, y: f"{x / y:6.3f}" if x and y else "     -"
    print(f"{' '.join(x for x in k if x):58s} {f(a)} {f(b):>9s} {f(c)} {f(e)}   {q(b, a)}   {q(e, c)}  {q(c, a)}  {q(e, a)}")
    for name, x, y in (("numba pp/off", b, a), ("mlir pp/off", e, c), ("mlir/numba off", c, a),
                       ("mlir+pp/numba off", e, a), ("mlir+pp/numba+pp", e, b)):
        if x and y:
            ratios[name].append(x / y)
for name, v in ratios.items():
    if v:
        print(f"{name:20s} median {statistics.median(v):.4f}  min {min(v):.4f}  max {max(v):.4f}  n={len(v)}")
