"""Call typing remembered within one compile of ours: the same call types are not resolved again and again.

numba's type inference resolves every call of a function by trying the function's typing templates on the
argument types (``BaseFunction.get_call_type``: the template order, one ``apply`` per template, literal and
non-literal argument variants). The generated kernels are long unrolled blocks of the same few calls on the same
argument types (``np.uint32(...)``, ``fma2``, ``lop3``, ``mma`` ...): in the warpgroup GEMM at 16 m-tiles about
three calls in four repeat a (function, argument types) pair seen before in the same kernel, and resolving them
is the largest part of the front end (``benchmarks/results/2026-12-05-cpu-typing-memo``).

``install()`` wraps ``BaseFunction.get_call_type`` (only the exact method it was written against: its source
hash) so that, while ``active()`` is entered in the calling thread, a resolved signature is remembered per
(function type, typing context, argument types, keyword argument types) and given back for a repeat; outside
``active()``, e.g. for a user's own ``@njit`` functions, the method behaves exactly as numba's. A failed
resolution raises as before and is not remembered; a function type whose implementation key for the signature
is not recorded (another instance of an equal type) resolves again. Each ``active()`` block starts with an empty
memo, so nothing is carried from one compile to the next. The resolution is a pure function of those inputs for
the templates our kernels use, and the LLVM IR of real kernels is byte-identical with and without it
(``tests/test_typing_memo.py``). ``backend`` installs it and enters ``active()`` around numba-cuda's compiles.

numba-cuda-mlir types calls through its own copy of the method (``numba_cuda_mlir.numba_cuda.types.functions``; the
same steps, its template order taken without numba's target lookup): ``install_mlir()`` wraps that one the same way
(its own source hash, ``mlir_status()``), and ``backend`` enters ``active()`` around numba-cuda-mlir's compiles too.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from .lowering_fix import source_sha256

#: sha256 of ``inspect.getsource(numba.core.types.functions.BaseFunction.get_call_type)`` (numba 0.68.0 / 0.68.1)
KNOWN_SOURCE_SHA256 = {"0.68": "6559c167bfc0ad36ab4af049ed2f2b9ddc28ce1eedbc2e3462b69b62079e850e"}
#: the same for numba-cuda-mlir's copy (``numba_cuda_mlir.numba_cuda.types.functions``), numba-cuda-mlir 0.6.0
KNOWN_MLIR_SOURCE_SHA256 = {"0.6": "c6cfb07dc7fe3d00c44c7f1fbb93adeb09edf9256ef760d4faae5fd6873fe988"}

_LOCK = threading.Lock()
_TLS = threading.local()
_state = {"done": False, "installed": False, "reason": "not tried", "original": None}
_mlir_state = {"done": False, "installed": False, "reason": "not tried", "original": None}


def _memo_get_call_type(self, context, args, kws):
    """``BaseFunction.get_call_type`` with this thread's ``active()`` memo (module docstring)."""
    return _memoised(_state["original"], self, context, args, kws)


def _memo_get_call_type_mlir(self, context, args, kws):
    """numba-cuda-mlir's ``BaseFunction.get_call_type`` with this thread's ``active()`` memo."""
    return _memoised(_mlir_state["original"], self, context, args, kws)


def _memoised(original, self, context, args, kws):
    memo = getattr(_TLS, "memo", None)
    if memo is None:
        return original(self, context, args, kws)
    try:
        key = (self, context, args, tuple(sorted(kws.items())) if kws else ())
        sig = memo.get(key)
    except TypeError:  # an unhashable argument type: resolve as numba does
        return original(self, context, args, kws)
    if sig is not None and sig.args in self._impl_keys:
        _TLS.hits += 1
        return sig
    sig = original(self, context, args, kws)
    memo[key] = sig
    return sig


@contextmanager
def active():
    """Remember call typing in this thread for the block (a fresh memo; the previous one restored after)."""
    saved = getattr(_TLS, "memo", None), getattr(_TLS, "hits", 0)
    _TLS.memo, _TLS.hits = {}, 0
    try:
        yield
    finally:
        _TLS.memo, _TLS.hits = saved


def hits() -> int:
    """Repeats answered from the memo so far in this thread's current ``active()`` block."""
    return getattr(_TLS, "hits", 0)


def install() -> bool:
    """Wrap the method if it is the one this module was written against; True when the wrapper is in place.
    Idempotent and thread-safe; ``status()`` says why not."""

    def load():
        import numba
        from numba.core.types import functions

        return f"numba {numba.__version__}", functions

    return _install(_state, "numba", load, KNOWN_SOURCE_SHA256, _memo_get_call_type)


def _install(state: dict, name: str, load, known: dict, wrapper) -> bool:
    """``install`` / ``install_mlir``: ``load()`` imports package ``name`` and gives (its name and version, its
    types.functions module), whose ``BaseFunction.get_call_type`` is wrapped by ``wrapper`` if its source hash is among
    ``known``'s."""
    with _LOCK:
        if state["done"]:
            return state["installed"]
        state["done"] = True
        try:
            who, functions = load()
        except ImportError as e:
            state["reason"] = f"{name} not importable: {e}"
            return False
        original = functions.BaseFunction.get_call_type
        if source_sha256(original) not in known.values():
            state["reason"] = f"{who}: BaseFunction.get_call_type is not the known one"
            return False
        state["original"] = original
        functions.BaseFunction.get_call_type = wrapper
        state["installed"] = True
        state["reason"] = f"installed on {who}"
        return True


def status() -> str:
    """Whether ``install`` wrapped the method, and why (not)."""
    return _state["reason"]


def install_mlir() -> bool:
    """``install()`` for numba-cuda-mlir's copy of the method; ``mlir_status()`` says why not."""

    def load():
        from numba_cuda_mlir import __version__ as version
        from numba_cuda_mlir.numba_cuda.types import functions

        return f"numba-cuda-mlir {version}", functions

    return _install(_mlir_state, "numba-cuda-mlir", load, KNOWN_MLIR_SOURCE_SHA256, _memo_get_call_type_mlir)


def mlir_status() -> str:
    """Whether ``install_mlir`` wrapped numba-cuda-mlir's method, and why (not)."""
    return _mlir_state["reason"]
