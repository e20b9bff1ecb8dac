"""Front-end CPU time of five tensor-core kernels, numba-cuda's dataflow passes as shipped (``stock``) or replaced
(``dataflow``); both with lowering_fix and the typing memo, as the library compiles. Run from the repository root:
``python benchmarks/results/2026-12-05-cpu-dataflow/front_end_cpu_time.py stock|dataflow``."""
import sys
import time
from contextlib import nullcontext

sys.path.insert(0, ".")
from benchmarks.ptx_stats import _fake_device  # noqa: E402

_fake_device()
from numba.cuda import types  # noqa: E402
from numba.cuda.compiler import compile_cuda  # noqa: E402

from numba_nbits import dataflow_fix, lowering_fix, typing_memo  # noqa: E402
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel  # noqa: E402
from numba_nbits.kernels.gemv.tactics import Tactic, default_tactic  # noqa: E402

lowering_fix.install()
typing_memo.install()
on = sys.argv[1] == "dataflow"
assert not on or dataflow_fix.install(), dataflow_fix.status()
ks = [gemv_mma_kernel("float16", 1, default_tactic(4096, 4096, 128, 1, 4), 128, "none", 4, False, True)]
ks += [gemv_mma_kernel("float16", mt, Tactic.parse(t), 128, "none", 4, False, True) for t, mt in
       (("t2w4u1p1", 2), ("t2w8u1s3xhv", 8), ("t1w8u1xhvm", 16), ("t1w8u1s3xhv", 32))]


def compile_(k):
    with typing_memo.active(), dataflow_fix.active() if on else nullcontext():
        compile_cuda(k.pyfunc, types.void, k.argtypes, debug=False, lineinfo=False, fastmath=False,
                     nvvm_options={"opt": 3}, cc=(9, 0, "a"))


compile_(ks[0])  # numba's one-time set-up
out = []
for k in ks[1:]:
    t = time.process_time()
    compile_(k)
    out.append(time.process_time() - t)
print(sys.argv[1], " ".join(f"{x:.2f}" for x in out), f"total {sum(out):.2f}", flush=True)
