import sys, time
sys.path.insert(0, "perf")  # run from the repo root: PYTHONPATH=. python perf/results/2026-11-30-lowbit-gemv-ptxas/lowbit_ptx_stats.py
import ptx_stats as P
P._fake_device()
from numba_nbits.kernels import gemv_common as gc, gemv_w2, gemv_w8
rows = []
for mod, bits, bs, K in ((gemv_w2, 2, 64, 4096), (gemv_w8, 8, 128, 4096)):
    for mt, (r, u, warps) in mod.SHAPES.items():
        row_bytes = K * bits // 8
        cb = gc.chunk_bytes_for(row_bytes)
        spec = gc.Spec(act="float16", bits=bits, block_size=bs, zp_kind="none", chunk_bytes=cb, mt=mt, r=r,
                       u=max(1, min(u, -(-(row_bytes // cb) // 32))), warps=warps)
        t = time.time()
        ptx = P._kernel_ptx(gc.kernel_for(spec))
        st = P.ptxas_stats(ptx)
        tile = gc.tile_chunks_for(row_bytes // cb, mt, spec.pad)
        smem = mt * tile * spec.pad * 4
        print(spec.name, st, f"row_chunks={row_bytes // cb} tile={tile} smem={smem}",
              f"blocks/SM={P.occupancy(st.get('regs', 0), smem, warps)}", f"{time.time()-t:.1f}s", flush=True)
