"""The tensor-core GEMV kernels past M = 16 (3..8 m-tiles of 8 tokens; 12 / 16 for the warpgroup tactics at
M = 65..128), against the default call and fp16 dense.

    python -m benchmarks.bench_small_gemm [--shapes 28672x8192 ...] [--M 17 32 64] [--blocks 128]
        [--bits 4] [--dtype float16] [--tactics t1w8u1p1 t2w4u1p1 ...] [--workers 16] [--tiny]

(``--tactics`` with no tag times only the default call and its baselines.)

For each shape (``--bits`` 4 or 8, symmetric, ``--dtype`` float16 or bfloat16; random ORT-layout bytes), block
and M: the operator's default call (``op(A, out=Y)``), the same call with ORT's dispatch chain
(``numba_nbits.fused_gemm`` off: dequantize + cuBLAS), ``torch.matmul`` on the dequantized weights in the
activations' dtype (cuBLAS, when torch with CUDA imports), and the tensor-core GEMV plan
(``kernels.gemv.mma.GemvMmaPlan``) with ``m_tiles(M)`` m-tiles and each tactic. Every subject rotates over weight
copies that together exceed twice the L2 (one copy when a copy alone does), timed by CUDA-graph replay
(``numba_nbits.perf.harness.measure``, medians); A and Y are the perf harness's device buffers. Each result is
checked against the default call's (relative error <= 2e-3 for fp16, 1e-2 for bf16). The kernels are compiled
first in ``--workers`` processes into the kernel cache. Prints a table; writes ``$OUT/bench_small_gemm.csv`` when
``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import os
import sys

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    from numba_nbits.probe import gpu_present

    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"

import numpy as np  # noqa: E402

from benchmarks.bench_dequant_chunks import _shape  # noqa: E402
from benchmarks.common import SubjectTimer, torch_dense, weight_bytes, weight_copies, write_out_csv  # noqa: E402

FIELDS = ["shape", "bits", "dtype", "block", "M", "what", "us", "tflops", "tb_s", "rel_err", "copies"]
L2_BYTES = 60e6
DEFAULT_TACTICS = ["t1w8u1p1", "t1w4u1p1", "t2w4u1p1", "t1w8u2p1", "t2w4u1"]


def _kernel_jobs(shapes, blocks, Ms, tactics, bits=4, dtype="float16"):
    from numba_nbits.kernels.gemv.mma import k_full
    from numba_nbits.kernels.gemv.tactics import m_tiles

    jobs = set()
    for _N, K in shapes:
        for bs in blocks:
            for M in Ms:
                for t in tactics:
                    jobs.add((dtype, m_tiles(M), t, bs, "none", bits, False, k_full(K, bs, bits)))
    return sorted(jobs)


def _compile(job):
    from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
    from numba_nbits.kernels.gemv.tactics import Tactic
    from numba_nbits.launch import simulated

    act, MT, tag, bs, zp, bits, l2pf, kf = job
    try:
        k = gemv_mma_kernel(act, MT, Tactic.parse(tag), bs, zp, bits, l2pf, kf)
        k.ensure()
        return job, -1 if simulated() else k.registers(), ""
    except Exception as e:  # noqa: BLE001 - reported per kernel
        return job, -1, f"{type(e).__name__}: {e}"[:300]


def precompile(jobs, workers: int) -> dict:
    """Compile ``jobs`` in ``workers`` processes (kernel cache); job -> (registers, error)."""
    out = {}
    if workers <= 1:
        for j in jobs:
            job, regs, err = _compile(j)
            out[job] = (regs, err)
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
        for job, regs, err in ex.map(_compile, jobs):
            out[job] = (regs, err)
    return out


def run(shapes, blocks, Ms, tactics, workers, emit, bits=4, dtype="float16") -> list:
    import numba_nbits as nb
    from numba_nbits.arrays import adapt_input
    from numba_nbits.kernels.gemv.mma import GemvMmaPlan
    from numba_nbits.kernels.gemv.tactics import Tactic
    from numba_nbits.launch import simulated
    from numba_nbits.perf import harness
    from numba_nbits.perf.subjects import np_dtype, random_activation, random_weights
    from numba_nbits.reference import TOLERANCES, relative_error

    sim = simulated()
    compiled = precompile(_kernel_jobs(shapes, blocks, Ms, tactics, bits, dtype), 1 if sim else workers)
    for job, (regs, err) in compiled.items():
        print(f"kernel {job}: {regs} registers {err}", flush=True)
    backend = harness.make_backend()
    rng = np.random.default_rng(0)
    dt = np_dtype(dtype)
    tol = TOLERANCES[dtype]
    rows = []

    timer = SubjectTimer(backend, sim)
    time_us, time_subject = timer.calls, timer

    def host(buf, M):
        """``buf``'s M rows (``rows`` waits for the whole device: the calls run on the legacy default stream)."""
        return backend.rows(buf, range(M)).astype(np.float64)

    try:
        for N, K in shapes:
            for bs in blocks:
                hw = random_weights(N, K, bits, bs, dtype, "none", False, rng)
                copies = weight_copies(N, K, bits, bs, L2_BYTES, sim)
                ops = [nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=bits, block_size=bs) for _ in range(copies)]
                ort = {"numba_nbits.fused_gemm": False}  # ORT's chain: dequantize + cuBLAS at these M
                ops_ort = [nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=bits, block_size=bs, config=ort)
                           for _ in range(copies)]
                dense_w: dict = {}  # the torch-dequantized W of the dense rows, across M
                for M in Ms:
                    a_host = random_activation(M, K, dtype, rng)
                    A_buf = backend.alloc((M, K), dt)
                    backend.upload(A_buf, a_host)
                    Y_bufs = [backend.alloc((M, N), dt) for _ in range(copies + 1)]
                    a_in, y_in, y_ort = A_buf.obj, Y_bufs[0].obj, Y_bufs[-1].obj
                    A = adapt_input(a_in, "A", sim, False).dev
                    Ys = [adapt_input(b.obj, "Y", sim, False).dev for b in Y_bufs[:copies]]
                    ops[0](a_in, out=y_in)
                    want = host(Y_bufs[0], M)
                    flops = 2.0 * M * N * K
                    base = dict(shape=f"{N}x{K}", bits=bits, dtype=dtype, block=bs, M=M)

                    def row(what, us, err, ncopy, moved):
                        return emit(dict(base, what=what, us=us, tflops=flops / us / 1e6, tb_s=moved / us / 1e6,
                                         rel_err=err, copies=ncopy))

                    moved_q = weight_bytes(N, K, bits, bs) + 2 * M * (K + N)
                    us = time_us([lambda s, o=o: o(a_in, out=y_in, stream=s) for o in ops])
                    rows.append(row(f"default ({ops[0].route(M)})", us, 0.0, copies, moved_q))
                    ops_ort[0](a_in, out=y_ort)
                    err = relative_error(host(Y_bufs[-1], M), want)
                    us = time_us([lambda s, o=o: o(a_in, out=y_ort, stream=s) for o in ops_ort])
                    rows.append(row(f"ORT chain ({ops_ort[0].route(M)})", us, err, copies, moved_q))
                    dense = torch_dense(backend, hw, M, L2_BYTES, dense_w)
                    if dense is not None:
                        err = relative_error(dense.run_check(backend, a_host, range(M)).astype(np.float64), want)
                        rows.append(row(f"{dtype} dense (torch)", time_subject(dense), err, dense.copies,
                                        dense.nbytes))
                        del dense
                    for tag in tactics:
                        try:
                            plans = [GemvMmaPlan(o.weights, M, Tactic.parse(tag)) for o in ops]
                        except Exception as e:  # noqa: BLE001
                            print(f"{N}x{K} b{bs} M={M} {tag}: {type(e).__name__}: {e}", flush=True)
                            continue
                        plans[0].enqueue(A, Ys[0], 0)
                        err = relative_error(host(Y_bufs[0], M), want)
                        if not err <= tol:
                            print(f"{N}x{K} b{bs} M={M} {tag}: relative error {err:.3g}", flush=True)
                        us = time_us([lambda s, p=p, y=y: p.enqueue(A, y, s) for p, y in zip(plans, Ys)])
                        rows.append(row(f"gemv_mma {tag} mt{-(-M // 8)}", us, err, copies, moved_q))
                    del A_buf, Y_bufs, Ys
                del ops, ops_ort, dense_w
    finally:
        backend.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["28672x8192", "8192x28672", "14336x4096", "4096x14336",
                                                     "4096x4096"])
    ap.add_argument("--M", type=int, nargs="+", default=[17, 32, 64])
    ap.add_argument("--blocks", type=int, nargs="+", default=[128])
    ap.add_argument("--bits", type=int, choices=(4, 8), default=4)
    ap.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    ap.add_argument("--tactics", nargs="*", default=DEFAULT_TACTICS)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--tiny", action="store_true", help="simulator-sized smoke test")
    a = ap.parse_args(argv)
    if a.tiny:
        a.shapes, a.M, a.tactics = ["64x256"], [30], ["t1w4u1p1"]
    if any(not 17 <= m <= 256 for m in a.M):
        ap.error("--M must be in 17..256 (past 64 only the warpgroup tactics, h, have kernels)")

    done = []

    def emit(r):
        print(f"{r['shape']:12s} w{r['bits']} {r['dtype']:8s} b{r['block']:<4d} M={r['M']:<3d} {r['what']:30s} "
              f"{r['us']:9.2f} us {r['tflops']:7.1f} TFLOP/s {r['tb_s']:6.2f} TB/s err {r['rel_err']:.2e}", flush=True)
        done.append(r)  # the CSV so far, rewritten per row: a run cut by a time limit keeps what it measured
        write_out_csv("bench_small_gemm.csv", FIELDS, done)
        return r

    rows = run([_shape(s) for s in a.shapes], a.blocks, a.M, a.tactics, a.workers, emit, a.bits, a.dtype)
    write_out_csv("bench_small_gemm.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
