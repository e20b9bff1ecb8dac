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
  compile, allocate or synchronise asks it first and raises ``CaptureError`` instead.
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


def is_capturing(stream_handle: int) -> bool:
    """Whether ``stream_handle`` is capturing a CUDA graph (always False under the simulator)."""
    if _SIMULATED or (_SIMULATED is None and simulated()):
        return False
    drv = _drv()
    res = drv.cuStreamIsCapturing(drv.CUstream(stream_handle))
    if int(res[0]) == _CUDA_ERROR_INVALID_CONTEXT:  # a thread with no current context: make one, ask again
        _make_context_current()
        res = drv.cuStreamIsCapturing(drv.CUstream(stream_handle))
    if int(res[0]) == _CUDA_ERROR_NOT_INITIALIZED:
        return False
    status = check(res, "cuStreamIsCapturing")
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _current_cc() -> tuple[int, int]:
    """The compute capability of the current context's device."""
    from numba import cuda

    return tuple(cuda.current_context().device.compute_capability)


class CaptureError(RuntimeError):
    """Raised when a call would compile, allocate or synchronise while a CUDA graph is captured."""
