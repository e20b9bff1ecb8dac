import sys, time
sys.path.insert(0, ".")  # run from the repository root
from benchmarks.ptx_stats import _fake_device
_fake_device()
from numba.cuda import types
from numba.cuda.compiler import compile_cuda
from numba_nbits import lowering_fix, typing_memo
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic, default_tactic
from contextlib import nullcontext
lowering_fix.install(); typing_memo.install()
memo = sys.argv[1] == "memo"
ks = [gemv_mma_kernel("float16", 1, default_tactic(4096, 4096, 128, 1, 4), 128, "none", 4, False, True)]
ks += [gemv_mma_kernel("float16", mt, Tactic.parse(t), 128, "none", 4, False, True) for t, mt in
       (("t2w4u1p1", 2), ("t2w8u1s3xhv", 8), ("t1w8u1s3xhv", 16), ("t1w8u1s3xhv", 32))]
compile_cuda(ks[0].pyfunc, types.void, ks[0].argtypes, debug=False, lineinfo=False, fastmath=False, nvvm_options={"opt": 3}, cc=(9, 0, "a"))
out = []
for k in ks[1:]:
    t = time.process_time()
    with typing_memo.active() if memo else nullcontext():
        compile_cuda(k.pyfunc, types.void, k.argtypes, debug=False, lineinfo=False, fastmath=False, nvvm_options={"opt": 3}, cc=(9, 0, "a"))
    out.append(time.process_time() - t)
print(sys.argv[1], " ".join(f"{x:.2f}" for x in out), f"total {sum(out):.2f}", flush=True)
