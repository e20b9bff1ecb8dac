"""Host time of one kernel launch from Python, layer by layer: where the floor of an eager call is.

    python -m benchmarks.launch_floor [--calls 20 1000] [--batches 200]

An empty kernel (one float32 array argument, 1 block of 32 threads) is launched back to back through

* ``numba``          ``kernel[1, 32](x)``, numba-cuda's own launch (argument typing, overload lookup);
* ``Launch.launch``  this package's launcher (``numba_nbits/launch/kernel.py``: pre-packed parameters,
                     one ``cuLaunchKernel`` through cuda-bindings);
* ``cuda-bindings``  ``driver.cuLaunchKernel`` called directly with the same pre-built parameter table;
* ``ctypes``         ``cuLaunchKernel`` of libcuda through ctypes, with ``argtypes`` set;
* ``graph``          ``driver.cuGraphLaunch`` of an instantiated graph of one such launch;
* ``C``              the same launch from a C program (``cc`` on the machine, libcuda by ``dlopen``, the
                     empty kernel from PTX): the driver's own cost, with no Python at all;

and the GEMV plan of a 1024x1024 4-bit block-128 fp16 operator at M=1 (``entry.run``, the plan's
pointer rewrites + launch; ``op.bind(A, O)()``; ``op(A, out=O)``).

Each row is timed with ``--calls`` calls per batch (the median over ``--batches`` batches, the GPU
synchronised between batches, outside the timed region). A short batch (20 calls) cannot fill the
driver's launch queue, so its figure is host time; a long batch (1000 calls) can, and when the GPU
drains the queue slower than the host fills it, its figure is the GPU's time per launch instead. The
two together say which one a figure is. GPU only: the simulator has no driver to time.
Prints a table; writes ``$OUT/launch_floor.csv`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys

import numpy as np

from benchmarks.common import batch_times_us, write_out_csv

FIELDS = ["what", "calls", "host_us", "p10_us", "p90_us"]


def _time(fn, calls: int, batches: int, sync) -> tuple[float, float, float]:
    per = sorted(batch_times_us(fn, calls, batches, sync, 200))
    return statistics.median(per), per[len(per) // 10], per[(9 * len(per)) // 10]


C_SOURCE = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int (*fn_t)();
static const char *ptx = ".version 7.0\n.target sm_52\n.address_size 64\n"
                         ".visible .entry empty(.param .u64 p) { ret; }\n";
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    int calls = atoi(argv[1]), batches = atoi(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) { fprintf(stderr, "no libcuda\n"); return 1; }
    int (*init)(unsigned) = dlsym(h, "cuInit");
    int (*dev_get)(int *, int) = dlsym(h, "cuDeviceGet");
    int (*retain)(void **, int) = dlsym(h, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = dlsym(h, "cuCtxSetCurrent");
    int (*load)(void **, const void *) = dlsym(h, "cuModuleLoadData");
    int (*get_fn)(void **, void *, const char *) = dlsym(h, "cuModuleGetFunction");
    int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                  void **) = dlsym(h, "cuLaunchKernel");
    int (*sync)(void) = dlsym(h, "cuCtxSynchronize");
    int dev; void *ctx, *mod, *f;
    if (init(0) || dev_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx) || load(&mod, ptx) ||
        get_fn(&f, mod, "empty")) { fprintf(stderr, "setup failed\n"); return 1; }
    unsigned long long p = 0; void *args[1] = {&p};
    for (int i = 0; i < 200; i++) launch(f, 1, 1, 1, 32, 1, 1, 0, 0, args, 0);
    sync();
    double *per = malloc(sizeof(double) * batches);
    for (int b = 0; b < batches; b++) {
        double t = now();
        for (int i = 0; i < calls; i++) if (launch(f, 1, 1, 1, 32, 1, 1, 0, 0, args, 0)) return 2;
        per[b] = (now() - t) / calls * 1e6;
        sync();
    }
    qsort(per, batches, sizeof(double), cmp);
    printf("%.4f %.4f %.4f\n", per[batches / 2], per[batches / 10], per[(9 * batches) / 10]);
    return 0;
}
"""


def c_floor(calls: int, batches: int):
    """(median, p10, p90) us per launch of the C program, or None when no C compiler is on the machine."""
    import shutil
    import subprocess
    import tempfile

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    d = tempfile.mkdtemp(prefix="launch-floor-")
    src, exe = os.path.join(d, "floor.c"), os.path.join(d, "floor")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    subprocess.run([cc, "-O2", "-o", exe, src, "-ldl"], check=True)
    out = subprocess.run([exe, str(calls), str(batches)], check=True, capture_output=True, text=True).stdout
    return tuple(float(x) for x in out.split())


def subjects():
    """(name, zero-argument callable) of every launch path, and the synchronise function."""
    from numba import cuda, types

    import numba_nbits as nb
    from numba_nbits.arrays import adapt_input
    from numba_nbits.formats import quantize
    from numba_nbits.launch import Kernel, _drv

    def empty(x):
        pass

    x = cuda.device_array(32, np.float32)
    jitted = cuda.jit(empty)
    jitted[1, 32](x)
    k = Kernel(empty, (types.float32[::1],), name="empty")
    dx = adapt_input(x, "x", False).dev
    L = k.bind(1, 32, [dx])
    drv = _drv()
    tbl = L._bufs()
    func, addr = L._func, tbl.addr
    fptr = int(func)

    libcuda = ctypes.CDLL("libcuda.so.1")
    launch = libcuda.cuLaunchKernel
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    assert launch(fptr, 1, 1, 1, 32, 1, 1, 0, None, addr, None) == 0

    from numba_nbits.launch import check

    stream = check(drv.cuStreamCreate(1), "cuStreamCreate")  # non-blocking: capture needs a non-legacy stream
    check(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
          "cuStreamBeginCapture")
    L.launch(int(stream))
    graph = check(drv.cuStreamEndCapture(stream), "cuStreamEndCapture")
    gexec = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    rng = np.random.default_rng(0)
    W = rng.standard_normal((1024, 1024)).astype(np.float32)
    B, sc, _ = quantize(W, bits=4, block_size=128, symmetric=True)
    op = nb.MatMulNBits(B, sc.astype(np.float16), None, K=1024, N=1024, bits=4, block_size=128)
    A = cuda.to_device(rng.standard_normal((1, 1024)).astype(np.float16))
    O = cuda.device_array((1, 1024), np.float16)
    op(A, out=O)
    entry = op._entries[1]
    a, o = adapt_input(A, "A", False).dev, adapt_input(O, "out", False).dev
    bound = op.bind(A, O)

    return [
        ("cuda-bindings cuLaunchKernel", lambda: drv.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, 0, addr, 0)),
        ("Launch.launch(0)", lambda: L.launch(0)),
        ("gemv 1024x1024 M=1 entry.run", lambda: entry.run(a, o, 0)),
        ("gemv 1024x1024 M=1 op.bind(A, O)()", bound),
        ("gemv 1024x1024 M=1 op(A, out=O)", lambda: op(A, out=O)),
        ("cuda-bindings cuGraphLaunch (1 node)", lambda: drv.cuGraphLaunch(gexec, stream)),
        ("ctypes cuLaunchKernel", lambda: launch(fptr, 1, 1, 1, 32, 1, 1, 0, None, addr, None)),
        ("numba kernel[1, 32](x)", lambda: jitted[1, 32](x)),
    ], cuda.synchronize


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, nargs="+", default=[20, 1000], help="calls per batch (default 20 1000)")
    ap.add_argument("--batches", type=int, default=200, help="batches per row; the median is reported (default 200)")
    a = ap.parse_args(argv)
    if any(c < 1 for c in a.calls) or a.batches < 1:
        ap.error("--calls and --batches must be >= 1")
    from numba_nbits.probe import gpu_present

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or not gpu_present():
        print("error: launch_floor times the CUDA driver and needs a CUDA GPU (the simulator has no driver)",
              file=sys.stderr)
        return 2
    subs, sync = subjects()
    rows = []
    for calls in a.calls:
        batches = max(3, a.batches * 20 // max(calls, 20)) if calls > 20 else a.batches
        c = c_floor(calls, batches)
        if c is not None:
            rows.append(dict(what="C cuLaunchKernel", calls=calls, host_us=round(c[0], 3), p10_us=round(c[1], 3),
                             p90_us=round(c[2], 3)))
            print(f"{'C cuLaunchKernel':40s} calls/batch={calls:<5d} {c[0]:7.2f} us  (p10 {c[1]:.2f}, p90 {c[2]:.2f})",
                  flush=True)
        for name, fn in subs:
            med, p10, p90 = _time(fn, calls, batches, sync)
            rows.append(dict(what=name, calls=calls, host_us=round(med, 3), p10_us=round(p10, 3),
                             p90_us=round(p90, 3)))
            print(f"{name:40s} calls/batch={calls:<5d} {med:7.2f} us  (p10 {p10:.2f}, p90 {p90:.2f})", flush=True)
    write_out_csv("launch_floor.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
