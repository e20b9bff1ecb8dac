"""numba_nbits with numba device arrays: quantize once, keep A, Y and the weights on the GPU.

    python examples/numba_device_arrays.py           # N=K=4096, M in {1, 16, 256}
    python examples/numba_device_arrays.py --small   # tiny shapes (also runs on numba's CUDA simulator:
                                                     # NUMBA_ENABLE_CUDASIM=1)

``MatMulNBits`` uploads B/scales/zero_points/bias once; ``op(A)`` with a numba device array returns a
numba device array (no host copies), ``op(A, out=Y, stream=s)`` writes into a preallocated output
on a numba stream (nothing allocated, nothing synchronised), and ``op.warmup(M)`` builds the launch
plan for an M ahead of time.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="tiny shapes for the simulator")
    a = p.parse_args(argv)
    from numba import cuda

    from numba_nbits import MatMulNBits, matmul_nbits_ref, quantize, relative_error

    N, K, Ms = (16, 96, (17,)) if a.small else (4096, 4096, (1, 16, 256))
    rng = np.random.default_rng(0)
    W = rng.standard_normal((N, K)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16)
    B, scales, zp = quantize(W, bits=4, block_size=32, symmetric=False)  # ORT's exact bytes
    op = MatMulNBits(B, scales, zp, None, bias, K=K, N=N, bits=4, block_size=32)  # first device use
    stream = cuda.stream()
    for M in Ms:
        A = rng.standard_normal((M, K)).astype(np.float16)
        d_A = cuda.to_device(A, stream=stream)
        d_Y = cuda.device_array((M, N), np.float16, stream=stream)
        op.warmup(M)                          # compile + plan outside any timing/capture
        op(d_A, out=d_Y, stream=stream)       # asynchronous on `stream`
        Y = d_Y.copy_to_host(stream=stream)
        stream.synchronize()
        y2 = op(d_A)                          # numba device array in -> numba device array out
        assert hasattr(y2, "copy_to_host") and y2.shape == (M, N)
        ref = matmul_nbits_ref(A, B, scales, zp, None, bias, K=K, N=N, bits=4, block_size=32)
        err = relative_error(Y, ref)
        print(f"M={M:4d} N={N} K={K} route={op.route(M):24s} relative error vs float64 oracle {err:.2e}")
        if err > 2e-3:
            return 1
    return 0


if __name__ == "__main__":
    from numba_nbits.probe import run_cli

    sys.exit(run_cli(main))  # no CUDA GPU (and no simulator): one line saying so, exit status 2
