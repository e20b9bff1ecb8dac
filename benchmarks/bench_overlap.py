"""The overlapped dequantize + cuBLAS route (``kernels.dequant_overlap``) against ORT's chain and fp16 dense, by
chunk count and SMs left to the dequantize.

    python -m benchmarks.bench_overlap [--shapes 28672x8192 ...] [--M 256 1024 4096] [--blocks 128] [--bits 4]
        [--dtype float16] [--variants 4r8 3r0 8r16 4r0p ...] [--tiny]

For each shape (symmetric, random ORT-layout bytes), block and M: the operator's default call (``op(A, out=Y)``),
the same call with our routes past the GEMVs off (``numba_nbits.fused_gemm``, which also turns the overlapped route
off: ORT's chain, dequantize + cuBLAS one after the other, where otherwise the fused GEMM may serve M <= 256), the
perf CLI's fp16 / bf16 dense peer (``benchmarks.common.torch_dense``: cuBLAS on the dequantized weights, when torch
with CUDA imports), and the overlapped route with each variant ``CrR[p]`` (N in ``C`` chunks, ``R`` SMs left out of the
GEMMs, ``p``: the side stream at the device's highest priority: ``OverlapPlan(chunks=C, reserve_sms=R,
high_priority=p)``). Every subject rotates over weight copies that together exceed twice the L2 (one copy when a
copy alone does), timed by CUDA-graph replay (``numba_nbits.perf.harness.measure``, medians; the graphs hold the
side stream's fork and joins; ``us``), and eagerly: CUDA events around batches of calls (``eager_us``) and the host
time per call (``host_us``; the overlapped route issues about 8 driver calls per chunk). Each result is checked
against ORT's chain (relative error <= 2e-3 for fp16, 1e-2 for bf16). Prints a table; writes
``$OUT/bench_overlap.csv`` when ``$OUT`` is set (rewritten per row, so a run cut by a time limit keeps what it
measured).
"""
from __future__ import annotations

import argparse
import os
import re
import sys

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    from numba_nbits.probe import gpu_present

    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"

import numpy as np  # noqa: E402

from benchmarks.bench_dequant_chunks import _shape  # noqa: E402
from benchmarks.common import SubjectTimer, torch_dense, weight_copies, write_out_csv  # noqa: E402

FIELDS = ["shape", "bits", "dtype", "block", "M", "what", "us", "tflops", "vs_dense", "vs_chain", "rel_err",
          "copies", "eager_us", "host_us"]
L2_BYTES = 60e6
DEFAULT_VARIANTS = ["4r0", "4r8", "4r16", "8r8", "8r16", "3r8", "4r0p", "4r8p"]


def _variant(text: str) -> tuple[int, int, bool]:
    m = re.fullmatch(r"(\d+)r(\d+)(p?)", text)
    if not m or int(m.group(1)) < 1:
        raise SystemExit(f"error: bad variant {text!r}: expected CrR[p] (C >= 1 chunks, R reserved SMs, p: a "
                         "high-priority side stream), e.g. 4r8 or 4r0p")
    return int(m.group(1)), int(m.group(2)), bool(m.group(3))


def run(shapes, blocks, Ms, variants, emit, bits=4, dtype="float16") -> list:
    import numba_nbits as nb
    from numba_nbits.arrays import adapt_input, np_dtype
    from numba_nbits.kernels.dequant_overlap import OverlapPlan
    from numba_nbits.launch import simulated
    from numba_nbits.perf import harness
    from numba_nbits.perf.subjects import random_activation, random_weights
    from numba_nbits.reference import TOLERANCES, relative_error

    sim = simulated()
    backend = harness.make_backend()
    rng = np.random.default_rng(0)
    dt = np_dtype(dtype)
    tol = TOLERANCES[dtype]
    rows = []

    timer = SubjectTimer(backend, sim, host=True)  # its ``last``: eager and host time per call of the last subject
    time_us, time_subject = timer.calls, timer

    try:
        for N, K in shapes:
            for bs in blocks:
                hw = random_weights(N, K, bits, bs, dtype, "none", False, rng)
                copies = weight_copies(N, K, bits, bs, L2_BYTES, sim)
                ops = [nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=bits, block_size=bs) for _ in range(copies)]
                chain_cfg = {"numba_nbits.fused_gemm": False}  # ORT's chain (NUMBA_NBITS_FUSED_GEMM=0)
                chain = [nb.MatMulNBits(hw.B, hw.scales, None, K=K, N=N, bits=bits, block_size=bs, config=chain_cfg)
                         for _ in range(copies)]
                dense_w: dict = {}  # the torch-dequantized W of the dense rows, across M
                for M in Ms:
                    a_host = random_activation(M, K, dtype, rng)
                    A_buf = backend.alloc((M, K), dt)
                    backend.upload(A_buf, a_host)
                    Y_buf = backend.alloc((M, N), dt)
                    a_in, y_in = A_buf.obj, Y_buf.obj
                    A = adapt_input(a_in, "A", sim, False).dev
                    Y = adapt_input(y_in, "Y", sim, False).dev
                    flops = 2.0 * M * N * K
                    base = dict(shape=f"{N}x{K}", bits=bits, dtype=dtype, block=bs, M=M)
                    ref = {}

                    def row(what, us, err, ncopy):
                        nan = float("nan")
                        r = dict(base, what=what, us=us, tflops=flops / us / 1e6, rel_err=err, copies=ncopy,
                                 vs_dense=ref.get("dense", nan) / us, vs_chain=ref.get("chain", nan) / us,
                                 eager_us=timer.last.get("eager_us", nan), host_us=timer.last.get("host_us", nan))
                        rows.append(emit(r))
                        return r

                    def result():
                        return backend.rows(Y_buf, range(M)).astype(np.float64)

                    chain[0](a_in, out=y_in)
                    want = result()
                    dense = torch_dense(backend, hw, M, L2_BYTES, dense_w)
                    if dense is not None:
                        err = relative_error(dense.run_check(backend, a_host, range(M)).astype(np.float64), want)
                        ref["dense"] = time_subject(dense)
                        row(f"{dtype} dense (torch)", ref["dense"], err, dense.copies)
                        del dense
                    ref["chain"] = time_us([lambda s, o=o: o(a_in, out=y_in, stream=s) for o in chain])
                    row(f"ORT chain ({chain[0].route(M)})", ref["chain"], 0.0, copies)
                    ops[0](a_in, out=y_in)
                    err = relative_error(result(), want)
                    us = time_us([lambda s, o=o: o(a_in, out=y_in, stream=s) for o in ops])
                    row(f"default ({ops[0].route(M)}, {ops[0]._entries[M].plan.tactic})", us, err, copies)
                    for c, r, hp in variants:
                        plans = [OverlapPlan(o.weights, o.problem(M), o.config, chunks=c, reserve_sms=r,
                                             high_priority=hp) for o in ops]
                        name = f"{c}r{r}" + ("p" if hp else "")
                        plans[0].enqueue(A, Y, 0)
                        err = relative_error(result(), want)
                        if not err <= tol:
                            print(f"{N}x{K} b{bs} M={M} {name}: relative error {err:.3g}", flush=True)
                        us = time_us([lambda s, p=p: p.enqueue(A, Y, s) for p in plans])
                        row(f"overlap {name} ({plans[0].tactic})", us, err, copies)
                        del plans
                del ops, chain, dense_w
    finally:
        backend.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["28672x8192", "8192x28672", "14336x4096", "4096x14336",
                                                     "128256x4096"])
    ap.add_argument("--M", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--blocks", type=int, nargs="+", default=[128])
    ap.add_argument("--bits", type=int, choices=(2, 4, 8), default=4)
    ap.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    ap.add_argument("--variants", nargs="*", default=DEFAULT_VARIANTS)
    ap.add_argument("--tiny", action="store_true", help="simulator-sized smoke test")
    a = ap.parse_args(argv)
    if a.tiny:
        a.shapes, a.M, a.variants = ["40x128"], [70], ["3r0", "3r0p"]
    if any(m < 1 for m in a.M):
        ap.error("--M must be >= 1")
    variants = [_variant(v) for v in a.variants]
    done = []

    def emit(r):
        print(f"{r['shape']:12s} w{r['bits']} {r['dtype']:8s} b{r['block']:<4d} M={r['M']:<5d} {r['what']:48s} "
              f"{r['us']:9.2f} us {r['tflops']:7.1f} TFLOP/s x{r['vs_dense']:.2f} dense x{r['vs_chain']:.2f} chain "
              f"err {r['rel_err']:.2e}", flush=True)
        done.append(r)
        write_out_csv("bench_overlap.csv", FIELDS, done)
        return r

    rows = run([_shape(s) for s in a.shapes], a.blocks, a.M, variants, emit, a.bits, a.dtype)
    write_out_csv("bench_overlap.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
