"""The prototype wgmma GEMM (``kernels/hopper_gemm.py``) against the default route of the same call, side by side.

    python -m benchmarks.bench_hopper_gemm [--shapes 28672x8192 14336x4096 4096x4096] [--M 17 64 256 1024] [--tiny]

For each shape (4-bit, block 128, symmetric, fp16; random ORT-layout bytes) and M: the operator's default call
(``op(A, out=Y)``: its route) and ``run_hopper_gemm`` on the same weights and A, each timed by CUDA-graph replay
(``numba_nbits.perf.harness.measure``, medians; weights not rotated: 28672x8192 is 2x the L2, 4096x4096 fits in
it), and the prototype's result checked against the default call's (relative error <= 2e-3). ``--tiny``: a
simulator-sized smoke test. Prints a table; writes ``$OUT/bench_hopper_gemm.csv`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import os
import sys

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    from numba_nbits.probe import gpu_present

    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"

import numpy as np  # noqa: E402

from benchmarks.bench_dequant_chunks import _shape, _time_us  # noqa: E402
from benchmarks.common import write_out_csv  # noqa: E402

FIELDS = ["shape", "M", "what", "us", "tflops", "rel_err"]


def run(shapes, Ms, emit) -> list:
    import numba_nbits as nb
    from numba_nbits.arrays import adapt_input, device_empty, to_device, to_host
    from numba_nbits.kernels import hopper_gemm as H
    from numba_nbits.launch import simulated
    from numba_nbits.perf import harness
    from numba_nbits.perf.subjects import random_weights
    from numba_nbits.reference import relative_error

    sim = simulated()
    backend = harness.make_backend()
    rng = np.random.default_rng(0)
    rows = []
    try:
        for N, K in shapes:
            hw = random_weights(N, K, 4, 128 if K % 128 == 0 else 32, "float16", "none", False, rng)
            op = nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=4, block_size=hw.block)
            for M in Ms:
                a_host = rng.standard_normal((M, K)).astype(np.float16)
                if sim:  # the operator takes NumPy in / out on the simulator
                    a_in, y_in = a_host, np.zeros((M, N), np.float16)
                    A = to_device(a_host, True)
                else:
                    from numba import cuda

                    a_in, y_in = cuda.to_device(a_host), cuda.device_array((M, N), np.float16)
                    A = adapt_input(a_in, "A", False, False).dev
                Yh = device_empty((M, N), np.float16, sim)
                op(a_in, out=y_in)
                H.run_hopper_gemm(op.weights, A, Yh)
                want = y_in if sim else y_in.copy_to_host()
                err = relative_error(to_host(Yh).astype(np.float64), want.astype(np.float64))
                if not err <= 2e-3:
                    raise AssertionError(f"{N}x{K} M={M}: hopper_gemm relative error {err:.3g} vs the default call")
                flops = 2.0 * M * N * K
                for what, fn in ((f"default ({op.route(M)})", lambda s: op(a_in, out=y_in, stream=s)),
                                 (f"hopper_gemm mt{H.m_tile(M)}", lambda s: H.run_hopper_gemm(op.weights, A, Yh, s))):
                    us = _time_us(backend, fn, sim)
                    rows.append(emit(dict(shape=f"{N}x{K}", M=M, what=what, us=us,
                                          tflops=flops / us / 1e6 if us == us else float("nan"), rel_err=err)))
    finally:
        backend.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["28672x8192", "14336x4096", "4096x4096"])
    ap.add_argument("--M", type=int, nargs="+", default=[17, 64, 256, 1024])
    ap.add_argument("--tiny", action="store_true", help="simulator-sized smoke test")
    a = ap.parse_args(argv)
    if a.tiny:
        a.shapes, a.M = ["64x128"], [17]
    if any(m < 1 for m in a.M):
        ap.error("--M must be >= 1")

    def emit(r):
        print(f"{r['shape']:12s} M={r['M']:<5d} {r['what']:28s} {r['us']:10.2f} us {r['tflops']:8.2f} TFLOP/s "
              f"err {r['rel_err']:.2e}", flush=True)
        return r

    rows = run([_shape(s) for s in a.shapes], a.M, emit)
    write_out_csv("bench_hopper_gemm.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
