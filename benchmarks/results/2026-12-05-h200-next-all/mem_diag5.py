import numpy as np
from numba import cuda
from cuda.bindings import driver as d
ctx = cuda.current_context()
def used(tag):
    cuda.synchronize(); ctx.deallocations.clear()
    _, f, t = d.cuMemGetInfo(); print(f"{tag:14s} used {(t - f) / 2**20:9.1f} MiB", flush=True)
used("start")
err, p = d.cuMemAlloc(256 << 20); used("cuMemAlloc")
d.cuMemFree(p); used("cuMemFree")
a = cuda.device_array(256 << 20, np.uint8); used("numba alloc")
import numba.cuda.cudadrv.driver as nd
print("numba dealloc dtor:", ctx.memory_manager.deallocations, flush=True)
del a; used("numba del")
