"""Test configuration: run on the GPU when one is present, on numba's CUDA simulator otherwise.

The choice must be made before numba is imported, so it happens here, at collection start:
``NUMBA_ENABLE_CUDASIM`` set by the user wins; otherwise the CUDA driver is asked (through ctypes,
without importing numba, ``numba_nbits.probe``) whether a device exists.
"""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

from numba_nbits.probe import gpu_present


if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if gpu_present() else "1"
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


def to_dev(x):
    """numba device copy of a host array; bf16 goes through uint16 bits (numba cannot copy ml_dtypes
    bfloat16 host arrays on a real GPU: its host_pointer rejects them)."""
    from numba import cuda

    if not SIMULATED and x.dtype.name == "bfloat16":
        return cuda.to_device(np.ascontiguousarray(x).view(np.uint16)).view(x.dtype)
    return cuda.to_device(x)


def to_host(d):
    """Host copy of a numba device array (bf16 through uint16 bits, see ``to_dev``)."""
    if not SIMULATED and d.dtype.name == "bfloat16":
        return d.view(np.uint16).copy_to_host().view(d.dtype)
    return d.copy_to_host()



def refuse_cublas_if_asked(monkeypatch, environ) -> bool:
    """With ``NUMBA_NBITS_TEST_SKIP_CUBLAS=1`` in ``environ``, replace ``numba_nbits.dispatch.cublas.gemm``
    by a ``pytest.skip`` (for the current test, through ``monkeypatch``); True when it did."""
    if environ.get("NUMBA_NBITS_TEST_SKIP_CUBLAS", "0") != "1":
        return False
    from numba_nbits.dispatch import cublas

    def refuse(*args, **kwargs):
        pytest.skip("NUMBA_NBITS_TEST_SKIP_CUBLAS=1: reaches a cuBLAS GEMM (initcheck cannot see its stores)")

    monkeypatch.setattr(cublas, "gemm", refuse)
    return True


@pytest.fixture(autouse=True)
def _skip_cublas_gemm_when_asked(monkeypatch):
    """``NUMBA_NBITS_TEST_SKIP_CUBLAS=1`` (set by ``gpu_sanitize.sh`` for initcheck): a test that reaches a
    cuBLAS GEMM is skipped there, at the call. compute-sanitizer's initcheck does not see cuBLAS's stores
    on the H200, so every later read of a cuBLAS-written output is reported as uninitialised (evidence:
    ``perf/results/2026-11-30-h200-x2-session2/initcheck_probe.py``, docs/reliability.md); memcheck and
    racecheck run those tests. (The simulator never calls ``gemm``: its GEMM step is ``gemm_host``.)"""
    refuse_cublas_if_asked(monkeypatch, os.environ)
