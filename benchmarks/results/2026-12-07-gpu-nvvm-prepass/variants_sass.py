"""Registers, main-loop SASS instructions and late loads of GEMV kernels (fp16, 4-bit, K-full), no GPU:
    NUMBA_NBITS_BACKEND=numba|mlir python variants_sass.py OUT.json TAG,BLOCK,MTILES ...  (ptxas, nvdisasm on PATH)"""
import json
import sys

from benchmarks import ptx_stats
from numba_nbits import backend

out = []
for spec in sys.argv[2:]:
    tag, bs, mt = spec.split(",")
    _, ptx, k = ptx_stats.compile_ptx(tag, int(bs), int(mt), "float16", 4, True)
    st = ptx_stats.snapped_ptxas_stats(k, ptx, True)
    st.pop("loop_ops", None)
    out.append(dict(compiler=backend.compiler(), tag=tag, block=int(bs), m_tiles=int(mt), **st))
    print(out[-1], flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=0)
