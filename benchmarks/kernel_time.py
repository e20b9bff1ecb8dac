"""Kernel time of a default call, as a profiler sees it: the kernels one ``op(A, out=Y)`` launches, under ncu.

On a GPU machine, from the repository root::

    ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-skip 20 --launch-count 10 \\
        python -m benchmarks.kernel_time --shape 32x2880 --block 32 --bias > ncu.csv
    python -m benchmarks.kernel_time --parse ncu.csv        # median per kernel name, microseconds

The first form builds one operator (random 4-bit symmetric weights, fp16 A, the given shape, block and M, bias
when asked) and calls it ``--calls`` times on device arrays with no knob set: what a default call launches.
ncu's default cache control flushes the caches before each profiled kernel, so every profiled launch reads
its weights from DRAM (the L2-cold time ORT's CUPTI figures report); ``--clock-control none`` keeps the
GPU's own clocks. The graph replay of ``numba_nbits.perf`` times a node including the gap between
dependent graph nodes; this is the kernel alone, the figure a profiler (CUPTI, nsys, ncu) reports.

``--cupti`` times the same default call without ncu, by CUPTI through ``torch.profiler``, the way the perf
suite times ONNX Runtime's node (``numba_nbits.perf.ort_peer.kernel_time``: the L2 evicted by a read before
each call, kernels summed, launch gaps excluded), and ORT's node on the same bytes in both its modes where
onnxruntime's CUDA EP is importable: one line per subject, each checked against the float64 oracle::

    python -m benchmarks.kernel_time --cupti --shape 32x2880 --block 32 --bias
"""
from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys


def _run(a) -> int:
    import numpy as np
    from numba import cuda

    import numba_nbits as nb

    N, K = (int(x) for x in a.shape.lower().split("x"))
    rng = np.random.default_rng(a.seed)
    W = (rng.standard_normal((N, K)) * 0.05).astype(np.float16)
    B, scales, zp = nb.quantize(W, bits=a.bits, block_size=a.block)
    bias = (rng.standard_normal(N) * 0.1).astype(np.float16) if a.bias else None
    op = nb.MatMulNBits(B, scales, zp, None, bias, K=K, N=N, bits=a.bits, block_size=a.block)
    A_h = rng.standard_normal((a.M, K)).astype(np.float16)
    A = cuda.to_device(A_h)
    Y = cuda.device_array((a.M, N), np.float16)
    for _ in range(a.calls):
        op(A, out=Y)
    cuda.synchronize()
    ref = nb.matmul_nbits_ref(A_h, B, scales, zp, None, bias, K=K, N=N, bits=a.bits, block_size=a.block)
    err = nb.relative_error(Y.copy_to_host(), ref)
    d = op.explain(M=a.M)
    print(f"# {N}x{K} M={a.M} bits={a.bits} block={a.block} bias={a.bias}: route {d.name} (bias {d.bias}), "
          f"relative error {err:.2e}", file=sys.stderr)
    return 0 if err <= 2e-3 else 1


def _cupti(a) -> int:
    import numpy as np

    import numba_nbits as nb
    from numba_nbits.perf import ort_peer
    from numba_nbits.perf.harness import make_backend
    from numba_nbits.perf.subjects import Activations, random_activation, random_weights

    why = ort_peer.cupti_available()
    if why:
        print(f"--cupti: {why}", file=sys.stderr)
        return 2
    N, K = (int(x) for x in a.shape.lower().split("x"))
    b = make_backend()
    rng = np.random.default_rng(a.seed)
    w = random_weights(N, K, a.bits, a.block, "float16", "none", a.bias, rng)
    acts = Activations(b, a.M, w, 1, rng)
    op = nb.MatMulNBits(w.B, w.scales, None, None, w.bias, K=K, N=N, bits=a.bits, block_size=a.block)
    A, Y = acts.A[0].obj, acts.Y[0].obj

    class Ours:
        route = f"ours:{op.explain(M=a.M).name}"

        def launch(self, i, stream):
            op(A, out=Y, stream=stream)

        def run_check(self, backend, A_host, rows):
            backend.upload(acts.A[0], A_host)
            backend.poison(acts.Y[0])
            self.launch(0, backend.stream)
            backend.sync()
            return backend.rows(acts.Y[0], rows)

    notes: list = []
    subjects = [Ours()] + ort_peer.ort_subjects(b, a.M, w, acts, notes, flush_bytes=2 * b.l2_bytes)
    bad = 0
    for s in subjects:
        A_h = random_activation(a.M, K, "float16", rng)
        got = s.run_check(b, A_h, np.arange(a.M)).astype(np.float64)
        ref = nb.matmul_nbits_ref(A_h, w.B, w.scales, None, None, w.bias, K=K, N=N, bits=a.bits, block_size=a.block)
        err = nb.relative_error(got, ref)
        if isinstance(s, Ours):
            for _ in range(3):
                s.launch(0, b.stream)
            t = ort_peer.kernel_time(lambda: s.launch(0, b.stream), b.d.cuCtxSynchronize,
                                     ort_peer.flush_buffer(2 * b.l2_bytes))
            bad += err > 2e-3
        else:
            t = s.time(b)
        print(f"{N}x{K} {a.bits}b g{a.block} M={a.M} bias={a.bias} {s.route}: {t['us_p50']:.2f} us kernel time "
              f"(p20 {t['us_p20']:.2f}, p80 {t['us_p80']:.2f}), relative error {err:.2e}")
    for name, text in notes:
        print(f"# {name}: {text}")
    return 1 if bad else 0


def parse(text: str) -> dict:
    """ncu ``--csv`` output -> {kernel name: [microseconds, ...]} (gpu__time_duration.sum rows)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    out: dict = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines))):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "")
        us = {"nsecond": v / 1e3, "ns": v / 1e3, "usecond": v, "us": v, "msecond": v * 1e3, "ms": v * 1e3,
              "second": v * 1e6, "s": v * 1e6}.get(unit)
        if us is None:
            raise ValueError(f"unknown unit {unit!r} in ncu output")
        out.setdefault(r["Kernel Name"], []).append(us)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernel_time", description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="32x2880", help="NxK")
    p.add_argument("--M", type=int, default=1)
    p.add_argument("--bits", type=int, default=4)
    p.add_argument("--block", type=int, default=32)
    p.add_argument("--bias", action="store_true")
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cupti", action="store_true", help="time by CUPTI (no ncu), beside ORT's node where importable")
    p.add_argument("--parse", metavar="CSV", help="print the median kernel time per kernel of an ncu --csv file")
    a = p.parse_args(argv)
    if a.parse:
        with open(a.parse) as f:
            times = parse(f.read())
        if not times:
            print("no gpu__time_duration rows in", a.parse)
            return 1
        for name, ts in times.items():
            print(f"{statistics.median(ts):8.3f} us  median of {len(ts):3d}  "
                  f"(min {min(ts):.3f}, max {max(ts):.3f})  {name[:100]}")
        return 0
    return _cupti(a) if a.cupti else _run(a)


if __name__ == "__main__":
    sys.exit(main())
