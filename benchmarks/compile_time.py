"""Where the cold compile of a kernel specialisation goes: source generation, numba's front end pass by pass,
NVVM (LLVM IR to PTX) and the link (PTX to cubin through nvJitLink).

    python -m benchmarks.compile_time [--shapes 4096x4096 14336x4096 ...] [--bits 4] [--block 128]
                                      [--dtype float16] [--M 1-16] [--cc 9.0] [--limit N]

The kernels are the ones the default routes build for the given weight shapes (fp16 / bf16, zero points
none): one tensor-core GEMV specialisation per distinct (m-tiles, tactic) over M = 1..16 (the tactic as
``gemv.tactics.default_tactic`` picks it), the dequantize kernel (the M > 16 route: dequantize + cuBLAS)
and the bias-add kernel. Each is compiled from scratch in this process for compute capability ``--cc``; no
GPU is needed (without one, numba's current-device query is answered with ``--cc`` for typing, and the
cubin is linked by nvJitLink). The first compilation of a process also pays numba's one-time set-up, so
a small warm-up kernel is compiled (and not reported) first. Kernels compile as the library compiles them,
with ``numba_nbits.lowering_fix`` installed and call typing remembered within each compile
(``numba_nbits.typing_memo``) and numba-cuda's dataflow passes replaced (``numba_nbits.dataflow_fix``);
``--stock-lowering`` measures numba-cuda's lowering as shipped, ``--no-typing-memo`` numba's call typing as shipped,
``--stock-dataflow`` numba-cuda's use/def, liveness and SSA passes as shipped. ``--tactics TAG:MT ...`` adds
tensor-core kernels of the given tactics and m-tiles (e.g. the fused GEMM's ``t1w8u1s3xhv:16``) for the first shape's
K.

Under ``NUMBA_NBITS_BACKEND=mlir`` the same kernels are compiled by numba-cuda-mlir as the library compiles them
(``backend``: ``chip="sm_90a"`` at 9.0, ``numba_nbits.mlir_fix`` and ``typing_memo``'s numba-cuda-mlir wrapper); there
``frontend_s`` is its numba-IR passes, ``nvvm_s`` its ``mlir_backend`` pass (numba IR lowered to MLIR, in Python) and
``link_s`` the rest (MLIR and LLVM optimisation, NVVM, the link to a cubin). ``--stock-mlir`` compiles without
``mlir_fix``, ``--no-typing-memo`` without the memo.

Writes ``compile_time.csv`` under ``$OUT`` (else ``benchmarks/results/<date>-compile-time/``): one row per
kernel with its generated-source lines, ``gen_s`` (generating and loading the Python source), ``frontend_s``
(typing, rewrites, SSA, lowering to LLVM IR), ``nvvm_s``, ``link_s``, ``total_s`` and the five costliest front-end
passes; prints a table and the front end's share of the total.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import inspect
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["kernel", "lines", "gen_s", "frontend_s", "nvvm_s", "link_s", "total_s", "top_passes"]


def _answer_device_queries_with(cc: tuple) -> None:
    """Without a GPU, numba's typing asks for the current device's compute capability: answer ``cc`` (and prime
    numba-cuda-mlir's private cache, which it asks even when ``chip`` names the target)."""
    from numba import cuda

    if cuda.is_available():
        return
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc

    dispatcher.get_current_device = lambda: _Device()
    from numba_nbits import backend

    if backend.compiler() == "mlir":
        from numba_cuda_mlir import tools

        if tools._cached_cc is None:
            tools._cached_cc = tuple(cc)


def stages_mlir(kernel, cc: tuple, memo: bool = False, fix: bool = False) -> dict:
    """``stages`` on numba-cuda-mlir (``memo``: inside ``typing_memo.active()``, ``fix``: inside ``mlir_fix.active()``,
    as ``backend`` compiles): numba-IR passes, the ``mlir_backend`` pass (lowering to MLIR), the rest (optimisation,
    NVVM, link)."""
    from contextlib import nullcontext

    from numba_nbits import backend, mlir_fix, typing_memo

    c = backend.cuda()
    sig = backend.types().void(*backend.argtypes(kernel.argtypes))
    opts = backend.jit_options(kernel.options, cc)
    t0 = time.perf_counter()
    with typing_memo.active() if memo else nullcontext(), mlir_fix.active() if fix else nullcontext():
        cres = c.jit(sig, **opts)(backend.rebind(kernel.pyfunc)).compile(sig)
    total = time.perf_counter() - t0
    passes = _pass_seconds(cres)
    back = sum(t for t, n in passes if n == "mlir_backend")
    front = sum(t for t, n in passes) - back
    return {"frontend_s": front, "nvvm_s": back, "link_s": total - front - back, "total_s": total,
            "top_passes": _top_passes(passes)}


def _pass_seconds(cres) -> list:
    """(seconds, pass name) of each pass of a compile, costliest first (numba's ``pipeline_times``)."""
    passes = []
    for timings in cres.metadata.get("pipeline_times", {}).values():
        for name, v in timings.items():
            passes.append((v.init + v.run + v.finalize, name.split("_", 1)[-1]))
    return sorted(passes, reverse=True)


def _top_passes(passes: list) -> str:
    return "; ".join(f"{n} {s:.2f}" for s, n in passes[:5])


def _parse_M(text: str) -> list[int]:
    """``--M`` as ``numba_nbits.precompile`` reads it, within the GEMV's M range."""
    from numba_nbits.precompile import parse_M

    try:
        Ms = parse_M(text)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    bad = [m for m in Ms if m > 16]
    if bad:
        raise SystemExit(f"--M: the GEMV serves M 1..16, got {bad}")
    return Ms


def kernel_set(shapes, bits: int, block: int, dtype: str, Ms) -> list:
    """The default routes' kernels for the shapes: (Kernel, source lines, seconds to generate and load the
    Python source; 0 for a kernel factory that ran before in this process)."""
    from numba_nbits.kernels.bias import bias_add_kernel
    from numba_nbits.kernels.dequant import dequant_kernel
    from numba_nbits.kernels.gemv.mma import gemv_mma_kernel, k_full
    from numba_nbits.kernels.gemv.tactics import default_tactic, m_tiles

    gemv = dict.fromkeys((m_tiles(M), default_tactic(N, K, block, M, bits), k_full(K, block, bits))
                         for N, K in shapes for M in Ms)
    makers = [lambda mt=mt, tac=tac, kf=kf: gemv_mma_kernel(dtype, mt, tac, block, "none", bits, False, kf)
              for mt, tac, kf in gemv]
    makers += [lambda: dequant_kernel(bits, dtype, "none", False), lambda: bias_add_kernel(dtype)]
    out = []
    for make in makers:
        t0 = time.perf_counter()
        k = make()
        out.append((k, _lines(k.pyfunc), time.perf_counter() - t0))
    return out


def _lines(fn) -> int | str:
    """Source lines of a kernel (generated ones through ``codegen.load_source``'s linecache entry)."""
    try:
        return len(inspect.getsource(fn).splitlines())
    except (OSError, TypeError):
        return ""


def stages(kernel, cc: tuple, memo: bool = False, dataflow: bool = False) -> dict:
    """Compile ``kernel`` from scratch: seconds per stage and the costliest front-end passes (``memo``: inside
    ``typing_memo.active()``, ``dataflow``: inside ``dataflow_fix.active()``, as ``backend`` compiles)."""
    from contextlib import nullcontext

    from numba.cuda import types
    from numba.cuda.compiler import compile_cuda, kernel_fixup
    from numba.cuda.cudadrv import nvvm

    from numba_nbits import dataflow_fix, typing_memo

    cc3 = (cc[0], cc[1], "a" if cc >= (9, 0) else "")
    t0 = time.perf_counter()
    with typing_memo.active() if memo else nullcontext(), dataflow_fix.active() if dataflow else nullcontext():
        cres = compile_cuda(kernel.pyfunc, types.void, kernel.argtypes, debug=False, lineinfo=False, fastmath=False,
                            nvvm_options={"fastmath": False, "opt": 3}, cc=cc3)
    lib = cres.library
    fn = lib.get_function(cres.fndesc.llvm_func_name)
    kernel_fixup(fn, False)
    nvvm.set_launch_bounds(fn, kernel.options.get("launch_bounds"))
    lib.get_llvm_str()
    t1 = time.perf_counter()
    lib.get_asm_str(cc=cc3)
    t2 = time.perf_counter()
    lib.get_cubin(cc=cc3)
    t3 = time.perf_counter()
    return {"frontend_s": t1 - t0, "nvvm_s": t2 - t1, "link_s": t3 - t2, "total_s": t3 - t0,
            "top_passes": _top_passes(_pass_seconds(cres))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.compile_time", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["4096x4096", "1024x4096", "14336x4096", "4096x14336",
                                                    "128256x4096"], help="NxK weight shapes (default: Llama-3-8B)")
    ap.add_argument("--bits", type=int, default=4, choices=(2, 4, 8))
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--M", default="1-16", help="Ms of the GEMV route to cover (1..16)")
    ap.add_argument("--cc", default="9.0", help="compute capability to compile for")
    ap.add_argument("--limit", type=int, default=0, help="compile at most this many kernels (0: all)")
    ap.add_argument("--stock-lowering", action="store_true",
                    help="compile with numba-cuda's lowering as shipped (without numba_nbits.lowering_fix)")
    ap.add_argument("--no-typing-memo", action="store_true",
                    help="resolve every call's typing as numba does (without numba_nbits.typing_memo)")
    ap.add_argument("--stock-dataflow", action="store_true",
                    help="numba-cuda's use/def, liveness and SSA passes as shipped (without numba_nbits.dataflow_fix)")
    ap.add_argument("--stock-mlir", action="store_true",
                    help="under NUMBA_NBITS_BACKEND=mlir: numba-cuda-mlir's front end as shipped (without "
                         "numba_nbits.mlir_fix)")
    ap.add_argument("--tactics", nargs="*", default=[], metavar="TAG:MT",
                    help="also compile these tensor-core tactics at these m-tiles (K of the first shape)")
    args = ap.parse_args(argv)
    try:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes]
        cc = tuple(int(x) for x in args.cc.split("."))
        if any(len(s) != 2 for s in shapes) or len(cc) != 2:
            raise ValueError
    except ValueError:
        raise SystemExit("--shapes takes NxK (e.g. 4096x14336), --cc MAJOR.MINOR (e.g. 9.0)") from None
    os.environ.setdefault("NUMBA_CUDA_ENABLE_PYNVJITLINK", "1")
    _answer_device_queries_with(cc)
    from numba_nbits import backend, dataflow_fix, lowering_fix, mlir_fix, typing_memo

    if backend.compiler() == "mlir":
        memo = not args.no_typing_memo and typing_memo.install_mlir()
        fix = not args.stock_mlir and mlir_fix.install()
        print(f"numba-cuda-mlir; call typing: {typing_memo.mlir_status() if memo else 'as shipped'}; front end: "
              f"{mlir_fix.status() if fix else 'as shipped'}")

        def compile_one(k):
            return stages_mlir(k, cc, memo, fix)
    else:
        if not args.stock_lowering:
            lowering_fix.install()
        memo = not args.no_typing_memo and typing_memo.install()
        dataflow = not args.stock_dataflow and dataflow_fix.install()
        print(f"lowering: {'as shipped' if args.stock_lowering else lowering_fix.status()}; call typing: "
              f"{typing_memo.status() if memo else 'as shipped'}; dataflow: "
              f"{dataflow_fix.status() if dataflow else 'as shipped'}")

        def compile_one(k):
            return stages(k, cc, memo, dataflow)

    from numba_nbits.kernels.bias import bias_add_kernel

    compile_one(bias_add_kernel("float32"))  # the compiler's one-time set-up, not reported
    todo = kernel_set(shapes, args.bits, args.block, args.dtype, _parse_M(args.M))
    if args.tactics:
        from numba_nbits.kernels.gemv.mma import gemv_mma_kernel, k_full
        from numba_nbits.kernels.gemv.tactics import Tactic

        for spec in args.tactics:
            tag, _, mt = spec.partition(":")
            t0 = time.perf_counter()
            k = gemv_mma_kernel(args.dtype, int(mt or 1), Tactic.parse(tag), args.block, "none", args.bits, False,
                                k_full(shapes[0][1], args.block, args.bits))
            todo.append((k, _lines(k.pyfunc), time.perf_counter() - t0))
    if args.limit:
        todo = todo[:args.limit]
    rows = []
    for kernel, lines, gen_s in todo:
        r = {"kernel": kernel.name, "lines": lines, "gen_s": round(gen_s, 4)}
        r.update(compile_one(kernel))
        for k in ("frontend_s", "nvvm_s", "link_s", "total_s"):
            r[k] = round(r[k], 3)
        rows.append(r)
        print(f"{r['kernel']:<50} {r['lines']!s:>5} lines  front end {r['frontend_s']:6.2f} s  NVVM {r['nvvm_s']:5.2f} s"
              f"  link {r['link_s']:5.2f} s  | {r['top_passes']}", flush=True)
    out = Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results" /
               f"{datetime.date.today().isoformat()}-compile-time")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "compile_time.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    tot = sum(r["total_s"] for r in rows)
    fe = sum(r["frontend_s"] for r in rows)
    print(f"\n{len(rows)} kernels, {tot:.1f} s in all ({backend.compiler()}, one process, cc {args.cc}); front end "
          f"{fe:.1f} s "
          f"({100 * fe / tot:.0f}%), NVVM {sum(r['nvvm_s'] for r in rows):.1f} s, link "
          f"{sum(r['link_s'] for r in rows):.1f} s -> {out / 'compile_time.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
