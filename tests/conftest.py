"""Test configuration: run on the GPU when one is present, on numba's CUDA simulator otherwise.

The choice must be made before numba is imported, so it happens here, at collection start:
``NUMBA_ENABLE_CUDASIM`` set by the user wins; otherwise the CUDA driver is asked (through ctypes,
without importing numba, ``numba_nbits.probe``) whether a device exists.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

from numba_nbits.probe import gpu_present


if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

SIMULATED = os.environ["NUMBA_ENABLE_CUDASIM"] == "1"

requires_gpu = pytest.mark.skipif(SIMULATED, reason="needs a real CUDA GPU (running on numba's simulator)")


WORKERS_ENV = "NUMBA_NBITS_TEST_WORKERS"
MAX_DEFAULT_WORKERS = 16
#: BLAS / OpenMP thread-pool sizes set to 1 (unless already set) when the suite starts parallel workers
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def default_workers(environ, simulated: bool, cpu_count: int | None, have_xdist: bool) -> int:
    """How many pytest-xdist worker processes a plain ``python -m pytest`` starts (0 = run in this process).

    On a real GPU the suite is bound by compiling kernels on the CPU, one process per core: the default is
    ``min(cpu_count, 16)`` workers. On the simulator the default is 0 (CI's command, one process).
    ``NUMBA_NBITS_TEST_WORKERS=N`` sets it either way (0 = serial); without pytest-xdist it is 0.
    """
    text = environ.get(WORKERS_ENV, "").strip()
    if text:
        try:
            n = int(text)
        except ValueError:
            raise pytest.UsageError(f"{WORKERS_ENV} must be a non-negative integer, got {text!r}") from None
        if n < 0:
            raise pytest.UsageError(f"{WORKERS_ENV} must be a non-negative integer, got {text!r}")
    else:
        n = 0 if simulated else min(cpu_count or 1, MAX_DEFAULT_WORKERS)
    return n if have_xdist and n > 1 else 0


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Parallel workers by default on a GPU (``default_workers``), unless the command line chose
    (``-n``, ``-p no:xdist``), a debugger is attached (``--pdb``) or this is already a worker."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.pluginmanager.hasplugin("xdist"):
        return None
    opt = config.option
    if getattr(opt, "numprocesses", None) is not None or getattr(opt, "usepdb", False) \
            or getattr(opt, "collectonly", False):
        return None
    n = default_workers(os.environ, SIMULATED, os.cpu_count(), True)
    if n:
        opt.numprocesses = n
        for var in BLAS_THREAD_VARS:  # n workers x a core-count BLAS pool each would oversubscribe the cores
            os.environ.setdefault(var, "1")  # inherited by the workers, read when they import numpy
        if getattr(opt, "dist", "no") == "no":
            opt.dist = "load"  # hands out the collection in order: heavy tests (sorted first) start first
            if getattr(opt, "maxschedchunk", None) is None:
                opt.maxschedchunk = 1  # one test at a time, so the heavy ones spread over all workers
    return None


#: Test functions that take many seconds each on a GPU with a cold kernel cache (profiling every fpA_intB
#: tactic, the fuzz shards, sweeps over many kernel specialisations), heaviest first by their mean duration per
#: case in a cold 16-worker run on an H200 (2026-12-01). ``pytest_collection_modifyitems`` runs them first in
#: this order and the workers take tests one at a time (``--maxschedchunk 1``), so the long ones start early
#: on every worker instead of queueing on a few.
HEAVY_TESTS = (
    "test_gpu_m_chunked", "test_op_matches_oracle", "test_debug_line",
    "test_gpu_capture_after_warmup_and_unprofiled_bucket", "test_fuzz_vs_oracle", "test_gpu_fpa_intb_matches_oracle",
    "test_workers_protocol_in_subprocesses", "test_sweep_tiny_low_bits", "test_w2_onehot_decode_exact",
    "test_mixed_gemm_loads_stay_behind_their_guards", "test_beyond_2_31", "test_w4_gpu_shapes",
    "test_fp32_accumulation", "test_bitwise_reproducible", "test_bench_mixed_gemm_tiny", "test_gpu_l2_prefetch",
    "test_w2_gpu_shapes", "test_nan_inf_propagation", "test_w4_onehot_decode_exact", "test_w2_small_m",
    "test_w8_gpu_shapes", "test_gemv_mma_variants", "test_mixed_gemm_every_tactic_gpu",
    "test_mixed_gemm_gpu_m_sweep", "test_mixed_gemm_8bit_matches_reference", "test_w4_small_m",
    "test_gemv_mma_low_bits", "test_mixed_gemm_split_k",
)
_HEAVY_RANK = {name: i for i, name in enumerate(HEAVY_TESTS)}

EXHAUSTIVE_ENV = "NUMBA_NBITS_TEST_EXHAUSTIVE"
exhaustive = pytest.mark.exhaustive


def heavy_first(items: list) -> list:
    """``items`` with the ``HEAVY_TESTS`` ones first, in that tuple's order (the cases of one function in
    their collected order), then the others in their collected order (a stable sort by rank)."""
    return sorted(items, key=lambda it: _HEAVY_RANK.get(getattr(it, "originalname", it.name), len(HEAVY_TESTS)))


def pytest_configure(config):
    config.addinivalue_line("markers", "exhaustive: part of the exhaustive GPU matrix; runs only with "
                            f"{EXHAUSTIVE_ENV}=1")


def pytest_collection_modifyitems(config, items):
    """Heavy tests first (``heavy_first``); cases marked ``exhaustive`` skip unless ``NUMBA_NBITS_TEST_EXHAUSTIVE=1``."""
    items[:] = heavy_first(items)
    if os.environ.get(EXHAUSTIVE_ENV, "0") != "1":
        skip = pytest.mark.skip(reason=f"exhaustive GPU matrix: set {EXHAUSTIVE_ENV}=1 to run it")
        for it in items:
            if it.get_closest_marker("exhaustive"):
                it.add_marker(skip)


def pytest_report_header(config):
    workers = getattr(config.option, "numprocesses", None)
    where = "CUDA simulator (no GPU found)" if SIMULATED else "real GPU"
    return f"numba_nbits: {where}" + (f"; {workers} worker processes ({WORKERS_ENV})" if workers else "")


@pytest.fixture
def rng(request):
    """A generator seeded per test (fresh data per test, reproducible per test id)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


def pythonpath_with(root) -> str:
    """``PYTHONPATH`` for a child process: ``root`` first, then the parent's entries (where packages installed
    with ``pip --target`` live, e.g. a numba-cuda-mlir or numpy the parent imports)."""
    return os.pathsep.join([str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def run_compiler(compiler: str, *args: str, timeout: int = 900):
    """``python ARGS`` in a process of its own whose kernels ``compiler`` builds (``NUMBA_NBITS_BACKEND``, ``numba`` or
    ``mlir``; ``NUMBA_ENABLE_CUDASIM=0``: no GPU needed for PTX), from the repository root: the finished
    ``subprocess.CompletedProcess`` (text output captured, ``timeout`` s at most)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_NBITS_BACKEND=compiler, PYTHONPATH=pythonpath_with(root))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=root)


def run_mlir_script(script: str):
    """``script`` run by ``python -c`` under numba-cuda-mlir (``run_compiler``)."""
    return run_compiler("mlir", "-c", script)


def run_benchmark(name: str, *args: str, out):
    """``python -m benchmarks.<name> <args>`` from the repository root with ``$OUT`` set to ``out`` (the script's CSVs
    land there): the finished ``subprocess.CompletedProcess`` (text output captured, 600 s at most)."""
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=Path(__file__).resolve().parents[1],
                          env=dict(os.environ, OUT=str(out)), capture_output=True, text=True, timeout=600)


#: The start of a script that compiles with numba-cuda's own pipeline in a process of its own (the suite may run on the
#: simulator, which has none): exits with "SKIP ..." where numba-cuda cannot import or compile (numpy too new), answers
#: the current-device query with compute capability 9.0 without a GPU, and defines ``ir(kernel)``: the LLVM IR of a
#: ``launch.Kernel`` compiled for sm_90a, with per-compilation symbols and counters normalised. Only LLVM IR is
#: produced: no NVVM or GPU is needed. ``run_offline_ir_script`` runs it.
OFFLINE_IR_PREAMBLE = r'''
import re, sys
try:
    import numba.cuda.dispatcher as dispatcher
except (ImportError, AttributeError) as e:  # numba-cuda cannot run with this numpy (numba-cuda-mlir's users)
    print(f"SKIP numba-cuda does not import here: {type(e).__name__}: {e}"); sys.exit(0)
from numba_nbits.backend import numba_can_compile
if not numba_can_compile():
    import numpy
    print(f"SKIP numba-cuda does not compile with numpy {numpy.__version__} here"); sys.exit(0)
from numba import cuda
if not cuda.is_available():
    class _Device:
        compute_capability = (9, 0)
    dispatcher.get_current_device = lambda: _Device()
from numba.cuda import types
from numba.cuda.compiler import compile_cuda


def ir(k):
    cres = compile_cuda(k.pyfunc, types.void, k.argtypes, debug=False, lineinfo=False, fastmath=False,
                        nvvm_options={"opt": 3}, cc=(9, 0, "a"))
    text = re.sub(r"_Z[A-Za-z0-9_$]+", "SYM", cres.library.get_llvm_str())
    return re.sub(r"(_cudapy_smem_|\$)[0-9]+", r"\1N", text)  # per-compilation counters
'''


#: A small kernel of nested loops, branches, early exits and variables assigned on several paths (phis, back edges),
#: with a device function inlined twice, as the source text of a compile script (``cuda`` and ``types`` of the
#: script's compiler in scope): ``branchy`` and ``_Branchy``, a kernel description (name, pyfunc, argtypes, options)
#: beside the library's. The typing / data-flow / lowering replacements are checked on it for both compilers.
BRANCHY_KERNEL = r'''
@cuda.jit(device=True, forceinline=True)
def halve_minus(t, j):
    return t * 0.5 - j


def branchy(x, y, n):
    i = cuda.grid(1)
    if i >= x.size:
        return
    acc = 0.0
    t = x[i]
    j = 0
    while j < n:
        if t > 0:
            t = halve_minus(t, j)
            k = 0
            while k < j:
                acc += t
                if acc > 100.0:
                    break
                k += 1
        elif t < -10:
            acc -= halve_minus(t, 1)
            t = -t
        else:
            t += 1.0
            continue
        j += 1
    y[i] = acc + t


class _Branchy:
    name = "branchy"
    pyfunc = staticmethod(branchy)
    argtypes = (types.float32[::1], types.float32[::1], types.int32)
    options = {}
'''


#: The start of a script that compiles to PTX with the compiler ``NUMBA_NBITS_BACKEND`` names (numba or mlir) in a
#: process of its own (``offline_ptx_env``), through ``numba_nbits.backend.compile_ptx``: answers the current-device
#: query with compute capability 9.0 without a GPU (``benchmarks.ptx_stats._fake_device``) and prints
#: ``{"skip": ...}`` and exits where that compiler cannot run here (numba-cuda with numpy >= 2.5).
OFFLINE_PTX_PREAMBLE = r'''
import json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
try:
    from benchmarks.ptx_stats import _fake_device
    _fake_device()
    from numba_nbits import backend
except (ImportError, AttributeError) as e:  # numba-cuda cannot run with this numpy (numba-cuda-mlir's users)
    print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
if backend.compiler() == "numba" and not backend.numba_can_compile():  # numba-cuda 0.30 cannot with numpy >= 2.5
    import numpy
    print(json.dumps({"skip": f"numba-cuda does not compile under numpy {numpy.__version__}"})); sys.exit(0)
'''


def offline_ptx_env(compiler: str) -> dict:
    """The environment of an ``OFFLINE_PTX_PREAMBLE`` script compiling with ``compiler`` ("numba" or "mlir"; the test
    is skipped when numba-cuda-mlir is asked for and not installed), the repository first on ``PYTHONPATH``."""
    from pathlib import Path

    if compiler == "mlir":
        pytest.importorskip("numba_cuda_mlir")
    return dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_NBITS_BACKEND=compiler,
                PYTHONPATH=pythonpath_with(Path(__file__).resolve().parents[1]))


def run_offline_ir_script(body: str, timeout: int) -> str:
    """Run ``OFFLINE_IR_PREAMBLE + body`` with numba-cuda as the compiler (``NUMBA_ENABLE_CUDASIM=0``,
    ``NUMBA_NBITS_BACKEND=numba``) and the repository first on ``PYTHONPATH``; its standard output. The test fails on a
    non-zero exit (with the script's standard error) and is skipped where the script says ``SKIP``."""
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", NUMBA_NBITS_BACKEND="numba",
               PYTHONPATH=pythonpath_with(Path(__file__).resolve().parents[1]))
    r = subprocess.run([sys.executable, "-c", OFFLINE_IR_PREAMBLE + body], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    if r.stdout.startswith("SKIP "):
        pytest.skip(r.stdout[5:].strip())
    return r.stdout


def to_dev(x):
    """numba device copy of a host array; bf16 goes through uint16 bits (numba cannot copy ml_dtypes
    bfloat16 host arrays on a real GPU: its host_pointer rejects them)."""
    from numba import cuda

    if not SIMULATED and x.dtype.name == "bfloat16":
        return cuda.to_device(np.ascontiguousarray(x).view(np.uint16)).view(x.dtype)
    return cuda.to_device(x)


def to_host(d):
    """Host copy of a numba device array (bf16 through uint16 bits, see ``to_dev``)."""
    if not SIMULATED and d.dtype.name == "bfloat16":
        return d.view(np.uint16).copy_to_host().view(d.dtype)
    return d.copy_to_host()



def refuse_cublas_if_asked(monkeypatch, environ) -> bool:
    """With ``NUMBA_NBITS_TEST_SKIP_CUBLAS=1`` in ``environ``, replace ``numba_nbits.dispatch.cublas.gemm``
    by a ``pytest.skip`` (for the current test, through ``monkeypatch``); True when it did."""
    if environ.get("NUMBA_NBITS_TEST_SKIP_CUBLAS", "0") != "1":
        return False
    from numba_nbits.dispatch import cublas

    def refuse(*args, **kwargs):
        pytest.skip("NUMBA_NBITS_TEST_SKIP_CUBLAS=1: reaches a cuBLAS GEMM (initcheck cannot see its stores)")

    monkeypatch.setattr(cublas, "gemm", refuse)
    return True


@pytest.fixture(autouse=True)
def _skip_cublas_gemm_when_asked(monkeypatch):
    """``NUMBA_NBITS_TEST_SKIP_CUBLAS=1`` (set by ``gpu_sanitize.sh`` for initcheck): a test that reaches a
    cuBLAS GEMM is skipped there, at the call. compute-sanitizer's initcheck does not see cuBLAS's stores
    on the H200, so every later read of a cuBLAS-written output is reported as uninitialised (evidence:
    docs/reliability.md, "initcheck and cuBLAS"); memcheck and
    racecheck run those tests. (The simulator never calls ``gemm``: its GEMM step is ``gemm_host``.)"""
    refuse_cublas_if_asked(monkeypatch, os.environ)
