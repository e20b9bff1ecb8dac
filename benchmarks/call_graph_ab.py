"""Call graphs on against off, in one process: host time, GPU time and what a captured graph holds.

    python -m benchmarks.call_graph_ab [--rounds 3] [--calls 200] [--batches 9] [--cases gemv1,...]

The steady-state path keeps a repeated ``op(A, out=Y)`` pointer pair and ``op.bind(...)()`` as one instantiated
CUDA graph (``numba_nbits/bound.py``, knob ``numba_nbits.call_graphs``). This script answers whether that costs
GPU time, side by side in one process, so a freshly started GPU or the order of two runs cannot tell the two
modes apart: per case it builds the operator twice on the same bytes (``numba_nbits.call_graphs`` off and on;
the same compiled kernels), and for ``--rounds`` rounds, the order of the two modes alternating, measures

* ``op(A, out=Y) host`` and ``bind() host``: host time per ``op(A, out=Y)`` and per ``op.bind(A, Y)()`` (numba
  arrays; torch and CuPy too when they import with CUDA): the median over ``--batches`` batches of ``--calls``
  back-to-back calls;
* ``graph GPU per node``: GPU time per node of a CUDA graph of ``op(A, out=Y, stream=s)`` calls that the caller
  captures (``numba_nbits.perf.harness.measure``, graphs of >= 2 ms of work), and ``eager GPU per call``: GPU time
  per back-to-back eager call between CUDA events from the same harness;
* ``stream0 GPU per call``: CUDA events around 2,000 back-to-back ``op(A, out=Y)`` calls on the legacy default
  stream (what the eager rows above issue), divided by 2,000: GPU time per call where the GPU is the bound;
* ``nodes of 4 captured`` (round 0): the node types of a graph of 4 ``op(A, out=Y, stream=s)`` calls captured by
  ``numba_nbits.capture`` (``kernel``, ``graph`` for a child graph, ``memset``...), once per mode.

Cases (4-bit fp16 unless named; the routes dispatch picks): ``gemv1`` 4096x4096 block 128 M = 1, ``small1``
1024x1024 M = 1, ``gemv8`` 4096x4096 M = 8, ``bias`` 4096x4096 M = 1 with a bias, ``w8`` 8-bit, ``w2`` 2-bit block
64, ``router`` 32x2880 block 32 with a bias, ``cublas64`` 4096x4096 M = 64 (dequantize + cuBLAS). Operands are not
rotated (the same A, weights and Y every call), as in a decode loop; ratios on / off are what this is for.
Prints a table and a summary of on / off per case and measure; writes ``$OUT/call_graph_ab.csv``. Needs a GPU.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from benchmarks.common import OpSubject, array_kinds, batch_times_us, write_out_csv

FIELDS = ["case", "route", "mode", "round", "kind", "what", "value", "unit"]
CASES = {  # name: (bits, N, K, block, M, bias, config)
    "gemv1": (4, 4096, 4096, 128, 1, False, None),
    "small1": (4, 1024, 1024, 128, 1, False, None),
    "gemv8": (4, 4096, 4096, 128, 8, False, None),
    "bias": (4, 4096, 4096, 128, 1, True, None),
    "w8": (8, 4096, 4096, 128, 1, False, None),
    "w2": (2, 4096, 4096, 64, 1, False, None),
    "router": (4, 32, 2880, 32, 1, True, None),
    "cublas64": (4, 4096, 4096, 128, 64, False, {"numba_nbits.force_route": "dequant_cublas"}),
}
GPU_BATCH_US = 2000.0
STREAM0_CALLS = 2000


def node_types(op, A, Y, n: int = 4) -> str:
    """The node types of a graph of ``n`` ``op(A, out=Y, stream=s)`` calls captured by ``numba_nbits.capture``."""
    from cuda.bindings import driver as d

    import numba_nbits as nb

    g = nb.capture(lambda s: [op(A, out=Y, stream=s) for _ in range(n)])
    try:
        _, nodes, count = d.cuGraphGetNodes(g._graph, 0)
        _, nodes, count = d.cuGraphGetNodes(g._graph, count)
        names = []
        for node in nodes[:count]:
            t = d.cuGraphNodeGetType(node)[1]
            names.append(t.name.replace("CU_GRAPH_NODE_TYPE_", "").lower())
        return " ".join(names)
    finally:
        g.close()


def stream0_us(op, A, Y) -> float:
    """GPU time per call of ``STREAM0_CALLS`` back-to-back ``op(A, out=Y)`` calls between events on stream 0."""
    from numba import cuda

    for _ in range(50):
        op(A, out=Y)
    cuda.synchronize()
    a, z = cuda.event(), cuda.event()
    a.record()
    for _ in range(STREAM0_CALLS):
        op(A, out=Y)
    z.record()
    z.synchronize()
    return cuda.event_elapsed_time(a, z) * 1e3 / STREAM0_CALLS


def run(names, rounds: int, calls: int, batches: int) -> list[dict]:
    from numba import cuda

    import numba_nbits as nb
    from numba_nbits.formats import quantize
    from numba_nbits.perf import harness

    rng = np.random.default_rng(0)
    rows = []

    def add(case, route, mode, r, kind, what, value, unit="us"):
        rows.append(dict(case=case, route=route, mode=mode, round=r, kind=kind, what=what,
                         value=value if isinstance(value, str) else round(value, 3), unit=unit))
        v = value if isinstance(value, str) else f"{value:9.3f}"
        print(f"{case:9s} {route:16s} {mode:3s} r{r} {kind:6s} {what:22s} {v} {unit}", flush=True)

    for case in names:
        bits, N, K, bs, M, bias, config = CASES[case]
        W = rng.standard_normal((N, K)).astype(np.float32)
        B, sc, _ = quantize(W, bits=bits, block_size=bs, symmetric=True)
        b = rng.standard_normal(N).astype(np.float16) if bias else None
        ops = {}
        for mode, on in (("off", False), ("on", True)):
            cfg = dict(config or {}, **{"numba_nbits.call_graphs": on})
            ops[mode] = nb.MatMulNBits(B, sc.astype(np.float16), None, None, b, K=K, N=N, bits=bits, block_size=bs,
                                       config=cfg)
        route = ops["on"].route(M)
        A_host = rng.standard_normal((M, K)).astype(np.float16)
        bufs = {kind: (dev(A_host), empty((M, N), np.float16)) for kind, dev, empty in array_kinds(False)}
        want = None
        for mode, op in ops.items():  # build the plans; the two modes give the same bits
            A, Y = bufs["numba"]
            op(A, out=Y)
            op(A, out=Y)
            op(A, out=Y)  # the third call: a graph launch where graphs are on
            got = Y.copy_to_host()
            if want is None:
                want = got
            elif not np.array_equal(got, want):
                raise SystemExit(f"{case}: call graphs on and off give different results")
            add(case, route, mode, 0, "numba", "nodes of 4 captured", node_types(op, A, Y), "types")
        for r in range(1, rounds + 1):
            for mode in (("off", "on") if r % 2 else ("on", "off")):
                op = ops[mode]
                for kind, (A, Y) in bufs.items():
                    per = batch_times_us(lambda: op(A, out=Y), calls, batches, cuda.synchronize, 200)
                    add(case, route, mode, r, kind, "op(A, out=Y) host", statistics.median(per))
                    bound = op.bind(A, Y)
                    per = batch_times_us(bound, calls, batches, cuda.synchronize, 200)
                    add(case, route, mode, r, kind, "bind() host", statistics.median(per))
                A, Y = bufs["numba"]
                add(case, route, mode, r, "numba", "stream0 GPU per call", stream0_us(op, A, Y))
                backend = harness.make_backend()
                try:
                    m = harness.measure(backend, OpSubject(op, A, Y), harness.Budget(min_batch_us=GPU_BATCH_US),
                                        host=False)
                finally:
                    backend.close()
                add(case, route, mode, r, "numba", "graph GPU per node", m["us_graph"])
                add(case, route, mode, r, "numba", "eager GPU per call", m["us_p50"])
    return rows


def summary(rows) -> list[str]:
    """Median over rounds of on / off per (case, kind, what)."""
    vals: dict = {}
    for x in rows:
        if x["round"] == 0:
            continue
        vals.setdefault((x["case"], x["kind"], x["what"]), {}).setdefault(x["round"], {})[x["mode"]] = x["value"]
    out = [f"{'case':9s} {'kind':6s} {'what':22s} {'off':>9s} {'on':>9s} {'on/off':>7s}"]
    for (case, kind, what), by_round in vals.items():
        off = statistics.median(v["off"] for v in by_round.values())
        on = statistics.median(v["on"] for v in by_round.values())
        ratios = statistics.median(v["on"] / v["off"] for v in by_round.values())
        out.append(f"{case:9s} {kind:6s} {what:22s} {off:9.3f} {on:9.3f} {ratios:7.3f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of off/on (the order alternates; default 3)")
    ap.add_argument("--calls", type=int, default=200, help="calls per host-timing batch (default 200)")
    ap.add_argument("--batches", type=int, default=9, help="host-timing batches, median reported (default 9)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = ap.parse_args(argv)
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in names if c not in CASES]
    if bad or not names:
        ap.error(f"--cases: unknown {bad}; choose from {', '.join(CASES)}")
    if args.rounds < 1 or args.calls < 1 or args.batches < 1:
        ap.error("--rounds, --calls and --batches must be >= 1")
    from numba_nbits.probe import gpu_present

    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0") or not gpu_present():
        print("call_graph_ab: needs a CUDA GPU (graphs and GPU timings)", file=sys.stderr)
        return 2
    rows = run(names, args.rounds, args.calls, args.batches)
    print("\non / off, median over rounds:")
    print("\n".join(summary(rows)))
    path = write_out_csv("call_graph_ab.csv", FIELDS, rows)
    if path:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
