"""The compiled-kernel cache of ``launch.py``: keys (fingerprints), the on-disk store, the knobs, and on a
GPU the load path (a second ``Kernel`` of the same specialisation loads the cubin instead of compiling
and computes the same bytes)."""
from __future__ import annotations

import json
import os
import stat
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
from numba_nbits.kernels import bias, dequant, mixed_gemm
from numba_nbits.kernels.gemv import mma as gemv_mma
from numba_nbits.kernels.gemv.tactics import Tactic
ks = [gemv_mma.gemv_mma_kernel("float16", 1, Tactic.parse("t2w8u1"), 128, "none"),
      gemv_mma.gemv_mma_kernel("bfloat16", 2, Tactic.parse("t2w8u1"), 32, "packed"),
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
    with pytest.warns(launch.KernelCacheWarning, match="cannot be created"):
        cache.store("cd" + "0" * 62, launch.Kernel(_factory(1), (types.float32[::1],)), "e", b"123")
    assert cache.stores == 0 and cache.load("cd" + "0" * 62) is None and "cannot be created" in cache.refused


# ----------------------------------------------------------------------------- trust: who could have written it

_KEY = "ef" + "0" * 62
_CUBIN = bytes(range(256)) * 2 + b"\n"


def _stored(tmp_path, directory="kc"):
    """A cache under ``tmp_path/directory`` holding one good file for ``_KEY``; (cache, its path)."""
    from numba.cuda import types

    cache = launch._KernelCache(str(tmp_path / directory))
    cache._toolchain = "tc"
    cache.store(_KEY, launch.Kernel(_factory(1), (types.float32[::1],), name="kern"), "_Z4kern", _CUBIN)
    assert cache.stores == 1
    return cache, cache.path(_KEY)


def _mode(path):
    return os.lstat(path).st_mode & 0o777


def test_directory_its_missing_parents_and_files_are_created_private(tmp_path):
    """Created under a umask of 0 (which would leave them 0777 / 0666): every directory the cache makes is
    0700 and every file 0600, and the good file is a hit with the stored bytes."""
    old = os.umask(0)
    try:
        cache, path = _stored(tmp_path, "cache_root/numba_nbits/kernels")
    finally:
        os.umask(old)
    for d in ("cache_root", "cache_root/numba_nbits", "cache_root/numba_nbits/kernels",
              "cache_root/numba_nbits/kernels/ef"):
        assert _mode(tmp_path / d) == 0o700, d
    assert _mode(path) == 0o600
    assert cache.load(_KEY) == ("_Z4kern", _CUBIN) and cache.hits == 1 and cache.rejects == 0
    assert cache.refused is None and cache.last_error is None


@pytest.mark.parametrize("mode,why", [(0o770, "group- or world-writable (mode 0770)"),
                                      (0o757, "group- or world-writable (mode 0757)")], ids=["0770", "0757"])
def test_group_or_world_writable_directory_is_refused_once(tmp_path, mode, why):
    """An existing cache directory others can write to: the cache is off (no load, no store) with one
    KernelCacheWarning naming the directory and the reason, kept in ``refused`` / ``last_error``."""
    cache, path = _stored(tmp_path)
    fresh = launch._KernelCache(cache.dir)
    fresh._toolchain = "tc"
    os.chmod(cache.dir, mode)
    with pytest.warns(launch.KernelCacheWarning) as rec:
        assert fresh.load(_KEY) is None
    assert len(rec) == 1 and cache.dir in str(rec[0].message) and why in str(rec[0].message)
    assert why in fresh.refused and cache.dir in fresh.last_error and why in fresh.last_error
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the second use is silent
        assert fresh.load(_KEY) is None
        fresh.store("ee" + "0" * 62, launch.Kernel(_factory(1), ()), "e", b"x")
    assert fresh.hits == 0 and fresh.stores == 0 and not os.path.exists(fresh.path("ee" + "0" * 62))


def test_directory_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    cache, path = _stored(tmp_path)
    fresh = launch._KernelCache(cache.dir)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # the files are now another user's
    with pytest.warns(launch.KernelCacheWarning, match=f"owned by uid {uid}, not by this user"):
        assert fresh.open() is False
    assert fresh.load(_KEY) is None and fresh.hits == 0 and "owned by uid" in fresh.last_error


def test_refused_directory_turns_the_process_cache_off(tmp_path, monkeypatch):
    """``_kernel_cache()`` (on a GPU) returns None for a refused directory and says why."""
    bad = tmp_path / "kc"
    bad.mkdir()
    os.chmod(bad, 0o777)
    monkeypatch.setattr(launch, "_SIMULATED", False)
    monkeypatch.setenv(C.ENV_KERNEL_CACHE_DIR, str(bad))
    monkeypatch.delenv(C.ENV_KERNEL_CACHE, raising=False)
    monkeypatch.delitem(launch._CACHE_STATE, "cache", raising=False)
    monkeypatch.delitem(launch._CACHE_STATE, "refused", raising=False)
    with pytest.warns(launch.KernelCacheWarning, match="world-writable"):
        assert launch._kernel_cache() is None
    assert str(bad) in launch._CACHE_STATE["refused"] and launch._kernel_cache() is None
    # a private directory that does not exist yet is created and used
    good = tmp_path / "new" / "kc"
    monkeypatch.setenv(C.ENV_KERNEL_CACHE_DIR, str(good))
    monkeypatch.delitem(launch._CACHE_STATE, "cache")
    assert isinstance(launch._kernel_cache(), launch._KernelCache) and _mode(good) == 0o700


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666], ids=["0620", "0602", "0666"])
def test_group_or_world_writable_file_is_a_miss(tmp_path, mode):
    cache, path = _stored(tmp_path)
    os.chmod(path, mode)
    assert cache.load(_KEY) is None and cache.misses == 1 and cache.rejects == 1
    assert path in cache.last_reject and f"group- or world-writable (mode {mode:04o})" in cache.last_reject
    os.chmod(path, 0o600)
    assert cache.load(_KEY) == ("_Z4kern", _CUBIN)  # the same bytes, private again: a hit


def _fstat_owned_by_another(monkeypatch, kind):
    """os.fstat reporting another uid as the owner of every regular file (kind "file") or directory
    ("dir"), the rest unchanged."""
    real = os.fstat
    test = stat.S_ISREG if kind == "file" else stat.S_ISDIR

    def fstat(fd):
        st = real(fd)
        if not test(st.st_mode):
            return st
        fields = list(st[:10])
        fields[4] = st.st_uid + 1000  # st_uid
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fstat)


@pytest.mark.parametrize("kind,what", [("file", "the file"), ("dir", "directory")])
def test_file_or_key_directory_owned_by_another_user_is_a_miss(tmp_path, monkeypatch, kind, what):
    cache, path = _stored(tmp_path)
    assert cache.open()
    _fstat_owned_by_another(monkeypatch, kind)
    assert cache.load(_KEY) is None and cache.rejects == 1 and cache.hits == 0
    assert what in cache.last_reject
    assert f"owned by uid {os.getuid() + 1000}, not by this user" in cache.last_reject
    monkeypatch.undo()
    assert cache.load(_KEY) == ("_Z4kern", _CUBIN)


def test_symlinked_file_or_key_directory_is_a_miss(tmp_path):
    """A valid file for the key, reached through a symlink (to the file or to its directory), is not loaded."""
    cache, path = _stored(tmp_path)
    elsewhere = tmp_path / "elsewhere.cubin"
    os.replace(path, elsewhere)
    os.symlink(elsewhere, path)
    assert cache.load(_KEY) is None and cache.rejects == 1 and "without following links" in cache.last_reject
    os.unlink(path)
    os.replace(elsewhere, path)
    assert cache.load(_KEY) == ("_Z4kern", _CUBIN)
    sub = os.path.dirname(path)
    os.replace(sub, tmp_path / "elsewhere_dir")
    os.symlink(tmp_path / "elsewhere_dir", sub)
    assert cache.load(_KEY) is None and cache.rejects == 2 and "without following links" in cache.last_reject
    assert cache.hits == 1
    cache.store(_KEY, launch.Kernel(_factory(1), ()), "_Z4kern", _CUBIN)  # not written through the link
    assert cache.stores == 1 and os.listdir(tmp_path / "elsewhere_dir") == [os.path.basename(path)]


def test_a_fifo_under_the_name_is_a_miss_without_blocking(tmp_path):
    """A FIFO planted under the name is neither waited on nor read. (A thread opens its writing end as soon
    as a reader blocks on it, so a load that did block fails this test instead of hanging it.)"""
    import threading
    import time

    cache, path = _stored(tmp_path)
    os.unlink(path)
    os.mkfifo(path, 0o600)
    done = threading.Event()

    def unblock():
        while not done.is_set():
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO until a reader is waiting
                return
            except OSError:
                time.sleep(0.02)

    t = threading.Thread(target=unblock, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        assert cache.load(_KEY) is None
    finally:
        done.set()
        t.join(5)
    assert "not a regular file" in (cache.last_reject or "") and time.monotonic() - t0 < 1.0


# ----------------------------------------------------------------------------- integrity: truncated / corrupt


def test_truncated_file_is_a_miss_at_every_length(tmp_path):
    cache, path = _stored(tmp_path)
    data = open(path, "rb").read()
    head_len = data.index(b"\n")
    for n in sorted({0, 1, head_len // 2, head_len, head_len + 1, len(data) // 2, len(data) - 1}):
        with open(path, "wb") as f:
            f.write(data[:n])
        os.chmod(path, 0o600)
        rejects = cache.rejects
        assert cache.load(_KEY) is None, n
        assert cache.rejects == rejects + 1 and ("truncated" in cache.last_reject or "corrupt" in cache.last_reject)
    assert cache.hits == 0


def test_bit_flipped_payload_or_header_is_a_miss(tmp_path):
    """A flipped bit the size check cannot see (payload, entry name) is caught by the header's sha256
    before the bytes could reach the driver; the same file restored is a hit."""
    cache, path = _stored(tmp_path)
    data = open(path, "rb").read()
    head_len = data.index(b"\n")

    def write(b):
        with open(path, "wb") as f:
            f.write(b)

    for pos in (head_len + 1, head_len + 100, len(data) - 1):
        flipped = bytearray(data)
        flipped[pos] ^= 0x01
        write(bytes(flipped))
        assert cache.load(_KEY) is None and "sha256 mismatch" in cache.last_reject, pos
    write(data.replace(b'"_Z4kern"', b'"_Z4kerm"'))  # another entry name, still valid JSON
    assert cache.load(_KEY) is None and "sha256 mismatch" in cache.last_reject
    meta = json.loads(data[:head_len])
    meta["sha256"] = "0" * 64
    write(json.dumps(meta).encode() + data[head_len:])
    assert cache.load(_KEY) is None and "sha256 mismatch" in cache.last_reject
    write(data)
    assert cache.load(_KEY) == ("_Z4kern", _CUBIN) and cache.hits == 1 and cache.rejects == 5


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
