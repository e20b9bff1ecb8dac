"""numba-cuda's NVVM input with and without an LLVM 7 pre-pass (-O1) through the same libNVVM: ptxas/nvdisasm figures.
python numba_prepass_batch.py SPEC... (SPEC = tag,block,m_tiles; run from the repository root with numba-cuda's venv;
needs an interpreter with numba-cuda-mlir, PY_MLIR (default /work/venv-mlir/bin/python), to run llvm7_opt.py;
LEVEL the pre-pass level, default 1)"""
import os, sys, re, subprocess, tempfile
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
sys.path.insert(0, os.getcwd())
from numba.cuda.cudadrv import nvvm
from benchmarks import ptx_stats
cap = []
orig = nvvm.compile_ir
def spy(llvmir, **opts):
    cap.append((llvmir if isinstance(llvmir, list) else [llvmir], dict(opts)))
    return orig(llvmir, **opts)
nvvm.compile_ir = spy
OPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llvm7_opt.py")
PY_MLIR = os.environ.get("PY_MLIR", "/work/venv-mlir/bin/python")
def stats(mods):
    ptx = orig(mods, arch="compute_90a", opt=3).decode().rstrip("\x00")
    st = ptx_stats.ptxas_stats(ptx, True, None)
    return {k: st.get(k) for k in ("regs", "main_loop", "late_loads", "spill")}
for spec in sys.argv[1:]:
    tag, bs, mt = spec.split(",")
    cap.clear()
    ptx_stats.compile_ptx(tag, int(bs), int(mt), "float16", 4, True)
    mods, opts = cap[-1]
    mods = [m if isinstance(m, str) else m.decode() for m in mods]
    d = tempfile.mkdtemp()
    src, dst = os.path.join(d, "k.ll"), os.path.join(d, "k1.ll")
    open(src, "w").write(mods[0])
    r = subprocess.run([PY_MLIR, OPT, src, dst, os.environ.get("LEVEL", "1")], capture_output=True, text=True)
    if r.returncode:
        print(spec, "prepass failed", r.stderr[-300:]); continue
    pre = [open(dst).read()] + mods[1:]
    print(spec, "as built", stats(mods), "prepass", stats(pre), flush=True)
