"""Inline-PTX / LLVM intrinsics for numba_nbits kernels, each with a pure-Python twin.

numba-cuda has no bit casts between float32 and uint32, no bf16 conversion without NVRTC shims,
no 16-byte read-only loads and no tensor-core instructions. Each is written here as a
``numba.cuda.extending.intrinsic`` emitting LLVM IR or inline PTX (verified on the H200: the
``ld.global.nc.v4.u32`` load gives LDG.E.128 in SASS, ``mma.sync`` gives HMMA), and each has a
pure-Python twin with identical results that the CUDA simulator runs instead (the simulator cannot
execute intrinsics). The choice is made once, here, when this module is imported; kernels import
the names from this module and never branch on simulation.

Functions (device side):

* ``u32_as_f32(x)`` / ``f32_as_u32(x)``: bit casts (any integer type is truncated to 32 bits).
* ``bf16_to_f32(h)``: bfloat16 bits (uint16) to float32, exact (shift + bit cast).
* ``f32_to_bf16(x)``: float32 to bfloat16 bits, round to nearest even (``cvt.rn.bf16.f32``);
  NaN stays NaN.
* ``ldg_v4(arr, i)``: the i-th 16-byte group of a 1-D uint32 array (``ld.global.nc.v4.u32``),
  returned as a 4-tuple of uint32. The caller guarantees 16-byte alignment of the group.
"""
from __future__ import annotations

import numpy as np
from numba.cuda.core import config as _nb_config

SIMULATED = bool(_nb_config.ENABLE_CUDASIM)

# --------------------------------------------------------------------------------------- twins


def _u32_as_f32_py(x):
    return np.uint32(int(x) & 0xFFFFFFFF).view(np.float32)


def _f32_as_u32_py(x):
    return np.float32(x).view(np.uint32)


def _bf16_to_f32_py(h):
    return np.uint32((int(h) & 0xFFFF) << 16).view(np.float32)


def _f32_to_bf16_py(x):
    import ml_dtypes

    return np.array(np.float32(x), dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[()]


def _ldg_v4_py(arr, i):
    j = 4 * int(i)
    return (np.uint32(arr[j]), np.uint32(arr[j + 1]), np.uint32(arr[j + 2]), np.uint32(arr[j + 3]))


TWINS = {
    "u32_as_f32": _u32_as_f32_py,
    "f32_as_u32": _f32_as_u32_py,
    "bf16_to_f32": _bf16_to_f32_py,
    "f32_to_bf16": _f32_to_bf16_py,
    "ldg_v4": _ldg_v4_py,
}

if SIMULATED:
    u32_as_f32 = _u32_as_f32_py
    f32_as_u32 = _f32_as_u32_py
    bf16_to_f32 = _bf16_to_f32_py
    f32_to_bf16 = _f32_to_bf16_py
    ldg_v4 = _ldg_v4_py
else:  # pragma: no cover - compiled on a GPU only
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    _I32 = ir.IntType(32)
    _I64 = ir.IntType(64)

    def _to_i32(builder, v):
        w = v.type.width
        if w > 32:
            return builder.trunc(v, _I32)
        if w < 32:
            return builder.zext(v, _I32)
        return v

    @intrinsic
    def u32_as_f32(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(_to_i32(builder, args[0]), ir.FloatType())

        return types.float32(x), codegen

    @intrinsic
    def f32_as_u32(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _I32)

        return types.uint32(x), codegen

    @intrinsic
    def bf16_to_f32(typingctx, h):
        if not isinstance(h, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = args[0]
            v = builder.zext(v, _I32) if v.type.width < 32 else builder.trunc(v, _I32) if v.type.width > 32 else v
            v = builder.and_(v, ir.Constant(_I32, 0xFFFF))
            return builder.bitcast(builder.shl(v, ir.Constant(_I32, 16)), ir.FloatType())

        return types.float32(h), codegen

    @intrinsic
    def f32_to_bf16(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            i16 = ir.IntType(16)
            fnty = ir.FunctionType(i16, [ir.FloatType()])
            asm = ir.InlineAsm(fnty, "cvt.rn.bf16.f32 $0, $1;", "=h,f")
            return builder.call(asm, [args[0]])

        return types.uint16(x), codegen

    @intrinsic
    def ldg_v4(typingctx, arr, idx):
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint32 and isinstance(idx, types.Integer)):
            return None
        rt = types.UniTuple(types.uint32, 4)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            i = args[1]
            i = builder.sext(i, _I64) if i.type.width < 64 else i
            p = builder.gep(ary.data, [builder.mul(i, ir.Constant(_I64, 4))])
            fnty = ir.FunctionType(ir.LiteralStructType([_I32] * 4), [_I64])
            asm = ir.InlineAsm(fnty, "ld.global.nc.v4.u32 {$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,l")
            res = builder.call(asm, [builder.ptrtoint(p, _I64)])
            return context.make_tuple(builder, rt, [builder.extract_value(res, k) for k in range(4)])

        return rt(arr, idx), codegen
