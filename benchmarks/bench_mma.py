"""GPU benchmark of the tensor-core kernels: small-M GEMV (kernels/gemv_mma.py) and the mixed GEMM
(kernels/mixed_gemm.py) vs M, 4-bit, block 128, fp16, no zero points, on four LLM shapes.

    python perf/bench_mma.py [--quick]        (GPU only; about 2-3 minutes on an H200)

Method: weights (packed B + scales) are copied on the device until the copies exceed 200 MB, and
launches rotate through them so every launch streams its weights from HRAM, not the 60 MB L2.
Each launch is bracketed by CUDA events on one stream; the table gives the median in microseconds.
Baselines in the same run: fp16 dense cuBLAS GEMM (W already fp16, rotated too) and, where the
project's route exists, dequantize + cuBLAS. Also printed per kernel: registers per thread and
whether the SASS contains HMMA (needs nvdisasm). A CSV goes to $OUT/bench_mma.csv when $OUT is set.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
import time

os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

SHAPES = [(4096, 4096), (14336, 4096), (28672, 8192), (128256, 4096)]
GEMV_MS = [1, 2, 4, 8, 12, 16]
GEMM_MS = [16, 32, 64, 128, 256, 512, 1024]
DENSE_MS = [1, 16, 64, 256, 1024]
DEQ_MS = [16, 64, 256]
BS = 128
ROTATE_BYTES = 200 << 20
ITERS = 30


def _events_time(launches, iters=ITERS, warmup=3):
    """Median GPU microseconds of one launch; ``launches`` is a list of zero-arg callables (rotated)."""
    from numba import cuda

    s = 0  # legacy default stream (the launches use it)
    for i in range(warmup):
        launches[i % len(launches)]()
    cuda.synchronize()
    evs = [(cuda.event(), cuda.event()) for _ in range(iters)]
    for i, (e0, e1) in enumerate(evs):
        e0.record()
        launches[i % len(launches)]()
        e1.record()
    evs[-1][1].synchronize()
    del s
    return float(np.median([e0.elapsed_time(e1) * 1000.0 for e0, e1 in evs]))


def _dev_copy(d, n):
    """n independent device copies of DevArray d (d itself first)."""
    from numba import cuda

    from numba_nbits.arrays import DevArray

    out = [d]
    if isinstance(d.owner, np.ndarray):  # simulator smoke run
        return out + [DevArray(0, d.shape, d.strides, d.dtype, d.owner.copy()) for _ in range(n - 1)]
    for _ in range(n - 1):
        raw = cuda.device_array(d.nbytes, np.uint8)
        raw.copy_to_device(d.owner)
        out.append(DevArray(raw.__cuda_array_interface__["data"][0], d.shape, d.strides, d.dtype, raw))
    return out


def _clone_launch(plan, replace):
    """The plan's launch bound again with array arguments replaced ({index: DevArray})."""
    L = plan._launch
    args = list(L._args)
    for i, v in replace.items():
        args[i] = v
    return plan._kernel.bind(L.grid, L.block, args, L.shared_mem)


def _kernel_facts(kernel):
    facts = {"regs": None, "hmma": None}
    try:
        facts["regs"] = kernel.registers()
    except Exception:
        pass
    if shutil.which("nvdisasm"):
        try:
            disp = kernel.dispatcher()
            sig = next(iter(disp.overloads.keys()))
            facts["hmma"] = "HMMA" in disp.inspect_sass(sig)
        except Exception as e:  # noqa: BLE001
            facts["hmma"] = f"? {type(e).__name__}"
    return facts


def main(quick=False):
    from numba import cuda

    from numba_nbits.arrays import to_device, to_host
    from numba_nbits.dispatch.problem import Problem
    from numba_nbits.kernels import gemv_mma, mixed_gemm
    from numba_nbits.reference import matmul_nbits_ref, relative_error
    from numba_nbits.launch import simulated
    from numba_nbits.weights import build_weights

    sim = simulated()
    dev = cuda.get_current_device()
    name = getattr(dev, "name", "simulator")
    print(f"# {name.decode() if isinstance(name, bytes) else name}, cc {getattr(dev, 'compute_capability', '?')}")
    rows, facts = [], {}
    shapes = SHAPES[:2] if quick else SHAPES
    rng = np.random.default_rng(0)
    for (N, K) in shapes:
        t0 = time.perf_counter()
        kb = K // BS
        B = rng.integers(0, 256, (N, kb, BS // 2), dtype=np.uint8)
        scales = (rng.random((N, kb), dtype=np.float32) * 0.02 + 0.001).astype(np.float16)
        w = build_weights(B, scales, None, K=K, N=N, bits=4, block_size=BS, simulated=sim)
        wbytes = N * K // 2 + N * kb * 2
        R = max(2, math.ceil(ROTATE_BYTES / wbytes))
        A_all = to_device((rng.standard_normal((max(GEMM_MS + DENSE_MS), K)) * 0.5).astype(np.float16), sim)
        Y_all = to_device(np.zeros((max(GEMM_MS + DENSE_MS), N), np.float16), sim)
        sub = min(64, N)
        ref_sub = matmul_nbits_ref(to_host(A_all)[:16], B[:sub], scales[:sub], K=K, N=sub, bits=4, block_size=BS)
        print(f"## N={N} K={K}: {wbytes / 1e6:.0f} MB of int4 weights+scales, {R} rotated copies "
              f"(setup {time.perf_counter() - t0:.1f}s)", flush=True)

        def a_y(M):
            a = A_all.offset(0, (M, K))
            y = Y_all.offset(0, (M, N))
            return a, y

        # ---- small-M GEMV
        bq_c = sc_c = None
        for M in GEMV_MS:
            p = Problem(M=M, N=N, K=K, bits=4, block_size=BS, dtype="float16")
            plan = gemv_mma.build(w, p)
            if bq_c is None:
                bq_c = _dev_copy(plan.packed.bq, R)
                sc_c = _dev_copy(plan.packed.scales, R)
            a, y = a_y(M)
            launches = []
            for r in range(R):
                L = _clone_launch(plan, {1: bq_c[r], 2: sc_c[r]})
                L.set_array(0, a.view(np.uint32, (M * K // 2,)))
                L.set_array(4, y.view(np.float16, (M * N,)))
                launches.append(L.launch)
            us = _events_time(launches)
            plan.run(a, y, 0)
            err = relative_error(to_host(y)[:, :sub], ref_sub[:M]) if M <= 16 else None
            facts.setdefault(plan.kernel, _kernel_facts(plan._kernel))
            rows.append(dict(kernel="gemv_mma", N=N, K=K, M=M, us=us, tactic=str(plan.tactic), rel_err=err,
                             GBps=wbytes / us / 1e3, name=plan.kernel))
        del bq_c, sc_c
        # ---- mixed GEMM
        mx_c = None
        for M in GEMM_MS:
            p = Problem(M=M, N=N, K=K, bits=4, block_size=BS, dtype="float16")
            plan = mixed_gemm.build(w, p)
            if mx_c is None:
                mx_c = (_dev_copy(plan.packed.bq, R), _dev_copy(plan.packed.scales, R))
            a, y = a_y(M)
            launches = []
            for r in range(R):
                L = _clone_launch(plan, {1: mx_c[0][r], 2: mx_c[1][r]})
                L.set_array(0, a.view(np.uint32, (M * K // 2,)))
                L.set_array(6, y.view(np.float16, (M * N,)))
                launches.append(L.launch)
            us = _events_time(launches)
            plan.run(a, y, 0)
            err = relative_error(to_host(y)[:16, :sub], ref_sub[:min(M, 16)])
            facts.setdefault(plan.kernel, _kernel_facts(plan._kernel))
            rows.append(dict(kernel="mixed_gemm", N=N, K=K, M=M, us=us, tactic=plan.tactic.name, rel_err=err,
                             GBps=wbytes / us / 1e3, TFLOPs=2 * M * N * K / us / 1e6, name=plan.kernel))
        del mx_c
        # ---- dense fp16 cuBLAS baseline (W fp16, rotated)
        try:
            from numba_nbits.dispatch import cublas

            h = cublas.handle_for(0)
            dense_bytes = N * K * 2
            Rd = max(2, math.ceil(ROTATE_BYTES / dense_bytes))
            from numba.cuda.cudadrv import driver as nbdrv

            Wd = []
            for _ in range(Rd):  # values do not matter for timing: zeros, written on the device
                c = cuda.device_array((N, K), np.float16)
                nbdrv.device_memset(c, 0, c.nbytes)
                Wd.append(c)
            for M in DENSE_MS:
                a, y = a_y(M)
                launches = [(lambda wp=wd.__cuda_array_interface__["data"][0], a=a, y=y, M=M:
                             cublas.gemm(h, 0, M, N, K, wp, K, a.ptr, y.ptr, N, "float16", True, 0)) for wd in Wd]
                us = _events_time(launches)
                rows.append(dict(kernel="cublas_fp16_dense", N=N, K=K, M=M, us=us, GBps=dense_bytes / us / 1e3,
                                 TFLOPs=2 * M * N * K / us / 1e6))
            del Wd
        except Exception as e:  # noqa: BLE001
            print(f"   (dense cuBLAS baseline unavailable: {type(e).__name__}: {e})")
        # ---- dequantize + cuBLAS (the project's universal route), if present
        try:
            from numba_nbits.config import Config
            from numba_nbits.kernels import dequant

            for M in DEQ_MS:
                p = Problem(M=M, N=N, K=K, bits=4, block_size=BS, dtype="float16")
                plan = dequant.build(w, p, Config())
                a, y = a_y(M)
                us = _events_time([lambda plan=plan, a=a, y=y: plan.run(a, y, 0)])
                rows.append(dict(kernel="dequant_cublas", N=N, K=K, M=M, us=us))
        except Exception as e:  # noqa: BLE001
            print(f"   (dequant+cuBLAS baseline unavailable: {type(e).__name__}: {e})")
        del w
        _print_shape(rows, N, K)

    print("\n# kernels: registers per thread, HMMA in SASS")
    for name, f in facts.items():
        print(f"{name}: regs={f['regs']} hmma={f['hmma']}")
    out = os.environ.get("OUT")
    if out:
        import csv

        keys = sorted({k for r in rows for k in r})
        with open(os.path.join(out, "bench_mma.csv"), "w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=keys)
            wr.writeheader()
            wr.writerows(rows)
        with open(os.path.join(out, "bench_mma_kernels.txt"), "w") as fh:
            for name, f in facts.items():
                fh.write(f"{name}\tregs={f['regs']}\thmma={f['hmma']}\n")
        print(f"wrote {os.path.join(out, 'bench_mma.csv')}")


def _print_shape(rows, N, K):
    mine = [r for r in rows if r["N"] == N and r["K"] == K]
    dense = {r["M"]: r["us"] for r in mine if r["kernel"] == "cublas_fp16_dense"}
    deq = {r["M"]: r["us"] for r in mine if r["kernel"] == "dequant_cublas"}
    g1 = next((r["us"] for r in mine if r["kernel"] == "gemv_mma" and r["M"] == 1), None)
    print(f"{'kernel':<18}{'M':>6}{'us':>10}{'GB/s':>9}{'vs M=1':>8}{'vs dense':>10}{'vs deq':>8}  err / tactic")
    for r in mine:
        rel1 = f"{r['us'] / g1:.2f}" if (g1 and r["kernel"] == "gemv_mma") else ""
        vd = f"{dense[r['M']] / r['us']:.2f}x" if r["M"] in dense and r["kernel"] != "cublas_fp16_dense" else ""
        vq = f"{deq[r['M']] / r['us']:.2f}x" if r["M"] in deq and r["kernel"] not in ("dequant_cublas",) else ""
        err = f"{r['rel_err']:.1e}" if r.get("rel_err") is not None else ""
        gb = f"{r['GBps']:.0f}" if r.get("GBps") else ""
        print(f"{r['kernel']:<18}{r['M']:>6}{r['us']:>10.1f}{gb:>9}{rel1:>8}{vd:>10}{vq:>8}  {err} {r.get('tactic', '')}",
              flush=True)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
