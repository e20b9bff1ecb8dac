"""The compiled-kernel cache: cubins on disk, keyed by everything a kernel is compiled from.

numba's pipeline (typing, lowering, NVVM) takes seconds per specialisation, and a process compiles
dozens (the fpA_intB profiler compiles every tactic of a bucket). On a GPU, ``Kernel.ensure``
(``launch/kernel.py``) writes each compiled kernel's cubin to a directory
(``NUMBA_NBITS_KERNEL_CACHE_DIR``, default ``~/.cache/numba_nbits/kernels``; ``NUMBA_NBITS_KERNEL_CACHE=0``
turns it off), one file per key, ``<dir>/<key[:2]>/<key>.cubin``; a later ``Kernel`` with the same key,
in this or another process, loads the cubin instead of compiling: on numba-cuda through numba's context
(``create_module_image`` + ``get_function``, what numba does with its own cubins), on numba-cuda-mlir
through the driver (``cuModuleLoadData``; ``backend.py`` selects the compiler).

**The key** is a sha256 over the cache format, the source of the modules kernels are built from
(``KERNEL_SOURCES``: ``kernels/``, ``launch/`` and the package modules they import, so editing a report
formatter keeps every compiled kernel), the toolchain (the backend's name and package version, numba /
numba-cuda / NVVM versions, driver version, compute capability), the kernel's name, argument types and jit options, and
``fingerprint(pyfunc)``: a structural description of the Python function (its bytecode, constants,
closure values and the globals it names, recursively through the functions it calls, so closures of
one factory with different constants get different keys). A value the fingerprint cannot describe
stably (an object whose ``repr`` is its address) makes the key unique to the process: never a wrong
hit, only a miss.

**Trust.** The directory is a place code is loaded from, so it is private and checked the way ssh
checks its keys:

* it is created (with any missing parents) with mode 0700; an existing one (followed when it is a
  symlink; its parents are not checked) that is owned by another user, group- or world-writable, or
  not a directory turns the cache off for the process: one ``KernelCacheWarning`` names the directory
  and the reason, ``_kernel_cache()`` is then None and ``_CACHE_STATE["refused"]`` says why;
* a file is loaded only when it and its key directory are opened without following symlinks, are a
  regular file / a directory, are owned by this user and are not group- or world-writable;
* each file's header carries the payload size and a sha256 over the format, key, entry name and
  cubin, so a truncated, bit-flipped or foreign file is caught before its bytes reach the driver.

Any such file is a miss (``rejects`` / ``last_reject`` say why) and the kernel is compiled again; a
cubin the driver still rejects is counted in ``errors`` / ``last_error``. Files are written
atomically (a temp file created 0600, then renamed over the name), so concurrent processes share the
directory safely.
"""
from __future__ import annotations

import enum
import hashlib
import json
import os
import stat
import threading
import types as _pytypes
from typing import TYPE_CHECKING

import numpy as np

from .. import backend
from .driver import _current_cc, _drv, simulated

if TYPE_CHECKING:  # annotations only: kernel.py imports this module
    from .kernel import Kernel


_CACHE_FORMAT = "numba_nbits-kernel-cache-2"
# "cache": the process's _KernelCache or None (resolved once); "refused": why it is off; "sources": the
# kernel sources' fingerprint (computed once)
_CACHE_STATE: dict = {}
_UNSTABLE = "@@id@@"  # marks a fingerprint part that names an object by its address


#: What kernels are built from, relative to the package directory: the kernel families, the launcher and
#: every package module they import (at module level or inside functions, directly or through each other).
#: ``tests/test_kernel_cache.py`` checks this against a static scan of those imports.
KERNEL_SOURCES = ("kernels", "launch", "dispatch", "arrays.py", "backend.py", "config.py", "formats.py",
                  "lowering_fix.py", "typing_memo.py", "dataflow_fix.py", "mlir_fix.py",
                  "mlir_layout.py", "nvvm_prepass.py", "scratch.py", "lanes.py")
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernel_source_files(root: str = _PACKAGE_DIR) -> list[str]:
    """The ``.py`` files of ``KERNEL_SOURCES`` under the package directory ``root``, as sorted relative paths."""
    files = []
    for entry in KERNEL_SOURCES:
        path = os.path.join(root, entry)
        if entry.endswith(".py"):
            files.append(entry)
            continue
        for d, dirs, names in os.walk(path):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            files += [os.path.relpath(os.path.join(d, f), root) for f in names if f.endswith(".py")]
    return sorted(files)


def sources_fingerprint(root: str = _PACKAGE_DIR) -> str:
    """sha256 over the relative path and bytes of every kernel source file under ``root``."""
    h = hashlib.sha256()
    for rel in kernel_source_files(root):
        h.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as fh:
            h.update(fh.read())
        h.update(b"\0")
    return h.hexdigest()


def _sources_fingerprint() -> str:
    """``sources_fingerprint()`` of this package, computed once per process."""
    fp = _CACHE_STATE.get("sources")
    if fp is None:
        fp = _CACHE_STATE["sources"] = sources_fingerprint(_PACKAGE_DIR)
    return fp


def _code_names(code) -> list:
    """co_names of a code object and of the code objects nested in its constants."""
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, _pytypes.CodeType):
            names += _code_names(c)
    return names


def fingerprint(obj, _memo=None, _depth=0) -> str:
    """A text that changes whenever ``obj`` would compile differently: for a function its bytecode,
    constants, defaults, closure values and the globals it names, recursively (functions, numba
    dispatchers and intrinsics through the Python functions behind them). Values it cannot describe
    stably give ``@@id@@<type>:<address>``, which makes the key unique to this process."""
    memo = {} if _memo is None else _memo
    if _depth > 40:
        return f"{_UNSTABLE}deep:{id(obj)}"
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, _pytypes.ModuleType):
        return f"module:{obj.__name__}"
    oid = id(obj)
    if oid in memo:
        return f"ref:{memo[oid]}"
    memo[oid] = len(memo)
    rec = lambda v: fingerprint(v, memo, _depth + 1)  # noqa: E731
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}(" + ",".join(rec(v) for v in obj) + ")"
    if isinstance(obj, (set, frozenset)):
        return f"{type(obj).__name__}(" + ",".join(sorted(rec(v) for v in obj)) + ")"
    if isinstance(obj, dict):
        return "dict(" + ",".join(sorted(f"{rec(k)}={rec(v)}" for k, v in obj.items())) + ")"
    if isinstance(obj, _pytypes.CodeType):
        return (f"code:{obj.co_name}:{obj.co_code.hex()}:{obj.co_argcount}:{obj.co_flags}:"
                + rec(tuple(obj.co_consts)) + ":" + ",".join(obj.co_names) + ":" + ",".join(obj.co_freevars))
    if isinstance(obj, _pytypes.FunctionType):
        cells = tuple(c.cell_contents for c in (obj.__closure__ or ()))
        g = obj.__globals__
        names = set(_code_names(obj.__code__))
        named = sorted(n for n in names if n in g)
        # ``mod.NAME`` of one of this package's modules is frozen into the kernel at compile time like a
        # global: fingerprint those attributes too (all co_names the module has; over-inclusive is fine)
        attrs = []
        for n in named:
            m = g[n]
            if isinstance(m, _pytypes.ModuleType) and m.__name__.startswith("numba_nbits"):
                attrs += [f"{n}.{a}={rec(getattr(m, a))}" for a in sorted(names) if hasattr(m, a)]
        return (f"fn:{obj.__module__}.{obj.__qualname__}:" + rec(obj.__code__) + ":defaults" + rec(obj.__defaults__)
                + ":kwdefaults" + rec(obj.__kwdefaults__) + ":closure" + rec(cells)
                + ":globals(" + ",".join(f"{n}={rec(g[n])}" for n in named) + ")"
                + ":attrs(" + ",".join(attrs) + ")")
    if isinstance(obj, np.ndarray):
        return f"ndarray:{obj.dtype}:{obj.shape}:{hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()}"
    if isinstance(obj, (np.generic, np.dtype)):
        return f"{type(obj).__name__}:{obj!r}"
    if hasattr(obj, "py_func") and callable(getattr(obj, "py_func")):  # numba dispatchers (jit, device fns)
        return f"dispatcher:{type(obj).__name__}:" + rec(obj.py_func) + rec(getattr(obj, "targetoptions", None))
    if hasattr(obj, "_defn") and callable(getattr(obj, "_defn")):  # numba @intrinsic
        return f"intrinsic:{type(obj).__name__}:" + rec(obj._defn)
    if isinstance(obj, type):
        return f"type:{obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, enum.Enum):
        return f"enum:{type(obj).__module__}.{type(obj).__qualname__}.{obj.name}"
    if isinstance(obj, (_pytypes.BuiltinFunctionType, np.ufunc)):
        return f"builtin:{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', obj.__name__)}"
    try:
        from numba.core import types as _nt

        if isinstance(obj, _nt.Type):
            return f"nbtype:{obj}"
    except ImportError:  # pragma: no cover
        pass
    if dataclasses_fields := getattr(type(obj), "__dataclass_fields__", None):
        return (f"dataclass:{type(obj).__module__}.{type(obj).__qualname__}("
                + ",".join(f"{n}={rec(getattr(obj, n))}" for n in sorted(dataclasses_fields)) + ")")
    if type(obj).__module__.startswith("llvmlite."):  # ir.IntType(32) etc.: their str is the LLVM type
        return f"llvm:{type(obj).__qualname__}:{obj}"
    r = repr(obj)
    if " at 0x" in r or r.startswith("<"):
        return f"{_UNSTABLE}{type(obj).__qualname__}:{oid}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}:{r}"


class KernelCacheWarning(RuntimeWarning):
    """The compiled-kernel cache is off for this process (its directory cannot be created or is not private)."""


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _make_private_dirs(path: str) -> None:
    """Create ``path`` and each missing parent with mode 0700 (``os.makedirs`` gives its mode to the leaf
    only); directories that exist are left as they are (the caller checks them)."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.lexists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:  # another process made it first: checked like any existing directory
            continue
        os.chmod(d, 0o700)  # exactly 0700 whatever the umask


def _untrusted(st: os.stat_result, what: str) -> str | None:
    """Why a file or directory with stat ``st`` may have been written by another user (so nothing read
    from it is loaded), or None: it is owned by another uid, or group- or world-writable."""
    uid = os.getuid()
    if st.st_uid != uid:
        return f"{what} is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & 0o022:
        return f"{what} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


class _Reject(Exception):
    """A cache file that is present but not loaded (untrusted, truncated or corrupt): a miss with a reason."""


def _digest(key: str, entry: str, cubin: bytes) -> str:
    """sha256 over what a load trusts from a file: the format, the key, the entry name and the cubin."""
    h = hashlib.sha256(f"{_CACHE_FORMAT}\0{key}\0{entry}\0".encode())
    h.update(cubin)
    return h.hexdigest()


class _KernelCache:
    """cubins on disk under a directory; one file per key (see the module docstring)."""

    def __init__(self, directory: str):
        self.dir = directory
        self.hits = self.misses = self.stores = self.errors = self.rejects = 0
        self.last_error = None  # repr of the last exception that made the cache fall back to compiling
        self.last_reject = None  # "<path>: <why>" of the last file that was present but not loaded
        self.refused = None  # why the directory is not used (then the cache is off), once open() ran
        self._open = None  # None until open() ran, then whether the directory is usable
        self._toolchain = None

    def note_error(self, exc: BaseException) -> None:
        self.errors += 1
        self.last_error = repr(exc)

    def open(self) -> bool:
        """Create the directory (and missing parents) with mode 0700 and check it, once: False, with
        ``refused`` / ``last_error`` set and one ``KernelCacheWarning``, when it cannot be created, is not a
        directory, is owned by another user or is group- or world-writable (then loads and stores do
        nothing)."""
        if self._open is None:
            try:
                _make_private_dirs(self.dir)
                st = os.stat(self.dir)
                why = None if stat.S_ISDIR(st.st_mode) else "it is not a directory"
                why = why or _untrusted(st, "it")
            except OSError as e:
                why = f"it cannot be created or read ({e})"
            self._open = why is None
            if why is not None:
                self.refused = why
                self.last_error = f"kernel cache directory {self.dir!r} refused: {why}"
                import warnings

                warnings.warn(f"numba_nbits: the compiled-kernel cache is off for this process: directory "
                              f"{self.dir!r} refused: {why}; kernels are compiled every time (if it is yours, "
                              f"`chmod -R go-w` it; or point NUMBA_NBITS_KERNEL_CACHE_DIR at a directory only "
                              f"you can write, or set NUMBA_NBITS_KERNEL_CACHE=0 to turn the cache off)",
                              KernelCacheWarning, stacklevel=2)
        return self._open

    def toolchain(self) -> str:
        if self._toolchain is None:
            import numba
            from numba.cuda.cudadrv import nvvm

            try:
                import numba.cuda as nc

                ncv = getattr(nc, "__version__", "")
            except Exception:  # pragma: no cover
                ncv = ""
            try:
                from importlib.metadata import version

                ncv = ncv or version("numba-cuda")
            except Exception:  # pragma: no cover
                pass
            err, drvver = _drv().cuDriverGetVersion()
            self._toolchain = (f"backend={backend.version()};numba={numba.__version__};numba-cuda={ncv};"
                               f"nvvm={nvvm.NVVM().get_version()};driver={drvver};cc={_current_cc()}")
        return self._toolchain

    def key(self, k: Kernel) -> str:
        fp = fingerprint(k.pyfunc)
        if _UNSTABLE in fp:  # something only this process can name: no cross-process key
            fp += f";process={os.getpid()}"
        h = hashlib.sha256()
        for part in (_CACHE_FORMAT, _sources_fingerprint(), self.toolchain(), k.name, repr(k.argtypes),
                     fingerprint(dict(k.options)), repr(k.snap), backend.prepass_state(k.prepass), fp):
            h.update(part.encode() + b"\0")
        return h.hexdigest()

    def path(self, key: str) -> str:
        return os.path.join(self.dir, key[:2], key + ".cubin")

    def _read(self, key: str) -> bytes | None:
        """The bytes of the file of ``key``: None when there is none; ``_Reject`` when its directory or the
        file is a symlink, not a directory / regular file, or may have been written by another user."""
        sub = os.path.dirname(self.path(key))
        try:
            dfd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:  # ELOOP / ENOTDIR: a symlink or a file where the directory should be
            raise _Reject(f"directory {sub} cannot be opened without following links ({e.strerror})") from None
        try:
            why = _untrusted(os.fstat(dfd), f"directory {sub}")
            if why:
                raise _Reject(why)
            try:  # O_NONBLOCK: a FIFO planted under the name must not block the open
                fd = os.open(os.path.basename(self.path(key)), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                             | _O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                return None
            except OSError as e:  # ELOOP: a symlink
                raise _Reject(f"cannot be opened without following links ({e.strerror})") from None
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _Reject("not a regular file")
            why = _untrusted(st, "the file")
            if why:
                raise _Reject(why)
            return f.read()

    def load(self, key: str):
        """(entry name, cubin bytes), or None (a miss) for a missing file and for a file that is untrusted
        (symlink, not a regular file, another user's, group/world-writable; so is its directory), truncated
        or corrupt (its header's size and sha256 do not match); ``rejects`` / ``last_reject`` say why."""
        if not self.open():
            return None
        try:
            data = self._read(key)
            if data is None:
                self.misses += 1
                return None
            head, sep, cubin = data.partition(b"\n")
            try:
                meta = json.loads(head)
            except ValueError:
                meta = None
            if not sep or not isinstance(meta, dict):
                raise _Reject("corrupt: no header")
            if meta.get("format") != _CACHE_FORMAT or meta.get("key") != key:
                raise _Reject("corrupt: header of another format or key")
            entry = meta.get("entry")
            if len(cubin) != meta.get("size"):
                raise _Reject(f"truncated or corrupt: {len(cubin)} payload bytes, header says {meta.get('size')}")
            if not isinstance(entry, str) or meta.get("sha256") != _digest(key, entry, cubin):
                raise _Reject("corrupt: sha256 mismatch")
        except (_Reject, OSError) as e:
            self.misses += 1
            self.rejects += 1
            self.last_reject = f"{self.path(key)}: {e}"
            return None
        self.hits += 1
        return entry, cubin

    def store(self, key: str, k: Kernel, entry: str, cubin: bytes) -> None:
        """Write the file of ``key`` atomically: a temp file created 0600, then renamed over the name."""
        if not self.open():
            return
        cubin = bytes(cubin)
        meta = {"format": _CACHE_FORMAT, "key": key, "kernel": k.name, "entry": entry, "size": len(cubin),
                "sha256": _digest(key, entry, cubin), "toolchain": self.toolchain()}
        path = self.path(key)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            try:
                os.mkdir(os.path.dirname(path), 0o700)
            except FileExistsError:  # a file a load would refuse is not worth writing
                st = os.lstat(os.path.dirname(path))
                if not stat.S_ISDIR(st.st_mode) or _untrusted(st, "directory"):
                    return
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o600)
        except OSError:  # a read-only or full disk: compiling again next time is the only cost
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(meta).encode() + b"\n" + cubin)
            os.replace(tmp, path)  # atomic: readers see the old file, no file, or the whole new one
            self.stores += 1
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _cubin_bytes(image) -> bytes:
    """The bytes of what numba's ``get_cubin`` returned (numba-cuda 0.30: a cuda.core ``ObjectCode``)."""
    return bytes(getattr(image, "code", image))


def _object_code(cubin: bytes):
    """A cubin from the cache as what numba's ``create_module_image`` loads (a cuda.core ``ObjectCode``)."""
    from cuda.core import ObjectCode

    return ObjectCode.from_cubin(cubin)


def _kernel_cache():
    """The process's kernel cache (None when turned off, under the simulator, or when its directory is
    refused: then ``_CACHE_STATE["refused"]`` says why); env read and directory checked once."""
    if "cache" not in _CACHE_STATE:
        from ..config import kernel_cache_dir

        d = None if simulated() else kernel_cache_dir(os.environ)
        cache = _KernelCache(d) if d else None
        if cache is not None and not cache.open():  # warned once; the reason stays in "refused"
            _CACHE_STATE["refused"] = cache.last_error
            cache = None
        _CACHE_STATE["cache"] = cache
    return _CACHE_STATE["cache"]
