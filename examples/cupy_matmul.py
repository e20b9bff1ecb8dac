"""numba_nbits with CuPy arrays: CuPy in, CuPy out, on CuPy's current stream, zero-copy.

    python examples/cupy_matmul.py            # needs a CUDA GPU and CuPy
    python examples/cupy_matmul.py --small

The op reads A's device pointer through CuPy, allocates Y with CuPy's memory pool, and launches on
``cupy.cuda.get_current_stream()`` unless ``stream=`` is given; nothing is synchronised.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="small shapes")
    a = p.parse_args(argv)
    try:
        import cupy as cp
    except ImportError:
        sys.exit("this example needs CuPy (pip install cupy-cuda12x or cupy-cuda13x)")

    from numba_nbits import MatMulNBits, matmul_nbits_ref, quantize, relative_error

    N, K, M = (64, 256, 4) if a.small else (4096, 4096, 16)
    rng = np.random.default_rng(0)
    W = rng.standard_normal((N, K)).astype(np.float16)
    B, scales, _ = quantize(W, bits=4, block_size=32, symmetric=True)
    op = MatMulNBits(B, scales, K=K, N=N, bits=4, block_size=32)
    A = cp.asarray(rng.standard_normal((2, M, K)).astype(np.float16))  # any leading shape
    with cp.cuda.Stream(non_blocking=True) as s:                          # op follows CuPy's current stream
        Y = op(A)
        s.synchronize()
    assert isinstance(Y, cp.ndarray) and Y.shape == (2, M, N)
    ref = matmul_nbits_ref(cp.asnumpy(A), B, scales, K=K, N=N, bits=4, block_size=32)
    err = relative_error(cp.asnumpy(Y), ref)
    print(f"A{tuple(A.shape)} fp16 x 4-bit W[{N}x{K}] -> Y{tuple(Y.shape)}: relative error vs oracle {err:.2e} "
          f"(route {op.route(2 * M)})")
    return 0 if err <= 2e-3 else 1


if __name__ == "__main__":
    from numba_nbits.probe import run_cli

    sys.exit(run_cli(main))  # no CUDA GPU (and no simulator): one line saying so, exit status 2
