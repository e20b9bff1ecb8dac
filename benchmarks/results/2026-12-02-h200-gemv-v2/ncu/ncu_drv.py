"""One default call of the M = 1 GEMV (28672x8192 4-bit, block from argv) for ncu; random codes and scales."""
import sys
import numpy as np
from numba import cuda
import numba_nbits as nb
N, K, bs, M = 28672, 8192, int(sys.argv[1]), 1
rng = np.random.default_rng(0)
B = rng.integers(0, 256, (N, K // bs, bs // 2), dtype=np.uint8)
s = (rng.random((N, K // bs)) * 0.02 + 0.001).astype(np.float16)
op = nb.MatMulNBits(B, s, None, K=K, N=N, bits=4, block_size=bs)
A = cuda.to_device(rng.standard_normal((M, K)).astype(np.float16))
Y = cuda.device_array((M, N), np.float16)
op(A, out=Y); cuda.synchronize()
op(A, out=Y); cuda.synchronize()
print(op.explain(M=M).explain().splitlines()[-3:])
