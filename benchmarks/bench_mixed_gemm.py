"""GPU benchmark of the mixed GEMM (``numba_nbits.kernels.mixed_gemm``) for 4-bit and 8-bit B, every
tactic, against dequantize + cuBLAS (the ``dequant_cublas`` route's plan) and fp16 dense cuBLAS, fp16,
block 128.

    python -m benchmarks.bench_mixed_gemm          (GPU; about 2-4 minutes on an H200, most of it compiling)
    python -m benchmarks.bench_mixed_gemm --tiny   (one tiny shape; runs on the simulator: checks the logic)
    options: --tactics m16,m64  (a subset)   --shapes 4096x4096,...   --ms 16,256   --bits 8

Shapes (N x K): 4096x4096, 14336x4096, 28672x8192, 128256x4096; M in 16 .. 4096.

Method: the constant operands of every subject are copied on the device until the copies exceed
twice the device's L2 (``numba_nbits.perf.metrics.rotation_copies``), and launches rotate through
them so each launch streams its weights from HBM. The mixed GEMM rotates its prepacked B + scales (its
launch rebound to each copy), dequantize + cuBLAS rotates whole plans (weights + their fp16 scratch),
dense cuBLAS rotates fp16 W copies. Timing goes through the perf harness (``numba_nbits.perf.harness``)
on its stream: ``estimate_us`` (a warm-up pass over the copies, then a timed one) sizes the batches,
``events_us`` times batches of back-to-back calls (at least one whole rotation and 40 us) between CUDA
events, and the row gives the median per call (batches sized so one row costs about 0.1 s of GPU
time, 5 to 20 of them; the first, compiling call of a row is the checked one and is not timed). The
dense W is the dequantized W
(copied from the dequant plan's scratch), so every row is checked against the float64 oracle
(``reference.matmul_nbits_ref``) on a sample: output rows < 16 and the first and last 64 columns.

Output: a CSV (``$OUT/bench_mixed_gemm.csv`` when ``$OUT`` is set, else ./bench_mixed_gemm.csv) with
columns ``shape, M, bits, block, route/tactic, us, TFLOP/s, TB/s, rel_err`` (TB/s counts the fewest
bytes the subject must move: its own weights + scales + A + Y), and a compact table: the best mixed
GEMM tactic per (shape, M, bits), its time, and the ratios dequant+cuBLAS / best and dense / best
(> 1: the mixed GEMM is faster). On the simulator the times are host times and mean nothing.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

from numba_nbits.perf.harness import Budget, Rotation, batch_size, estimate_us, events_us, sample_count

os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

import numpy as np

SHAPES = [(4096, 4096), (14336, 4096), (28672, 8192), (128256, 4096)]
MS = [16, 32, 64, 128, 256, 512, 1024, 4096]
BITS = (4, 8)
BLOCK = 128
DTYPE = "float16"
ROW_BUDGET = Budget(target_ms=100.0, min_samples=5, max_samples=20)  # ~0.1 s of GPU time per timed row
TINY = dict(shapes=[(16, 128)], ms=[3])
COLUMNS = ["shape", "M", "bits", "block", "route/tactic", "us", "TFLOP/s", "TB/s", "rel_err"]
TOL = 2e-3  # reference.TOLERANCES["float16"]


def _time(be, launches, checked_us: float) -> float:
    """Median microseconds per call of ``launches`` (one callable ``fn(stream)`` per rotated copy,
    already run once, in ``checked_us``: compiled), through the harness. The simulator reports that
    first call (each takes seconds; the number means nothing there)."""
    if be.simulated:
        return checked_us
    subject = Rotation(lambda i, s: launches[i](s), len(launches))
    est = estimate_us(be, subject)
    n = batch_size(subject.copies, est, ROW_BUDGET)
    return events_us(be, subject, n, sample_count(n, est, ROW_BUDGET))[1]


def _dev_copy(d, n):
    """n independent device copies of DevArray d (d itself first)."""
    from numba import cuda

    from numba_nbits.arrays import DevArray

    out = [d]
    if isinstance(d.owner, np.ndarray):  # simulator
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


def _host_weights(rng, N, K, bits):
    kb = K // BLOCK
    B = np.frombuffer(rng.bytes(N * kb * BLOCK * bits // 8), np.uint8).reshape(N, kb, BLOCK * bits // 8).copy()
    scales = (rng.random((N, kb), dtype=np.float32) * 0.5 + 0.5) / (math.sqrt(K) * 2 ** (bits - 1))
    return B, scales.astype(np.float16)


def _row(rows, shape, M, bits, subject, us, nbytes, err):
    N, K = shape
    rows.append({"shape": f"{N}x{K}", "M": M, "bits": bits, "block": BLOCK, "route/tactic": subject, "us": us,
                 "TFLOP/s": 2 * M * N * K / us / 1e6 if us > 0 else float("nan"),
                 "TB/s": nbytes / us / 1e6 if us > 0 else float("nan"), "rel_err": err})
    ok = "" if (err is None or err < TOL) else "  <-- OVER TOLERANCE"
    print(f"  {subject:<22} M={M:<5} {us:10.1f} us  err={err if err is None else f'{err:.1e}'}{ok}", flush=True)


def _dense_runner(be, M, N, K, W_list, a, y, handle):
    """One callable ``fn(stream)`` per rotated fp16 W: Y = A @ W^T (torch.matmul on the harness's stream
    if torch has CUDA, else cuBLAS via nvmath)."""
    if be.simulated:
        def host(stream, W=W_list[0]):
            y.host_view()[...] = (a.host_view().astype(np.float32) @ W.host_view().reshape(N, K).astype(np.float32).T
                                  ).astype(np.float16)
        return [host], "dense_fp16/numpy(sim)"
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch without CUDA")
        at = torch.as_tensor(_cai(a, (M, K)), device="cuda")
        yt = torch.as_tensor(_cai(y, (M, N)), device="cuda")
        ext = torch.cuda.ExternalStream(be.stream)

        def mm(stream, wt):
            with torch.cuda.stream(ext):
                torch.matmul(at, wt, out=yt)

        return [(lambda stream, wt=torch.as_tensor(_cai(W, (N, K)), device="cuda").t(): mm(stream, wt))
                for W in W_list], "dense_fp16/torch"
    except ImportError:
        from numba_nbits.dispatch import cublas

        return [(lambda stream, W=W: cublas.gemm(handle, stream, M, N, K, W.ptr, K, a.ptr, y.ptr, N, "float16", False,
                                                 0)) for W in W_list], "dense_fp16/cublas"


class _cai:
    """A DevArray region as a CUDA array interface object (for torch.as_tensor)."""

    def __init__(self, d, shape):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<f2", "data": (d.ptr, False),
                                         "version": 3, "strides": None}
        self._keep = d


def _checked(be, fn):
    """Run ``fn`` once on the harness's stream (compiling on first use); its host microseconds, synced."""
    t0 = time.perf_counter()
    fn(be.stream)
    be.sync()
    return (time.perf_counter() - t0) * 1e6


def _skip(mg, tac, M, N, K, every):
    """Why a (tactic, M) row is not timed ('' = timed): a tile 16x shorter than M is hopeless (m16 at
    M=4096 on the LM head would take ~30 s a launch; the tallest tile is always timed), and a split-K tactic that would not split is
    its base tactic again. ``--every`` times them all."""
    if every:
        return ""
    if M > 16 * tac.bm and tac.bm < max(t.bm for t in mg.TACTICS.values()):  # the tallest tile always runs
        return f"M > 16 * BM ({tac.bm})"
    if tac.splitk != 1:
        n_st = K // 64 + (K % 64 == 32)
        if mg.split_count(tac, -(-N // tac.bn) * -(-M // tac.bm), n_st, BLOCK)[0] == 1:
            return "split-K would not split"
    return ""


def run(shapes, ms, tactics, bits_list=BITS, every=False, skipped=None, rows=None, failed=None):
    from numba import cuda
    from numba.cuda.cudadrv import driver as nbdrv

    from numba_nbits.arrays import device_empty, to_device, to_host
    from numba_nbits.config import Config
    from numba_nbits.dispatch.problem import Problem
    from numba_nbits.kernels import dequant, mixed_gemm
    from numba_nbits.perf.metrics import dense_bytes, nbits_bytes, rotation_copies
    from numba_nbits.reference import matmul_nbits_ref, relative_error
    from numba_nbits.perf.harness import make_backend
    from numba_nbits.weights import build_weights

    be = make_backend()
    sim = be.simulated
    skipped = [] if skipped is None else skipped
    failed = [] if failed is None else failed
    rng = np.random.default_rng(0)
    rows = [] if rows is None else rows
    handle = None
    if not sim:
        from numba_nbits.dispatch import cublas

        handle = cublas.handle_for(0)
    for (N, K) in shapes:
        Mmax = max(ms)
        A = (rng.standard_normal((Mmax, K)) * 0.5).astype(np.float16)
        A_d = to_device(A, sim)
        Y_d = to_device(np.zeros((Mmax, N), np.float16), sim)
        cols = np.unique(np.concatenate([np.arange(min(64, N)), np.arange(max(0, N - 64), N)]))
        for bits in bits_list:
            t0 = time.perf_counter()
            B, scales = _host_weights(rng, N, K, bits)
            ref = matmul_nbits_ref(A[:16], B[cols], scales[cols], K=K, N=len(cols), bits=bits, block_size=BLOCK)

            def err_of(M):  # copies back only the rows checked
                y = to_host(Y_d.offset(0, (min(M, 16), N)))[:, cols]
                return relative_error(y, ref[:min(M, 16)])

            def poison(M):  # every output NaN (fp16 0xFFFF) before a checked call
                if sim:
                    Y_d.host_view()[...] = np.nan
                else:
                    nbdrv.device_memset(Y_d.owner, 0xFF, Y_d.nbytes)
                    cuda.synchronize()  # the memset's stream is not the harness's

            w = build_weights(B, scales, K=K, N=N, bits=bits, block_size=BLOCK, simulated=sim)
            wbytes = nbits_bytes(1, N, K, bits, BLOCK, DTYPE).constant
            print(f"## {N}x{K} {bits}-bit g{BLOCK}: {wbytes / 1e6:.0f} MB weights+scales "
                  f"(setup {time.perf_counter() - t0:.1f}s)", flush=True)
            # ---- mixed GEMM, every tactic
            R = 1 if sim else max(2, rotation_copies(wbytes, be.l2_bytes))
            copies = None
            for tname in tactics:
                for M in ms:
                    why = _skip(mixed_gemm, mixed_gemm.TACTICS[tname], M, N, K, every)
                    if why:
                        skipped.append(f"{N}x{K} {bits}-bit M={M} {tname}: {why}")
                        continue
                    p = Problem(M=M, N=N, K=K, bits=bits, block_size=BLOCK, dtype=DTYPE)
                    try:  # one tactic failing to compile or launch must not lose the rest of the run
                        plan = mixed_gemm.build(w, p, None, tname)
                        if copies is None:
                            copies = (_dev_copy(plan.packed.bq, R), _dev_copy(plan.packed.scales, R))
                        a, y = A_d.offset(0, (M, K)), Y_d.offset(0, (M, N))
                        poison(M)
                        t_chk = _checked(be, lambda s: plan.run(a, y, s))  # compiles once per tactic
                        err = err_of(M)
                        launches = []
                        for r in range(R):
                            L = _clone_launch(plan, {1: copies[0][r], 2: copies[1][r]})
                            L.set_array(0, a.view(np.uint32, (M * K // 2,)))
                            L.set_array(6, y.view(np.float16, (M * N,)))
                            launches.append(L.launch)
                        us = _time(be, launches, t_chk)
                    except Exception as e:  # noqa: BLE001 - reported, counted, exit status 1
                        failed.append(f"{N}x{K} {bits}-bit M={M} {tname}: {type(e).__name__}: {e}")
                        print("  FAILED " + failed[-1], flush=True)
                        continue
                    _row(rows, (N, K), M, bits, f"mixed_gemm/{tname}", us,
                         nbits_bytes(M, N, K, bits, BLOCK, DTYPE).total, err)
            del copies
            # ---- dequantize + cuBLAS: R plans over R weight copies (each with its own fp16 scratch)
            scratch_bytes = N * K * 2
            Rq = 1 if sim else max(1, rotation_copies(wbytes + scratch_bytes, be.l2_bytes))
            ws = [w] + [build_weights(B, scales, K=K, N=N, bits=bits, block_size=BLOCK, simulated=sim)
                        for _ in range(Rq - 1)]
            plans = [dequant.build(wi, Problem(M=ms[0], N=N, K=K, bits=bits, block_size=BLOCK, dtype=DTYPE),
                                   Config()) for wi in ws]
            for M in ms:
                a, y = A_d.offset(0, (M, K)), Y_d.offset(0, (M, N))
                poison(M)
                t_chk = _checked(be, lambda s: plans[0].run(a, y, s))
                err = err_of(M)
                us = _time(be, [lambda s, pl=pl, a=a, y=y: pl.run(a, y, s) for pl in plans], t_chk)
                nb = nbits_bytes(M, N, K, bits, BLOCK, DTYPE).total
                _row(rows, (N, K), M, bits, "dequant_cublas", us, nb, err)
            # ---- fp16 dense cuBLAS on the dequantized W (once per shape: the 4-bit pass)
            if bits == bits_list[0]:
                Rd = 1 if sim else max(1, rotation_copies(N * K * 2, be.l2_bytes))
                Wd = []
                for _ in range(Rd):
                    Wc = device_empty((N * K,), np.float16, sim)
                    if plans[0].rows != N or plans[0].w.K_padded != K:
                        raise SystemExit(f"{N}x{K}: the dense baseline needs an unchunked plan and K % {BLOCK} == 0")
                    plans[0].dequantize_into(0, Wc, 0)  # the route's own dequantize into the dense copy
                    Wd.append(Wc)
                dense_rows = []
                for M in ms:
                    a, y = A_d.offset(0, (M, K)), Y_d.offset(0, (M, N))
                    fns, label = _dense_runner(be, M, N, K, Wd, a, y, handle)
                    poison(M)
                    t_chk = _checked(be, fns[0])
                    err = err_of(M)
                    us = _time(be, fns, t_chk)
                    dense_rows.append((M, label, us, dense_bytes(M, N, K, DTYPE).total, err))
                del Wd
            for (M, label, us, nb, err) in dense_rows:  # the same dense rows serve both bits
                _row(rows, (N, K), M, bits, label, us, nb, err if bits == bits_list[0] else None)
            del plans, ws, w
    return rows


def summary(rows):
    """The compact table: best mixed-GEMM tactic per (shape, M, bits) and its ratios."""
    lines = [f"{'shape':<12}{'M':>6}{'bits':>5}  {'best tactic':<14}{'us':>10}{'TFLOP/s':>9}"
             f"{'deq+cuBLAS us':>15}{'deq/best':>9}{'dense us':>10}{'dense/best':>11}"]
    keys = []
    for r in rows:
        k = (r["shape"], r["M"], r["bits"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        mine = [r for r in rows if (r["shape"], r["M"], r["bits"]) == k]
        mixed = [r for r in mine if r["route/tactic"].startswith("mixed_gemm/")]
        if not mixed:
            continue
        best = min(mixed, key=lambda r: r["us"])
        deq = next((r["us"] for r in mine if r["route/tactic"] == "dequant_cublas"), float("nan"))
        den = next((r["us"] for r in mine if r["route/tactic"].startswith("dense_fp16")), float("nan"))
        lines.append(f"{k[0]:<12}{k[1]:>6}{k[2]:>5}  {best['route/tactic'].split('/')[1]:<14}{best['us']:>10.1f}"
                     f"{best['TFLOP/s']:>9.1f}{deq:>15.1f}{deq / best['us']:>9.2f}{den:>10.1f}{den / best['us']:>11.2f}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="one tiny shape (for the simulator)")
    ap.add_argument("--tactics", default=None, help="comma-separated mixed_gemm tactic names (default: all)")
    ap.add_argument("--shapes", default=None, help="comma-separated NxK list")
    ap.add_argument("--ms", default=None, help="comma-separated M list")
    ap.add_argument("--bits", default=None, help="comma-separated subset of 4,8")
    ap.add_argument("--every", action="store_true", help="also time hopeless (tactic, M) rows (see _skip)")
    args = ap.parse_args(argv)
    from numba import cuda

    from numba_nbits.kernels import mixed_gemm
    from numba_nbits.launch import simulated

    sim = simulated()
    shapes, ms = (TINY["shapes"], TINY["ms"]) if args.tiny else (SHAPES, MS)
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    if args.ms:
        ms = [int(x) for x in args.ms.split(",")]
    bits_list = tuple(int(b) for b in args.bits.split(",")) if args.bits else BITS
    if not set(bits_list) <= set(BITS):
        ap.error(f"--bits must be a subset of {BITS}")
    tactics = args.tactics.split(",") if args.tactics else list(mixed_gemm.TACTICS)
    unknown = [t for t in tactics if t not in mixed_gemm.TACTICS]
    if unknown:
        ap.error(f"unknown tactics {unknown}; known: {list(mixed_gemm.TACTICS)}")
    if sim and not args.tiny:
        ap.error("on the simulator only --tiny is practical")
    dev = cuda.get_current_device()
    name = getattr(dev, "name", "simulator")
    print(f"# {name.decode() if isinstance(name, bytes) else name}; tactics {tactics}; shapes {shapes}; M {ms}")
    t0 = time.perf_counter()
    skipped, rows, failed = [], [], []
    out_dir = os.environ.get("OUT") or "."
    path = os.path.join(out_dir, "bench_mixed_gemm.csv")
    try:
        run(shapes, ms, tactics, bits_list, args.every, skipped, rows, failed)
    finally:  # the rows measured so far, whatever happens
        with open(path, "w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=COLUMNS)
            wr.writeheader()
            wr.writerows(rows)
    print(f"\n{len(skipped)} (tactic, M) rows not timed (--every times them):")
    for line in skipped:
        print("  " + line)
    print()
    print(summary(rows))
    bad = [r for r in rows if r["rel_err"] is not None and not r["rel_err"] < TOL]
    for line in failed:
        print("FAILED " + line)
    print(f"\nwrote {path} ({len(rows)} rows, {time.perf_counter() - t0:.0f}s); "
          f"{len(bad)} rows over the fp16 tolerance {TOL}; {len(failed)} rows failed")
    return 1 if (bad or failed) else 0


if __name__ == "__main__":
    sys.exit(main())
