"""Is there a CUDA GPU? Answered through the driver with ctypes, without importing numba.

numba decides between the real driver and its CUDA simulator when it is first imported
(``NUMBA_ENABLE_CUDASIM``), so entry points (the demo, the test suite) ask this first.
"""
from __future__ import annotations

import ctypes


def gpu_present() -> bool:
    """True when libcuda loads, initialises and reports at least one device."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    try:
        if lib.cuInit(0) != 0:
            return False
        n = ctypes.c_int(0)
        return lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0
    except AttributeError:
        return False
