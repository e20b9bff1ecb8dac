"""The intrinsics of ``kernels/intrinsics_async.py`` for numba-cuda-mlir (``NUMBA_NBITS_BACKEND=mlir``).

Device functions around ``cuda.experimental.inline_ptx``, with the same PTX as the llvmlite versions
(``intrinsics_mlir.py`` has the operand conventions). Imported only by ``intrinsics_async.py``, and only
when the backend is numba-cuda-mlir outside the simulator.
"""
from __future__ import annotations

import importlib

import numpy as np
from numba_cuda_mlir import cuda
from numba_cuda_mlir import types as mt

importlib.import_module("numba_cuda_mlir.cuda.experimental")  # loads cuda.experimental (inline_ptx)

_I0 = np.int32(0)
_L0 = np.int64(0)

_device = cuda.jit(device=True, inline="always")


@_device
def smem_addr(arr):
    a = cuda.experimental.inline_ptx("cvta.to.shared.u64 %0, %1;", "=l", _L0, "C", mt.ptr(arr))
    return np.uint32(np.uint64(a) & np.uint64(0xFFFFFFFF))


@_device
def cp_async_16(saddr, arr, i):
    cuda.experimental.inline_ptx("cp.async.cg.shared.global [%0], [%1], 16;", "r", np.uint32(saddr),
                                 "C", mt.ptr(arr) + i * 16)


@_device
def cp_async_8(saddr, arr, i):
    cuda.experimental.inline_ptx("cp.async.ca.shared.global [%0], [%1], 8;", "r", np.uint32(saddr),
                                 "C", mt.ptr(arr) + i * 8)


@_device
def cp_async_4(saddr, arr, i):
    cuda.experimental.inline_ptx("cp.async.ca.shared.global [%0], [%1], 4;", "r", np.uint32(saddr),
                                 "C", mt.ptr(arr) + i * 4)


@_device
def cp_async_commit():
    cuda.experimental.inline_ptx("cp.async.commit_group;")


@_device
def lds_v4(saddr):
    a, b, c, d = cuda.experimental.inline_ptx("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];",
                                              "=r", _I0, "=r", _I0, "=r", _I0, "=r", _I0, "r", np.uint32(saddr))
    return np.uint32(a), np.uint32(b), np.uint32(c), np.uint32(d)


@_device
def lds_v2(saddr):
    a, b = cuda.experimental.inline_ptx("ld.shared.v2.u32 {%0, %1}, [%2];", "=r", _I0, "=r", _I0,
                                        "r", np.uint32(saddr))
    return np.uint32(a), np.uint32(b)


@_device
def lds(saddr):
    return np.uint32(cuda.experimental.inline_ptx("ld.shared.u32 %0, [%1];", "=r", _I0, "r", np.uint32(saddr)))


_WAITS: dict = {}


def cp_async_wait_for(n: int):
    """``cp_async_wait()`` for ``cp.async.wait_group n`` (one device function per ``n``: the count is an
    immediate of the instruction)."""
    if n not in _WAITS:
        ptx = f"cp.async.wait_group {n};"

        def cp_async_wait():
            cuda.experimental.inline_ptx(ptx)

        _WAITS[n] = _device(cp_async_wait)
    return _WAITS[n]
