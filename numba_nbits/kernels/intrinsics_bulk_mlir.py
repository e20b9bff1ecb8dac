"""The intrinsics of ``kernels/intrinsics_bulk.py`` for numba-cuda-mlir (``NUMBA_NBITS_BACKEND=mlir``).

Device functions around ``cuda.experimental.inline_ptx``, with the same PTX as the llvmlite versions
(``intrinsics_mlir.py`` has the operand conventions). Imported only by ``intrinsics_bulk.py``, and only when the
backend is numba-cuda-mlir outside the simulator.
"""
from __future__ import annotations

import importlib

import numpy as np
from numba_cuda_mlir import cuda
from numba_cuda_mlir import types as mt

importlib.import_module("numba_cuda_mlir.cuda.experimental")  # loads cuda.experimental (inline_ptx)

_I0 = np.int32(0)

_device = cuda.jit(device=True, inline="always")


@_device
def mbar_init(bar, count):
    cuda.experimental.inline_ptx("mbarrier.init.shared::cta.b64 [%0], %1;", "r", np.uint32(bar),
                                 "r", np.uint32(count))


@_device
def mbar_fence_init():
    cuda.experimental.inline_ptx("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;")


@_device
def mbar_arrive(bar):
    cuda.experimental.inline_ptx("mbarrier.arrive.shared::cta.b64 _, [%0];", "r", np.uint32(bar))


@_device
def mbar_arrive_tx(bar, nbytes):
    cuda.experimental.inline_ptx("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;", "r", np.uint32(bar),
                                 "r", np.uint32(nbytes))


@_device
def mbar_try_wait(bar, parity):
    return np.uint32(cuda.experimental.inline_ptx(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}",
        "=r", _I0, "r", np.uint32(bar), "r", np.uint32(parity)))


@_device
def bulk_g2s(saddr, arr, i, nbytes, bar):
    cuda.experimental.inline_ptx(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];",
        "r", np.uint32(saddr), "C", mt.ptr(arr) + i * 16, "r", np.uint32(nbytes), "r", np.uint32(bar))
