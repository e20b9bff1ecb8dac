"""Process CPU time of one compile by numba pass (and PostProcessor.run and its three maps), with the dataflow
replacements on: ``python benchmarks/results/2026-12-05-cpu-dataflow/stage_split.py TACTIC M_TILES``."""
import sys, time, functools
sys.path.insert(0, ".")  # run from the repository root
from benchmarks.ptx_stats import _fake_device
_fake_device()
from numba.cuda import types
from numba.cuda.compiler import compile_cuda
from numba_nbits import dataflow_fix, lowering_fix, typing_memo
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic, default_tactic
from numba.cuda.core import compiler_machinery, postproc, analysis
lowering_fix.install(); typing_memo.install(); dataflow_fix.install()
T = {}
def timed(name, fn):
    @functools.wraps(fn)
    def w(*a, **k):
        t = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            T[name] = T.get(name, 0) + time.process_time() - t
    return w
orig_run = compiler_machinery.PassManager._runPass
def runpass(self, index, pss, internal_state):
    t = time.process_time()
    try:
        return orig_run(self, index, pss, internal_state)
    finally:
        n = "pass " + pss.name()
        T[n] = T.get(n, 0) + time.process_time() - t
compiler_machinery.PassManager._runPass = runpass
postproc.PostProcessor.run = timed("  (postproc.run)", postproc.PostProcessor.run)
analysis.compute_use_defs = timed("    (use_defs)", analysis.compute_use_defs)
analysis.compute_live_map = timed("    (live_map)", analysis.compute_live_map)
analysis.compute_dead_maps = timed("    (dead_maps)", analysis.compute_dead_maps)
def c(k):
    with typing_memo.active(), dataflow_fix.active():
        return compile_cuda(k.pyfunc, types.void, k.argtypes, debug=False, lineinfo=False, fastmath=False, nvvm_options={"opt": 3}, cc=(9, 0, "a"))
c(gemv_mma_kernel("float16", 1, default_tactic(4096, 4096, 128, 1, 4), 128, "none", 4, False, True))
T.clear()
k = gemv_mma_kernel("float16", int(sys.argv[2]), Tactic.parse(sys.argv[1]), 128, "none", 4, False, True)
t = time.process_time(); c(k); tot = time.process_time() - t
print(f"total {tot:.2f}")
for n, v in sorted(T.items(), key=lambda x: -x[1])[:22]:
    print(f"{v:6.2f} {n}")
