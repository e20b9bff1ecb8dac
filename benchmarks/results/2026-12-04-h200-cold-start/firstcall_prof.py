"""Profile a fresh process's first results (warm kernel cache): 7 nodes per projection shape + LM head."""
import cProfile, pstats, sys, time, io, os
t0 = time.perf_counter()
import numpy as np
import numba_nbits
from numba import cuda
from numba_nbits.precompile import build_op, parse_shape
cuda.current_context()
t_imp = time.perf_counter() - t0
shapes = ["4096x4096:4:128", "1024x4096:4:128", "14336x4096:4:128", "4096x14336:4:128", "128256x4096:4:128"]
sigs = [parse_shape(s) for s in shapes]
layer = [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096), (4096, 14336)]
by = {(s.N, s.K): s for s in sigs}
nodes = [by[nk] for nk in layer] * int(sys.argv[1]) + [by[(128256, 4096)]]
ops = [build_op(s, None, seed=i % 5) for i, s in enumerate(nodes)]
cuda.synchronize()
rng = np.random.default_rng(1)
out = os.environ.get("OUT", ".")
print(f"import+init {t_imp:.3f}s, {len(ops)} nodes")
for M in (512, 1):
    acts = {K: cuda.to_device(rng.standard_normal((M, K)).astype(np.float16)) for K in (4096, 14336)}
    cuda.synchronize()
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    for op, s in zip(ops, nodes):
        op(acts[s.K])
    cuda.synchronize()
    pr.disable()
    dt = time.perf_counter() - t
    print(f"M={M}: {dt:.3f}s ({dt / len(ops) * 1e3:.2f} ms/node)")
    for key in ("cumulative", "tottime"):
        sio = io.StringIO()
        pstats.Stats(pr, stream=sio).sort_stats(key).print_stats(45)
        with open(f"{out}/prof_M{M}_{key}.txt", "w") as f:
            f.write(sio.getvalue())
    # second call timing
    t = time.perf_counter()
    for op, s in zip(ops, nodes):
        op(acts[s.K])
    cuda.synchronize()
    print(f"M={M} second call: {(time.perf_counter() - t) / len(ops) * 1e3:.3f} ms/node")
