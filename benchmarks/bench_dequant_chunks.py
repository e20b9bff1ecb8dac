"""The dequantize + cuBLAS route by chunk size, and its dequantize kernel alone: how much of M >= 17 is the
dequantize, and whether an L2-sized chunk (the GEMM reading its dequantized weights from L2, not HBM) wins.

    python -m benchmarks.bench_dequant_chunks [--shapes 28672x8192 8192x28672 ...] [--M 64 256 1024]
                                              [--chunks 0 512 1024 2048 4096 8192] [--tiny]

For each shape (4-bit, block 128, fp16, symmetric; random ORT-layout bytes) it times

* ``dequant kernel from B`` / ``from packed``: the dequantize of the whole matrix alone, from ORT's B
  (``dequant_fast``) and from the tensor-core layout (``dequant_packed``: what these fp16 nodes run, since they keep
  only that layout; its bytes are checked identical), with their bytes (codes + scales read, fp16 written) over
  time as TB/s;
* for each M and each ``--chunks`` value: the route forced (``numba_nbits.force_route``), ``0`` =
  ``dequant_cublas`` (all N at once into an N x K scratch), ``R`` = ``dequant_cublas_chunked`` with
  ``ORT_MATMULNBITS_CHUNK_SIZE=R`` rows per chunk (an ``R x K`` fp16 scratch, ``scratch_mb``, dequantized and
  multiplied one chunk after another; below ~50 MB the chunk can stay in the H200's L2 for its GEMM).

Times are CUDA-graph replay per call (``numba_nbits.perf.harness.measure``: medians of batches; the weights are
not rotated, but each is at least 4x the L2 for the default shapes). Each chunked result is checked
against the unchunked route's (relative error <= 2e-3; the GEMMs differ only by cuBLAS's choice of algorithm).
``--tiny`` runs a simulator-sized case (a smoke test of the script, not a measurement). Prints a table;
writes ``$OUT/bench_dequant_chunks.csv`` when ``$OUT`` is set.
"""
from __future__ import annotations

import argparse
import os
import sys

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    from numba_nbits.probe import gpu_present

    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"

import numpy as np  # noqa: E402

from benchmarks.common import write_out_csv  # noqa: E402

FIELDS = ["shape", "M", "what", "chunk_rows", "scratch_mb", "us", "tb_s", "rel_err"]


class _Call:
    copies = 1

    def __init__(self, fn):
        self.fn = fn

    def launch(self, i, stream):
        self.fn(stream)


def _time_us(backend, fn, sim: bool) -> float:
    from numba_nbits.perf import harness

    if sim:
        fn(0)
        return float("nan")
    r = harness.measure(backend, _Call(fn), host=False)
    us = r["us_graph"]
    return r["us_p50"] if us != us else us


def run(shapes, Ms, chunks, emit) -> list:
    from numba import cuda

    import numba_nbits as nb
    from numba_nbits.arrays import device_empty, to_host
    from numba_nbits.kernels import dequant
    from numba_nbits.kernels.gemv import dequant_packed, repack
    from numba_nbits.launch import simulated
    from numba_nbits.perf import harness
    from numba_nbits.perf.subjects import random_weights
    from numba_nbits.reference import relative_error
    from numba_nbits.weights import build_weights

    sim = simulated()
    backend = harness.make_backend()
    rng = np.random.default_rng(0)
    rows = []
    try:
        for N, K in shapes:
            w = random_weights(N, K, 4, 128 if K % 128 == 0 else 32, "float16", "none", False, rng)
            bs = w.block
            base = nb.MatMulNBits(w.B, w.scales, None, K=K, N=N, bits=4, block_size=bs,
                                  config={"numba_nbits.force_route": "dequant_cublas"})
            # the dequantize kernels alone, on one node's weights: from ORT's B (``dequant_fast``) and from the
            # tensor-core layout (``dequant_packed``, what a node that keeps only that layout runs), into one scratch
            wd = build_weights(w.B, w.scales, K=K, N=N, bits=4, block_size=bs, simulated=sim)
            scratch = device_empty((N * wd.K_padded,), np.float16, sim)
            b, sc, zpp, zpt = dequant._flat_views(wd, 0, N)
            launches = [("B", dequant.bind_dequant(b, sc, zpp, zpt, wd.dummy(np.int32), scratch, bits=4, act="float16",
                                                  zp_kind="none", has_gidx=False, n_rows=N, k_blocks=wd.k_blocks,
                                                  block_size=bs, zp_row=wd.zp_row)),
                        ("packed", dequant_packed.bind(wd, repack.prepack(wd), 0, N, scratch))]
            first = None
            for src, dq in launches:
                dq.launch(0)
                got = to_host(scratch).view(np.uint16).copy()
                if first is None:
                    first = got
                elif not np.array_equal(got, first):
                    raise AssertionError(f"{N}x{K}: the dequantize from the packed layout differs from dequant_fast")
                us = _time_us(backend, lambda s, dq=dq: dq.launch(s), sim)
                nbytes = w.B.nbytes + w.scales.nbytes + N * wd.K_padded * 2
                rows.append(emit(dict(shape=f"{N}x{K}", M="", what=f"dequant kernel from {src} ({dq.kernel.name})",
                                      chunk_rows="", scratch_mb="", us=us,
                                      tb_s=nbytes / us / 1e6 if us == us else float("nan"), rel_err="")))
            del wd, scratch, launches
            for M in Ms:
                A = cuda.to_device(rng.standard_normal((M, K)).astype(np.float16))
                ref = None
                for c in chunks:
                    if c == 0:
                        op = base
                    else:
                        op = nb.MatMulNBits(w.B, w.scales, None, K=K, N=N, bits=4, block_size=bs,
                                            config={"numba_nbits.force_route": "dequant_cublas_chunked"},
                                            environ={"ORT_MATMULNBITS_CHUNK_SIZE": str(c)})
                    O = cuda.device_array((M, N), np.float16)
                    op(A, out=O)
                    y = O.copy_to_host().astype(np.float64)
                    err = 0.0
                    if ref is None:
                        ref = y
                    else:
                        err = relative_error(y, ref)
                        if not err <= 2e-3:
                            raise AssertionError(f"{N}x{K} M={M} chunk {c}: relative error {err:.3g} vs unchunked")
                    plan = op._entries[M].plan
                    us = _time_us(backend, lambda s, op=op, A=A, O=O: op(A, out=O, stream=s), sim)
                    rows.append(emit(dict(shape=f"{N}x{K}", M=M, what=op.route(M), chunk_rows=plan.rows,
                                          scratch_mb=round(plan.rows * plan.w.K_padded * 2 / 2**20, 1), us=us,
                                          tb_s="", rel_err=err)))
                    if c:
                        del op
    finally:
        backend.close()
    return rows


def _shape(text: str):
    n, _, k = text.lower().partition("x")
    try:
        return int(n), int(k)
    except ValueError:
        raise SystemExit(f"error: bad shape {text!r}: expected NxK, e.g. 28672x8192") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["28672x8192", "8192x28672", "14336x4096", "128256x4096"])
    ap.add_argument("--M", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--chunks", type=int, nargs="+", default=[0, 512, 1024, 2048, 4096, 8192],
                    help="rows per chunk; 0 = the unchunked route (default 0 512 1024 2048 4096 8192)")
    ap.add_argument("--tiny", action="store_true", help="simulator-sized smoke test")
    a = ap.parse_args(argv)
    if a.tiny:
        a.shapes, a.M, a.chunks = ["16x64"], [17], [0, 8]
    shapes = [_shape(s) for s in a.shapes]
    if any(m < 1 for m in a.M) or any(c < 0 for c in a.chunks) or 0 not in a.chunks[:1]:
        ap.error("--M must be >= 1 and --chunks >= 0, starting with 0 (the unchunked reference)")

    def emit(r):
        print(f"{r['shape']:12s} M={str(r['M']):5s} {r['what']:44s} rows={str(r['chunk_rows']):6s} "
              f"scratch={str(r['scratch_mb']):7s}MB {r['us']:9.2f} us" + (f"  {r['tb_s']:.2f} TB/s" if r["tb_s"] != "" else ""),
              flush=True)
        return r

    rows = run(shapes, a.M, a.chunks, emit)
    write_out_csv("bench_dequant_chunks.csv", FIELDS, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
