"""Demo: ``python -m numba_nbits [--M 4 --N 256 --K 512 --bits 4 --block-size 32 --dtype float16]``.

Quantizes a random weight with the ORT-exact quantizer, runs MatMulNBits on the GPU (or on numba's
CUDA simulator when no GPU is found and ``NUMBA_ENABLE_CUDASIM`` is unset, with a one-line notice on
stderr; then keep the shape small), and prints the route dispatch chose, the kernel, the time of the
call and the relative error against the float64 oracle.
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    from .probe import gpu_present

    p = argparse.ArgumentParser(prog="python -m numba_nbits", description="MatMulNBits demo")
    p.add_argument("--M", type=int, default=4)
    p.add_argument("--N", type=int, default=None, help="default 4096 on a GPU, 64 on the simulator")
    p.add_argument("--K", type=int, default=None, help="default 4096 on a GPU, 128 on the simulator")
    p.add_argument("--bits", type=int, default=4, choices=(2, 4, 8))
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--dtype", default="float16", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--asymmetric", action="store_true", help="quantize with zero points")
    args = p.parse_args(argv)
    if "NUMBA_ENABLE_CUDASIM" not in os.environ:  # an entry point may choose; the library never does
        gpu = gpu_present()
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu else "1"
        if not gpu:
            print("no CUDA GPU found: running on numba's CUDA simulator (slow; default shape N=64 K=128)",
                  file=sys.stderr)
    sim = os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
    N = args.N or (64 if sim else 4096)
    K = args.K or (128 if sim else 4096)

    import ml_dtypes
    import numpy as np

    import numba_nbits as nb

    dt = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[args.dtype]
    rng = np.random.default_rng(0)
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, scales, zp = nb.quantize(W, bits=args.bits, block_size=args.block_size, symmetric=not args.asymmetric)
    scales = scales.astype(dt)
    A = rng.standard_normal((args.M, K)).astype(dt)
    op = nb.MatMulNBits(B, scales, zp, K=K, N=N, bits=args.bits, block_size=args.block_size)
    t0 = time.perf_counter()
    Y = op(A)
    t1 = time.perf_counter()
    Y = op(A)
    t2 = time.perf_counter()
    ref = nb.matmul_nbits_ref(A, B, scales, zp, K=K, N=N, bits=args.bits, block_size=args.block_size)
    err = nb.relative_error(Y.astype(np.float32), ref)
    entry = op._entries[args.M]
    print(f"device: {'numba CUDA simulator (no GPU found)' if sim else 'GPU'}")
    print(f"problem: M={args.M} N={N} K={K} bits={args.bits} block_size={args.block_size} dtype={args.dtype} "
          f"zero_points={'packed' if zp is not None else 'none'}")
    print("dispatch chain:")
    print(entry.decision.explain())
    print(f"route: {entry.decision.name}   kernel: {entry.plan.kernel}")
    print(f"first call (compile + run): {t1 - t0:.2f} s   second call (host, incl. copies): {(t2 - t1) * 1e3:.2f} ms")
    tol = nb.TOLERANCES[args.dtype]
    print(f"relative error vs float64 oracle: {err:.2e} (tolerance {tol:.0e}) -> {'OK' if err <= tol else 'FAIL'}")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    from .probe import run_cli

    sys.exit(run_cli(main))  # NUMBA_ENABLE_CUDASIM=0 without a GPU: one line (NoGPUError), exit status 2
