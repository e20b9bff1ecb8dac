"""The intrinsics of ``kernels/intrinsics.py`` for numba-cuda-mlir (``NUMBA_NBITS_BACKEND=mlir``).

Each is a device function around ``cuda.experimental.inline_ptx(fmt, constraint, value, ...)``, the same
PTX as the llvmlite version that numba-cuda compiles: CUDA C++ inline-asm syntax, operands ``%0, %1, ...``
in argument order, outputs marked ``=`` (their values are placeholders; the call returns the outputs,
a tuple when there are several), inputs plain; constraint letters ``h`` (16-bit), ``r`` (32-bit),
``l`` (64-bit), ``f`` (float32). numba-cuda-mlir types every ``r`` operand as int32, so results are
returned as ``uint32`` explicitly. Addresses are ``types.ptr(arr)`` (the array's data pointer) plus a
byte offset, passed with ``C`` (a pointer operand). ``ldcg`` is numba-cuda-mlir's own ``cuda.ldcg``.

The names, signatures, results and the guarantee that guarded loads and stores stay behind their guard
are those of ``intrinsics.py`` (see its docstring); this module is imported only there, and only when the
backend is numba-cuda-mlir outside the simulator.
"""
from __future__ import annotations

import importlib

import numpy as np
from numba_cuda_mlir import cuda
from numba_cuda_mlir import types as mt

importlib.import_module("numba_cuda_mlir.cuda.experimental")  # loads cuda.experimental (inline_ptx)

_F0 = np.float32(0.0)
_I0 = np.int32(0)
_H0 = np.int16(0)
_L0 = np.int64(0)

_device = cuda.jit(device=True, inline="always")


@_device
def u32_as_f32(x):
    return cuda.experimental.inline_ptx("mov.b32 %0, %1;", "=f", _F0, "r", np.uint32(x & 0xFFFFFFFF))


@_device
def f32_as_u32(x):
    return np.uint32(cuda.experimental.inline_ptx("mov.b32 %0, %1;", "=r", _I0, "f", np.float32(x)))


@_device
def bf16_to_f32(h):
    return u32_as_f32(np.uint32((h & 0xFFFF) << 16))


@_device
def f32_to_bf16(x):
    return np.uint16(cuda.experimental.inline_ptx("cvt.rn.bf16.f32 %0, %1;", "=h", _H0, "f", np.float32(x)))


@_device
def f32_to_f16(x):
    return np.uint16(cuda.experimental.inline_ptx("cvt.rn.f16.f32 %0, %1;", "=h", _H0, "f", np.float32(x)))


@_device
def ldg_v4(arr, i):
    p = mt.ptr(arr) + i * 16
    a, b, c, d = cuda.experimental.inline_ptx("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];",
                                              "=r", _I0, "=r", _I0, "=r", _I0, "=r", _I0, "C", p)
    return np.uint32(a), np.uint32(b), np.uint32(c), np.uint32(d)


@_device
def ldg_v4_at(arr, off):
    p = mt.ptr(arr) + off
    a, b, c, d = cuda.experimental.inline_ptx("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];",
                                              "=r", _I0, "=r", _I0, "=r", _I0, "=r", _I0, "C", p)
    return np.uint32(a), np.uint32(b), np.uint32(c), np.uint32(d)


@_device
def ldg_v2(arr, i):
    p = mt.ptr(arr) + i * 8
    a, b = cuda.experimental.inline_ptx("ld.global.nc.v2.u32 {%0, %1}, [%2];", "=r", _I0, "=r", _I0, "C", p)
    return np.uint32(a), np.uint32(b)


@_device
def st_v4(arr, i, a, b, c, d):
    cuda.experimental.inline_ptx("st.global.v4.b32 [%0], {%1, %2, %3, %4};", "C", mt.ptr(arr) + i * 4,
                                 "r", np.uint32(a), "r", np.uint32(b), "r", np.uint32(c), "r", np.uint32(d))


@_device
def st_v2(arr, i, a, b):
    cuda.experimental.inline_ptx("st.global.v2.b32 [%0], {%1, %2};", "C", mt.ptr(arr) + i * 4,
                                 "r", np.uint32(a), "r", np.uint32(b))


@_device
def prefetch_l2(arr, i):
    cuda.experimental.inline_ptx("prefetch.global.L2 [%0];", "C", mt.ptr(arr) + i * 16)


@_device
def pack_f16x2(lo, hi):  # PTX: "cvt.rn.f16x2.f32 d, a, b" puts a in the upper half, b in the lower
    return np.uint32(cuda.experimental.inline_ptx("cvt.rn.f16x2.f32 %0, %2, %1;", "=r", _I0,
                                                  "f", np.float32(lo), "f", np.float32(hi)))


@_device
def pack_bf16x2(lo, hi):
    return np.uint32(cuda.experimental.inline_ptx("cvt.rn.bf16x2.f32 %0, %2, %1;", "=r", _I0,
                                                  "f", np.float32(lo), "f", np.float32(hi)))


@_device
def fma_f16x2(a, b, c):
    return np.uint32(cuda.experimental.inline_ptx("fma.rn.f16x2 %0, %1, %2, %3;", "=r", _I0, "r", np.uint32(a),
                                                  "r", np.uint32(b), "r", np.uint32(c)))


@_device
def fma_bf16x2(a, b, c):
    return np.uint32(cuda.experimental.inline_ptx("fma.rn.bf16x2 %0, %1, %2, %3;", "=r", _I0, "r", np.uint32(a),
                                                  "r", np.uint32(b), "r", np.uint32(c)))



@_device
def lop3_andor(a, b, c):
    return np.uint32(cuda.experimental.inline_ptx("lop3.b32 %0, %1, %2, %3, 0xEA;", "=r", _I0, "r", np.uint32(a),
                                                  "r", np.uint32(b), "r", np.uint32(c)))


@_device
def opaque_i64(x):
    return np.int64(cuda.experimental.inline_ptx("mov.b64 %0, %1;", "=l", _L0, "l", np.int64(x)))


@_device
def f16lo_to_f32(w):
    return cuda.experimental.inline_ptx("{ .reg .b16 l16, h16; mov.b32 {l16, h16}, %1; cvt.f32.f16 %0, l16; }",
                                        "=f", _F0, "r", np.uint32(w))


@_device
def f16hi_to_f32(w):
    return cuda.experimental.inline_ptx("{ .reg .b16 l16, h16; mov.b32 {l16, h16}, %1; cvt.f32.f16 %0, h16; }",
                                        "=f", _F0, "r", np.uint32(w))

def _mma(kind: str):
    """``mma_{kind}``: one ``mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32`` (see intrinsics.py)."""
    ptx = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
           "{%8, %9}, {%10, %11, %12, %13};")

    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        return cuda.experimental.inline_ptx(
            ptx, "=f", _F0, "=f", _F0, "=f", _F0, "=f", _F0,
            "r", np.uint32(a0), "r", np.uint32(a1), "r", np.uint32(a2), "r", np.uint32(a3), "r", np.uint32(b0),
            "r", np.uint32(b1), "f", np.float32(c0), "f", np.float32(c1), "f", np.float32(c2), "f", np.float32(c3))

    mma.__name__ = mma.__qualname__ = f"mma_{kind}"
    return _device(mma)


mma_f16 = _mma("f16")
mma_bf16 = _mma("bf16")

ldcg = cuda.ldcg


@_device
def threadfence():
    cuda.experimental.inline_ptx("membar.gl;")
