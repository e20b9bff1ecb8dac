"""Hopper (sm_90a) warpgroup tensor-core intrinsics, each with a pure-Python twin for the simulator.

The building blocks of the fused Hopper GEMM (issue: weights decoded in registers and fed to
``wgmma.mma_async`` as its register A operand, activations from shared memory). As in
``intrinsics.py``, the twin or the compiled intrinsic is chosen once at import and kernels never
branch on simulation. numba-cuda compiles for ``sm_90a`` on a compute-capability 9.0 device, which
``wgmma`` needs; under ``NUMBA_NBITS_BACKEND=mlir`` the names are rebound to ``intrinsics_sm90_mlir.py``
(the same PTX, ``sm90_asm``, through ``llvm.inline_asm``; ``backend.py`` passes ``chip="sm_90a"``).

* ``smem_desc(arr, byte_offset, lbo, sbo)``: the 64-bit shared-memory matrix descriptor of
  ``wgmma`` for the matrix starting ``byte_offset`` bytes into the shared uint32 array ``arr``, no
  swizzle (layout type 0), leading-dimension byte offset ``lbo`` and stride byte offset ``sbo``
  (multiples of 16): bits 0-13 the shared-window address >> 4, 16-29 ``lbo >> 4``, 32-45
  ``sbo >> 4``, base offset 0. For a K-major operand without swizzle the matrix is made of 8 x 16-byte
  "core matrices" (8 rows of the M/N dimension, each 8 consecutive 16-bit k values; rows 16 bytes
  apart, 128 bytes in all); the core matrix at (row block ``r``, k block ``c``) starts at
  ``start + r * sbo + c * lbo``.
* ``fence_proxy_async()``: ``fence.proxy.async.shared::cta``, which makes this thread's ordinary
  shared-memory stores visible to the async proxy that ``wgmma`` reads shared memory through (store,
  fence, then a barrier, then ``wgmma``).
* ``wgmma_m64n{N}k16_{f16,bf16}(acc, a0, a1, a2, a3, desc)`` for N a multiple of 8 up to 128: one warpgroup (128
  threads, all of them call it) computes ``D = A @ B + C`` for A 64 x 16 in registers, B 16 x N (K-major,
  from ``desc``) and fp32 accumulators; ``acc`` is this thread's ``N / 2`` float32 accumulators (a
  tuple), the result the new ones. One asm block issues ``wgmma.fence``, the ``mma_async`` (scale-d 1,
  no negation, B not transposed), ``commit_group`` and ``wait_group 0``: the instruction completes
  before the block ends, so the compiler's view of the registers is the hardware's (the pipelined
  form waits later). Fragments (PTX ISA "wgmma .m64nNk16" register layouts; warp ``w = (thread % 128)
  // 32`` of the warpgroup owns rows ``16w .. 16w + 15``; ``g = lane >> 2``, ``t = lane & 3``; each
  uint32 holds two 16-bit values, the lower index in the low half):
      a0 = A[16w+g, 2t:2t+2]  a1 = A[16w+g+8, 2t:2t+2]  a2 = A[16w+g, 2t+8:2t+10]  a3 = A[16w+g+8, 2t+8:2t+10]
      acc[4j + 0], acc[4j + 1] = D[16w+g, 8j+2t], D[16w+g, 8j+2t+1]
      acc[4j + 2], acc[4j + 3] = D[16w+g+8, 8j+2t], D[16w+g+8, 8j+2t+1]          (j < N / 8)
  The twin gathers the warpgroup's fragments (``simulator.warpgroup_exchange``), reads B from the
  shared array as the descriptor says, and computes each output as a float64 dot product of the exact
  products plus the accumulator, rounded once to float32 (the hardware agrees to ~1 ulp).

Shared-memory addresses under the simulator: ``smem_desc``'s twin gives each shared array it sees a
16-byte-aligned range of a pretend 256 KiB shared window, so descriptors carry addresses as on a GPU
and the ``wgmma`` twin finds the array (and the offset) back from them.
"""
from __future__ import annotations

import threading

import numpy as np
from numba.cuda.core import config as _nb_config

from .. import backend as _backend
from .sm90_asm import WGMMA_N, wait_asm, wgmma_asm

SIMULATED = bool(_nb_config.ENABLE_CUDASIM)
MLIR = not SIMULATED and _backend.NAME == "mlir"  # numba-cuda-mlir compiles the kernels (see the end)
_WINDOW = 1 << 18  # the shared window a descriptor's 14-bit (address >> 4) field spans

# --------------------------------------------------------------------------------------- twins

_SMEM_LOCK = threading.Lock()
_SMEM: dict = {}  # pretend base address -> shared array
_NEXT = [16]


def _smem_base(arr) -> int:
    """The pretend base address of ``arr``'s memory (threads of a block hold different views of one
    shared array, so the memory, not the view, is what is named)."""
    data = arr.__array_interface__["data"][0]
    with _SMEM_LOCK:
        for base, a in _SMEM.items():
            if a.__array_interface__["data"][0] == data and a.nbytes == arr.nbytes:
                return base
        size = -(-arr.nbytes // 16) * 16
        if _NEXT[0] + size > _WINDOW:  # wrapped: forget the arrays of earlier launches
            _SMEM.clear()
            _NEXT[0] = 16
        base = _NEXT[0]
        _NEXT[0] += size
        _SMEM[base] = arr
        return base


def _smem_desc_py(arr, byte_offset, lbo, sbo):
    for name, v in (("byte_offset", byte_offset), ("lbo", lbo), ("sbo", sbo)):
        if int(v) % 16 or int(v) < 0:
            raise ValueError(f"smem_desc: {name}={int(v)} must be a non-negative multiple of 16")
    addr = _smem_base(arr) + int(byte_offset)
    return np.uint64(((addr >> 4) & 0x3FFF) | (((int(lbo) >> 4) & 0x3FFF) << 16) | (((int(sbo) >> 4) & 0x3FFF) << 32))


def _smem_bytes(addr: int, nbytes: int, what: str = "wgmma") -> np.ndarray:
    """The ``nbytes`` bytes at pretend shared address ``addr`` (within one array; a view: writable);
    ``what`` names the caller in the error."""
    with _SMEM_LOCK:
        for base, a in _SMEM.items():
            if base <= addr and addr + nbytes <= base + a.nbytes:
                flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
                return flat[addr - base:addr - base + nbytes]
    raise IndexError(f"{what}: shared address range [{addr:#x}, {addr + nbytes:#x}) is in no shared array")


def _fence_proxy_async_py():
    return None


def desc_fields(desc) -> tuple[int, int, int]:
    """``(start address, lbo, sbo)`` in bytes of a no-swizzle descriptor (the twin's reading of it)."""
    d = int(desc)
    return (d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4


def b_from_desc(desc, n: int, bf16: bool) -> np.ndarray:
    """B (16 x n, float64) as a K-major no-swizzle descriptor lays it out (module docstring)."""
    start, lbo, sbo = desc_fields(desc)
    B = np.zeros((16, n))
    for rb in range(n // 8):
        for cb in range(2):
            raw = _smem_bytes(start + rb * sbo + cb * lbo, 128).view(np.uint16).reshape(8, 8)  # [row, k]
            vals = (raw.astype(np.uint32) << 16).view(np.float32) if bf16 else raw.view(np.float16)
            B[8 * cb:8 * cb + 8, 8 * rb:8 * rb + 8] = vals.astype(np.float64).T
    return B


def a_from_fragments(regs: np.ndarray, bf16: bool) -> np.ndarray:
    """A (64 x 16, float64) from the warpgroup's register fragments ``regs[128, 4]`` (uint32)."""
    r = np.asarray(regs, np.uint32)
    halves = np.stack([r & 0xFFFF, r >> 16], axis=-1).astype(np.uint16)  # [thread, reg, half]
    vals = (halves.astype(np.uint32) << 16).view(np.float32) if bf16 else halves.view(np.float16)
    vals = vals.astype(np.float64)
    A = np.zeros((64, 16))
    for th in range(128):
        w, lane = divmod(th, 32)
        g, t = lane >> 2, lane & 3
        for reg, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            A[16 * w + g + dr, 2 * t + dc:2 * t + dc + 2] = vals[th, reg]
    return A


def fragments_from_a(A: np.ndarray, bf16: bool) -> np.ndarray:
    """The register fragments ``[128, 4]`` (uint32) of A (64 x 16): the inverse of ``a_from_fragments``."""
    if bf16:
        bits = (np.asarray(A, np.float32).view(np.uint32) >> 16).astype(np.uint32)  # A holds bf16 values exactly
    else:
        bits = np.asarray(A, np.float16).view(np.uint16).astype(np.uint32)
    regs = np.zeros((128, 4), np.uint32)
    for th in range(128):
        w, lane = divmod(th, 32)
        g, t = lane >> 2, lane & 3
        for reg, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            row, col = 16 * w + g + dr, 2 * t + dc
            regs[th, reg] = bits[row, col] | (bits[row, col + 1] << 16)
    return regs


def d_fragment_positions(n: int, thread: int) -> list[tuple[int, int]]:
    """``(row, col)`` of D for each of a thread's ``n / 2`` accumulators."""
    w, lane = divmod(thread % 128, 32)
    g, t = lane >> 2, lane & 3
    pos = []
    for j in range(n // 8):
        pos += [(16 * w + g, 8 * j + 2 * t), (16 * w + g, 8 * j + 2 * t + 1),
                (16 * w + g + 8, 8 * j + 2 * t), (16 * w + g + 8, 8 * j + 2 * t + 1)]
    return pos


def _wgmma_twin(n: int, bf16: bool):
    def wgmma(acc, a0, a1, a2, a3, desc):
        from . import simulator

        if len(acc) != n // 2:
            raise TypeError(f"wgmma m64n{n}k16: acc must hold {n // 2} float32, got {len(acc)}")
        th = threading.current_thread().thread_id
        mine = (int(a0) & 0xFFFFFFFF, int(a1) & 0xFFFFFFFF, int(a2) & 0xFFFFFFFF, int(a3) & 0xFFFFFFFF, int(desc))
        got = simulator.warpgroup_exchange(mine)
        if len({v[4] for v in got}) != 1:
            raise ValueError("wgmma: the warpgroup's threads passed different B descriptors")
        A = a_from_fragments(np.array([v[:4] for v in got], np.uint32), bf16)
        D = A @ b_from_desc(got[0][4], n, bf16)
        return tuple(np.float32(D[r, c] + float(np.float32(acc[i]))) for i, (r, c) in
                     enumerate(d_fragment_positions(n, th)))

    wgmma.__name__ = f"wgmma_m64n{n}k16_{'bf16' if bf16 else 'f16'}"
    return wgmma


def _wgmma_wait_py(acc):
    return acc


if SIMULATED:
    smem_desc = _smem_desc_py
    fence_proxy_async = _fence_proxy_async_py
    _WGMMA = {(n, bf): _wgmma_twin(n, bf) for n in WGMMA_N for bf in (False, True)}
    _WGMMA_ASYNC = _WGMMA  # the twin completes at once; its wait has nothing left to do
    wgmma_wait = _wgmma_wait_py
else:  # pragma: no cover - compiled on a GPU only
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    _I32 = ir.IntType(32)
    _I64 = ir.IntType(64)

    def _to_i32(builder, v):
        w = v.type.width
        return builder.trunc(v, _I32) if w > 32 else builder.zext(v, _I32) if w < 32 else v

    def _to_i64(builder, v):
        w = v.type.width
        return builder.sext(v, _I64) if w < 64 else v

    @intrinsic
    def smem_desc(typingctx, arr, byte_offset, lbo, sbo):
        if not (isinstance(arr, types.Array) and all(isinstance(x, types.Integer) for x in (byte_offset, lbo, sbo))):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            p = builder.add(builder.ptrtoint(ary.data, _I64), _to_i64(builder, args[1]))
            cvta = ir.InlineAsm(ir.FunctionType(_I64, [_I64]), "cvta.to.shared.u64 $0, $1;", "=l,l")
            addr = builder.call(cvta, [p])

            def field(v, shift):
                v = builder.and_(builder.lshr(v, ir.Constant(_I64, 4)), ir.Constant(_I64, 0x3FFF))
                return builder.shl(v, ir.Constant(_I64, shift)) if shift else v

            d = builder.or_(field(addr, 0), field(_to_i64(builder, args[2]), 16))
            return builder.or_(d, field(_to_i64(builder, args[3]), 32))

        return types.uint64(arr, byte_offset, lbo, sbo), codegen

    @intrinsic
    def fence_proxy_async(typingctx):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "fence.proxy.async.shared::cta;", "",
                               side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()

        return types.void(), codegen

    def _wgmma_intrinsic(n: int, bf16: bool, sync: bool = True):
        kind = "bf16" if bf16 else "f16"
        m = n // 2
        ptx, cons = wgmma_asm(n, bf16, sync)

        def typer(typingctx, acc, a0, a1, a2, a3, desc):
            if not (isinstance(acc, types.UniTuple) and acc.count == m and acc.dtype == types.float32):
                return None
            if not all(isinstance(x, types.Integer) for x in (a0, a1, a2, a3, desc)):
                return None
            rt = types.UniTuple(types.float32, m)

            def codegen(context, builder, sig, args):
                f32 = ir.FloatType()
                cs = [builder.extract_value(args[0], k) for k in range(m)]
                ins = [_to_i32(builder, v) for v in args[1:5]] + [_to_i64(builder, args[5]), ir.Constant(_I32, 1)] + cs
                fnty = ir.FunctionType(ir.LiteralStructType([f32] * m), [_I32] * 4 + [_I64, _I32] + [f32] * m)
                res = builder.call(ir.InlineAsm(fnty, ptx, cons, side_effect=True), ins)
                return context.make_tuple(builder, rt, [builder.extract_value(res, k) for k in range(m)])

            return rt(acc, a0, a1, a2, a3, desc), codegen

        typer.__name__ = f"wgmma_m64n{n}k16_{kind}" + ("" if sync else "_async")
        return intrinsic(typer)

    _WGMMA = {(n, bf): _wgmma_intrinsic(n, bf) for n in WGMMA_N for bf in (False, True)}
    _WGMMA_ASYNC = {(n, bf): _wgmma_intrinsic(n, bf, False) for n in WGMMA_N for bf in (False, True)}

    @intrinsic
    def wgmma_wait(typingctx, acc):
        if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32 and acc.count in
                tuple(n // 2 for n in WGMMA_N)):
            return None
        m = acc.count

        def codegen(context, builder, sig, args):
            f32 = ir.FloatType()
            fnty = ir.FunctionType(ir.LiteralStructType([f32] * m), [f32] * m)
            asm = ir.InlineAsm(fnty, *wait_asm(m), side_effect=True)
            res = builder.call(asm, [builder.extract_value(args[0], k) for k in range(m)])
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(res, k) for k in range(m)])

        return acc(acc), codegen


if MLIR:  # pragma: no cover - compiled on a GPU only
    from . import intrinsics_sm90_mlir as _mlir

    globals().update(smem_desc=_mlir.smem_desc, fence_proxy_async=_mlir.fence_proxy_async)
    _WGMMA, _WGMMA_ASYNC = _mlir._WGMMA, _mlir._WGMMA_ASYNC


def wgmma_wait_for(m: int):
    """``wgmma_wait`` for a tuple of ``m`` accumulators: the generic intrinsic (numba-cuda) or twin, or the
    per-size intrinsic of numba-cuda-mlir."""
    if m not in tuple(n // 2 for n in WGMMA_N):
        raise ValueError(f"wgmma_wait: {m} accumulators is no wgmma shape's (n / 2 for n in {WGMMA_N})")
    return _mlir.wgmma_wait_for(m) if MLIR else wgmma_wait


def wgmma(n: int, bf16: bool, sync: bool = True):
    """``wgmma_m64n{n}k16_{f16|bf16}`` (for kernel generators); ``sync=False``: the form that only issues
    (``wgmma.fence`` + ``mma_async``), whose accumulators are valid after ``wgmma_wait(acc)`` (commit +
    wait for all groups; ptxas keeps the registers of in-flight MMAs untouched or serialises)."""
    if n not in WGMMA_N:
        raise ValueError(f"wgmma: n must be one of {WGMMA_N}, got {n}")
    return (_WGMMA if sync else _WGMMA_ASYNC)[(n, bool(bf16))]


wgmma_m64n8k16_f16 = _WGMMA[(8, False)]
wgmma_m64n16k16_f16 = _WGMMA[(16, False)]
wgmma_m64n32k16_f16 = _WGMMA[(32, False)]
wgmma_m64n64k16_f16 = _WGMMA[(64, False)]
wgmma_m64n8k16_bf16 = _WGMMA[(8, True)]
wgmma_m64n16k16_bf16 = _WGMMA[(16, True)]
wgmma_m64n32k16_bf16 = _WGMMA[(32, True)]
wgmma_m64n64k16_bf16 = _WGMMA[(64, True)]
