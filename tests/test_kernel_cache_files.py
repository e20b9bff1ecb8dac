"""The compiled-kernel cache's files (``launch/cache.py``): the store, the trust checks on the directory and
on every file (who could have written it), and integrity (truncated or corrupt files are misses)."""
from __future__ import annotations

import json
import os
import stat

import pytest

from numba_nbits import config as C
from numba_nbits import launch
from numba_nbits.launch import cache as kcache
from numba_nbits.launch import driver as launch_driver


def _factory(c):
    def kern(x):
        return x + c
    return kern


# ----------------------------------------------------------------------------- the store


def test_store_and_load_roundtrip_and_every_mismatch_is_a_miss(tmp_path):
    from numba.cuda import types

    cache = kcache._KernelCache(str(tmp_path / "kc"))
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
    cache = kcache._KernelCache(str(blocker / "sub"))  # a directory under a file cannot be made
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

    cache = kcache._KernelCache(str(tmp_path / directory))
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
    fresh = kcache._KernelCache(cache.dir)
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
    fresh = kcache._KernelCache(cache.dir)
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
    monkeypatch.setattr(launch_driver, "_SIMULATED", False)
    monkeypatch.setenv(C.ENV_KERNEL_CACHE_DIR, str(bad))
    monkeypatch.delenv(C.ENV_KERNEL_CACHE, raising=False)
    monkeypatch.delitem(kcache._CACHE_STATE, "cache", raising=False)
    monkeypatch.delitem(kcache._CACHE_STATE, "refused", raising=False)
    with pytest.warns(launch.KernelCacheWarning, match="world-writable"):
        assert kcache._kernel_cache() is None
    assert str(bad) in kcache._CACHE_STATE["refused"] and kcache._kernel_cache() is None
    # a private directory that does not exist yet is created and used
    good = tmp_path / "new" / "kc"
    monkeypatch.setenv(C.ENV_KERNEL_CACHE_DIR, str(good))
    monkeypatch.delitem(kcache._CACHE_STATE, "cache")
    assert isinstance(kcache._kernel_cache(), kcache._KernelCache) and _mode(good) == 0o700


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
