"""Run the default fused_gemm call on one shape a few times (for ncu)."""
import sys
import numpy as np
from numba import cuda
import numba_nbits as nb
N, K, M = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
B = rng.integers(0, 256, (N, K // 128, 64), dtype=np.uint8)
s = (rng.uniform(0.5, 1.5, (N, K // 128)) / 800).astype(np.float16)
op = nb.MatMulNBits(B, s, K=K, N=N, bits=4, block_size=128)
A = cuda.to_device(rng.uniform(-1, 1, (M, K)).astype(np.float16))
Y = cuda.device_array((M, N), np.float16)
for _ in range(5):
    op(A, out=Y)
cuda.synchronize()
print(op.route(M), op._entries[M].plan.kernel)
