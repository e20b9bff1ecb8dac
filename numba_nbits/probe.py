"""Is there a CUDA GPU? Answered through the driver with ctypes, without importing numba.

numba decides between the real driver and its CUDA simulator when it is first imported
(``NUMBA_ENABLE_CUDASIM``), so entry points (the demo, the test suite) ask this first.

Without a GPU the library does not pick the simulator by itself (importing numba_nbits stays free of
side effects): the first device use (building a ``MatMulNBits``) raises ``NoGPUError``, whose message
says how to run on the simulator. The CLIs print that message on one line and exit with status 2.
"""
from __future__ import annotations

import ctypes
import functools
import sys
from typing import Optional

SIMULATOR_HINT = ("to run on numba's CUDA simulator instead (slow: keep the shapes small), set NUMBA_ENABLE_CUDASIM=1 "
                  "in the environment before numba is imported")


class NoGPUError(RuntimeError):
    """No CUDA GPU (or no working CUDA driver) was found, and numba is not running on its CUDA simulator."""


def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


@functools.lru_cache(maxsize=None)
def why_no_gpu() -> Optional[str]:
    """None when libcuda loads, initialises and reports at least one device; else why not (one line)."""
    lib = _libcuda()
    if lib is None:
        return "no CUDA driver: libcuda.so.1 not found"
    try:
        rc = lib.cuInit(0)
        if rc != 0:
            return f"the CUDA driver failed to initialise (cuInit error {rc})"
        n = ctypes.c_int(0)
        rc = lib.cuDeviceGetCount(ctypes.byref(n))
        if rc != 0:
            return f"the CUDA driver cannot count devices (cuDeviceGetCount error {rc})"
        if n.value <= 0:
            return "the CUDA driver reports no device"
    except AttributeError:
        return "libcuda.so.1 lacks the driver API"
    return None


def gpu_present() -> bool:
    """True when libcuda loads, initialises and reports at least one device."""
    return why_no_gpu() is None


def no_gpu_message(reason: Optional[str] = None) -> str:
    reason = reason or why_no_gpu() or "no device"
    return f"no CUDA GPU found ({reason}); {SIMULATOR_HINT}"


def require_gpu() -> None:
    """Raise ``NoGPUError`` when there is no CUDA GPU (call it only when numba is not simulating)."""
    reason = why_no_gpu()
    if reason is not None:
        raise NoGPUError(no_gpu_message(reason))


def device_info(ordinal: int = 0) -> Optional[tuple[int, str]]:
    """``(sm, name)`` of device ``ordinal`` through the driver (no numba), or None without a GPU."""
    if why_no_gpu() is not None:
        return None
    lib = _libcuda()
    dev = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
    if lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) or lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev):
        return None
    buf = ctypes.create_string_buffer(256)
    name = buf.value.decode(errors="replace") if lib.cuDeviceGetName(buf, 256, dev) == 0 else "?"
    return major.value * 10 + minor.value, name


def run_cli(main, argv=None) -> int:
    """``main(argv)``, with ``NoGPUError`` printed as one line on stderr and exit status 2."""
    try:
        return main(argv)
    except NoGPUError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
