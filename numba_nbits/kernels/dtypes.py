"""Element load/store device functions per activation dtype, shared by every kernel family.

Kernels compute in float32 whatever the activation dtype (one accumulation precision for every
route, and the oracle's tolerances are set for it): fp16 is loaded with the native
``cvt.f32.f16`` and stored with ``cvt.rn.f16.f32`` (no NVRTC shim, so kernels stay cacheable);
bf16 is carried as uint16 bits, widened by shift + bit cast and narrowed by ``cvt.rn.bf16.f32``
(``intrinsics.py``); fp32 is used as is.

``LOADS[name](arr, i) -> float32`` and ``STORES[name](arr, i, value)``; ``KERNEL_DTYPE[name]`` is the
numba element type a kernel signature uses for that dtype (bf16 -> uint16).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .intrinsics import bf16_to_f32, f32_to_bf16

ACT_DTYPES = ("float32", "float16", "bfloat16")


@cuda.jit(device=True)
def ld_f32(a, i):
    return np.float32(a[i])


@cuda.jit(device=True)
def ld_f16(a, i):
    return np.float32(a[i])


@cuda.jit(device=True)
def ld_bf16(a, i):
    return bf16_to_f32(a[i])


@cuda.jit(device=True)
def st_f32(a, i, v):
    a[i] = np.float32(v)


@cuda.jit(device=True)
def st_f16(a, i, v):
    a[i] = np.float16(v)


@cuda.jit(device=True)
def st_bf16(a, i, v):
    a[i] = f32_to_bf16(np.float32(v))


LOADS = {"float32": ld_f32, "float16": ld_f16, "bfloat16": ld_bf16}
STORES = {"float32": st_f32, "float16": st_f16, "bfloat16": st_bf16}


def kernel_dtype(name: str):
    """numba element type for activation dtype ``name`` (bf16 travels as uint16 bits)."""
    from numba.cuda import types

    return {"float32": types.float32, "float16": types.float16, "bfloat16": types.uint16}[name]


def array_type(name: str, ndim: int = 1):
    """C-contiguous numba array type of ``ndim`` dimensions for dtype ``name`` (or a numpy int type)."""
    from numba.cuda import types

    elem = kernel_dtype(name) if name in ACT_DTYPES else getattr(types, name)
    return types.Array(elem, ndim, "C")
