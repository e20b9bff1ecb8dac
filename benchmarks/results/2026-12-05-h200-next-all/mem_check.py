"""Device memory of one node, keeping only the tensor-core layout (default) against keeping ORT's B beside it.
Usage: python mem_check.py [NxK ...]"""
import gc
import sys

import numpy as np
from numba import cuda

import numba_nbits as nb
from numba_nbits import op as op_module
from numba_nbits.perf.subjects import random_weights


def used():
    cuda.synchronize()
    ctx = cuda.current_context()
    ctx.deallocations.clear()  # numba frees device arrays lazily: count what is really held
    free, total = ctx.get_memory_info()
    return total - free


shapes = sys.argv[1:] or ["28672x8192", "128256x4096"]
rng = np.random.default_rng(0)
for s in shapes:
    N, K = (int(x) for x in s.split("x"))
    hw = random_weights(N, K, 4, 128, "float16", "none", False, rng)
    for mode in ("packed-only", "keep B"):
        gc.collect()
        u0 = used()
        if mode == "keep B":
            real = op_module.packed_layout_serves
            op_module.packed_layout_serves = lambda *a: False
        try:
            op = nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=4, block_size=128)
        finally:
            if mode == "keep B":
                op_module.packed_layout_serves = real
        u1 = used()
        a = cuda.to_device(rng.standard_normal((1, K)).astype(np.float16))
        y = cuda.device_array((1, N), np.float16)
        op(a, out=y)
        u2 = used()
        print(f"{s} {mode:12s} B {hw.B.nbytes / 2**20:8.1f} MiB: after construction +{(u1 - u0) / 2**20:8.1f} MiB, "
              f"after an M = 1 call +{(u2 - u0) / 2**20:8.1f} MiB  ({op.weights.describe()})", flush=True)
        del op, a, y
