"""Test configuration: run on the GPU when one is present, on numba's CUDA simulator otherwise.

The choice must be made before numba is imported, so it happens here, at collection start:
``NUMBA_ENABLE_CUDASIM`` set by the user wins; otherwise the CUDA driver is asked (through ctypes,
without importing numba) whether a device exists.
"""
from __future__ import annotations

import ctypes
import os
import zlib

import numpy as np
import pytest


def _gpu_present() -> bool:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    if lib.cuInit(0) != 0:
        return False
    n = ctypes.c_int(0)
    return lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0


if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if _gpu_present() else "1"
os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")

SIMULATED = os.environ["NUMBA_ENABLE_CUDASIM"] == "1"

requires_gpu = pytest.mark.skipif(SIMULATED, reason="needs a real CUDA GPU (running on numba's simulator)")


def pytest_report_header(config):
    return f"numba_nbits: {'CUDA simulator (no GPU found)' if SIMULATED else 'real GPU'}"


@pytest.fixture
def rng(request):
    """A generator seeded per test (fresh data per test, reproducible per test id)."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
