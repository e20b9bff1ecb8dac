"""Bias-add kernel: ``Y[m, n] = T(float(Y[m, n]) + float(bias[n]))`` (spec §9).

Used after a bias-less fused GEMV (the spec's "retry without bias") and after the dequantize +
cuBLAS route. The add is done in float32 and rounded once to the output dtype, exactly like ORT's
``MatMulNBitsBiasAddKernel``. Thread mapping: a grid-stride loop over the ``M*N`` outputs, 256
threads per block, grid clamped to ``MAX_BLOCKS``; indices are 64-bit.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ..launch import Kernel
from .dtypes import LOADS, STORES, array_type

THREADS = 256
MAX_BLOCKS = 132 * 16  # 16 blocks per SM on a 132-SM H200: enough to saturate the store path


def _make_bias_add(act: str):
    ld = LOADS[act]
    st = STORES[act]

    def bias_add(y, bias, total, n):
        i = np.int64(cuda.blockIdx.x) * THREADS + cuda.threadIdx.x
        step = np.int64(cuda.gridDim.x) * THREADS
        while i < total:
            st(y, i, ld(y, i) + ld(bias, i % n))
            i += step

    bias_add.__name__ = f"bias_add_{act}"
    return bias_add


@lru_cache(maxsize=None)
def bias_add_kernel(act: str) -> Kernel:
    from numba.cuda import types

    return Kernel(_make_bias_add(act), (array_type(act), array_type(act), types.int64, types.int64))


def bind_bias_add(y, bias, *, act: str, total: int, n: int):
    """A ``Launch`` adding ``bias`` (length n) to every row of the flat output ``y`` (total elements)."""
    grid = max(1, min(MAX_BLOCKS, (total + THREADS - 1) // THREADS))
    return bias_add_kernel(act).bind(grid, THREADS, (y, bias, total, n))
