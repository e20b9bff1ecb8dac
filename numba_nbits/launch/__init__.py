"""The fast launcher: compile each kernel specialisation once, launch it with pre-packed parameters.

An ordinary numba launch (``kernel[grid, block, stream](*args)``) types the arguments, looks up the
overload and builds the parameter buffer on every call: tens of microseconds of host time, more than a
decode GEMV takes on the GPU. This package removes that cost. Its modules, bottom up:

* ``driver``: simulator detection, cuda-bindings access, CUresult checks (``check``), the capture query
  (``is_capturing``, ``CaptureError``), cuda-bindings' integer-handle driver module where it has one
  (``lean_driver``);
* ``cache``: the compiled-kernel cache on disk (the key's fingerprint, the directory's trust checks,
  ``KernelCacheWarning``);
* ``kernel``: ``Kernel`` (a ``@cuda.jit`` function compiled or loaded once) and ``Launch`` (a kernel bound
  to its geometry and a packed parameter buffer in the kernel ABI of the selected compiler, ``backend.py``).

The names below are the package's launch API; ``_drv``, ``_kernel_cache`` and ``_CACHE_STATE`` are what
the tactic profiler's timing and the precompile summaries read of the driver and the cache.
"""
from __future__ import annotations

from .cache import _CACHE_STATE, KernelCacheWarning, _kernel_cache, fingerprint
from .driver import CaptureError, _drv, check, is_capturing, lean_driver, simulated
from .kernel import Kernel, Launch

__all__ = ["CaptureError", "Kernel", "KernelCacheWarning", "Launch", "check", "fingerprint", "is_capturing",
           "lean_driver", "simulated", "_CACHE_STATE", "_drv", "_kernel_cache"]
