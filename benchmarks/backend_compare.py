"""numba-cuda against numba-cuda-mlir, side by side in one run (``NUMBA_NBITS_BACKEND``, see ``backend.py``).

    python -m benchmarks.backend_compare [--budget-s 240] [--backends numba,mlir] [--path NAME=DIR[:DIR...]]
                                         [--routes auto|ROUTE,...]

The backend is read once per process, so each backend runs in a worker process of its own
(``--worker NAME``) with ``NUMBA_NBITS_BACKEND=NAME`` and an empty compiled-kernel cache directory (every
kernel is compiled, none loaded). A worker

* runs the quick perf set (``python -m numba_nbits.perf --quick --no-peers``, in process): the kernel
  time of every eligible route of every quick case through ``numba_nbits.perf.harness.measure``
  (``us`` = GPU time per node of a CUDA graph), its host time per eager call (``host_us``) and its
  correctness against the oracle (``rel_err``, ``correct``);
* records the compile time of each kernel specialisation the set builds (``Kernel.ensure`` timed
  while it compiles: source to loaded cubin);
* times the launcher alone: host time per ``Launch.launch`` of one bias-add kernel (``--launches``
  back-to-back launches, median of 5 batches, the GPU synchronised outside the timed loop).

``--path NAME=DIRS`` puts ``DIRS`` in front of ``PYTHONPATH`` for backend NAME's worker alone, so each backend
can run with the packages it needs in one run (numba-cuda 0.30 compiles only with numpy < 2.5, numba-cuda-mlir
runs with numpy 2.5: ``--path numba=/tmp/np24``).

The parent joins the workers' rows and writes under ``$OUT`` (else ``benchmarks/results/<date>-backend-
compare/``): ``routes.csv`` (one row per case and route: ``us``, ``host_us``, ``correct`` of each backend and
``us_ratio`` = mlir / numba, in either order of ``--backends``), ``compile.csv`` (backend, kernel, seconds),
``launch.csv`` (backend, host us per launch), each worker's perf directory under ``perf-<backend>/``, and
prints a summary: the median and worst ``us_ratio`` (the issue's bar: numba-cuda-mlir within 2% of numba-cuda
or faster), compile seconds per backend, host time per launch. Needs a GPU; under numba-cuda-mlir the wheel
``numba-cuda-mlir`` (``pip install -e ".[mlir]"``).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOIN = ("shape", "N", "K", "M", "bits", "block", "dtype", "zp", "bias", "variant", "route")


def _timed_ensure(records: list):
    """Wrap ``Kernel.ensure`` so that each compilation it does appends (kernel name, seconds)."""
    from numba_nbits.launch import kernel as lk

    inner = lk.Kernel.ensure

    def ensure(self):
        cold = self._func is None and self._disp is None
        t = time.perf_counter()
        inner(self)
        if cold and not self.from_cache:
            records.append((self.name, time.perf_counter() - t))

    lk.Kernel.ensure = ensure


def _launch_host_us(launches: int) -> float:
    import numpy as np
    from numba import cuda

    from numba_nbits.arrays import adapt_input
    from numba_nbits.kernels import bias

    dy, db = cuda.to_device(np.zeros(4096, np.float16)), cuda.to_device(np.zeros(64, np.float16))
    y, b = adapt_input(dy, "y", False, False).dev, adapt_input(db, "bias", False, False).dev
    lau = bias.bind_bias_add(y, b, act="float16", total=4096, n=64)
    lau.launch(0)
    cuda.synchronize()
    per = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(launches):
            lau.launch(0)
        per.append((time.perf_counter() - t) / launches * 1e6)
        cuda.synchronize()
    return statistics.median(per)


def perf_args(name: str, out: Path, budget_s: float, routes: str | None = None) -> list[str]:
    """The quick perf run of backend ``name``'s worker (``--routes`` passed on when given)."""
    return (["--quick", "--no-peers", "--budget-s", str(budget_s), "--out", str(out / f"perf-{name}")]
            + (["--routes", routes] if routes else []))


def worker(name: str, out: Path, budget_s: float, launches: int, routes: str | None = None) -> int:
    from numba_nbits import backend

    assert backend.NAME == name, f"worker {name} runs with NUMBA_NBITS_BACKEND={backend.NAME}"
    compiles: list = []
    _timed_ensure(compiles)
    from numba_nbits.perf import cli

    rc = cli.main(perf_args(name, out, budget_s, routes))
    if rc:
        return rc
    result = {"backend": name, "version": backend.version(), "perf_rc": rc, "compiles": compiles,
              "launch_host_us": _launch_host_us(launches)}
    (out / f"worker-{name}.json").write_text(json.dumps(result))
    return 0


def _rows(path: Path) -> dict:
    with open(path, newline="") as f:
        return {tuple(r[k] for k in JOIN): r for r in csv.DictReader(f) if r.get("kind") == "ours"}


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def compare(out: Path, names: list[str]) -> None:
    workers = {n: json.loads((out / f"worker-{n}.json").read_text()) for n in names}
    perf = {n: _rows(out / f"perf-{n}" / "results.csv") for n in names}
    with open(out / "compile.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "version", "kernel", "compile_s"])
        for n in names:
            for kname, s in workers[n]["compiles"]:
                w.writerow([n, workers[n]["version"], kname, f"{s:.4f}"])
    with open(out / "launch.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "version", "host_us_per_launch"])
        for n in names:
            w.writerow([n, workers[n]["version"], f"{workers[n]['launch_host_us']:.3f}"])
    keys = sorted(set.union(*(set(p) for p in perf.values())))
    # the ratio's numerator and denominator: numba-cuda-mlir over numba-cuda whichever ran first, else second / first
    over = ["numba", "mlir"] if sorted(names) == ["mlir", "numba"] else list(names)
    ratios = []
    with open(out / "routes.csv", "w", newline="") as f:
        w = csv.writer(f)
        cols = [f"{c}_{n}" for n in names for c in ("us", "host_us", "correct")]
        w.writerow(list(JOIN) + cols + ["us_ratio"])
        for k in keys:
            vals = []
            for n in names:
                r = perf[n].get(k, {})
                vals += [r.get("us", ""), r.get("host_us", ""), r.get("correct", "")]
            ratio = float("nan")
            if len(names) == 2:
                a, b = (_float(perf[n].get(k, {}).get("us")) for n in over)
                ratio = b / a if a > 0 else float("nan")
                if ratio == ratio:
                    ratios.append(ratio)
            w.writerow(list(k) + vals + [f"{ratio:.4f}"])
    for n in names:
        secs = [s for _, s in workers[n]["compiles"]]
        print(f"{n} ({workers[n]['version']}): {len(secs)} kernels compiled, {sum(secs):.1f} s in all, median "
              f"{statistics.median(secs) if secs else float('nan'):.2f} s; {workers[n]['launch_host_us']:.2f} us "
              f"host per launch")
    if ratios:
        print(f"kernel time {over[1]} / {over[0]} over {len(ratios)} case-routes: median "
              f"{statistics.median(ratios):.4f}, worst {max(ratios):.4f} (bar: <= 1.02)")


def parse_paths(items: list[str], names: list[str]) -> dict[str, str]:
    """``--path NAME=DIRS`` values as {backend: DIRS}; NAME must be one of ``names``."""
    out = {}
    for item in items:
        name, sep, dirs = item.partition("=")
        name = name.strip()
        if not sep or name not in names or not dirs:
            raise SystemExit(f"--path takes NAME=DIRS with NAME one of {', '.join(names)}; got {item!r}")
        out[name] = dirs
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="numba,mlir")
    p.add_argument("--budget-s", type=float, default=240.0, help="per backend: the quick perf run's budget")
    p.add_argument("--launches", type=int, default=20000)
    p.add_argument("--routes", help="the perf run's --routes (default: its own, every eligible route)")
    p.add_argument("--path", action="append", default=[], metavar="NAME=DIRS",
                   help="extra PYTHONPATH entries (os.pathsep-separated) for backend NAME's worker only")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(a.worker, a.out, a.budget_s, a.launches, a.routes)
    out = Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results" /
               f"{datetime.date.today().isoformat()}-backend-compare")
    out.mkdir(parents=True, exist_ok=True)
    names = [n.strip() for n in a.backends.split(",") if n.strip()]
    paths = parse_paths(a.path, names)
    for n in names:
        with tempfile.TemporaryDirectory(prefix=f"kc-{n}-") as kc:
            env = dict(os.environ, NUMBA_NBITS_BACKEND=n, NUMBA_NBITS_KERNEL_CACHE="1",
                       NUMBA_NBITS_KERNEL_CACHE_DIR=kc, NUMBA_ENABLE_CUDASIM="0")
            if n in paths:
                env["PYTHONPATH"] = os.pathsep.join(x for x in (paths[n], os.environ.get("PYTHONPATH", "")) if x)
            cmd = [sys.executable, "-m", "benchmarks.backend_compare", "--worker", n, "--out", str(out),
                   "--budget-s", str(a.budget_s), "--launches", str(a.launches)]
            cmd += ["--routes", a.routes] if a.routes else []
            t = time.time()
            r = subprocess.run(cmd, env=env, cwd=ROOT)
            print(f"worker {n}: rc {r.returncode} in {time.time() - t:.0f} s", file=sys.stderr)
            if r.returncode:
                return r.returncode
    compare(out, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
