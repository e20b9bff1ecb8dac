"""The CUDA driver as the launcher uses it: simulator detection, cuda-bindings, CUresult checks, the
capture query.

* ``simulated()`` says whether numba runs on its CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba
  is imported). numba fixes that at import, so it is read once; under the simulator nothing in this
  package touches a driver.
* ``_drv()`` is ``cuda.bindings.driver``, imported on first use (importing the package does no device
  work). ``check(result, what)`` takes the ``(CUresult, values...)`` tuple a cuda-bindings call returns
  and gives back the values (None, the one value, or a tuple of them), or raises
  ``RuntimeError("<what> failed: <driver's error name> (<number>)")``; every driver call of the package
  goes through it.
* A thread whose first CUDA call is one of ours has no current context, and the driver answers
  CUDA_ERROR_INVALID_CONTEXT (201). ``_make_context_current`` then makes numba's context current on
  the thread (what numba's own calls do on first use) and the caller makes its call once more.
* ``is_capturing(stream)`` asks ``cuStreamIsCapturing`` whether a stream is capturing a CUDA graph (False
  when CUDA was never initialised in the process, so no stream can be capturing). Work that would
  compile, allocate or synchronise asks it first and raises ``CaptureError`` instead. After its first
  answer it asks through ``lean_driver()`` where cuda-bindings has that module (0.15 against 0.73 us per
  query on an H100 host, cuda-bindings 13.5): the steady-state path asks it on every call into a
  non-zero stream.
"""
from __future__ import annotations

_SIMULATED = None


def simulated() -> bool:
    """True when numba runs on its CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before import)."""
    global _SIMULATED
    if _SIMULATED is None:
        from numba.cuda.core import config

        _SIMULATED = bool(config.ENABLE_CUDASIM)  # fixed once numba is imported
    return _SIMULATED


_CUDA_ERROR_INVALID_CONTEXT = 201  # what the driver answers on a thread with no current context
_CUDA_ERROR_NOT_INITIALIZED = 3  # cuInit never ran in this process (so no stream exists to capture)


def _make_context_current() -> None:
    """Make numba's context current on this thread (what numba's own calls do on first use), so a
    thread whose first CUDA call is one of ours still works."""
    from numba import cuda

    cuda.current_context()


_DRIVER = None  # cuda.bindings.driver once imported


def _drv():
    """``cuda.bindings.driver``, imported on first use and then kept: a function-level
    ``from cuda.bindings import driver`` costs about a microsecond on every call (the import system's
    ``fromlist`` handling), and every launch and capture query asks for the module."""
    global _DRIVER
    d = _DRIVER
    if d is None:
        from cuda.bindings import driver

        d = _DRIVER = driver
    return d


def check(result, what: str):
    """Raise RuntimeError if a cuda-bindings call returned an error; return the remaining values."""
    err = result[0]
    if int(err) != 0:
        try:
            drv = _drv()
            _, name = drv.cuGetErrorName(drv.CUresult(int(err)))
            name = name.decode() if isinstance(name, bytes) else name
        except Exception:  # no driver to name it: the number still says what failed
            name = "CUDA error"
        raise RuntimeError(f"{what} failed: {name} ({int(err)})")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


_LEAN = None  # cuda.bindings' integer-handle driver module (``_v2``), False where it is missing


def lean_driver():
    """``cuda.bindings._v2.driver`` (in cuda-bindings 13.5): the driver functions taking and returning plain
    integer handles, raising ``DriverError`` subclasses instead of returning a ``CUresult``; None where the
    installed cuda-bindings has no such module (13.3 has none). The steady-state path's two per-call driver
    calls (the capture query, ``CallGraph``'s graph launch) go through it: no handle object is built and no
    result tuple unpacked per call."""
    global _LEAN
    d = _LEAN
    if d is None:
        try:
            from cuda.bindings._v2 import driver as d
            d.stream_is_capturing, d.graph_launch, d.DriverError  # noqa: B018  (the three this package uses)
        except (ImportError, AttributeError):
            d = False
        _LEAN = d
    return d or None


_IS_CAPTURING = None  # lean_driver().stream_is_capturing once a first query found the driver up


def is_capturing(stream_handle: int) -> bool:
    """Whether ``stream_handle`` is capturing a CUDA graph (always False under the simulator)."""
    f = _IS_CAPTURING
    if f is not None:
        try:
            return f(stream_handle) != 0  # CU_STREAM_CAPTURE_STATUS_NONE is 0
        except Exception:  # e.g. no current context on this thread: the general query answers or raises
            pass
    if _SIMULATED or (_SIMULATED is None and simulated()):
        return False
    return _is_capturing(stream_handle)


def _is_capturing(stream_handle: int) -> bool:
    """``is_capturing`` through ``cuStreamIsCapturing`` with its error handling; the first success makes
    later queries take the lean driver's call."""
    global _IS_CAPTURING
    drv = _drv()
    res = drv.cuStreamIsCapturing(drv.CUstream(stream_handle))
    if int(res[0]) == _CUDA_ERROR_INVALID_CONTEXT:  # a thread with no current context: make one, ask again
        _make_context_current()
        res = drv.cuStreamIsCapturing(drv.CUstream(stream_handle))
    if int(res[0]) == _CUDA_ERROR_NOT_INITIALIZED:
        return False
    status = check(res, "cuStreamIsCapturing")
    if _IS_CAPTURING is None:
        lean = lean_driver()
        if lean is not None:
            _IS_CAPTURING = lean.stream_is_capturing
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _current_cc() -> tuple[int, int]:
    """The compute capability of the current context's device."""
    from numba import cuda

    return tuple(cuda.current_context().device.compute_capability)


class CaptureError(RuntimeError):
    """Raised when a call would compile, allocate or synchronise while a CUDA graph is captured."""
