"""Steady-state host time per call of ``MatMulNBits`` (the Python per-call path), by input kind.

    python -m benchmarks.bench_host [--tiny] [--calls 2000] [--batches 5]

Two detailed cases: a GEMV route (4096x4096, 4-bit, block 128, fp16, M=1; dispatch's choice,
``gemv_*``) and the dequant + cuBLAS route (same weights, M=64, forced with
``numba_nbits.force_route=dequant_cublas``). For each input kind that imports here (numba device
arrays; torch and CuPy when installed with CUDA) it times

* ``op(A, out=O)``   the lowest-latency eager call;
* ``op(A)``          the call that allocates its output (numba: ``cuda.device_array``; torch: its
                     caching allocator; CuPy: its memory pool);
* ``op(A, out=O, stream=s)`` with an explicit stream (numba only);

and, per route, the layers under the call: ``entry.run`` (plan level: pointer rewrites + launches)
and ``adapt_input`` per kind.

Then one row per remaining route of the dispatch table (``ROUTE_CASES``: 4-bit GEMV at M=8 and with a
bias that is added by the separate bias kernel, 8-bit and 2-bit GEMV, the router GEMV on 32x2880 with
its fused bias, the fpA_intB mixed GEMM at M=16, the N-chunked dequant + cuBLAS fallback): ``op(A,
out=O)`` per input kind, with that route's graph-replay GPU time per node. Each row names the route
dispatch actually took, so a case whose guard changed shows it.

Method: each row is the median over ``--batches`` batches of ``--calls`` back-to-back calls (after
200 warmup calls) of wall time / calls, in microseconds; the GPU is synchronised between batches,
outside the timed loop. The GPU must not be the bottleneck for this to be host time: each route's
GPU time per call is measured by capturing 100 calls into a CUDA graph (``numba_nbits.capture``)
and timing replays; a row whose host time is not above 1.2x that GPU time is flagged
``GPU-BOUND`` (its number then says little about the host path).

``--tiny`` runs a small problem (K=64, N=16, block 32; M=1 and M=4) with 2 batches of 2 calls, and
works on numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): a smoke test of the script, not a
measurement. Prints a table; writes ``$OUT/bench_host.csv`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    from numba_nbits.probe import gpu_present

    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"

import numpy as np  # noqa: E402

FIELDS = ["route", "M", "kind", "what", "host_us", "batch_us", "gpu_us", "note"]


WARMUP = 200


def _median_us(fn, calls: int, batches: int, sync) -> tuple[float, list[float]]:
    for _ in range(min(WARMUP, calls)):
        fn()
    sync()
    per = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
        sync()
    return statistics.median(per), per


def _gpu_us_per_call(op, A, O, sim: bool, n: int = 100, reps: int = 20) -> float | None:
    """GPU time of one ``op(A, out=O)``: n calls captured in a CUDA graph, replayed ``reps`` times."""
    if sim:
        return None
    import numba_nbits as nb

    g = nb.capture(lambda s: [op(A, out=O, stream=s) for _ in range(n)])
    try:
        g.replay(sync=True)
        t = time.perf_counter()
        for _ in range(reps):
            g.replay()
        g.synchronize()
        return (time.perf_counter() - t) / (reps * n) * 1e6
    finally:
        g.close()


def _kinds(sim: bool):
    """(kind, to_device(host array), empty(shape, np dtype)) for each importable input kind."""
    from numba import cuda

    kinds = [("numba", lambda a: cuda.to_device(a), lambda shape, dt: cuda.device_array(shape, dt))]
    if sim:
        return kinds
    try:
        import torch

        if torch.cuda.is_available():
            tdt = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}
            kinds.append(("torch", lambda a: torch.from_numpy(a).cuda(),
                          lambda shape, dt: torch.empty(shape, dtype=tdt[np.dtype(dt)], device="cuda")))
    except ImportError:
        pass
    try:
        import cupy

        kinds.append(("cupy", lambda a: cupy.asarray(a), lambda shape, dt: cupy.empty(shape, dt)))
    except ImportError:
        pass
    return kinds


def run(tiny: bool, calls: int, batches: int) -> list[dict]:
    from numba import cuda

    import numba_nbits as nb
    from numba_nbits import launch
    from numba_nbits.formats import quantize

    sim = launch.simulated()
    if tiny:
        N, K, BS = 16, 64, 32
        calls, batches = min(calls, 2), min(batches, 2)
        cases = ((1, None), (4, "dequant_cublas"))
    else:
        N, K, BS = 4096, 4096, 128
        cases = ((1, None), (64, "dequant_cublas"))
    rng = np.random.default_rng(0)
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, sc, _ = quantize(W, bits=4, block_size=BS, symmetric=True)
    sc = sc.astype(np.float16)
    sync = cuda.synchronize
    rows = []

    def add(route, M, kind, what, host, per, gpu, note=""):
        if gpu is not None and not sim and host <= 1.2 * gpu:
            note = (note + " GPU-BOUND").strip()
        rows.append(dict(route=route, M=M, kind=kind, what=what, host_us=round(host, 2),
                         batch_us=" ".join(f"{x:.2f}" for x in per), gpu_us="" if gpu is None else round(gpu, 2),
                         note=note))
        print(f"{route:16s} M={M:<3d} {kind:6s} {what:28s} {host:8.2f} us/call"
              + ("" if gpu is None else f"   (GPU {gpu:.2f} us/call)") + (f"  {note}" if note else ""), flush=True)

    for M, force in cases:
        config = {"numba_nbits.force_route": force} if force else None
        op = nb.MatMulNBits(B, sc, None, K=K, N=N, bits=4, block_size=BS, config=config)
        route = op.route(M)
        _detail(op, route, M, N, K, rng, sim, calls, batches, sync, add)
    for label, bits, n, k, bs, M, bias, config in route_cases(tiny):
        Wr = rng.standard_normal((n, k)).astype(np.float32)
        Br, scr, _ = quantize(Wr, bits=bits, block_size=bs, symmetric=True)
        bias_arr = rng.standard_normal(n).astype(np.float16) if bias else None
        op = nb.MatMulNBits(Br, scr.astype(np.float16), None, None, bias_arr, K=k, N=n, bits=bits, block_size=bs,
                            config=config)
        route = op.route(M)
        A_host = rng.standard_normal((M, k)).astype(np.float16)
        gpu = None
        for kind, dev, empty in _kinds(sim):
            A, O = dev(A_host), empty((M, n), np.float16)
            op(A, out=O)  # builds the plan (compiles; the fpA_intB profiler times its candidates once)
            if gpu is None:
                gpu = _gpu_us_per_call(op, A, O, sim)
            h, per = _median_us(lambda: op(A, out=O), calls, batches, sync)
            add(route, M, kind, f"op(A, out=O) [{label}]", h, per, gpu)
    return rows


def route_cases(tiny: bool):
    """(label, bits, N, K, block, M, bias, config) of the per-route rows; tiny: simulator-sized."""
    fpa = {"ep.cuda.fpa_intb_gemm": "1"}
    chunked = {"numba_nbits.force_route": "dequant_cublas_chunked"}
    if tiny:
        return (("4b g32 M=2 bias", 4, 16, 64, 32, 2, True, None), ("8b g32", 8, 16, 64, 32, 1, False, None),
                ("2b g32", 2, 16, 64, 32, 1, False, None))
    return (("4b g128 M=8", 4, 4096, 4096, 128, 8, False, None),
            ("4b g128 bias", 4, 4096, 4096, 128, 1, True, None),
            ("8b g128", 8, 4096, 4096, 128, 1, False, None),
            ("2b g64", 2, 4096, 4096, 64, 1, False, None),
            ("router 32x2880 g32 bias", 4, 32, 2880, 32, 1, True, None),
            ("fpA_intB M=16", 4, 4096, 4096, 128, 16, False, fpa),
            ("chunked M=64", 4, 4096, 4096, 128, 64, False, chunked))


def _detail(op, route, M, N, K, rng, sim, calls, batches, sync, add):
    """The detailed rows of one route (every call form, adapt_input, entry.run)."""
    from numba import cuda

    from numba_nbits.arrays import _mk, adapt_input

    A_host = rng.standard_normal((M, K)).astype(np.float16)
    gpu = None
    for kind, dev, empty in _kinds(sim):
        A, O = dev(A_host), empty((M, N), np.float16)
        op(A, out=O)  # builds the plan for M (compiles once)
        if gpu is None:
            gpu = _gpu_us_per_call(op, A, O, sim)
        h, per = _median_us(lambda: op(A, out=O), calls, batches, sync)
        add(route, M, kind, "op(A, out=O)", h, per, gpu)
        h, per = _median_us(lambda: op(A), calls, batches, sync)
        add(route, M, kind, "op(A)", h, per, gpu)
        if kind == "numba":
            s = cuda.stream()
            h, per = _median_us(lambda: op(A, out=O, stream=s), calls, batches, sync)
            add(route, M, kind, "op(A, out=O, stream=s)", h, per, gpu)
        h, per = _median_us(lambda: adapt_input(A, "A", sim), calls, batches, sync)
        add(route, M, kind, "adapt_input(A)", h, per, None)
        if kind == "numba":  # plan level, once per route
            entry = op._entries[M]
            a, o = adapt_input(A, "A", sim).dev, adapt_input(O, "out", sim).dev
            if sim:
                a2, o2 = a, o
            else:
                a2 = _mk(a.ptr, (M, K), (2 * K, 2), a.dtype, a.owner, True)
                o2 = _mk(o.ptr, (M, N), (2 * N, 2), o.dtype, o.owner, True)
            h, per = _median_us(lambda: entry.run(a2, o2, 0), calls, batches, sync)
            add(route, M, "-", "entry.run", h, per, gpu)
    return gpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="small problem, few calls (simulator smoke test)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per batch (default 2000)")
    ap.add_argument("--batches", type=int, default=5, help="batches; the median is reported (default 5)")
    args = ap.parse_args(argv)
    from numba_nbits import launch

    if args.tiny:
        global WARMUP
        WARMUP = 1
        args.calls, args.batches = min(args.calls, 2), min(args.batches, 2)
    print(f"bench_host: {'CUDA simulator' if launch.simulated() else 'GPU'}; median of {args.batches} batches of "
          f"{args.calls} calls" + (" (--tiny: a smoke test, not a measurement)" if args.tiny else ""), flush=True)
    rows = run(args.tiny, args.calls, args.batches)
    bound = [f"{r['route']} M={r['M']} {r['kind']} {r['what']}" for r in rows if "GPU-BOUND" in r["note"]]
    if bound:
        print("GPU-BOUND rows (host time not above 1.2x the GPU time; not a host measurement): " + "; ".join(bound))
    elif not launch.simulated():
        print("every row is host-bound: GPU time per call < host time per call / 1.2")
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "bench_host.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
