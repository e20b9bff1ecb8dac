"""libNVVM (numba-cuda's binding, compute_90a, -O3) on the modules numba_nvvm_ir.py wrote, then ptxas/nvdisasm figures and
the loop's self-incremented 64-bit registers:  python numba_nvvm_compile.py n.ll"""
import os, sys, re
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
sys.path.insert(0, os.getcwd())
from numba.cuda.cudadrv import nvvm
from benchmarks import ptx_stats
path = sys.argv[1]
import glob
mods=[open(path).read()]+[open(f).read() for f in sorted(glob.glob(path+".[0-9]*"))]
ptx = nvvm.compile_ir(mods, arch="compute_90a", opt=3).decode().rstrip("\x00")
open(path + ".ptx", "w").write(ptx)
st = ptx_stats.ptxas_stats(ptx, True, None, path)
inc = sorted({int(c) for a, b, c in re.findall(r"add\.s64\s+(%rd\d+), (%rd\d+), (\d+);", ptx) if a == b})
print(path, {k: v for k, v in st.items() if k != "loop_ops"}, "self-increments", inc)
