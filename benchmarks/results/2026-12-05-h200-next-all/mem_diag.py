"""Why does a packed-only node hold ORT's B on the device? weakref the numba array under Weights.b, then look."""
import gc, sys, weakref
import numpy as np
from numba import cuda
import numba_nbits as nb
from numba_nbits import weights as W
from numba_nbits.perf.subjects import random_weights

refs = []
orig = W.Weights.keep_packed_only
def kpo(self, prepack):
    refs.append(weakref.ref(self.b.owner))
    return orig(self, prepack)
W.Weights.keep_packed_only = kpo

def used():
    cuda.synchronize(); ctx = cuda.current_context()
    n = len(ctx.deallocations._cons); ctx.deallocations.clear()
    free, total = ctx.get_memory_info(); return (total - free) / 2**20, n

N, K = 28672, 8192
hw = random_weights(N, K, 4, 128, "float16", "none", False, np.random.default_rng(0))
gc.collect(); u0 = used()
op = nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=4, block_size=128)
u1 = used()
print("packed_only", op.weights.packed_only, "used MiB / pending before", u0, "after", u1, flush=True)
r = refs[0]
print("B owner alive:", r() is not None, flush=True)
gc.collect(); u2 = used(); print("after gc.collect:", r() is not None, u2, flush=True)
o = r()
if o is not None:
    seen = set()
    def show(x, depth):
        if depth > 4: return
        for ref in gc.get_referrers(x):
            if ref is globals() or id(ref) in seen or isinstance(ref, type(sys._getframe())): continue
            seen.add(id(ref))
            print("  " * depth, type(ref).__name__, repr(ref)[:160], flush=True)
            show(ref, depth + 1)
    show(o, 0)
