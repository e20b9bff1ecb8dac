"""Host time of the steady-state path's two driver calls, cuda-bindings' CUresult API against its integer-handle
(_v2) API, on one stream and one instantiated graph (a 16-byte memset node), in one process."""
import functools
import statistics
import time

import numpy as np
from numba import cuda

from numba_nbits import graphs
from numba_nbits.launch import driver as ld

cuda.current_context()
drv = ld._drv()
v2 = ld.lean_driver()
import cuda.bindings as cb
print("cuda-bindings", cb.__version__, "lean driver:", v2 is not None)
s = int(ld.check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
buf = cuda.device_array(16, np.uint8)
ptr = buf.__cuda_array_interface__["data"][0]
g = graphs.CallGraph(lambda cs: ld.check(drv.cuMemsetD8Async(ptr, 0, 16, cs), "cuMemsetD8Async"))
exec_ = g._exec
v1_launch = functools.partial(drv.cuGraphLaunch, exec_)


def v1_graph(st):
    err = v1_launch(st)[0]
    if err:
        ld.check((err,), "cuGraphLaunch")


def v1_capturing(h):
    return ld._is_capturing(h)


cases = {"cuStreamIsCapturing (CUresult API, as before)": v1_capturing,
         "is_capturing (lean after the first)": ld.is_capturing,
         "cuGraphLaunch (CUresult API, as before)": v1_graph,
         "CallGraph.__call__ (lean)": g}
ld.is_capturing(s)
res = {k: [] for k in cases}
for rnd in range(15):
    for name, f in cases.items():
        cuda.synchronize()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            f(s)
        res[name].append((time.perf_counter() - t0) / n * 1e6)
cuda.synchronize()
for name, v in res.items():
    print(f"{name:50s} median {statistics.median(v):6.3f} us  min {min(v):6.3f}")
