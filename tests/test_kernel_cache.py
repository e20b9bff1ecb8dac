"""The compiled-kernel cache (``launch/cache.py``): keys (fingerprints, what the key covers), the knobs,
``Kernel.ensure`` with a stand-in GPU, and on a GPU the load path (a second ``Kernel`` of the same
specialisation loads the cubin instead of compiling and computes the same bytes). Its files (store,
trust, integrity): ``test_kernel_cache_files.py``."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SIMULATED, pythonpath_with, requires_gpu, to_dev, to_host
from test_imports import import_graph, reachable

from numba_nbits import backend
from numba_nbits import config as C
from numba_nbits import launch
from numba_nbits.kernels import bias as bias_mod_global
from numba_nbits.launch import cache as kcache
from numba_nbits.launch import driver as launch_driver
from numba_nbits.launch import kernel as launch_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ----------------------------------------------------------------------------- fingerprints

_FP_SCRIPT = r"""
import hashlib, sys
from numba_nbits.launch import cache as kcache
from numba_nbits.kernels import bias, dequant, mixed_gemm
from numba_nbits.kernels.gemv import mma as gemv_mma
from numba_nbits.kernels.gemv.tactics import Tactic
ks = [gemv_mma.gemv_mma_kernel("float16", 1, Tactic.parse("t2w8u1"), 128, "none"),
      gemv_mma.gemv_mma_kernel("bfloat16", 2, Tactic.parse("t2w8u1"), 32, "packed"),
      mixed_gemm.mixed_gemm_kernel("float16", next(iter(mixed_gemm.TACTICS.values())), 128, "typed", True, 80, 4),
      dequant.dequant_kernel(4, "float16", "packed", False), bias.bias_add_kernel("bfloat16")]
for k in ks:
    fp = kcache.fingerprint(k.pyfunc)
    print(k.name, hashlib.sha256(fp.encode()).hexdigest(), kcache._UNSTABLE in fp)
"""


def _fingerprints(hashseed: str) -> list[str]:
    env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=pythonpath_with(ROOT))
    out = subprocess.run([sys.executable, "-c", _FP_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split("\n")


def test_fingerprints_of_real_kernels_are_stable_across_processes_and_distinct():
    """Two processes (different hash seeds) give every kernel the same fingerprint, with no part named by
    an address (which would make the cache miss every time), and different kernels differ."""
    a, b = _fingerprints("1"), _fingerprints("2")
    assert a == b
    rows = [line.split() for line in a if line.strip()]
    assert len(rows) == 5
    assert all(r[2] == "False" for r in rows), rows
    assert len({r[1] for r in rows}) == 5


def _factory(c):
    def kern(x):
        return x + c
    return kern


def _helper_a(x):
    return x + 1


def _helper_b(x):
    return x + 2


def _uses_a(x):
    return _helper_a(x)


def _reads_module_constant(x):
    return x + bias_mod_global.THREADS


def test_fingerprint_tells_closures_globals_and_constants_apart():
    fp = kcache.fingerprint
    assert fp(_factory(1)) == fp(_factory(1))
    assert fp(_factory(1)) != fp(_factory(2))
    assert fp(_factory(1)) != fp(_factory(1.0))  # type matters: int vs float constants compile differently
    assert fp(_factory((1, 2))) != fp(_factory((1, 3)))
    assert fp(_factory(np.arange(4))) != fp(_factory(np.arange(1, 5)))
    # a function the kernel calls is fingerprinted through its body
    before = fp(_uses_a)
    g = _uses_a.__globals__
    original = g["_helper_a"]
    g["_helper_a"] = g["_helper_b"]
    try:
        assert fp(_uses_a) != before
    finally:
        g["_helper_a"] = original
    assert fp(_uses_a) == before
    # an attribute of one of the package's modules, read as mod.NAME, is part of it too
    before = fp(_reads_module_constant)
    threads = bias_mod_global.THREADS
    bias_mod_global.THREADS = threads * 2
    try:
        assert fp(_reads_module_constant) != before
    finally:
        bias_mod_global.THREADS = threads
    assert fp(_reads_module_constant) == before
    # a value with an address-based repr makes the fingerprint process-local, never a shared key
    obj = object()
    assert kcache._UNSTABLE in fp(_factory(obj))
    # recursion through self-references terminates
    lst = [1]
    lst.append(lst)
    assert fp(_factory(lst)) == fp(_factory(lst))


def test_key_depends_on_name_argtypes_options_and_marks_process_local_parts(monkeypatch):
    from numba.cuda import types

    cache = kcache._KernelCache("/nonexistent")
    monkeypatch.setattr(cache, "toolchain", lambda: "toolchain-x")
    k1 = launch.Kernel(_factory(1), (types.float32[::1],), name="k")
    k2 = launch.Kernel(_factory(1), (types.float32[::1],), name="k")
    assert cache.key(k1) == cache.key(k2)
    assert cache.key(k1) != cache.key(launch.Kernel(_factory(1), (types.float16[::1],), name="k"))
    assert cache.key(k1) != cache.key(launch.Kernel(_factory(1), (types.float32[::1],), name="k2"))
    assert cache.key(k1) != cache.key(launch.Kernel(_factory(1), (types.float32[::1],), name="k", fastmath=True))
    assert cache.key(k1) != cache.key(launch.Kernel(_factory(2), (types.float32[::1],), name="k"))
    key_x = cache.key(k2)
    monkeypatch.setattr(cache, "toolchain", lambda: "toolchain-y")  # another driver / numba / device
    assert cache.key(k2) != key_x
    # an address-named part: the key gets the process id
    obj = object()
    k3 = launch.Kernel(_factory(obj), (types.float32[::1],), name="k")
    monkeypatch.setattr(os, "getpid", lambda: 1)
    a = cache.key(k3)
    monkeypatch.setattr(os, "getpid", lambda: 2)
    assert cache.key(k3) != a


def _module_of(rel: str) -> str:
    """``kernels/bias.py`` -> ``numba_nbits.kernels.bias`` (a package's ``__init__.py`` -> the package)."""
    parts = ["numba_nbits"] + rel[:-len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_kernel_sources_are_the_modules_kernels_import():
    """``KERNEL_SOURCES`` covers exactly the package modules the kernel families and the launcher reach
    through their imports (inside functions too): editing one of them changes every key, editing any
    other module (the operator, the front ends, the perf tooling) changes none."""
    graph = import_graph(module_level=False)
    start = [m for m in graph if m.startswith("numba_nbits.kernels")] + ["numba_nbits.launch.kernel"]
    reached = reachable(graph, start)
    covered = {_module_of(f) for f in kcache.kernel_source_files()}
    assert not reached - covered, ("kernels import modules the cache key does not cover; add them to "
                                   f"launch.cache.KERNEL_SOURCES: {sorted(reached - covered)}")
    assert not covered - reached, ("launch.cache.KERNEL_SOURCES covers modules no kernel imports: "
                                   f"{sorted(covered - reached)}")
    assert {"numba_nbits.perf.report", "numba_nbits.op", "numba_nbits.torch"}.isdisjoint(covered)
    assert {"numba_nbits.kernels.bias", "numba_nbits.launch.kernel", "numba_nbits.formats"} <= covered


def test_key_changes_with_a_kernel_module_and_not_with_a_report_formatter(tmp_path, monkeypatch):
    """In a copy of the package: editing ``perf/report.py`` (or the operator) keeps the key, editing a
    kernel module or the launcher changes it; the process computes the sources' fingerprint once."""
    import shutil

    from numba.cuda import types

    pkg = tmp_path / "numba_nbits"
    shutil.copytree(os.path.join(ROOT, "numba_nbits"), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    fp = kcache._sources_fingerprint()
    assert len(fp) == 64 and kcache._sources_fingerprint() == fp == kcache.sources_fingerprint()
    assert kcache.sources_fingerprint(str(pkg)) == fp  # the copy has the same sources
    monkeypatch.setattr(kcache, "_PACKAGE_DIR", str(pkg))
    monkeypatch.setitem(kcache._CACHE_STATE, "sources", None)  # restored after the test
    cache = kcache._KernelCache("/nonexistent")
    monkeypatch.setattr(cache, "toolchain", lambda: "toolchain-x")
    k = launch.Kernel(_factory(1), (types.float32[::1],), name="k")

    def key_after_editing(*files):
        for f in files:
            (pkg / f).write_text((pkg / f).read_text() + "\n# edited\n")
        kcache._CACHE_STATE["sources"] = None  # as in a new process
        return cache.key(k)

    base = key_after_editing()
    assert key_after_editing("perf/report.py", "op.py") == base
    edited = key_after_editing("kernels/bias.py")
    assert edited != base
    assert key_after_editing("launch/kernel.py") not in (base, edited)


# ----------------------------------------------------------------------------- knobs


def test_kernel_cache_dir_knobs(tmp_path):
    home = os.path.expanduser("~")
    assert C.kernel_cache_dir({}) == os.path.join(home, ".cache", "numba_nbits", "kernels")
    assert C.kernel_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == str(tmp_path / "numba_nbits" / "kernels")
    assert C.kernel_cache_dir({C.ENV_KERNEL_CACHE_DIR: str(tmp_path / "k")}) == str(tmp_path / "k")
    for off in ("0", "false", "False"):
        assert C.kernel_cache_dir({C.ENV_KERNEL_CACHE: off, C.ENV_KERNEL_CACHE_DIR: "/x"}) is None
    for on in ("1", "true", "", " "):
        assert C.kernel_cache_dir({C.ENV_KERNEL_CACHE: on, C.ENV_KERNEL_CACHE_DIR: "/x"}) == "/x"
    with pytest.raises(ValueError, match='environment variable - name: "NUMBA_NBITS_KERNEL_CACHE", value: "maybe"'):
        C.kernel_cache_dir({C.ENV_KERNEL_CACHE: "maybe"})
    names = [r.name for r in C.PROCESS_ENV_TABLE]
    assert names == [C.ENV_KERNEL_CACHE, C.ENV_KERNEL_CACHE_DIR, C.ENV_BACKEND]
    assert not set(names) & set(C.ENV_VARS)  # not operator knobs: Config never reads them


def test_simulator_has_no_kernel_cache():
    if not SIMULATED:
        pytest.skip("simulator only")
    assert kcache._kernel_cache() is None


# ----------------------------------------------------------------------------- GPU


@requires_gpu
def test_gpu_second_kernel_loads_the_cubin_and_computes_the_same(tmp_path, monkeypatch, rng):
    """A fresh cache: the first ``Kernel`` compiles and stores, a second ``Kernel`` of the same
    specialisation (what another process would build) loads the cubin; both give the same bytes,
    registers and dynamic-shared-memory handling."""
    from numba import cuda

    from numba_nbits.kernels import bias

    cache = kcache._KernelCache(str(tmp_path / "kc"))
    monkeypatch.setitem(kcache._CACHE_STATE, "cache", cache)
    k1 = launch.Kernel(bias._make_bias_add("float16"), bias.bias_add_kernel("float16").argtypes,
                       name="bias_add_cache_test")
    k1.ensure()
    assert not k1.from_cache and cache.stores == 1, (cache.errors, cache.last_error)
    k2 = launch.Kernel(bias._make_bias_add("float16"), k1.argtypes, name="bias_add_cache_test")
    k2.ensure()
    assert k2.from_cache and cache.hits == 1 and k2.registers() == k1.registers(), (cache.errors, cache.last_error)
    y0 = rng.standard_normal((4, 96)).astype(np.float16)
    b = rng.standard_normal(96).astype(np.float16)
    outs = []
    for k in (k1, k2):
        y = to_dev(y0.copy())
        k.bind(1, 256, (launch_arg(y), launch_arg(to_dev(b)), y0.size, 96)).launch(0)
        cuda.synchronize()
        outs.append(to_host(y))
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
    ref = (y0.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(outs[1].view(np.uint16), ref.view(np.uint16))
    assert k2.dispatcher() is not None  # numba's dispatcher is still available on demand


def launch_arg(a):
    """A device array as the flat DevArray the bias kernel takes."""
    from numba_nbits.arrays import DevArray, adapt_input

    d = adapt_input(a, "x", False, False).dev
    n = int(np.prod(d.shape))
    return DevArray(d.ptr, (n,), (d.dtype.itemsize,), d.dtype, d.owner)


# ----------------------------------------------------------------------------- ensure(), with a stand-in GPU


class _FakeLib:
    """numba-cuda 0.30's code library as the launcher meets it: ``get_cufunc`` built and loaded the cubin of
    the device's own target (``get_cubin()``, cc None: ``(9, 0, "a")`` on an sm_90 GPU); any other ``cc`` is
    a second compilation, which for a wgmma kernel ptxas refuses (plain sm_90)."""
    _entry_name = "_Z6kernel"

    def get_cubin(self, cc=None):  # numba-cuda 0.30 returns a cuda.core ObjectCode
        from cuda.core import ObjectCode

        if cc is not None:
            raise RuntimeError(f"ptxas: wgmma is not supported on {cc} (a second compilation)")
        return ObjectCode.from_cubin(b"CUBIN-(9, 0, 'a')")


class _FakeOverload:
    _codelibrary = _FakeLib()


class _FakeDisp:
    overloads = {"sig": _FakeOverload()}


class _FakeFunc:
    def __init__(self, handle):
        self.handle = handle


class _FakeModule:
    def __init__(self, image, fail):
        if fail:
            raise RuntimeError("cuModuleLoadData failed")
        self.image = image

    def get_function(self, name):
        return _FakeFunc(0x5000 + len(self.image))


class _CountingKernel(launch.Kernel):
    compiles = 0

    def dispatcher(self):  # what numba's compile + get_cufunc would do on a GPU
        if self._disp is None:
            _CountingKernel.compiles += 1
            self._disp = _FakeDisp()
            if self._func is None:
                self._set_function(_FakeFunc(0x1234))
        return self._disp


@pytest.mark.skipif(backend.compiler() == "mlir",
                    reason="fakes numba-cuda's dispatcher; numba-cuda-mlir's compile, store and load path is "
                           "tests/test_backend.py::test_launcher_compiles_caches_loads_and_packs_for_numba_cuda_mlir")
def test_ensure_compiles_stores_then_loads_and_falls_back_on_a_bad_cubin(tmp_path, monkeypatch):
    from numba import cuda
    from numba.cuda import types

    loaded = []

    class _Ctx:
        fail = False

        def create_module_image(self, image):  # numba-cuda 0.30 loads a cuda.core ObjectCode
            assert image.code_type == "cubin"
            image = image.code
            loaded.append(image)
            return _FakeModule(image, _Ctx.fail)

    monkeypatch.setattr(launch_driver, "_SIMULATED", False)
    monkeypatch.setattr(launch_kernel, "_current_cc", lambda: (9, 0))
    monkeypatch.setattr(cuda, "current_context", lambda: _Ctx(), raising=False)
    cache = kcache._KernelCache(str(tmp_path / "kc"))
    cache._toolchain = "tc"
    monkeypatch.setitem(kcache._CACHE_STATE, "cache", cache)
    _CountingKernel.compiles = 0
    argtypes = (types.float32[::1], types.int64)

    k1 = _CountingKernel(_factory(1), argtypes, name="k")
    k1.ensure()
    assert _CountingKernel.compiles == 1 and not k1.from_cache and cache.stores == 1 and int(k1._func) == 0x1234
    k2 = _CountingKernel(_factory(1), argtypes, name="k")
    k2.ensure()
    assert _CountingKernel.compiles == 1 and k2.from_cache and loaded == [b"CUBIN-(9, 0, 'a')"]
    assert int(k2._func) == 0x5000 + len(b"CUBIN-(9, 0, 'a')") and k2._layout is not None
    k2.ensure()  # idempotent
    assert len(loaded) == 1
    # another specialisation: a miss, compiled and stored under its own key
    k3 = _CountingKernel(_factory(2), argtypes, name="k")
    k3.ensure()
    assert _CountingKernel.compiles == 2 and cache.stores == 2
    # a cubin the driver rejects: compiled instead, counted as a cache error
    _Ctx.fail = True
    k4 = _CountingKernel(_factory(1), argtypes, name="k")
    k4.ensure()
    assert _CountingKernel.compiles == 3 and not k4.from_cache and cache.errors == 1 and int(k4._func) == 0x1234
    # the cache turned off: always compiled
    monkeypatch.setitem(kcache._CACHE_STATE, "cache", None)
    k5 = _CountingKernel(_factory(1), argtypes, name="k")
    k5.ensure()
    assert _CountingKernel.compiles == 4 and not k5.from_cache
