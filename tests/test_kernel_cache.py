"""The compiled-kernel cache of ``launch.py``: keys (fingerprints), the on-disk store, the knobs, and on a
GPU the load path (a second ``Kernel`` of the same specialisation loads the cubin instead of compiling
and computes the same bytes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu, to_dev, to_host

from numba_nbits import config as C
from numba_nbits import launch
from numba_nbits.kernels import bias as bias_mod_global

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ----------------------------------------------------------------------------- fingerprints

_FP_SCRIPT = r"""
import hashlib, sys
from numba_nbits import launch
from numba_nbits.kernels import bias, dequant, gemv_mma, mixed_gemm
ks = [gemv_mma.gemv_mma_kernel("float16", 1, gemv_mma.Tactic.parse("t2w8u1"), 128, "none"),
      gemv_mma.gemv_mma_kernel("bfloat16", 2, gemv_mma.Tactic.parse("t2w8u1"), 32, "packed"),
      mixed_gemm.mixed_gemm_kernel("float16", next(iter(mixed_gemm.TACTICS.values())), 128, "typed", True, 80, 4),
      dequant.dequant_kernel(4, "float16", "packed", False), bias.bias_add_kernel("bfloat16")]
for k in ks:
    fp = launch.fingerprint(k.pyfunc)
    print(k.name, hashlib.sha256(fp.encode()).hexdigest(), launch._UNSTABLE in fp)
"""


def _fingerprints(hashseed: str) -> list[str]:
    env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=ROOT)
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
    fp = launch.fingerprint
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
    assert launch._UNSTABLE in fp(_factory(obj))
    # recursion through self-references terminates
    lst = [1]
    lst.append(lst)
    assert fp(_factory(lst)) == fp(_factory(lst))


def test_key_depends_on_name_argtypes_options_and_marks_process_local_parts(monkeypatch):
    from numba.cuda import types

    cache = launch._KernelCache("/nonexistent")
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


def test_package_fingerprint_covers_every_module(monkeypatch):
    monkeypatch.setitem(launch._CACHE_STATE, "package", None)
    monkeypatch.delitem(launch._CACHE_STATE, "package")
    fp = launch._package_fingerprint()
    assert len(fp) == 64 and launch._package_fingerprint() == fp


# ----------------------------------------------------------------------------- the store


def test_store_and_load_roundtrip_and_every_mismatch_is_a_miss(tmp_path):
    from numba.cuda import types

    cache = launch._KernelCache(str(tmp_path / "kc"))
    cache._toolchain = "tc"
    k = launch.Kernel(_factory(1), (types.float32[::1],), name="kern")
    key = "ab" + "0" * 62
    assert cache.load(key) is None and cache.misses == 1
    cubin = bytes(range(256)) * 3 + b"\n\n"  # newlines inside the payload are fine
    cache.store(key, k, "_Z4kern", cubin)
    assert cache.load(key) == ("_Z4kern", cubin) and cache.hits == 1 and cache.stores == 1
    path = cache.path(key)
    assert path.startswith(str(tmp_path / "kc" / "ab"))
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temp file left behind
    head = json.loads(open(path, "rb").read().partition(b"\n")[0])
    assert head["kernel"] == "kern" and head["size"] == len(cubin) and head["toolchain"] == "tc"
    # a truncated file, a file under another key, and garbage are misses, not errors
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-5])
    assert cache.load(key) is None
    other = "ab" + "1" * 62
    open(cache.path(other), "wb").write(data)
    assert cache.load(other) is None
    open(path, "wb").write(b"not json\n123")
    assert cache.load(key) is None


def test_store_into_an_unwritable_place_is_silent(tmp_path):
    from numba.cuda import types

    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = launch._KernelCache(str(blocker / "sub"))  # a directory under a file cannot be made
    cache._toolchain = "tc"
    cache.store("cd" + "0" * 62, launch.Kernel(_factory(1), (types.float32[::1],)), "e", b"123")
    assert cache.stores == 0 and cache.load("cd" + "0" * 62) is None


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
    assert names == [C.ENV_KERNEL_CACHE, C.ENV_KERNEL_CACHE_DIR]
    assert not set(names) & set(C.ENV_VARS)  # not operator knobs: Config never reads them


def test_simulator_has_no_kernel_cache():
    if not SIMULATED:
        pytest.skip("simulator only")
    assert launch._kernel_cache() is None


# ----------------------------------------------------------------------------- GPU


@requires_gpu
def test_gpu_second_kernel_loads_the_cubin_and_computes_the_same(tmp_path, monkeypatch, rng):
    """A fresh cache: the first ``Kernel`` compiles and stores, a second ``Kernel`` of the same
    specialisation (what another process would build) loads the cubin; both give the same bytes,
    registers and dynamic-shared-memory handling."""
    from numba import cuda

    from numba_nbits.kernels import bias

    cache = launch._KernelCache(str(tmp_path / "kc"))
    monkeypatch.setitem(launch._CACHE_STATE, "cache", cache)
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
    _entry_name = "_Z6kernel"

    def get_cubin(self, cc=None):  # numba-cuda 0.30 returns a cuda.core ObjectCode
        from cuda.core import ObjectCode

        return ObjectCode.from_cubin(b"CUBIN-" + bytes(str(cc), "ascii"))


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

    monkeypatch.setattr(launch, "_SIMULATED", False)
    monkeypatch.setattr(launch, "_current_cc", lambda: (9, 0))
    monkeypatch.setattr(cuda, "current_context", lambda: _Ctx(), raising=False)
    cache = launch._KernelCache(str(tmp_path / "kc"))
    cache._toolchain = "tc"
    monkeypatch.setitem(launch._CACHE_STATE, "cache", cache)
    _CountingKernel.compiles = 0
    argtypes = (types.float32[::1], types.int64)

    k1 = _CountingKernel(_factory(1), argtypes, name="k")
    k1.ensure()
    assert _CountingKernel.compiles == 1 and not k1.from_cache and cache.stores == 1 and int(k1._func) == 0x1234
    k2 = _CountingKernel(_factory(1), argtypes, name="k")
    k2.ensure()
    assert _CountingKernel.compiles == 1 and k2.from_cache and loaded == [b"CUBIN-(9, 0)"]
    assert int(k2._func) == 0x5000 + len(b"CUBIN-(9, 0)") and k2._layout is not None
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
    monkeypatch.setitem(launch._CACHE_STATE, "cache", None)
    k5 = _CountingKernel(_factory(1), argtypes, name="k")
    k5.ensure()
    assert _CountingKernel.compiles == 4 and not k5.from_cache
