import gc, numpy as np
from numba import cuda
ctx = cuda.current_context(); mm = ctx.memory_manager
def used(tag):
    cuda.synchronize(); ctx.deallocations.clear(); gc.collect(); ctx.deallocations.clear()
    f, t = ctx.get_memory_info()
    print(f"{tag:12s} used {(t - f) / 2**20:9.1f} MiB  numba allocations {len(mm.allocations)} pending {len(ctx.deallocations._cons)} "
          f"disabled {ctx.deallocations.is_disabled}", flush=True)
used("start")
a = cuda.device_array(256 << 20, np.uint8); used("alloc 256")
del a; used("freed")
b = cuda.device_array(256 << 20, np.uint8); used("alloc again")
