import gc, numpy as np
from numba import cuda
from numba_nbits.weights import build_weights
from numba_nbits.kernels.gemv import repack
from numba_nbits.perf.subjects import random_weights
def used(tag):
    cuda.synchronize(); ctx = cuda.current_context(); ctx.deallocations.clear(); gc.collect(); ctx.deallocations.clear()
    f, t = ctx.get_memory_info(); print(f"{tag:28s} {(t - f) / 2**20:9.1f} MiB", flush=True)
N, K = 28672, 8192
hw = random_weights(N, K, 4, 128, "float16", "none", False, np.random.default_rng(0))
used("start")
w = build_weights(hw.B, hw.scales, K=K, N=N, bits=4, block_size=128, simulated=False); used("build_weights")
p = repack.prepack(w); used("prepack")
print("bq", p.bq.nbytes / 2**20, "scales", p.scales.nbytes / 2**20, flush=True)
w.b = None; w._derived.pop("b_words", None); used("b dropped")
del p, w; used("all dropped")
