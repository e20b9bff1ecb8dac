"""Sweep every gemv_mma tactic (tpw 1/2 x warps 4/8 x unroll 1/2/4) on large shapes, M 1/4/16.

GPU only: ``PYTHONPATH=. python perf/sweep_gemv_mma.py [--g128]`` (~90 s on an H200). Weights are
rotated so each timed batch streams >= 200 MB; CUDA events around 100-300 back-to-back launches,
median of 3. Prints the best tactic per case next to ``default_tactic``'s, and writes
``$OUT/sweep_mma.json`` (rows ``(N, K, M, tactic, us, TB/s)``); the committed run is
``perf/results/2026-11-30-h200-kernels/sweep_mma.json``.
"""
import itertools, sys, time, os, json
import numpy as np
from numba import cuda
from numba_nbits.weights import build_weights
from numba_nbits.dispatch.problem import Problem
from numba_nbits.kernels import gemv_mma
from numba_nbits.arrays import DevArray
rng = np.random.default_rng(0)
shapes = [(4096, 4096), (28672, 8192), (8192, 28672), (128256, 4096)]
bs = 128 if "--g128" in sys.argv else 32
tactics = [gemv_mma.Tactic(t, w, u) for t in (1, 2) for w in (4, 8) for u in (1, 2, 4)]
rows = []
t_start = time.time()
for N, K in shapes:
    wbytes = N * K // 2
    copies = max(1, -(-200_000_000 // wbytes))
    Ws = []
    for c in range(copies):
        B = rng.integers(0, 256, (N, K // bs, bs // 2), dtype=np.uint8)
        s = (rng.random((N, K // bs)) * 0.01).astype(np.float16)
        Ws.append(build_weights(B, s, None, None, None, K=K, N=N, bits=4, block_size=bs, simulated=False))
    for M in (1, 4, 16):
        a = cuda.to_device(rng.standard_normal((M, K)).astype(np.float16))
        y = cuda.device_array((M, N), np.float16)
        A = DevArray(a.__cuda_array_interface__["data"][0], (M, K), (2 * K, 2), np.float16, a)
        Y = DevArray(y.__cuda_array_interface__["data"][0], (M, N), (2 * N, 2), np.float16, y)
        p = Problem(M, N, K, 4, bs, "float16")
        best = None
        for tac in tactics:
            try:
                plans = [gemv_mma.build(w, p, None, tactic=tac) for w in Ws]
            except Exception as e:
                rows.append((N, K, M, str(tac), float("nan"), str(e)[:60])); continue
            for pl in plans: pl.run(A, Y, 0)
            cuda.synchronize()
            e0, e1 = cuda.event(), cuda.event()
            n = 100 if N * K > 1e8 else 300
            meds = []
            for rep in range(3):
                e0.record()
                for i in range(n): plans[i % len(plans)].run(A, Y, 0)
                e1.record(); e1.synchronize()
                meds.append(cuda.event_elapsed_time(e0, e1) * 1000 / n)
            us = float(np.median(meds))
            tb = (wbytes + N * K // bs * 2) / us / 1e6
            rows.append((N, K, M, str(tac), us, f"{tb:.2f} TB/s"))
            if best is None or us < best[1]: best = (tac, us)
        d = gemv_mma.default_tactic(N, K, bs)
        print(f"{N}x{K} M={M} g{bs}: best {best[0]} {best[1]:.1f} us; default {d} -> "
              f"{[r[4] for r in rows if r[:3]==(N,K,M) and r[3]==str(d)]}", flush=True)
    del Ws
print(f"sweep {time.time()-t_start:.0f}s")
with open(os.path.join(os.environ.get("OUT", "."), "sweep_mma.json"), "w") as f:
    json.dump(rows, f)
