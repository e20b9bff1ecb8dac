import gc, numpy as np
from numba import cuda
from cuda.bindings import driver as d
ctx = cuda.current_context()
print("memory manager:", type(ctx.memory_manager).__module__, type(ctx.memory_manager).__name__, flush=True)
def used(tag):
    cuda.synchronize(); ctx.deallocations.clear(); gc.collect(); ctx.deallocations.clear()
    f, t = ctx.get_memory_info()
    err, pool = d.cuDeviceGetDefaultMemPool(0)
    _, u = d.cuMemPoolGetAttribute(pool, d.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
    _, r = d.cuMemPoolGetAttribute(pool, d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    print(f"{tag:12s} used {(t - f) / 2**20:9.1f} MiB  default pool used {int(u) / 2**20:9.1f} reserved {int(r) / 2**20:9.1f}", flush=True)
used("start")
a = cuda.device_array(256 << 20, np.uint8); used("alloc 256")
del a; used("freed")
