"""GPU and host time of a one-node CUDA graph launch against a plain kernel launch, when either side is the bound.

    python -m benchmarks.graph_launch_gpu [--launches 2000] [--cycles 0 2000 6000 14000]

A kernel of one block of 32 threads spins for ``cycles`` SM clock cycles (PTX loaded by the driver, no
compiler of this package involved). For each spin length it is launched ``--launches`` times back to back on
one non-blocking stream

* with ``cuLaunchKernel`` (a pre-built parameter table), and
* as a one-node graph (captured, instantiated, uploaded) with ``cuGraphLaunch``;

and a ten-node graph of it ``--launches / 10`` times. The GPU time per launch (per node) comes from CUDA events
around the batch, the host time from the clock around the launching loop; each figure is the median of 5
batches after 50 launches of warm-up. With short spins the host is the bound (GPU time = host time); with long
ones the GPU is, and the GPU time per launch shows what each kind of launch costs the GPU between kernels.
Prints one line per spin length; writes ``$OUT/graph_launch_gpu.csv`` when ``$OUT`` is set. Needs a CUDA GPU
and cuda-bindings (errors through ``numba_nbits.launch.check``).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time

from benchmarks.common import write_out_csv
from numba_nbits.launch import check

FIELDS = ["cycles", "kernel_gpu_us", "kernel_host_us", "graph1_gpu_us", "graph1_host_us", "graph10_gpu_us_per_node",
          "graph10_host_us_per_graph"]

PTX = b""".version 7.8
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 cyc) {
  .reg .u64 %r<5>; .reg .pred %p;
  ld.param.u64 %r1, [cyc];
  mov.u64 %r2, %clock64;
L: mov.u64 %r3, %clock64; sub.u64 %r4, %r3, %r2; setp.lt.u64 %p, %r4, %r1; @%p bra L;
  ret;
}
"""


class Bench:
    def __init__(self):
        from cuda.bindings import driver as d

        self.d = d
        check(d.cuInit(0), "cuInit")
        ctx = check(d.cuDevicePrimaryCtxRetain(check(d.cuDeviceGet(0), "cuDeviceGet")), "cuDevicePrimaryCtxRetain")
        check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.f = check(d.cuModuleGetFunction(check(d.cuModuleLoadData(PTX), "cuModuleLoadData"), b"spin"),
                     "cuModuleGetFunction")
        self.stream = int(check(d.cuStreamCreate(1), "cuStreamCreate"))
        self.e0, self.e1 = check(d.cuEventCreate(0), "cuEventCreate"), check(d.cuEventCreate(0), "cuEventCreate")
        self._keep = []

    def params(self, cycles: int) -> int:
        """Address of a kernel-parameter table holding ``cycles`` (kept alive by the bench)."""
        v = ctypes.c_uint64(cycles)
        arr = (ctypes.c_void_p * 1)(ctypes.addressof(v))
        self._keep.append((v, arr))
        return ctypes.addressof(arr)

    def launch(self, addr: int):
        return self.d.cuLaunchKernel(self.f, 1, 1, 1, 32, 1, 1, 0, self.stream, addr, 0)

    def graph(self, addr: int, nodes: int):
        d = self.d
        check(d.cuStreamBeginCapture(self.stream, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture")
        for _ in range(nodes):
            check(self.launch(addr), "cuLaunchKernel (capture)")
        g = check(d.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        ge = check(d.cuGraphInstantiate(g, 0), "cuGraphInstantiate")
        check(d.cuGraphUpload(ge, self.stream), "cuGraphUpload")
        check(d.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        return ge

    def timed(self, fn, n: int) -> tuple[float, float]:
        """(GPU us, host us) per call of ``fn`` over ``n`` back-to-back calls: medians of 5 batches."""
        d = self.d
        for _ in range(50):
            fn()
        check(d.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        gpu, host = [], []
        for _ in range(5):
            check(d.cuEventRecord(self.e0, self.stream), "cuEventRecord")
            t = time.perf_counter()
            for _ in range(n):
                fn()
            h = time.perf_counter() - t
            check(d.cuEventRecord(self.e1, self.stream), "cuEventRecord")
            check(d.cuEventSynchronize(self.e1), "cuEventSynchronize")
            gpu.append(check(d.cuEventElapsedTime(self.e0, self.e1), "cuEventElapsedTime") * 1000 / n)
            host.append(h * 1e6 / n)
        return statistics.median(gpu), statistics.median(host)

    def row(self, cycles: int, launches: int) -> dict:
        addr = self.params(cycles)
        k = self.timed(lambda: self.launch(addr), launches)
        g1 = self.graph(addr, 1)
        one = self.timed(lambda: self.d.cuGraphLaunch(g1, self.stream), launches)
        g10 = self.graph(addr, 10)
        ten = self.timed(lambda: self.d.cuGraphLaunch(g10, self.stream), max(1, launches // 10))
        return dict(cycles=cycles, kernel_gpu_us=round(k[0], 3), kernel_host_us=round(k[1], 3),
                    graph1_gpu_us=round(one[0], 3), graph1_host_us=round(one[1], 3),
                    graph10_gpu_us_per_node=round(ten[0] / 10, 3), graph10_host_us_per_graph=round(ten[1], 3))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", type=int, default=2000, help="launches per batch (default 2000)")
    ap.add_argument("--cycles", type=int, nargs="+", default=[0, 2000, 6000, 14000],
                    help="spin lengths in SM clock cycles (default 0 2000 6000 14000)")
    a = ap.parse_args(argv)
    if a.launches < 10 or any(c < 0 for c in a.cycles):
        ap.error("--launches must be >= 10 and --cycles >= 0")
    from numba_nbits.probe import gpu_present

    if not gpu_present():
        print("error: graph_launch_gpu times the CUDA driver and needs a CUDA GPU", file=sys.stderr)
        return 2
    b = Bench()
    rows = []
    for c in a.cycles:
        r = b.row(c, a.launches)
        rows.append(r)
        print(f"cycles={c:6d}  kernel launch: gpu {r['kernel_gpu_us']:6.2f} us/launch "
              f"host {r['kernel_host_us']:5.2f} | 1-node graph: gpu {r['graph1_gpu_us']:6.2f} "
              f"host {r['graph1_host_us']:5.2f} | 10-node graph: "
              f"gpu/node {r['graph10_gpu_us_per_node']:6.2f} host/graph {r['graph10_host_us_per_graph']:5.2f}",
              flush=True)
    write_out_csv("graph_launch_gpu.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
