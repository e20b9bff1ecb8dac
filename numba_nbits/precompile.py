"""Compile a model's kernels ahead of serving, in parallel processes, into the on-disk kernel cache.

A first call compiles: every kernel specialisation a plan needs (dtype, bits, block size, zero-point
kind, bias, tile shape, M tile, the fpA_intB profiler's candidate tactics) goes through numba's
pipeline, ~1.5-7 s each, one after another in the serving process. ``precompile`` does that work
up front in worker processes, so a later process loads cubins from the kernel cache (``launch/cache.py``)
instead of compiling.

    numba_nbits.precompile(targets, M=range(1, 4097), workers=None, config=None, progress=True)
    python -m numba_nbits.precompile MODEL.onnx [--M 1-4096] [--workers N] [--config key=value ...]
    python -m numba_nbits.precompile --shapes 4096x4096:4:128:float16 14336x4096 ...

``targets`` are ``MatMulNBits`` ops, ONNX model paths or ``ModelProto`` s (their MatMulNBits nodes;
initializer headers are read, weight data is not), shape specs (``NxK[:bits[:block[:dtype[:zp[:bias]]]]]``,
``parse_shape``) or ``Signature`` s. A kernel depends on the node's signature, not its weight values,
so nodes are reduced to distinct ``Signature`` s (a model repeats a few shapes over many layers) and
each worker builds its ops from random bytes of ORT's layout.

M reduction (``plan_Ms``): of the requested Ms a worker warms every M <= 16 (the GEMV routes compile
one M tile / tactic per M), and above 16 the first M of each run that dispatch (``dispatch.select``,
the operator's own chain, on this device's sm) sends to one route (for the fused GEMM: to one route and
m-tile count, ``tactics.m_class``, and no other M of that run), every power of two (the fpA_intB
buckets are ``next_pow2(M)``; its chunking and the mixed GEMM's default tactic change there too),
the buckets listed in ``ep.cuda.fpa_intb_profile_m`` when the route is fpa_intb, and the largest M.
Other Ms reuse these kernels; an M the rule misses costs one compile at its first call, never a
wrong result.

Each (signature, M) pair is a task; tasks are dealt in signature order to ``workers`` processes
(``python -m numba_nbits.precompile --worker JOB I``, started with ``subprocess``: nothing is forked
after CUDA is initialised), which print one JSON line per task and a final line with the worker's
kernel-cache counters (compiled = cubins stored, loaded = cache hits). A failing task (or worker) is
counted and reported, never fatal. Under numba's CUDA simulator there is no disk cache: kernels are
compiled in the workers and not kept, and the summary says so.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional

GEMV_M = 16  # the fused GEMV routes serve M <= 16, one M tile / tactic per M
_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class Signature:
    """What a node's kernels depend on: everything but its weight values."""

    N: int
    K: int
    bits: int = 4
    block_size: int = 128
    dtype: str = "float16"
    zp: str = "none"  # "none" | "packed" (uint8) | "typed" (scales' dtype)
    bias: bool = False
    g_idx: bool = False
    accuracy_level: int = 0
    weight_prepacked: int = 0

    def __str__(self) -> str:
        extra = (":g_idx" if self.g_idx else "") + (f":accuracy_level={self.accuracy_level}" if self.accuracy_level
                                                      else "") + \
            (f":weight_prepacked={self.weight_prepacked}" if self.weight_prepacked else "")
        return (f"{self.N}x{self.K}:{self.bits}:{self.block_size}:{self.dtype}:{self.zp}:"
                f"{'bias' if self.bias else 'nobias'}{extra}")


def parse_shape(text: str) -> Signature:
    """``NxK[:bits[:block[:dtype[:zp[:bias]]]]]`` (defaults 4, 128, float16, none, nobias); zp is none /
    packed / typed, bias is bias / nobias. N, K, bits and block are checked like the operator's attributes."""
    from .schema import MatMulNBitsError, check_attributes
    from .weights import ZP_KINDS

    parts = text.strip().split(":")
    if len(parts) > 6 or "x" not in parts[0]:
        raise ValueError(f"bad shape {text!r}: expected NxK[:bits[:block[:dtype[:zp[:bias]]]]], e.g. 4096x4096:4:128")
    parts += [""] * (6 - len(parts))
    try:
        n, k = (int(v) for v in parts[0].lower().split("x"))
        bits, block = int(parts[1] or 4), int(parts[2] or 128)
    except ValueError:
        raise ValueError(f"bad shape {text!r}: N, K, bits and block must be integers") from None
    dtype, zp, bias = parts[3] or "float16", parts[4] or "none", parts[5] or "nobias"
    for value, allowed, what in ((dtype, _DTYPES, "dtype"), (zp, ZP_KINDS, "zero points"),
                                 (bias, ("bias", "nobias"), "bias")):
        if value not in allowed:
            raise ValueError(f"bad shape {text!r}: {what} must be one of {', '.join(allowed)}, got {value!r}")
    try:
        check_attributes(k, n, bits, block)
    except MatMulNBitsError as e:
        raise ValueError(f"bad shape {text!r}: {e}") from None
    return Signature(n, k, bits, block, dtype, zp, bias == "bias")


def parse_M(text: str) -> list[int]:
    """``1-4096``, ``1,2,4`` or a mix (``1-16,32,4096``) -> the sorted distinct Ms (each >= 1)."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        try:
            lo, _, hi = part.partition("-")
            lo_i, hi_i = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise ValueError(f"bad --M {text!r}: expected 1-4096, 1,2,4 or a mix like 1-16,32") from None
        if lo_i < 1 or hi_i < lo_i:
            raise ValueError(f"bad --M {text!r}: each M must be >= 1 and each range lo-hi must have lo <= hi")
        out.update(range(lo_i, hi_i + 1))
    return sorted(out)


def _problem(sig: Signature, M: int, sm: int):
    from .dispatch.problem import DEFAULT_SMEM_PER_BLOCK, Problem

    return Problem(M=M, N=sig.N, K=sig.K, bits=sig.bits, block_size=sig.block_size, dtype=sig.dtype,
                   zero_points=sig.zp, has_g_idx=sig.g_idx, has_bias=sig.bias, sm=sm,
                   weight_prepacked=sig.weight_prepacked, smem_per_block=DEFAULT_SMEM_PER_BLOCK)


def plan_Ms(sig: Signature, Ms: Iterable[int], config, sm: int) -> list[int]:
    """The Ms of ``Ms`` that give distinct plans (the rule is in the module docstring)."""
    from .dispatch.profiler import initial_buckets
    from .dispatch.select import select
    from .kernels.gemv.tactics import m_class

    Ms = sorted({int(m) for m in Ms})
    if Ms and Ms[0] < 1:
        raise ValueError(f"M must be >= 1, got {Ms[0]}")
    keep = {m for m in Ms if m <= GEMV_M}
    big = [m for m in Ms if m > GEMV_M]
    if big:
        listed = set(initial_buckets(getattr(config, "fpa_intb_profile_m", None)))
        prev = None
        for m in big:
            try:
                route = select(_problem(sig, m, sm), config).name
            except ValueError:  # a forced route that cannot serve: the worker reports the error
                route = "?"
            # the fused GEMM's plans differ only by m-tile count (``m_class``): the first M of each, nothing more
            key = (route, m_class(m)) if route == "fused_gemm" else route
            if (key != prev or (route == "fpa_intb" and m in listed)
                    or (route != "fused_gemm" and (m & (m - 1) == 0 or m == big[-1]))):
                keep.add(m)
            prev = key
    return sorted(keep)


def _model_signatures(model) -> list[Signature]:
    from . import onnx as nbonnx
    from .formats import float_dtype_name

    m = nbonnx.load(model)
    sigs = []
    for name in m.node_names:
        at, ins = m.attributes(name), m.input_specs(name)
        dtype = float_dtype_name(ins["scales"][0])
        zp = "none" if ins["zero_points"] is None else ("packed" if ins["zero_points"][0].kind == "u" else "typed")
        sigs.append(Signature(at["N"], at["K"], at["bits"], at["block_size"], dtype, zp, ins["bias"] is not None,
                              ins["g_idx"] is not None, at["accuracy_level"], at["weight_prepacked"]))
    return sigs


def signatures(targets) -> list[Signature]:
    """The distinct signatures of ``targets`` (ops, ONNX models, shape specs, Signatures), first-seen order."""
    if isinstance(targets, (str, os.PathLike, Signature)) or not isinstance(targets, Iterable) \
            or type(targets).__name__ == "ModelProto":
        targets = [targets]
    out: list[Signature] = []
    for t in targets:
        if isinstance(t, Signature):
            sigs = [t]
        elif type(t).__name__ == "MatMulNBits":
            w, a = t.weights, t.attrs
            sigs = [Signature(a.N, a.K, a.bits, a.block_size, t.dtype, t.zero_points_kind, w.bias is not None,
                              w.g_idx is not None, a.accuracy_level, a.weight_prepacked)]
        elif type(t).__name__ == "ModelProto" or (isinstance(t, (str, os.PathLike))
                                                  and os.fspath(t).endswith(".onnx")):
            sigs = _model_signatures(t)
        elif isinstance(t, str):
            sigs = [parse_shape(t)]
        else:
            raise TypeError(f"precompile: cannot read a target of type {type(t).__name__} (expected a MatMulNBits, "
                            "an ONNX model path or ModelProto, a shape spec NxK[:bits...] or a Signature)")
        out.extend(s for s in sigs if s not in out)
    return out


# ------------------------------------------------------------------------------ the worker side

def cache_stats() -> dict:
    """This process's kernel-cache counters: cubins stored (compiled) and loaded, errors, and when the
    cache is off, why (``cache_off``)."""
    from . import launch

    cache = launch._kernel_cache()
    off = None
    if cache is None:
        off = ("numba's CUDA simulator has no kernel cache" if launch.simulated() else
               launch._CACHE_STATE.get("refused") or "turned off by NUMBA_NBITS_KERNEL_CACHE")
    return {"kernels_compiled": cache.stores if cache else None, "kernels_loaded": cache.hits if cache else None,
            "cache_errors": cache.errors if cache else 0, "cache_last_error": cache.last_error if cache else None,
            "cache_dir": cache.dir if cache else None, "cache_off": off}


def build_op(sig: Signature, config=None, seed: int = 0):
    """A ``MatMulNBits`` of this signature with random codes, scales, zero points, g_idx and bias (the perf
    harness's ``random_weights``, plus the typed zero points, g_idx and flat prepacked B it does not make)."""
    import numpy as np

    from .arrays import np_dtype
    from .formats import quant_format
    from .op import MatMulNBits
    from .perf.subjects import random_weights

    w = random_weights(sig.N, sig.K, sig.bits, sig.block_size, sig.dtype, "packed" if sig.zp == "packed" else "none",
                       sig.bias, np.random.default_rng(seed))
    B = w.B.reshape(-1) if sig.weight_prepacked else w.B  # prepacked B: the flat bytes
    zp = w.zero_points
    if sig.zp == "typed":
        zp = np.full(w.scales.shape, quant_format(sig.bits).default_zero_point, np.float32).astype(np_dtype(sig.dtype))
    g_idx = (np.arange(sig.K, dtype=np.int32) // sig.block_size) if sig.g_idx else None
    return MatMulNBits(B, w.scales, zp, g_idx, w.bias, K=sig.K, N=sig.N, bits=sig.bits, block_size=sig.block_size,
                       accuracy_level=sig.accuracy_level, weight_prepacked=sig.weight_prepacked, config=config)


def run_tasks(tasks: list, config=None, emit=None) -> dict:
    """Build each signature's op once and ``warmup`` each of its Ms; ``emit(line)`` gets one dict per task."""
    t0 = time.time()
    errors, op, op_sig, op_err = [], None, None, None
    for idx, (sig, M) in tasks:
        t1 = time.time()
        err, build_s = None, 0.0
        try:
            if sig != op_sig:
                op, op_sig, op_err = None, sig, None
                try:
                    op = build_op(sig, config)
                except Exception as e:  # noqa: BLE001 - every task of this signature fails with it
                    op_err = f"{type(e).__name__}: {e}"
                build_s = time.time() - t1
            if op is None:
                err = f"{sig} M={M}: building the op failed: {op_err}"
            else:
                op.warmup(M)
        except Exception as e:  # noqa: BLE001 - a failing task is counted and reported, not fatal
            err = f"{sig} M={M}: {type(e).__name__}: {e}"
        if err is not None:
            errors.append(err[:400])
        if emit:
            emit({"task": idx, "ok": err is None, "error": err and err[:400], "seconds": round(time.time() - t1, 2),
                  "build_s": round(build_s, 2)})
    return {"tasks": len(tasks), "errors": errors, "seconds": round(time.time() - t0, 1), **cache_stats()}


def worker_main(path: str, i: int) -> int:
    with open(path) as f:
        job = json.load(f)
    tasks = [(idx, (Signature(**s), M)) for idx, s, M in job["parts"][i]]

    def emit(d):
        print(json.dumps(d), flush=True)

    stats = run_tasks(tasks, job.get("config"), emit)
    print(json.dumps({"worker": i, **stats}), flush=True)
    return 0


# ------------------------------------------------------------------------------ the parent side

@dataclass
class PrecompileSummary:
    """What ``precompile`` did: tasks (signature x M plans) built / failed, kernel-cache counters, time."""

    signatures: list = field(default_factory=list)
    tasks: int = 0
    workers: int = 0
    built: int = 0
    failures: list = field(default_factory=list)  # one message per failed task or worker
    kernels_compiled: Optional[int] = None  # cubins written to the cache (None: cache off)
    kernels_loaded: Optional[int] = None  # cubins loaded from it
    cache: str = ""  # "on (DIR)" or "off: why"
    seconds: float = 0.0
    #: (seconds, op build seconds, task index) of every reported task; ``slowest`` names the top ones
    task_seconds: list = field(default_factory=list)
    slowest: list = field(default_factory=list)  # "SIG M=m: s s (op build b s)", slowest first

    @property
    def failed(self) -> int:
        return self.tasks - self.built

    @property
    def ok(self) -> bool:
        return not self.failures and self.built == self.tasks

    def __str__(self) -> str:
        where = f"{self.workers} workers" if self.workers else "this process"
        head = (f"precompile: {self.tasks} plans of {len(self.signatures)} signatures in {where}, "
                f"{self.seconds:.1f} s: {self.built} built, {self.failed} failed")
        if self.kernels_compiled is not None:
            kern = (f"kernels: {self.kernels_compiled} compiled, {self.kernels_loaded} loaded from the cache "
                    f"[{self.cache}]")
        elif self.cache.startswith("off"):
            kern = f"kernels: not counted: the kernel cache is {self.cache}; they were compiled and not kept"
        else:
            kern = f"kernels: none counted (cache {self.cache})"
        slow = [f"slowest plans: {'; '.join(self.slowest)}"] if self.slowest else []
        return "\n".join([head, kern] + slow + [f"  failed: {m}" for m in self.failures])


def _device_sm() -> int:
    from .launch import simulated

    if simulated():
        return 90  # what MatMulNBits takes the simulated device to be
    from .probe import device_info, require_gpu

    require_gpu()
    return device_info(0)[0]


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="precompile", unit="plan", file=sys.stderr)


def _count(summary: PrecompileSummary, d: dict, bar) -> None:
    """One task's JSON line: built, or a failure with its message."""
    summary.task_seconds.append((d.get("seconds", 0.0), d.get("build_s", 0.0), d["task"]))
    if d["ok"]:
        summary.built += 1
    else:
        summary.failures.append(d["error"])
    if bar is not None:
        bar.update(1)


def _spawn(parts: list, config, summary: PrecompileSummary, bar, plain: bool, timeout_s: Optional[float]) -> list:
    """Run one worker process per part; returns the workers' final JSON dicts."""
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (pkg_root, os.environ.get("PYTHONPATH")) if p))
    results, seen, q = [], set(), queue.Queue()
    with tempfile.TemporaryDirectory(prefix="nbits-precompile-") as tmp:
        path = os.path.join(tmp, "job.json")
        with open(path, "w") as f:
            json.dump({"config": config, "parts": [[[idx, asdict(s), M] for idx, (s, M) in p] for p in parts]}, f)
        procs = []
        for i in range(len(parts)):
            err = open(os.path.join(tmp, f"stderr{i}"), "w+")
            p = subprocess.Popen([sys.executable, "-m", "numba_nbits.precompile", "--worker", path, str(i)],
                                 stdout=subprocess.PIPE, stderr=err, text=True, env=env)
            procs.append((p, err))
            threading.Thread(target=lambda i=i, p=p: ([q.put((i, x)) for x in p.stdout], q.put((i, None))),
                             daemon=True).start()
        running, killed = len(procs), False
        deadline = None if timeout_s is None else time.time() + timeout_s
        while running:
            try:
                i, line = q.get(timeout=None if deadline is None else max(0.01, deadline - time.time()))
            except queue.Empty:
                killed = True
                break
            if line is None:
                running -= 1
                continue
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "task" in d:
                seen.add(d["task"])
                _count(summary, d, bar)
            elif "worker" in d:
                results.append(d)
                if plain:
                    print(f"precompile: worker {i} done: {d['tasks']} plans, {len(d['errors'])} failed, "
                          f"{d['seconds']} s [{len(seen)}/{summary.tasks}]", file=sys.stderr, flush=True)
        for i, (p, err) in enumerate(procs):
            if p.poll() is None:
                p.kill()
            p.wait()
            lost = [idx for idx, _ in parts[i] if idx not in seen]
            if lost or p.returncode:
                err.seek(0)
                tail = " ".join(err.read().strip().splitlines()[-3:])[-300:]
                why = f"killed after {timeout_s:.0f} s" if killed and p.returncode and p.returncode < 0 else \
                    f"exit {p.returncode}: {tail}"
                summary.failures.append(f"worker {i} ({len(lost)} plans unreported): {why}")
            err.close()
    return results


#: the summary names this many of the slowest tasks (where precompiling spends its time)
SLOWEST = 3


def precompile(targets, M: Any = range(1, 4097), workers: Optional[int] = None,
               config: Mapping[str, Any] | None = None, progress: bool = True,
               timeout_s: Optional[float] = None) -> PrecompileSummary:
    """Compile (into the kernel cache) every plan ``targets`` need for the Ms in ``M`` (an int, an
    iterable or a range), reduced by ``plan_Ms``. ``config`` is a mapping of session-config keys, used
    for dispatch here and passed to every worker's ops (workers inherit the environment). ``workers``
    defaults to ``min(os.cpu_count(), tasks)``; ``workers=0`` runs the tasks in this process."""
    from .config import load_config

    t0 = time.time()
    cfg = load_config(None, dict(config) if config else None)
    Ms = [int(M)] if isinstance(M, int) else list(M)
    sigs = signatures(targets)
    sm = _device_sm()
    tasks = [(sig, m) for sig in sigs for m in plan_Ms(sig, Ms, cfg, sm)]
    indexed = list(enumerate(tasks))
    n = len(tasks)
    w = min(os.cpu_count() or 1, n) if workers is None else min(max(0, int(workers)), n)
    summary = PrecompileSummary(signatures=[str(s) for s in sigs], tasks=n, workers=w)
    bar = _progress(n, progress)
    if w == 0:
        results = [run_tasks(indexed, config, lambda d: _count(summary, d, bar))] if n else []
    else:  # contiguous slices of the signature-ordered list: a worker shares kernels across its Ms
        parts = [indexed[i * n // w:(i + 1) * n // w] for i in range(w)]
        results = _spawn(parts, dict(config) if config else None, summary, bar, progress and bar is None, timeout_s)
    if bar is not None:
        bar.close()
    on = [r for r in results if r.get("kernels_compiled") is not None]
    if on:
        summary.kernels_compiled = sum(r["kernels_compiled"] for r in on)
        summary.kernels_loaded = sum(r["kernels_loaded"] for r in on)
        summary.cache = f"on: {on[0]['cache_dir']}"
    elif results:
        summary.cache = "off: " + results[0]["cache_off"]
    else:
        summary.cache = "not used: nothing to compile" if not n else "unknown: no worker reported"
    for sec, build_s, idx in sorted(summary.task_seconds, reverse=True)[:SLOWEST]:
        sig, m = tasks[idx]
        summary.slowest.append(f"{sig} M={m}: {sec:.1f} s" + (f" (op build {build_s:.1f} s)" if build_s else ""))
    summary.seconds = round(time.time() - t0, 1)
    return summary


# ------------------------------------------------------------------------------ the command line

def main(argv=None) -> int:
    import argparse

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1], int(argv[2]))

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, exit 2
            print(f"error: {message} (see --help)", file=sys.stderr)
            raise SystemExit(2)

    p = Parser(prog="python -m numba_nbits.precompile", description=(
        "Compile every kernel the MatMulNBits nodes of ONNX models (or --shapes) need for the given M range "
        "into the kernel cache, in parallel processes; prints a summary; exits 1 if any plan failed."))
    p.add_argument("models", nargs="*", metavar="MODEL.onnx", help="ONNX models whose MatMulNBits nodes to compile")
    p.add_argument("--shapes", nargs="+", default=[], metavar="SPEC",
                   help="NxK[:bits[:block[:dtype[:zp[:bias]]]]]: bits 2/4/8 (default 4), block a power of two "
                        ">= 16 (128), dtype float16/bfloat16/float32 (float16), zp none/packed/typed (none), "
                        "bias/nobias (nobias); e.g. 4096x4096 14336x4096:4:128:float16:none:bias")
    p.add_argument("--M", default="1-4096", help="Ms to serve: 1-4096 (default), 1,2,4 or a mix like 1-16,32")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: min(cores, plans); 0: in this process)")
    p.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE", help="session-config keys for the ops")
    p.add_argument("--timeout", type=float, default=None, help="seconds before unfinished workers are killed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2, one line)
        return int(e.code or 0)
    try:
        Ms = parse_M(a.M)
        targets = [parse_shape(s) for s in a.shapes if not s.endswith(".onnx")]
        for m in a.models + [s for s in a.shapes if s.endswith(".onnx")]:
            if not os.path.isfile(m):
                raise ValueError(f"no such model file: {m!r}")
            targets.append(m)
        if not targets:
            raise ValueError("nothing to compile: give MODEL.onnx paths or --shapes")
        targets = signatures(targets)
        if a.workers is not None and a.workers < 0:
            raise ValueError(f"--workers must be >= 0, got {a.workers}")
        config = {}
        for kv in a.config:
            k, eq, v = kv.partition("=")
            if not eq:
                raise ValueError(f"bad --config {kv!r}: expected key=value")
            config[k] = v
        from .config import load_config

        load_config(None, config)
    except (ValueError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from .probe import run_cli

    def run(_):
        s = precompile(targets, Ms, a.workers, config or None, not a.no_progress, a.timeout)
        print(s)
        return 0 if s.ok else 1

    return run_cli(run)


class _CallableModule(types.ModuleType):
    """``numba_nbits.precompile`` is this module once it is imported; calling it calls ``precompile``."""

    def __call__(self, *args, **kwargs):
        return precompile(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
else:
    sys.modules[__name__].__class__ = _CallableModule
