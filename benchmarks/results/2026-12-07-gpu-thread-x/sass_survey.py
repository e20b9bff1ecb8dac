# python sass_survey.py TAG:BLOCK:MTILES:BITS ...  (repository root on PYTHONPATH, NUMBA_NBITS_BACKEND=numba|mlir,
# cu13 ptxas on PATH): registers, spill bytes, main-loop SASS instructions and late loads of each GEMV kernel (fp16,
# kfull), as a GPU build gets them (benchmarks.ptx_stats.snapped_ptxas_stats)
import sys
from benchmarks import ptx_stats
for spec in sys.argv[1:]:
    tag, bs, mt, bits = spec.split(":"); bs=int(bs); mt=int(mt); bits=int(bits)
    try:
        _, ptx, k = ptx_stats.compile_ptx(tag, bs, mt, "float16", bits, True)
        st = ptx_stats.snapped_ptxas_stats(k, ptx, True)
        st.pop("loop_ops", None)
    except Exception as ex:
        st = repr(ex)[:200]
    print(spec, st, flush=True)
