"""Steady-state host time per call of ``MatMulNBits`` (the Python per-call path), by input kind.

    python -m benchmarks.bench_host [--tiny] [--calls 200] [--batches 15]

Three detailed cases: a GEMV route at 4096x4096 and at 1024x1024 (4-bit, block 128, fp16, M=1;
dispatch's choice, ``gemv_*``; 4096x4096 takes ~5.6 us on the GPU, so its host rows can be
GPU-bound, the 1024x1024 rows are not) and the dequant + cuBLAS route (4096x4096, M=64, forced with
``numba_nbits.force_route=dequant_cublas``). For each input kind that imports here (numba device
arrays; torch and CuPy when installed with CUDA) it times

* ``op(A, out=O)``   the lowest-latency eager call (after the first, the steady-state path of
                     ``numba_nbits/bound.py``);
* ``op(A)``          the call that allocates its output (numba: ``cuda.device_array``; torch: its
                     caching allocator; CuPy: its memory pool);
* ``op(A, out=O, stream=s)`` with an explicit stream (numba only);
* ``op.bind(A, O)()`` the bound callable on fixed buffers;
* ``graph replay``   ``numba_nbits.capture`` of 100 ``op(A, out=O, stream=s)`` calls, replayed: host
                     time per replay divided by the 100 nodes;

and, per route, the layers under the call: ``entry.run`` (plan level: pointer rewrites + launches),
``adapt_input`` per kind and, on a GPU, the steady-state record's own steps (``bound.py``): reading A's and
Y's pointers, reading the producer's current stream (torch, CuPy) and the ``cuGraphLaunch`` of the record's
graph for that pointer pair (made once call graphs are on and the pair was seen twice).

Then one row per remaining route of the dispatch table (``ROUTE_CASES``: 4-bit GEMV at M=8 and with a
bias that is added by the separate bias kernel, 8-bit and 2-bit GEMV, the router GEMV on 32x2880 with
its fused bias, the fpA_intB mixed GEMM at M=16, the fused small GEMM at M=32, the N-chunked dequant + cuBLAS
fallback): ``op(A,
out=O)`` per input kind, with that route's graph-replay GPU time per node. Each row names the route
dispatch actually took, so a case whose guard changed shows it.

Method: each row's ``host_us`` is the median over ``--batches`` batches of ``--calls`` back-to-back
calls (after 200 warmup calls) of wall time / calls, in microseconds; the GPU is synchronised between
batches, outside the timed loop (``numba_nbits.perf.harness`` times host calls in one short pass of
at most a few hundred calls, too few for these sub-10-us figures, so the batches are timed here).
Before each route's GPU times, ``warm_gpu`` runs its call back to back for 0.3 s, so the GPU's clocks are up.
Each route's ``gpu_us`` is the GPU time per node of a CUDA graph of ``op(A, out=O, stream=s)`` calls
and ``eager_gpu_us`` the GPU time per eager ``op(A, out=O, stream=s)`` call (back-to-back calls
between CUDA events, as the steady-state path issues them), both from
``numba_nbits.perf.harness.measure`` with batches and graphs of at least 2 ms of GPU work (``GPU_BATCH_US``;
hundreds of calls), so the cost of launching a graph or recording an event, spread over its calls, adds
little; with the harness's default 40 us a graph of a 7 us call has 6 nodes, and the number of nodes follows
the one-call estimate it is sized from. A host time is the host's own cost unless the GPU held the host
back: a host slower than the GPU never waits for it, and a faster one waits only once the launch
queue is full, which a batch of 200 calls (the default) cannot fill (it leaves at most 200 launches
pending). Only a row whose host time is within 20% of the GPU time per call either way is flagged
``GPU-BOUND``: there the queue may have set the pace, and the number says little about the host path.

``--tiny`` runs a small problem (K=64, N=16, block 32; M=1 and M=4) with 2 batches of 2 calls, and
works on numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): a smoke test of the script, not a
measurement. Prints a table; writes ``$OUT/bench_host.csv`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    from numba_nbits.probe import gpu_present

    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"

import numpy as np  # noqa: E402

from benchmarks.common import OpSubject, array_kinds, batch_times_us, write_out_csv  # noqa: E402

GPU_BATCH_US = 2000.0  # GPU time one timed batch or graph covers (harness.Budget.min_batch_us; its default is 40)
FIELDS = ["route", "shape", "M", "kind", "what", "host_us", "batch_us", "gpu_us", "eager_gpu_us", "note"]


WARMUP = 200
WARM_S = 0.3  # seconds of back-to-back calls before each GPU measurement (warm_gpu)


def _median_us(fn, calls: int, batches: int, sync) -> tuple[float, list[float]]:
    per = batch_times_us(fn, calls, batches, sync, min(WARMUP, calls))
    return statistics.median(per), per


def _gpu_us_per_call(op, A, O, sim: bool) -> tuple[float | None, float | None]:
    """(GPU time per node of a CUDA graph of ``op(A, out=O, stream=s)`` calls, GPU time per eager call of it)
    from ``harness.measure``; None on the simulator (no GPU clock) or where the capture failed."""
    if sim:
        return None, None
    from numba_nbits.perf import harness

    warm_gpu(lambda: op(A, out=O))
    backend = harness.make_backend()
    try:  # batches and graphs of >= GPU_BATCH_US of work: a graph's own launch cost spread over many nodes
        r = harness.measure(backend, OpSubject(op, A, O), harness.Budget(min_batch_us=GPU_BATCH_US), host=False)
    finally:
        backend.close()
    us = r["us_graph"]
    return (None if us != us else us), r["us_p50"]  # NaN: the capture failed (its note is in the harness row)


def warm_gpu(call, seconds: float = WARM_S) -> None:
    """Back-to-back ``call()`` for ``seconds`` of wall time, then a synchronisation: the GPU's clocks up before a
    GPU time is taken (the first case of a run, measured straight after the process started, read 9.25 us per
    graph node for a 4096x4096 GEMV that takes 4.1 us once warm: ``results/2026-12-03-h200-call-graphs``)."""
    import time

    from numba import cuda

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            call()
    cuda.synchronize()


def gpu_bound(host: float, gpu: float | None) -> bool:
    """Whether a host time per call is within 20% of the GPU time per call either way (see the docstring)."""
    return gpu is not None and gpu / 1.2 <= host <= 1.2 * gpu


def _graph_replay_us(op, A, O, calls: int, batches: int, sync, n: int) -> tuple[float, list[float]]:
    """Host time per node of replaying a graph of ``n`` ``op(A, out=O, stream=s)`` calls."""
    import numba_nbits as nb

    g = nb.capture(lambda s: [op(A, out=O, stream=s) for _ in range(n)])
    try:
        g.replay(sync=True)
        reps = max(1, calls // n)
        h, per = _median_us(g.replay, reps, batches, lambda: (g.synchronize(), sync()))
        return h / n, [x / n for x in per]
    finally:
        g.close()


def run(tiny: bool, calls: int, batches: int) -> list[dict]:
    from numba import cuda

    import numba_nbits as nb
    from numba_nbits import launch
    from numba_nbits.formats import quantize

    sim = launch.simulated()
    BS = 32 if tiny else 128
    if tiny:
        calls, batches = min(calls, 2), min(batches, 2)
        cases = ((16, 64, 1, None), (16, 64, 4, "dequant_cublas"))
    else:
        cases = ((4096, 4096, 1, None), (1024, 1024, 1, None), (4096, 4096, 64, "dequant_cublas"))
    rng = np.random.default_rng(0)
    sync = cuda.synchronize
    rows = []

    def add(route, shape, M, kind, what, host, per, gpus, note=""):
        gpu, eager = gpus
        if not sim and gpu_bound(host, gpu):
            note = (note + " GPU-BOUND").strip()
        rows.append(dict(route=route, shape=shape, M=M, kind=kind, what=what, host_us=round(host, 2),
                         batch_us=" ".join(f"{x:.2f}" for x in per), gpu_us="" if gpu is None else round(gpu, 2),
                         eager_gpu_us="" if eager is None else round(eager, 2), note=note))
        print(f"{route:16s} {shape:9s} M={M:<3d} {kind:6s} {what:28s} {host:8.2f} us/call"
              + ("" if gpu is None else f"   (GPU {gpu:.2f} us/call)") + (f"  {note}" if note else ""), flush=True)

    for N, K, M, force in cases:
        config = {"numba_nbits.force_route": force} if force else None
        W = rng.standard_normal((N, K)).astype(np.float32)
        B, sc, _ = quantize(W, bits=4, block_size=BS, symmetric=True)
        op = nb.MatMulNBits(B, sc.astype(np.float16), None, K=K, N=N, bits=4, block_size=BS, config=config)
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
        for kind, dev, empty in array_kinds(sim):
            A, O = dev(A_host), empty((M, n), np.float16)
            op(A, out=O)  # builds the plan (compiles; the fpA_intB profiler times its candidates once)
            if gpu is None:
                gpu = _gpu_us_per_call(op, A, O, sim)
            h, per = _median_us(lambda: op(A, out=O), calls, batches, sync)
            add(route, f"{n}x{k}", M, kind, f"op(A, out=O) [{label}]", h, per, gpu)
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
            ("fused GEMM M=32", 4, 4096, 4096, 128, 32, False, None),
            ("chunked M=64", 4, 4096, 4096, 128, 64, False, chunked),
            ("overlapped M=2048", 4, 4096, 4096, 128, 2048, False, None))  # M * N >= 2**23


def _detail(op, route, M, N, K, rng, sim, calls, batches, sync, add):
    """The detailed rows of one route (every call form, adapt_input, entry.run)."""
    from numba import cuda

    from numba_nbits.arrays import _mk, adapt_input

    A_host = rng.standard_normal((M, K)).astype(np.float16)
    shape = f"{N}x{K}"
    gpu = None
    for kind, dev, empty in array_kinds(sim):
        A, O = dev(A_host), empty((M, N), np.float16)
        op(A, out=O)  # builds the plan for M (compiles once)
        if gpu is None:
            gpu = _gpu_us_per_call(op, A, O, sim)
        h, per = _median_us(lambda: op(A, out=O), calls, batches, sync)
        add(route, shape, M, kind, "op(A, out=O)", h, per, gpu)
        h, per = _median_us(lambda: op(A), calls, batches, sync)
        add(route, shape, M, kind, "op(A)", h, per, gpu)
        h, per = _median_us(op.bind(A, O), calls, batches, sync)
        add(route, shape, M, kind, "op.bind(A, O)()", h, per, gpu)
        h, per = _graph_replay_us(op, A, O, calls, batches, sync, 2 if sim else 100)
        add(route, shape, M, kind, "graph replay (per node)", h, per, gpu)
        if kind == "numba":
            s = cuda.stream()
            h, per = _median_us(lambda: op(A, out=O, stream=s), calls, batches, sync)
            add(route, shape, M, kind, "op(A, out=O, stream=s)", h, per, gpu)
        h, per = _median_us(lambda: adapt_input(A, "A", sim), calls, batches, sync)
        add(route, shape, M, kind, "adapt_input(A)", h, per, (None, None))
        rec = op._calls.get((type(A), A.shape, type(O), O.shape))
        if rec is not None and not sim:  # the steady-state path's own layers (bound.py)
            h, per = _median_us(lambda: (rec.read_a(A), rec.read_o(O)), calls, batches, sync)
            add(route, shape, M, kind, "record: read A, Y pointers", h, per, (None, None))
            if rec.stream_of is not None:
                h, per = _median_us(rec.stream_of, calls, batches, sync)
                add(route, shape, M, kind, "record: current stream", h, per, (None, None))
            g = rec.graphs.get((rec.read_a(A), rec.read_o(O)))
            if g is not None:
                h, per = _median_us(lambda: g(0), calls, batches, sync)
                add(route, shape, M, kind, "record: cuGraphLaunch", h, per, gpu)
        if kind == "numba":  # plan level, once per route
            entry = op._entries[M]
            a, o = adapt_input(A, "A", sim).dev, adapt_input(O, "out", sim).dev
            if sim:
                a2, o2 = a, o
            else:
                a2 = _mk(a.ptr, (M, K), (2 * K, 2), a.dtype, a.owner, True)
                o2 = _mk(o.ptr, (M, N), (2 * N, 2), o.dtype, o.owner, True)
            h, per = _median_us(lambda: entry.run(a2, o2, 0), calls, batches, sync)
            add(route, shape, M, "-", "entry.run", h, per, gpu)
    return gpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="small problem, few calls (simulator smoke test)")
    ap.add_argument("--calls", type=int, default=200, help="calls per batch (default 200)")
    ap.add_argument("--batches", type=int, default=15, help="batches; the median is reported (default 15)")
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
        print("GPU-BOUND rows (host time within 20% of the GPU time per call; not a host measurement): "
              + "; ".join(bound))
    elif not launch.simulated():
        print("no row is GPU-bound: every host time per call is more than 20% away from the GPU time per call")
    path = write_out_csv("bench_host.csv", FIELDS, rows)
    if path:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
