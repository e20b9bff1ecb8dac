"""GPU micro-benchmark of the fused CUDA-core GEMV family (gemv_w4 / gemv_w8 / gemv_w2 / router).

    PYTHONPATH=. python perf/bench_gemv.py [--quick] [--bits 4] [--dtype float16] [--shapes 4096x4096,...]
                                            [--ms 1,2,4] [--quant w4g32,w4g128]

GPU only (it refuses to run on the simulator). ``--quick`` (< 3 minutes on an H200, compile
included) runs 4 shapes x M {1, 4} x 4-bit g32/g128 x fp16; the full run sweeps
(N, K) in {4096x4096, 14336x4096, 4096x14336, 28672x8192, 8192x28672, 128256x4096, 32x2880}
x M {1, 2, 4, 8, 16} x {4-bit g32, 4-bit g128, 8-bit g128, 2-bit g64} x {fp16, bf16}
(M beyond a family's guard is skipped: 8-bit M <= 5, 2-bit M <= 8; the router shape uses the router
kernel at M = 1, 4-bit). Use the filters to split a full run across several calls.

Method
------
* Weights are random codes and scales (no zero points), uploaded as independent copies until the
  copies exceed ``max(200 MB, 3 x L2)`` (L2 size from numba's device attributes), capped at
  ``MAX_COPIES``; launches rotate through the copies so each one streams its weights from HBM.
* Kernel time: ``LAUNCHES`` plan launches (rotating copies) are captured into one CUDA graph by
  driver stream capture; the graph is replayed ``REPEATS`` times between CUDA events; the median
  per-launch time is reported (graph replay removes the ~10 us host launch cost that would
  otherwise hide a 2-5 us kernel; it still includes the ~0.7 us graph-node gap).
* Effective bandwidth = (packed weights + scales + A + Y bytes) / kernel time.
* host_us: host time of one eager ``plan.run`` (set 2 pointers + cuLaunchKernel), M = 1 rows.
* Per kernel: registers per thread (``Kernel.registers()``) and whether the PTX contains
  ``ld.global.nc.v4`` (16-byte loads) via ``dispatcher.inspect_asm``.
* A spot check of the first 256 rows of Y against a float64 reference (``err`` column).

Prints a compact table and writes ``$OUT/bench_gemv.csv`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (128256, 4096), (32, 2880)]
QUICK_SHAPES = [(4096, 4096), (28672, 8192), (128256, 4096), (32, 2880)]
MS = [1, 2, 4, 8, 16]
QUANTS = {"w4g32": (4, 32), "w4g128": (4, 128), "w8g128": (8, 128), "w2g64": (2, 64)}
DTYPES = ["float16", "bfloat16"]
ROTATE_BYTES = 200 << 20
MAX_COPIES = 2048
LAUNCHES = 200  # per captured graph
REPEATS = 7
#: ORT 1.31.1 default CUDA MatMulNBits on our H200 (fp16, no zp; h200-measurements.md), us.
ORT_US = {(4096, 4096, 32, 1): 6.45, (4096, 4096, 128, 1): 6.31, (4096, 4096, 32, 4): 9.29,
          (4096, 4096, 32, 16): 30.73, (14336, 4096, 32, 1): 13.5, (14336, 4096, 32, 4): 24.96,
          (28672, 8192, 32, 1): 38.01, (28672, 8192, 128, 1): 43.45, (28672, 8192, 32, 4): 59.82,
          (28672, 8192, 32, 16): 64.95, (128256, 4096, 32, 1): 83.42, (128256, 4096, 128, 1): 95.71,
          (128256, 4096, 32, 4): 123.51, (128256, 4096, 32, 16): 124.84, (32, 2880, 32, 1): 2.81}


def _check(result, what):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: CUDA error {int(err)} ({err})")
    return None if len(result) == 1 else (result[1] if len(result) == 2 else result[1:])


class Gpu:
    def __init__(self):
        from cuda.bindings import driver as d
        from numba import cuda

        cuda.current_context()
        self.d = d
        dev = cuda.get_current_device()
        self.name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        self.l2 = int(getattr(dev, "L2_CACHE_SIZE", 60 << 20))
        self.sms = int(dev.MULTIPROCESSOR_COUNT)
        self.stream = int(_check(d.cuStreamCreate(1), "cuStreamCreate"))  # non-blocking
        self.cs = d.CUstream(self.stream)

    def sync(self):
        _check(self.d.cuStreamSynchronize(self.cs), "cuStreamSynchronize")

    def graph(self, issue):
        d = self.d
        _check(d.cuStreamBeginCapture(self.cs, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture")
        try:
            issue(self.stream)
        finally:
            g = _check(d.cuStreamEndCapture(self.cs), "cuStreamEndCapture")
        exe = _check(d.cuGraphInstantiate(g, 0), "cuGraphInstantiate")
        return g, exe

    def time_graph_ms(self, exe, repeats):
        d = self.d
        out = []
        _check(d.cuGraphLaunch(exe, self.cs), "cuGraphLaunch")  # warm
        self.sync()
        for _ in range(repeats):
            e0 = _check(d.cuEventCreate(0), "cuEventCreate")
            e1 = _check(d.cuEventCreate(0), "cuEventCreate")
            _check(d.cuEventRecord(e0, self.cs), "cuEventRecord")
            _check(d.cuGraphLaunch(exe, self.cs), "cuGraphLaunch")
            _check(d.cuEventRecord(e1, self.cs), "cuEventRecord")
            _check(d.cuEventSynchronize(e1), "cuEventSynchronize")
            out.append(float(_check(d.cuEventElapsedTime(e0, e1), "cuEventElapsedTime")))
            d.cuEventDestroy(e0)
            d.cuEventDestroy(e1)
        return out


def family_for(N, K, bits, bs, M):
    from numba_nbits.dispatch.routes import ROUTER_SHAPES

    if bits == 4 and M == 1 and (N, K) in ROUTER_SHAPES and bs in (32, 64):
        from numba_nbits.kernels import router

        return router
    import importlib

    mod = importlib.import_module(f"numba_nbits.kernels.gemv_w{bits}")
    if M > mod.M_MAX:
        return None
    if bits in (8, 2) and (K % bs or (bits == 8 and 256 % bs) or (bits == 2 and 512 % bs)):
        return None
    return mod


def make_weights(rng, N, K, bits, bs, dtype, copies, host_cache):
    from numba_nbits.arrays import np_dtype
    from numba_nbits.weights import build_weights

    kb = -(-K // bs)
    key = (N, K, bits, bs)
    if key not in host_cache:
        host_cache.clear()  # keep one shape's host data alive at a time
        B = rng.integers(0, 256, size=(N, kb, bs * bits // 8), dtype=np.uint8)
        s32 = (rng.random((N, kb), dtype=np.float32) * 0.02 + 0.001).astype(np.float32)
        host_cache[key] = (B, s32)
    B, s32 = host_cache[key]
    S = s32.astype(np_dtype(dtype))
    return [build_weights(B, S, None, None, None, K=K, N=N, bits=bits, block_size=bs, simulated=False)
            for _ in range(copies)], B, S


def spot_error(y_dev, A, B, S, K, N, bits, bs):
    from numba_nbits.arrays import to_host
    from numba_nbits.reference import matmul_nbits_ref, relative_error

    rows = min(N, 256)
    y = to_host(y_dev)[:, :rows]
    ref = matmul_nbits_ref(A, B[:rows], S[:rows], K=K, N=rows, bits=bits, block_size=bs)
    return relative_error(y, ref)


def kernel_facts(plan):
    k = plan.launch.kernel
    regs = k.registers()
    nc_v4 = None
    try:
        asm = k.dispatcher().inspect_asm()
        if isinstance(asm, dict):
            asm = "\n".join(asm.values())
        nc_v4 = "ld.global.nc.v4" in asm
    except Exception:  # noqa: BLE001 - informational only
        pass
    return regs, nc_v4


def host_us(plan, a, out, stream, n=2000):
    for _ in range(50):
        plan.run(a, out, stream)
    t = time.perf_counter()
    for _ in range(n):
        plan.run(a, out, stream)
    return (time.perf_counter() - t) / n * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--bits", type=int, choices=(2, 4, 8))
    ap.add_argument("--dtype", choices=DTYPES)
    ap.add_argument("--shapes", help="comma list NxK")
    ap.add_argument("--ms", help="comma list of M")
    ap.add_argument("--quant", help=f"comma list of {','.join(QUANTS)}")
    args = ap.parse_args(argv)

    from numba_nbits.launch import simulated

    if simulated():
        print("bench_gemv.py needs a real GPU (NUMBA_ENABLE_CUDASIM is on)")
        return 2
    from numba_nbits.arrays import device_empty, np_dtype, to_device
    from numba_nbits.dispatch.problem import Problem

    gpu = Gpu()
    shapes = QUICK_SHAPES if args.quick else SHAPES
    ms = [1, 4] if args.quick else MS
    quants = ["w4g32", "w4g128"] if args.quick else list(QUANTS)
    dtypes = ["float16"] if args.quick else DTYPES
    if args.shapes:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes.split(",")]
    if args.ms:
        ms = [int(x) for x in args.ms.split(",")]
    if args.quant:
        quants = args.quant.split(",")
    if args.bits:
        quants = [q for q in quants if QUANTS[q][0] == args.bits]
    if args.dtype:
        dtypes = [args.dtype]
    rotate = max(ROTATE_BYTES, 3 * gpu.l2)
    print(f"# {gpu.name}: {gpu.sms} SMs, L2 {gpu.l2 / 2**20:.0f} MiB; rotating >= {rotate / 2**20:.0f} MB of weights; "
          f"{LAUNCHES} launches per graph, median of {REPEATS} replays", flush=True)
    rng = np.random.default_rng(0)
    rows, facts, host_cache = [], {}, {}
    t_start = time.time()
    for (N, K) in shapes:
        for q in quants:
            bits, bs = QUANTS[q]
            if N == 32 and K == 2880 and bits != 4:
                continue
            for dtype in dtypes:
                npdt = np_dtype(dtype)
                kb = -(-K // bs)
                wbytes = N * kb * bs * bits // 8 + N * kb * npdt.itemsize
                copies = max(1, min(MAX_COPIES, math.ceil(rotate / wbytes)))
                todo = [M for M in ms if family_for(N, K, bits, bs, M) is not None]
                if not todo:
                    continue
                ws, B, S = make_weights(rng, N, K, bits, bs, dtype, copies, host_cache)
                for M in todo:
                    mod = family_for(N, K, bits, bs, M)
                    p = Problem(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype)
                    t0 = time.time()
                    plans = [mod.build(w, p) for w in ws]
                    compile_s = time.time() - t0
                    A = rng.standard_normal((M, K)).astype(np.float32).astype(npdt)
                    a = to_device(A, False)
                    out = device_empty((M, N), npdt, False)
                    plans[0].run(a, out, gpu.stream)
                    gpu.sync()
                    err = spot_error(out, A, B, S, K, N, bits, bs)
                    n_launch = max(LAUNCHES, copies) if copies <= 4 * LAUNCHES else copies

                    def issue(stream, plans=plans, a=a, out=out, n=n_launch):
                        for i in range(n):
                            plans[i % len(plans)].run(a, out, stream)

                    _, exe = gpu.graph(issue)
                    ms_list = gpu.time_graph_ms(exe, REPEATS)
                    us = statistics.median(ms_list) * 1000.0 / n_launch
                    nbytes = wbytes + M * K * npdt.itemsize + M * N * npdt.itemsize
                    kname = plans[0].kernel
                    if kname not in facts:
                        facts[kname] = kernel_facts(plans[0])
                    h_us = host_us(plans[0], a, out, gpu.stream) if M == 1 else float("nan")
                    gpu.sync()
                    ort = ORT_US.get((N, K, bs, M)) if dtype == "float16" and bits == 4 else None
                    row = dict(N=N, K=K, M=M, quant=q, dtype=dtype, route=plans[0].route, kernel=kname,
                               us=round(us, 2), TBps=round(nbytes / us / 1e6, 3), host_us=round(h_us, 2),
                               regs=facts[kname][0], ld_nc_v4=facts[kname][1], grid=plans[0].grid[0] * plans[0].grid[1],
                               copies=copies, err=float(f"{err:.2e}"), ort_us=ort, build_s=round(compile_s, 1))
                    rows.append(row)
                    print(f"{N:>6}x{K:<6} M={M:<2} {q:<6} {dtype:<8} {us:8.2f} us {row['TBps']:6.3f} TB/s "
                          f"host {h_us:5.1f} us regs {row['regs']:3d} v4 {row['ld_nc_v4']} err {err:.1e} "
                          f"{'ORT ' + str(ort) + ' us ' if ort else ''}[{kname}, build {compile_s:.1f}s]", flush=True)
                    del plans, exe
                del ws
    print(f"\n# done in {time.time() - t_start:.0f} s\n")
    cols = ["N", "K", "M", "quant", "dtype", "us", "TBps", "ort_us", "host_us", "regs", "ld_nc_v4", "err", "kernel"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols] if rows else [len(c) for c in cols]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(r[c]).rjust(w) for c, w in zip(cols, widths)))
    out_dir = os.environ.get("OUT")
    if out_dir and rows:
        import csv

        path = os.path.join(out_dir, "bench_gemv.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
