"""The intrinsics of ``kernels/intrinsics_sm90.py`` for numba-cuda-mlir (``NUMBA_NBITS_BACKEND=mlir``).

``smem_desc`` and ``fence_proxy_async`` are device functions around ``cuda.experimental.inline_ptx``, as
``intrinsics_mlir.py`` (its docstring has the operand conventions). The ``wgmma`` forms and ``wgmma_wait`` are
intrinsics of their own (typing by ``numba_cuda_mlir.extending.type_callable``, lowering by ``lower_builtin``
to one ``llvm.inline_asm`` op whose result is a struct of the accumulators), with the asm text and
constraints of the llvmlite versions (``sm90_asm``: outputs tied to the accumulator inputs), so both compilers
emit the same PTX. ``inline_ptx`` cannot take them: a call of more than 30 arguments is compiled by CPython
into one argument tuple (``CALL_FUNCTION_EX``), whose constraint strings numba-cuda-mlir 0.6 no longer types as
literals (m64n16 and up, 8 accumulators or more, did not compile), and its ``nvvm.inline_ptx`` op has no tied
operands. The intrinsics take the accumulator tuple itself, so every ``n`` of ``WGMMA_N`` (8..256) compiles.
Kernels that use them must be compiled for ``sm_90a`` (``backend.jit_options`` passes ``chip`` on a 9.0
device). The lowerings are registered at import and the compiler's registries refreshed.
"""
from __future__ import annotations

import importlib

import numpy as np
from numba_cuda_mlir import cuda
from numba_cuda_mlir import types as mt
from numba_cuda_mlir._mlir.dialects import llvm
from numba_cuda_mlir.extending import lower_builtin, refresh_registries, type_callable
from numba_cuda_mlir.lowering_utilities import i32_of
from numba_cuda_mlir.lowering_utilities.type_conversions import inline_ptx_type_constraint_to_mlir_type as _mlir_t

importlib.import_module("numba_cuda_mlir.cuda.experimental")  # loads cuda.experimental (inline_ptx)

from .sm90_asm import WGMMA_N, wait_asm, wgmma_asm

_L0 = np.int64(0)

_device = cuda.jit(device=True, inline="always")


@_device
def smem_desc(arr, byte_offset, lbo, sbo):
    addr = np.uint64(cuda.experimental.inline_ptx("cvta.to.shared.u64 %0, %1;", "=l", _L0, "C",
                                                  mt.ptr(arr) + byte_offset))
    return (((addr >> np.uint64(4)) & np.uint64(0x3FFF))
            | (((np.uint64(lbo) >> np.uint64(4)) & np.uint64(0x3FFF)) << np.uint64(16))
            | (((np.uint64(sbo) >> np.uint64(4)) & np.uint64(0x3FFF)) << np.uint64(32)))


@_device
def fence_proxy_async():
    cuda.experimental.inline_ptx("fence.proxy.async.shared::cta;")


def _acc_type(acc, m: int) -> bool:
    return isinstance(acc, mt.UniTuple) and acc.count == m and acc.dtype == mt.float32


def _asm(builder, target, m: int, asm: tuple[str, str], ins: list) -> None:
    """One ``llvm.inline_asm`` (side effects) returning ``m`` fp32 values, stored to ``target`` as a tuple."""
    f32 = _mlir_t("f")
    res = llvm.inline_asm(llvm.StructType.get_literal([f32] * m), ins, *asm, has_side_effects=True)
    builder.store_var(target, tuple(llvm.extractvalue(f32, res, [k]) for k in range(m)))


def _wgmma_intrinsic(n: int, bf16: bool, sync: bool):
    m = n // 2
    asm = wgmma_asm(n, bf16, sync)

    def stub(acc, a0, a1, a2, a3, desc):
        """Compiled by numba-cuda-mlir only (typing and lowering registered below)."""
        raise NotImplementedError("a numba-cuda-mlir intrinsic: call it from a kernel")

    stub.__name__ = stub.__qualname__ = f"wgmma_m64n{n}k16_{'bf16' if bf16 else 'f16'}" + ("" if sync else "_async")

    @type_callable(stub)
    def _typing(context):
        def typer(acc, a0, a1, a2, a3, desc):
            if _acc_type(acc, m) and all(isinstance(x, mt.Integer) for x in (a0, a1, a2, a3, desc)):
                return acc
            return None

        return typer

    @lower_builtin(stub, mt.UniTuple, mt.Integer, mt.Integer, mt.Integer, mt.Integer, mt.Integer)
    def _lower(builder, target, args, kwargs):
        f32, u32, u64 = _mlir_t("f"), _mlir_t("r"), _mlir_t("l")
        vals = builder.load_vars(args)
        ins = [builder.mlir_convert(v, u32) for v in vals[1:5]] + [builder.mlir_convert(vals[5], u64), i32_of(1)]
        _asm(builder, target, m, asm, ins + [builder.mlir_convert(v, f32) for v in vals[0]])

    return stub


def _wait_intrinsic(m: int):
    asm = wait_asm(m)

    def stub(acc):
        """Compiled by numba-cuda-mlir only (typing and lowering registered below)."""
        raise NotImplementedError("a numba-cuda-mlir intrinsic: call it from a kernel")

    stub.__name__ = stub.__qualname__ = f"wgmma_wait_{m}"

    @type_callable(stub)
    def _typing(context):
        def typer(acc):
            return acc if _acc_type(acc, m) else None

        return typer

    @lower_builtin(stub, mt.UniTuple)
    def _lower(builder, target, args, kwargs):
        f32 = _mlir_t("f")
        _asm(builder, target, m, asm, [builder.mlir_convert(v, f32) for v in builder.load_var(args[0])])

    return stub


_WGMMA = {(n, bf): _wgmma_intrinsic(n, bf, True) for n in WGMMA_N for bf in (False, True)}
_WGMMA_ASYNC = {(n, bf): _wgmma_intrinsic(n, bf, False) for n in WGMMA_N for bf in (False, True)}
_WAITS = {n // 2: _wait_intrinsic(n // 2) for n in WGMMA_N}
refresh_registries()  # the lowerings too (type_callable refreshes typing only): compiled kernels may exist already


def wgmma_wait_for(m: int):
    """``wgmma_wait`` for ``m`` accumulators (one intrinsic per tuple size)."""
    return _WAITS[m]
