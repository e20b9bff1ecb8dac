"""Does compute-sanitizer's initcheck see cuBLAS's writes? Usage: initcheck_probe.py {cublas|cublas_memset|gemv}.

Writes Y with the named route into a fresh, never-initialised device array (or a memset one), then reads Y
with a trivial numba kernel. Prints whether Y equals the oracle (i.e. the writes happened)."""
import sys

import numpy as np
from numba import cuda

import numba_nbits as nb
from numba_nbits import formats as fm
from numba_nbits.reference import matmul_nbits_ref, relative_error

mode = sys.argv[1]
rng = np.random.default_rng(0)
M, N, K, bs = 4, 256, 512, 128
W = rng.standard_normal((N, K)).astype(np.float16)
B, s, zp = fm.quantize(W, 4, bs, symmetric=True)
A = rng.standard_normal((M, K)).astype(np.float16)
route = "gemv_w4" if mode == "gemv" else "dequant_cublas"
op = nb.MatMulNBits(B, s, zp, K=K, N=N, bits=4, block_size=bs, config={"numba_nbits.force_route": route})
dA = cuda.to_device(A)
y = cuda.to_device(np.zeros((M, N), np.float16)) if mode == "cublas_memset" else cuda.device_array((M, N), np.float16)


@cuda.jit
def copy(src, dst):
    i = cuda.grid(1)
    if i < src.size:
        dst[i // src.shape[1], i % src.shape[1]] = src[i // src.shape[1], i % src.shape[1]]


op(dA, out=y)
z = cuda.to_device(np.zeros((M, N), np.float16))
copy[(M * N + 127) // 128, 128](y, z)
cuda.synchronize()
ref = matmul_nbits_ref(A, B, s, zp, K=K, N=N, bits=4, block_size=bs)
print(f"{mode}: route {op.route(M)}, relative error of the copy vs the oracle {relative_error(z.copy_to_host(), ref):.2e}")
