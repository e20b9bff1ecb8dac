"""Inline-PTX / LLVM intrinsics for numba_nbits kernels, each with a pure-Python twin.

numba-cuda has no bit casts between float32 and uint32, no bf16 conversion without NVRTC shims,
no 16-byte read-only loads and no tensor-core instructions. Each is written here as a
``numba.cuda.extending.intrinsic`` emitting LLVM IR or inline PTX (verified on the H200: the
``ld.global.nc.v4.u32`` load gives LDG.E.128 in SASS, ``mma.sync`` gives HMMA), and each has a
pure-Python twin with identical results that the CUDA simulator runs instead (the simulator cannot
execute intrinsics). The choice is made once, here, when this module is imported; kernels import
the names from this module and never branch on simulation. Under ``NUMBA_NBITS_BACKEND=mlir`` (outside
the simulator) the names are rebound at the end of this module to ``kernels/intrinsics_mlir.py``: the
same PTX through numba-cuda-mlir's ``cuda.experimental.inline_ptx``.

Functions (device side):

* ``u32_as_f32(x)`` / ``f32_as_u32(x)``: bit casts (any integer type is truncated to 32 bits).
* ``bf16_to_f32(h)``: bfloat16 bits (uint16) to float32, exact (shift + bit cast).
* ``f32_to_bf16(x)``: float32 to bfloat16 bits, round to nearest even (``cvt.rn.bf16.f32``);
  NaN stays NaN.
* ``ldg_v4(arr, i)``: the i-th 16-byte group of a 1-D uint32 array (``ld.global.nc.v4.u32``),
  returned as a 4-tuple of uint32. The caller guarantees 16-byte alignment of the group. The asm is
  side-effecting so the compiler never speculates it past the branch that guards it (a guarded
  out-of-range load must not run); the twin raises IndexError for any group not wholly inside ``arr``.
* ``ldg_v2(arr, i)``: the i-th 8-byte pair of a 1-D uint32 array (``ld.global.nc.v2.u32``), a
  2-tuple of uint32 (one request instead of two scalar loads; 8-byte alignment by the caller);
  side-effecting and range-checked in the twin, as ``ldg_v4``.
"""
from __future__ import annotations

import numpy as np
from numba.cuda.core import config as _nb_config

from .. import backend as _backend

SIMULATED = bool(_nb_config.ENABLE_CUDASIM)
MLIR = not SIMULATED and _backend.NAME == "mlir"  # numba-cuda-mlir compiles the kernels (see the end)

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


def _check_vector_index(what, arr, i, width, n):
    """Simulator twins: a vector access outside the array is an error (on a GPU an illegal address,
    or silently someone else's bytes); NumPy would wrap a negative index instead."""
    if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"{what}: index must be an integer, got {type(i).__name__}")
    j = int(i) * width
    if j < 0 or j + n > len(arr):
        raise IndexError(f"{what}: index {int(i)} reads/writes elements [{j}, {j + n}) of an array of {len(arr)}")
    return j


def _ldg_v4_py(arr, i):
    j = _check_vector_index("ldg_v4", arr, i, 4, 4)
    return (np.uint32(arr[j]), np.uint32(arr[j + 1]), np.uint32(arr[j + 2]), np.uint32(arr[j + 3]))


def _ldg_v2_py(arr, i):
    j = _check_vector_index("ldg_v2", arr, i, 2, 2)
    return (np.uint32(arr[j]), np.uint32(arr[j + 1]))


TWINS = {
    "ldg_v2": _ldg_v2_py,
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
    ldg_v2 = _ldg_v2_py
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

    def _ldg_vector(n: int):
        """``ldg_v{n}(arr, i)``: the i-th group of ``n`` uint32 of a 1-D uint32 array, one
        ``ld.global.nc.v{n}.u32`` (see the module docstring)."""

        def ldg(typingctx, arr, idx):
            if not (isinstance(arr, types.Array) and arr.dtype == types.uint32 and isinstance(idx, types.Integer)):
                return None
            rt = types.UniTuple(types.uint32, n)

            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[0])(context, builder, args[0])
                i = args[1]
                i = builder.sext(i, _I64) if i.type.width < 64 else i
                p = builder.gep(ary.data, [builder.mul(i, ir.Constant(_I64, n))])
                fnty = ir.FunctionType(ir.LiteralStructType([_I32] * n), [_I64])
                # side_effect: without it LLVM/NVVM treats the asm as a pure function of its operands and
                # may speculate it out of the branch that guards it (the H200 run saw a loop-invariant
                # 8-bit half-chunk load hoisted unguarded into the loop preheader: it read past B's end
                # and faulted with CUDA_ERROR_ILLEGAL_ADDRESS). Guarded loads must stay behind their guard.
                regs = ",".join(f"${k}" for k in range(n))
                asm = ir.InlineAsm(fnty, f"ld.global.nc.v{n}.u32 {{{regs}}}, [${n}];", ",".join(["=r"] * n + ["l"]),
                                   side_effect=True)
                res = builder.call(asm, [builder.ptrtoint(p, _I64)])
                return context.make_tuple(builder, rt, [builder.extract_value(res, k) for k in range(n)])

            return rt(arr, idx), codegen

        ldg.__name__ = ldg.__qualname__ = f"ldg_v{n}"
        return intrinsic(ldg)

    ldg_v4 = _ldg_vector(4)
    ldg_v2 = _ldg_vector(2)


# ------------------------------------------------------------------------- tensor cores (mma)
# Appended for the tensor-core kernels (kernels/gemv/mma_source.py, mma_ring.py, kernels/mixed_gemm/source.py).
#
# * ``mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)`` / ``mma_bf16(...)``:
#   ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` (one warp; every lane must
#   call it). ``a*``/``b*`` are uint32 registers each holding two 16-bit values (low half = lower
#   index); ``c*`` float32; returns the 4 float32 accumulators ``(d0, d1, d2, d3)``. Fragment layout
#   (PTX ISA "Matrix Fragments for mma.m16n8k16", g = lane >> 2, t = lane & 3):
#       a0 = A[g, 2t:2t+2]      a1 = A[g+8, 2t:2t+2]    a2 = A[g, 2t+8:2t+10]   a3 = A[g+8, 2t+8:2t+10]
#       b0 = B[2t:2t+2, g]      b1 = B[2t+8:2t+10, g]
#       d0 = D[g, 2t]  d1 = D[g, 2t+1]  d2 = D[g+8, 2t]  d3 = D[g+8, 2t+1]      (D = A @ B + C)
#   The twin gathers the 32 lanes' fragments with ``simulator.warp_exchange``, rebuilds A (16x16)
#   and B (16x8), and computes each lane's 4 outputs as one float64 dot product of the exact
#   products (fp16/bf16 x fp16/bf16 is exact in fp32 and fp64), plus c, rounded once to float32.
#   The hardware sums the 16 exact products with fp32-class internal precision, so twin and
#   hardware agree to ~1 ulp of fp32 (tests/test_mma.py checks 1e-6 relative on a GPU).
# * ``pack_f16x2(lo, hi)`` / ``pack_bf16x2(lo, hi)``: two float32 -> one uint32 holding two
#   fp16/bf16 (round to nearest even; ``cvt.rn.{f16,bf16}x2.f32``, lo in bits 0..15).
# * ``f32_to_f16(x)``: float32 -> fp16 bits (uint16, ``cvt.rn.f16.f32``).
# * ``fma_f16x2(a, b, c)`` / ``fma_bf16x2(a, b, c)``: packed ``fma.rn.{f16x2,bf16x2}`` on uint32
#   registers (two lanes of a*b+c, one rounding each). Used for the exact integer-to-fp16
#   conversion ``(0x6400 | q) - (1024 + zp)`` of 4-bit codes (both operands exact, so the
#   result q - zp is exact).

_MMA_G = np.arange(32) >> 2
_MMA_T = np.arange(32) & 3


def _halves_to_f64(words, bf16: bool):
    w = np.asarray(words, dtype=np.uint32)
    lo = (w & np.uint32(0xFFFF)).astype(np.uint16)
    hi = (w >> np.uint32(16)).astype(np.uint16)
    if bf16:
        lo = (lo.astype(np.uint32) << np.uint32(16)).view(np.float32)
        hi = (hi.astype(np.uint32) << np.uint32(16)).view(np.float32)
    else:
        lo = lo.view(np.float16)
        hi = hi.view(np.float16)
    return lo.astype(np.float64), hi.astype(np.float64)


def mma_fragments_to_matrices(a_regs, b_regs, bf16: bool = False):
    """Host helper (twin and tests): (32, 4) A-fragment and (32, 2) B-fragment uint32 registers
    -> (A 16x16, B 16x8) as float64 matrices, following the m16n8k16 fragment layout."""
    a_regs = np.asarray(a_regs, dtype=np.uint32).reshape(32, 4)
    b_regs = np.asarray(b_regs, dtype=np.uint32).reshape(32, 2)
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    g, t = _MMA_G, _MMA_T
    alo, ahi = _halves_to_f64(a_regs, bf16)
    blo, bhi = _halves_to_f64(b_regs, bf16)
    for r, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
        A[g + dr, 2 * t + dc] = alo[:, r]
        A[g + dr, 2 * t + 1 + dc] = ahi[:, r]
    for r, dk in enumerate((0, 8)):
        B[2 * t + dk, g] = blo[:, r]
        B[2 * t + 1 + dk, g] = bhi[:, r]
    return A, B


def matrices_to_mma_fragments(A, B, bf16: bool = False):
    """Host helper (tests): A (16x16) and B (16x8) float arrays -> (32, 4) and (32, 2) uint32
    fragment registers (values rounded to fp16/bf16)."""
    if bf16:
        import ml_dtypes

        A16 = np.asarray(A, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
        B16 = np.asarray(B, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    else:
        A16 = np.asarray(A, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
        B16 = np.asarray(B, np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
    g, t = _MMA_G, _MMA_T
    a = np.zeros((32, 4), np.uint32)
    b = np.zeros((32, 2), np.uint32)
    for r, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
        a[:, r] = A16[g + dr, 2 * t + dc] | (A16[g + dr, 2 * t + 1 + dc] << np.uint32(16))
    for r, dk in enumerate((0, 8)):
        b[:, r] = B16[2 * t + dk, g] | (B16[2 * t + 1 + dk, g] << np.uint32(16))
    return a, b


def mma_reference(a_regs, b_regs, c, bf16: bool = False):
    """Host model of one m16n8k16 mma.sync: (32, 4) A and (32, 2) B fragment registers and (32, 4)
    float32 accumulators in -> (32, 4) float32 D fragments out (the twin's arithmetic: a float64
    dot product of the exact products plus c, rounded once to float32)."""
    A, B = mma_fragments_to_matrices(a_regs, b_regs, bf16)
    D = A @ B  # (16, 8) float64
    c = np.asarray(c, dtype=np.float32).reshape(32, 4).astype(np.float64)
    g, t = _MMA_G, _MMA_T
    out = np.empty((32, 4), np.float64)
    out[:, 0] = D[g, 2 * t]
    out[:, 1] = D[g, 2 * t + 1]
    out[:, 2] = D[g + 8, 2 * t]
    out[:, 3] = D[g + 8, 2 * t + 1]
    return (out + c).astype(np.float32)


def _mma_twin(bf16: bool):
    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        import threading

        from . import simulator

        lane = threading.current_thread().thread_id % 32  # the simulator's laneid
        regs = simulator.warp_exchange((int(a0) & 0xFFFFFFFF, int(a1) & 0xFFFFFFFF, int(a2) & 0xFFFFFFFF,
                                        int(a3) & 0xFFFFFFFF, int(b0) & 0xFFFFFFFF, int(b1) & 0xFFFFFFFF))
        r = np.array(regs, dtype=np.uint32)
        A, B = mma_fragments_to_matrices(r[:, :4], r[:, 4:], bf16)
        g, t = lane >> 2, lane & 3
        d0 = np.float32(float(np.dot(A[g], B[:, 2 * t])) + float(np.float32(c0)))
        d1 = np.float32(float(np.dot(A[g], B[:, 2 * t + 1])) + float(np.float32(c1)))
        d2 = np.float32(float(np.dot(A[g + 8], B[:, 2 * t])) + float(np.float32(c2)))
        d3 = np.float32(float(np.dot(A[g + 8], B[:, 2 * t + 1])) + float(np.float32(c3)))
        return d0, d1, d2, d3

    mma.__name__ = "mma_bf16" if bf16 else "mma_f16"
    return mma


def _f32_to_f16_py(x):
    return np.float16(np.float32(x)).view(np.uint16)


def _pack_f16x2_py(lo, hi):
    return np.uint32(int(_f32_to_f16_py(lo)) | (int(_f32_to_f16_py(hi)) << 16))


def _pack_bf16x2_py(lo, hi):
    return np.uint32(int(_f32_to_bf16_py(lo)) | (int(_f32_to_bf16_py(hi)) << 16))


def _fma_x2_py(bf16: bool):
    def to16(v):
        if bf16:
            return int(_f32_to_bf16_py(np.float32(v)))
        return int(np.float16(v).view(np.uint16))

    def fma(a, b, c):
        out = 0
        for sh in (0, 16):
            vals = []
            for w in (a, b, c):
                h = (int(w) >> sh) & 0xFFFF
                vals.append(float(np.uint32(h << 16).view(np.float32)) if bf16 else float(np.uint16(h).view(np.float16)))
            # a*b is exact in float64; the sum is rounded to float64 then to 16 bits (a double
            # rounding that differs from the hardware's single rounding only on exact ties of
            # inexact sums, which the kernels never produce: they use fma for exact integers).
            out |= to16(vals[0] * vals[1] + vals[2]) << sh
        return np.uint32(out)

    fma.__name__ = "fma_bf16x2" if bf16 else "fma_f16x2"
    return fma


_mma_f16_py = _mma_twin(False)
_mma_bf16_py = _mma_twin(True)
_fma_f16x2_py = _fma_x2_py(False)
_fma_bf16x2_py = _fma_x2_py(True)

TWINS.update({
    "mma_f16": _mma_f16_py,
    "mma_bf16": _mma_bf16_py,
    "f32_to_f16": _f32_to_f16_py,
    "pack_f16x2": _pack_f16x2_py,
    "pack_bf16x2": _pack_bf16x2_py,
    "fma_f16x2": _fma_f16x2_py,
    "fma_bf16x2": _fma_bf16x2_py,
})

if SIMULATED:
    mma_f16 = _mma_f16_py
    mma_bf16 = _mma_bf16_py
    f32_to_f16 = _f32_to_f16_py
    pack_f16x2 = _pack_f16x2_py
    pack_bf16x2 = _pack_bf16x2_py
    fma_f16x2 = _fma_f16x2_py
    fma_bf16x2 = _fma_bf16x2_py
else:  # pragma: no cover - compiled on a GPU only
    def _mma_intrinsic(kind: str):
        ptx = (f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "
               "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")

        def typer(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
            ints = (a0, a1, a2, a3, b0, b1)
            if not all(isinstance(x, types.Integer) for x in ints):
                return None
            if not all(isinstance(x, (types.Float, types.Integer)) for x in (c0, c1, c2, c3)):
                return None
            f4 = types.UniTuple(types.float32, 4)

            def codegen(context, builder, sig, args):
                f32 = ir.FloatType()
                ins = [_to_i32(builder, v) for v in args[:6]]
                for ty, v in zip(sig.args[6:], args[6:]):
                    ins.append(context.cast(builder, v, ty, types.float32))
                fnty = ir.FunctionType(ir.LiteralStructType([f32] * 4), [_I32] * 6 + [f32] * 4)
                asm = ir.InlineAsm(fnty, ptx, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
                res = builder.call(asm, ins)
                return context.make_tuple(builder, f4, [builder.extract_value(res, k) for k in range(4)])

            return f4(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3), codegen

        typer.__name__ = f"mma_{kind}"
        return intrinsic(typer)

    mma_f16 = _mma_intrinsic("f16")
    mma_bf16 = _mma_intrinsic("bf16")

    @intrinsic
    def f32_to_f16(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(16), [ir.FloatType()])
            asm = ir.InlineAsm(fnty, "cvt.rn.f16.f32 $0, $1;", "=h,f")
            return builder.call(asm, [args[0]])

        return types.uint16(x), codegen

    def _pack_intrinsic(kind: str):
        # PTX: "cvt.rn.f16x2.f32 d, a, b" puts a in the upper half and b in the lower half.
        ptx = f"cvt.rn.{kind}x2.f32 $0, $2, $1;"

        def typer(typingctx, lo, hi):
            if lo != types.float32 or hi != types.float32:
                return None

            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(_I32, [ir.FloatType(), ir.FloatType()])
                return builder.call(ir.InlineAsm(fnty, ptx, "=r,f,f"), list(args))

            return types.uint32(lo, hi), codegen

        typer.__name__ = f"pack_{kind}x2"
        return intrinsic(typer)

    pack_f16x2 = _pack_intrinsic("f16")
    pack_bf16x2 = _pack_intrinsic("bf16")

    def _fma_intrinsic(kind: str):
        ptx = f"fma.rn.{kind}x2 $0, $1, $2, $3;"

        def typer(typingctx, a, b, c):
            if not all(isinstance(x, types.Integer) for x in (a, b, c)):
                return None

            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(_I32, [_I32] * 3)
                return builder.call(ir.InlineAsm(fnty, ptx, "=r,r,r,r"), [_to_i32(builder, v) for v in args])

            return types.uint32(a, b, c), codegen

        typer.__name__ = f"fma_{kind}x2"
        return intrinsic(typer)

    fma_f16x2 = _fma_intrinsic("f16")
    fma_bf16x2 = _fma_intrinsic("bf16")



# ----------------------------------------------------------------------- decode helpers (GEMV)
# * ``lop3_andor(a, b, c)``: ``(a & b) | c`` on uint32 as one ``lop3.b32`` (LUT 0xEA). Written out as ``&``
#   then ``|`` with two constant operands, ptxas emits two LOP3s (a SASS LOP3 takes one immediate); the
#   inline form is one LOP3 with the constant in a register hoisted out of the loop (the tensor-core GEMV
#   decodes every weight register with one).
# * ``f16lo_to_f32(w)`` / ``f16hi_to_f32(w)``: the fp16 in bits 0..15 / 16..31 of a uint32 as float32
#   (``cvt.f32.f16``, exact, one instruction; the GEMV's fp16 block scales).


def _lop3_andor_py(a, b, c):
    return np.uint32((int(a) & int(b) | int(c)) & 0xFFFFFFFF)


def _f16lo_to_f32_py(w):
    return np.float32(np.uint16(int(w) & 0xFFFF).view(np.float16))


def _f16hi_to_f32_py(w):
    return np.float32(np.uint16((int(w) >> 16) & 0xFFFF).view(np.float16))


TWINS.update({"lop3_andor": _lop3_andor_py, "f16lo_to_f32": _f16lo_to_f32_py, "f16hi_to_f32": _f16hi_to_f32_py})

if SIMULATED:
    lop3_andor = _lop3_andor_py
    f16lo_to_f32 = _f16lo_to_f32_py
    f16hi_to_f32 = _f16hi_to_f32_py
else:  # pragma: no cover - compiled on a GPU only
    @intrinsic
    def lop3_andor(typingctx, a, b, c):
        if not all(isinstance(x, types.Integer) for x in (a, b, c)):
            return None

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(_I32, [_I32] * 3)
            return builder.call(ir.InlineAsm(fnty, "lop3.b32 $0, $1, $2, $3, 0xEA;", "=r,r,r,r"),
                                [_to_i32(builder, v) for v in args])

        return types.uint32(a, b, c), codegen

    def _f16_half_intrinsic(hi: int):
        ptx = ("{ .reg .b16 l16, h16; mov.b32 {l16, h16}, $1; "
               f"cvt.f32.f16 $0, {'h16' if hi else 'l16'}; }}")

        def typer(typingctx, w):
            if not isinstance(w, types.Integer):
                return None

            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(ir.FloatType(), [_I32])
                return builder.call(ir.InlineAsm(fnty, ptx, "=f,r"), [_to_i32(builder, args[0])])

            return types.float32(w), codegen

        typer.__name__ = "f16hi_to_f32" if hi else "f16lo_to_f32"
        return intrinsic(typer)

    f16lo_to_f32 = _f16_half_intrinsic(0)
    f16hi_to_f32 = _f16_half_intrinsic(1)

# ----------------------------------------------------------------------- opaque values
# ``opaque_i64(x)``: ``x`` as int64, through an identity ``mov.b64`` the optimiser cannot see into. A value set
# once before a loop and read in it (the tensor-core GEMV's activation base and limit per m-tile) is then
# computed once and kept in a register: without it numba-cuda-mlir's LLVM sinks the multiply and select that
# make it into the loop, next to every guarded load that uses it.


def _opaque_i64_py(x):
    return np.int64(x)


TWINS["opaque_i64"] = _opaque_i64_py

if SIMULATED:
    opaque_i64 = _opaque_i64_py
else:  # pragma: no cover - compiled on a GPU only
    @intrinsic
    def opaque_i64(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = args[0]
            v = v if v.type.width == 64 else (builder.sext(v, _I64) if sig.args[0].signed else builder.zext(v, _I64))
            return builder.call(ir.InlineAsm(ir.FunctionType(_I64, [_I64]), "mov.b64 $0, $1;", "=l,l"), [v])

        return types.int64(x), codegen


# ----------------------------------------------------------------------- vector stores (global)
# ``st_v4(arr, i, a, b, c, d)`` writes 16 bytes (``st.global.v4.b32``) at uint32 element ``i`` of a
# 1-D uint32 array; ``st_v2`` writes 8 bytes. The caller guarantees 16- / 8-byte alignment.


def _st_v4_py(arr, i, a, b, c, d):
    j = _check_vector_index("st_v4", arr, i, 1, 4)
    arr[j], arr[j + 1], arr[j + 2], arr[j + 3] = np.uint32(a), np.uint32(b), np.uint32(c), np.uint32(d)


def _st_v2_py(arr, i, a, b):
    j = _check_vector_index("st_v2", arr, i, 1, 2)
    arr[j], arr[j + 1] = np.uint32(a), np.uint32(b)


TWINS.update({"st_v4": _st_v4_py, "st_v2": _st_v2_py})

if SIMULATED:
    st_v4 = _st_v4_py
    st_v2 = _st_v2_py
else:  # pragma: no cover - compiled on a GPU only
    def _st_intrinsic(n: int):
        regs = ",".join(f"${k + 1}" for k in range(n))
        ptx = f"st.global.v{n}.b32 [$0], {{{regs}}};"
        cons = "l," + ",".join(["r"] * n)

        def typer(typingctx, arr, idx, *vals):
            if not (isinstance(arr, types.Array) and arr.dtype == types.uint32 and isinstance(idx, types.Integer)
                    and len(vals) == n and all(isinstance(v, types.Integer) for v in vals)):
                return None

            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[0])(context, builder, args[0])
                i = args[1]
                i = builder.sext(i, _I64) if i.type.width < 64 else i
                p = builder.gep(ary.data, [i])
                fnty = ir.FunctionType(ir.VoidType(), [_I64] + [_I32] * n)
                asm = ir.InlineAsm(fnty, ptx, cons, side_effect=True)
                builder.call(asm, [builder.ptrtoint(p, _I64)] + [_to_i32(builder, v) for v in args[2:]])
                return context.get_dummy_value()

            return types.void(arr, idx, *vals), codegen

        return typer

    def _st_v4(typingctx, arr, idx, a, b, c, d):
        return _st_intrinsic(4)(typingctx, arr, idx, a, b, c, d)

    def _st_v2(typingctx, arr, idx, a, b):
        return _st_intrinsic(2)(typingctx, arr, idx, a, b)

    st_v4 = intrinsic(_st_v4)
    st_v2 = intrinsic(_st_v2)


# --------------------------------------------------------------------------- L2-only loads
# ``ldcg(arr, i)``: ``arr[i]`` read through L2 only (``ld.global.cg``, numba's cache-hint intrinsic),
# for data written by other CTAs of the same launch (the split-K workspace of kernels/gemv/mma.py). The
# simulator has no cache hints (``cuda.ldcg`` is None there); its twin is a plain read.


def _ldcg_py(arr, i):
    return arr[i]


TWINS["ldcg"] = _ldcg_py

if SIMULATED:
    ldcg = _ldcg_py
else:  # pragma: no cover - compiled on a GPU only
    from numba.cuda import ldcg  # noqa: F401  (overloaded for the CUDA target)


# -------------------------------------------------------------------------------- memory fence
# ``threadfence()``: a device-wide memory fence (``membar.gl``: numba-cuda's ``cuda.threadfence``), between a
# CTA's split-K partial stores and its arrival on the tile's counter, and before the last CTA reads the other
# CTAs' slices (kernels/gemv/mma_source.py, kernels/mixed_gemm/source.py). numba-cuda-mlir 0.6 has no
# lowering for ``cuda.threadfence``, so it is an intrinsic (numba-cuda's lowering of ``cuda.threadfence``, which
# numba-cuda cannot call as a plain global) with an inline_ptx form there. The simulator's
# threads share one memory, which every read sees at once: its twin does nothing.


def _threadfence_py():
    return None


TWINS["threadfence"] = _threadfence_py

if SIMULATED:
    threadfence = _threadfence_py
else:  # pragma: no cover - compiled on a GPU only
    from numba.cuda import cgutils as _cgutils

    def _threadfence(typingctx):
        def codegen(context, builder, sig, args):  # numba-cuda's own lowering of cuda.threadfence()
            fnty = ir.FunctionType(ir.VoidType(), ())
            builder.call(_cgutils.get_or_insert_function(builder.module, fnty, "llvm.nvvm.membar.gl"), ())
            return context.get_dummy_value()

        return types.void(), codegen

    threadfence = intrinsic(_threadfence)


# --------------------------------------------------------------------------------- L2 prefetch
# ``prefetch_l2(arr, i)``: ``prefetch.global.L2 [&arr[4 * i]]`` -- asks L2 to fetch the cache line of
# the i-th 16-byte group of a 1-D uint32 array (no register result, no wait; the 8-bit M = 1 GEMV's
# ``ORT_QUANTIZED_DECODE_L2_PREFETCH`` variant issues it for weight bytes a few iterations ahead). The
# asm is side-effecting so it stays behind the branch that guards its index. The simulator has no
# cache: the twin only checks that the group lies inside ``arr`` (as ``ldg_v4``'s twin does) and
# returns nothing.


def _prefetch_l2_py(arr, i):
    _check_vector_index("prefetch_l2", arr, i, 4, 4)


TWINS["prefetch_l2"] = _prefetch_l2_py

if SIMULATED:
    prefetch_l2 = _prefetch_l2_py
else:  # pragma: no cover - compiled on a GPU only
    def _prefetch_l2(typingctx, arr, idx):
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint32 and isinstance(idx, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            i = args[1]
            i = builder.sext(i, _I64) if i.type.width < 64 else i
            p = builder.gep(ary.data, [builder.mul(i, ir.Constant(_I64, 4))])
            fnty = ir.FunctionType(ir.VoidType(), [_I64])
            asm = ir.InlineAsm(fnty, "prefetch.global.L2 [$0];", "l", side_effect=True)
            builder.call(asm, [builder.ptrtoint(p, _I64)])
            return context.get_dummy_value()

        return types.void(arr, idx), codegen

    prefetch_l2 = intrinsic(_prefetch_l2)


# ---------------------------------------------------------------------------- 16-byte loads at a byte offset
# ``ldg_v4_at(arr, off)``: the 16 bytes at byte offset ``off`` of any C-contiguous array's data
# (``ld.global.nc.v4.u32 [data + off]``), as 4 uint32 in memory order: activations of any dtype read 16 bytes at a
# time without a uint32 view built per call (the router GEMV reads a chunk's 32 fp16 A values in 4 such loads).
# The caller guarantees that ``data + off`` is 16-byte aligned (the plan checks A's pointer before it launches the
# kernel that uses it) and that the group lies inside the array. Side-effecting as ``ldg_v4``. The twin reads the
# same bytes of the NumPy buffer and raises for an offset that is not a multiple of 16 or a group not wholly
# inside the array.


def _ldg_v4_at_py(arr, off):
    raw = np.asarray(getattr(arr, "_ary", arr))
    if not raw.flags.c_contiguous:
        raise ValueError("ldg_v4_at: the array must be C-contiguous")
    if isinstance(off, (bool, np.bool_)) or not isinstance(off, (int, np.integer)):
        raise TypeError(f"ldg_v4_at: offset must be an integer, got {type(off).__name__}")
    o = int(off)
    if o % 16 or o < 0 or o + 16 > raw.nbytes:
        raise IndexError(f"ldg_v4_at: bytes [{o}, {o + 16}) of an array of {raw.nbytes} bytes "
                         "(16-byte groups inside it)")
    w = raw.reshape(-1).view(np.uint8)[o:o + 16].view(np.uint32)
    return (np.uint32(w[0]), np.uint32(w[1]), np.uint32(w[2]), np.uint32(w[3]))


TWINS["ldg_v4_at"] = _ldg_v4_at_py

if SIMULATED:
    ldg_v4_at = _ldg_v4_at_py
else:  # pragma: no cover - compiled on a GPU only
    def _ldg_v4_at(typingctx, arr, off):
        if not (isinstance(arr, types.Array) and isinstance(off, types.Integer)):
            return None
        rt = types.UniTuple(types.uint32, 4)

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            o = args[1]
            o = builder.sext(o, _I64) if o.type.width < 64 else o
            p = builder.add(builder.ptrtoint(ary.data, _I64), o)
            fnty = ir.FunctionType(ir.LiteralStructType([_I32] * 4), [_I64])
            asm = ir.InlineAsm(fnty, "ld.global.nc.v4.u32 {$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,l", side_effect=True)
            res = builder.call(asm, [p])
            return context.make_tuple(builder, rt, [builder.extract_value(res, k) for k in range(4)])

        return rt(arr, off), codegen

    ldg_v4_at = intrinsic(_ldg_v4_at)


# ------------------------------------------------------------------------------- numba-cuda-mlir
if MLIR:  # pragma: no cover - compiled on a GPU only
    from . import intrinsics_mlir as _mlir

    globals().update({name: getattr(_mlir, name) for name in TWINS})  # every intrinsic has its inline_ptx form
