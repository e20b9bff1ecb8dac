"""Cold start of a served model: precompiling its kernels, then a fresh process's first results.

    python -m benchmarks.cold_start [--shapes 4096x4096:4:128 ...] [--M 1-4096] [--workers 16]
                                    [--layers 32] [--first-M 512 1] [--cache-dir DIR] [--also-cold]

The default model is Llama-3-8B-sized: per layer its projections q/o 4096x4096, k/v 1024x4096, gate/up
14336x4096, down 4096x14336 (fp16, 4-bit, block 128), and the LM head 128256x4096 once. Steps, each in a
fresh process (``subprocess``), against one kernel cache that starts empty (``NUMBA_NBITS_KERNEL_CACHE_DIR``
= ``--cache-dir``, default a new temporary directory):

1. ``precompile`` cold: ``python -m numba_nbits.precompile --shapes ... --M ... --workers ...`` (wall
   time of the whole command);
2. ``precompile`` again, warm (every kernel is loaded, none compiled);
3. ``first results`` warm: a fresh process imports numba_nbits, builds the model's nodes (``--layers``
   layers of the seven projections plus the LM head, random ORT-layout bytes), and then calls every node
   once for each ``--first-M`` (default: a 512-token prefill, then one decode step), synchronising after
   each M. Reported: process start to import done, the node build (weights generated and uploaded: the
   model load, not ours to count), and the first results of each M, and ``import + first results``,
   the time the user waits for the model to answer that the library causes;
4. with ``--also-cold``: step 3 against a second, empty cache (what the first results cost without
   precompiling).

Writes ``$OUT/cold_start.csv`` (``what, cache, seconds``, plus ``detail``) when ``$OUT`` is set and prints
it. Under numba's CUDA simulator there is no kernel cache; ``--tiny`` runs a simulator-sized model
(one 16x64 block-32 node, M 1-2) as a smoke test of the script, not a measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import write_out_csv

LLAMA3_8B = ("4096x4096:4:128", "1024x4096:4:128", "14336x4096:4:128", "4096x14336:4:128", "128256x4096:4:128")
#: (N, K) of one Llama-3-8B layer's seven projections, in call order
LLAMA3_8B_LAYER = ((4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                   (4096, 14336))
LM_HEAD = (128256, 4096)
FIELDS = ["what", "cache", "seconds", "detail"]


def child(spec: dict) -> int:
    """Step 3 in this (fresh) process: print one JSON line of timings."""
    t0 = time.perf_counter()
    import numpy as np

    import numba_nbits  # noqa: F401 - the import is what is timed
    from numba import cuda

    from numba_nbits.launch import simulated
    from numba_nbits.precompile import build_op, cache_stats, parse_shape

    sigs = {}
    for s in spec["shapes"]:
        sig = parse_shape(s)
        sigs[(sig.N, sig.K)] = sig
    cuda.current_context()  # CUDA initialised here: part of what a first call costs
    t_import = time.perf_counter() - t0
    nodes = [sigs[tuple(nk)] for nk in spec["nodes"]]
    ops, seeds = [], {}
    t1 = time.perf_counter()
    for sig in nodes:  # one op per node; nodes of one shape share the generated host bytes' seed
        ops.append(build_op(sig, None, seed=seeds.setdefault(sig, len(seeds))))
    cuda.synchronize()
    t_build = time.perf_counter() - t1
    rng = np.random.default_rng(1)
    firsts = []
    for M in spec["first_M"]:
        acts = {}
        for sig in nodes:
            if sig.K not in acts:
                acts[sig.K] = cuda.to_device(rng.standard_normal((M, sig.K)).astype(np.float16))
        cuda.synchronize()
        t2 = time.perf_counter()
        for op, sig in zip(ops, nodes):
            op(acts[sig.K])
        cuda.synchronize()
        firsts.append((M, time.perf_counter() - t2))
    stats = cache_stats() if not simulated() else {}
    print("COLDSTART " + json.dumps({"import": t_import, "build": t_build, "firsts": firsts, "nodes": len(nodes),
                                     "compiled": stats.get("kernels_compiled"),
                                     "loaded": stats.get("kernels_loaded")}), flush=True)
    return 0


def _run(cmd: list, env: dict, timeout: float) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return dt, p.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(LLAMA3_8B), help="precompile shape specs (default Llama-3-8B)")
    ap.add_argument("--M", default="1-4096", help="Ms to precompile (default 1-4096)")
    ap.add_argument("--workers", type=int, default=None, help="precompile worker processes (default: its own)")
    ap.add_argument("--layers", type=int, default=32, help="layers of the default model in step 3 (default 32)")
    ap.add_argument("--first-M", type=int, nargs="+", default=[512, 1], help="Ms of the first calls (default 512 1)")
    ap.add_argument("--cache-dir", default=None, help="kernel cache to use; must be empty or absent (default: new tmp)")
    ap.add_argument("--also-cold", action="store_true", help="also time step 3 without precompiling")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per step before it is killed (default 900)")
    ap.add_argument("--tiny", action="store_true", help="simulator-sized smoke test (one 16x64 node, M 1-2)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child is not None:
        return child(json.loads(a.child))
    if a.layers < 1 or any(m < 1 for m in a.first_M):
        ap.error("--layers and --first-M must be >= 1")
    if a.tiny:
        a.shapes, a.M, a.first_M, a.workers = ["16x64:4:32"], "1-2", [2, 1], 0
        nodes = [(16, 64)]
    elif a.shapes == list(LLAMA3_8B):
        nodes = [nk for _ in range(a.layers) for nk in LLAMA3_8B_LAYER] + [LM_HEAD]
    else:  # other shapes: one node each
        from numba_nbits.precompile import parse_shape

        nodes = [(s.N, s.K) for s in map(parse_shape, a.shapes)]
    cache = a.cache_dir or tempfile.mkdtemp(prefix="nbits-coldstart-")
    if os.path.isdir(cache) and os.listdir(cache):
        ap.error(f"--cache-dir {cache!r} is not empty: the precompile step must start from an empty cache")
    env = dict(os.environ, NUMBA_NBITS_KERNEL_CACHE_DIR=cache)
    py = sys.executable
    pre = [py, "-m", "numba_nbits.precompile", "--shapes", *a.shapes, "--M", a.M, "--no-progress"]
    if a.workers is not None:
        pre += ["--workers", str(a.workers)]
    rows = []

    def add(what, cache_state, seconds, detail=""):
        rows.append(dict(what=what, cache=cache_state, seconds=round(seconds, 2), detail=detail))
        print(f"{what:34s} {cache_state:5s} {seconds:8.2f} s  {detail}", flush=True)

    dt, out = _run(pre, env, a.timeout)
    add("precompile", "cold", dt, " / ".join(line for line in out.strip().splitlines()[:3]))
    dt, out = _run(pre, env, a.timeout)
    add("precompile", "warm", dt, " / ".join(line for line in out.strip().splitlines()[:3]))
    spec = json.dumps({"shapes": a.shapes, "nodes": nodes, "first_M": a.first_M})
    states = [("warm", env)]
    if a.also_cold:
        states.append(("cold", dict(os.environ, NUMBA_NBITS_KERNEL_CACHE_DIR=tempfile.mkdtemp(prefix="nbits-cold-"))))
    for state, e in states:
        wall, out = _run([py, "-m", "benchmarks.cold_start", "--child", spec], e, a.timeout)
        line = next(x for x in out.splitlines() if x.startswith("COLDSTART "))
        r = json.loads(line[len("COLDSTART "):])
        kern = f"kernels compiled {r['compiled']}, loaded {r['loaded']}"
        add("import numba_nbits + CUDA init", state, r["import"])
        add(f"build {r['nodes']} nodes (model load)", state, r["build"])
        for M, s in r["firsts"]:
            add(f"first results M={M} ({r['nodes']} nodes)", state, s)
        add("import + first results", state, r["import"] + sum(s for _, s in r["firsts"]), kern)
        add("fresh process wall", state, wall, "interpreter start to exit")
    write_out_csv("cold_start.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
