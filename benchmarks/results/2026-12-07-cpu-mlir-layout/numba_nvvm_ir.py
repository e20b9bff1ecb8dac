"""numba-cuda's NVVM input for one GEMV kernel (the modules it hands libNVVM, captured at nvvm.compile_ir):
    python numba_nvvm_ir.py t2w4u1p1,128,2 n.ll      (n.ll, n.ll.1, ...; from the repository root)"""
import os, sys
sys.path.insert(0, os.getcwd())
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
from numba.cuda.cudadrv import nvvm
cap = []
orig = nvvm.compile_ir
def spy(llvmir, **opts):
    cap.append(llvmir)
    return orig(llvmir, **opts)
nvvm.compile_ir = spy
from benchmarks import ptx_stats
tag, bs, mt = sys.argv[1].split(",")
ptx_stats.compile_ptx(tag, int(bs), int(mt), "float16", 4, True)
print(len(cap), [type(c) for c in cap][:3])
ir = cap[-1]
if not isinstance(ir, (list, tuple)):
    ir = [ir]
print(len(ir), "modules")
for i, x in enumerate(ir):
    open(sys.argv[2] + (f".{i}" if i else ""), "w").write(x if isinstance(x, str) else x.decode())
