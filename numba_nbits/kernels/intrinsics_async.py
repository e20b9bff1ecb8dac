"""Asynchronous copies into shared memory (``cp.async``, sm_80+) and shared-memory vector loads, each with a
pure-Python twin for the simulator.

The tensor-core GEMV's shared-memory ring (``kernels/gemv/mma_ring.py``, ``Tactic.smem``) streams each
lane's weight vectors, scale words and zero points through ``D`` shared-memory slots filled by ``cp.async``:
the bytes in flight no longer cost registers, so a warp can keep ``D - 1`` work items in flight at the
register count (and occupancy) of a kernel that keeps one. Each lane reads back only what it copied
itself, so ``cp.async.wait_group`` (per thread) is the only synchronisation a slot needs. As in
``intrinsics.py`` the compiled intrinsic or the twin is chosen once at import, kernels never branch on
simulation, and under ``NUMBA_NBITS_BACKEND=mlir`` the names are rebound to ``intrinsics_async_mlir.py``
(the same PTX through ``inline_ptx``).

Functions (device side); a shared address is a 32-bit shared-window address (``smem_addr`` plus a byte
offset):

* ``smem_addr(arr)``: the shared-window address of element 0 of the shared array ``arr`` (``cvta.to.shared``).
* ``cp_async_16(saddr, arr, i)`` / ``cp_async_8`` / ``cp_async_4``: start copying the ``i``-th group of 16 / 8 /
  4 bytes of the 1-D global array ``arr`` (any dtype; byte offset ``i * n``) to ``saddr`` (``n``-byte
  aligned). 16 bytes bypass L1 (``cp.async.cg``); 8 and 4 bytes can only be ``.ca``.
* ``cp_async_commit()``: close this thread's group of copies started since the last commit
  (``cp.async.commit_group``; an empty group is allowed).
* ``cp_async_wait_for(n)``: the device function ``cp_async_wait()`` that waits until at most ``n`` of this
  thread's committed groups are pending (``cp.async.wait_group n``; ``n`` is an immediate, so one function
  per ``n``). The copies of the completed groups are then visible to this thread.
* ``lds_v4(saddr)`` / ``lds_v2(saddr)`` / ``lds(saddr)``: 16 / 8 / 4 bytes at a shared address as uint32s
  (``ld.shared.v4.u32`` ...). The asm is side-effecting, with a memory clobber on the copy and wait
  intrinsics, so the compiler never moves a read above the wait that makes its bytes valid.

Twins: ``smem_addr`` gives each shared array a range of the pretend shared window of
``intrinsics_sm90`` (the same addresses its ``smem_desc`` twin uses); a copy is done at once (a simulated
thread sees its own writes immediately, which is all the wait guarantees on a GPU); commit and wait do
nothing; every access is range- and alignment-checked.
"""
from __future__ import annotations

import numpy as np
from numba.cuda.core import config as _nb_config

from .. import backend as _backend
from . import intrinsics_sm90 as _sm90

SIMULATED = bool(_nb_config.ENABLE_CUDASIM)
MLIR = not SIMULATED and _backend.NAME == "mlir"  # numba-cuda-mlir compiles the kernels (see the end)
#: the ``n`` of ``cp_async_wait_for`` (pending groups left): 0 .. MAX_PENDING
MAX_PENDING = 15

# --------------------------------------------------------------------------------------- twins


def _smem_addr_py(arr):
    return np.uint32(_sm90._smem_base(arr))


def _smem_view(what: str, saddr, nbytes: int) -> np.ndarray:
    """The ``nbytes`` bytes at pretend shared address ``saddr`` (within one shared array), writable."""
    a = int(saddr)
    if a % nbytes:
        raise ValueError(f"{what}: shared address {a:#x} is not {nbytes}-byte aligned")
    return _sm90._smem_bytes(a, nbytes, what)


def _cp_async_twin(n: int):
    def cp_async(saddr, arr, i):
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"cp_async_{n}: index must be an integer, got {type(i).__name__}")
        src = arr.reshape(-1).view(np.uint8)
        j = int(i) * n
        if j < 0 or j + n > len(src):
            raise IndexError(f"cp_async_{n}: group {int(i)} reads bytes [{j}, {j + n}) of an array of {len(src)}")
        _smem_view(f"cp_async_{n}", saddr, n)[:] = src[j:j + n]

    cp_async.__name__ = f"cp_async_{n}"
    return cp_async


def _noop():
    return None


def _lds_twin(n: int):
    def lds(saddr):
        words = _smem_view(f"lds_v{n}", saddr, 4 * n).view(np.uint32)
        return tuple(np.uint32(w) for w in words) if n > 1 else np.uint32(words[0])

    return lds


TWINS = {"smem_addr": _smem_addr_py, "cp_async_16": _cp_async_twin(16), "cp_async_8": _cp_async_twin(8),
         "cp_async_4": _cp_async_twin(4), "cp_async_commit": _noop, "lds_v4": _lds_twin(4), "lds_v2": _lds_twin(2),
         "lds": _lds_twin(1)}
#: the wait functions' twin (one for every ``n``)
_WAIT_TWIN = _noop

if SIMULATED:
    globals().update(TWINS)
else:  # pragma: no cover - compiled on a GPU only
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    from .intrinsics_sm90 import _I32, _I64, _to_i32, _to_i64

    @intrinsic
    def smem_addr(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, args[0])
            cvta = ir.InlineAsm(ir.FunctionType(_I64, [_I64]), "cvta.to.shared.u64 $0, $1;", "=l,l")
            return builder.trunc(builder.call(cvta, [builder.ptrtoint(ary.data, _I64)]), _I32)

        return types.uint32(arr), codegen

    def _cp_async_intrinsic(n: int):
        cache = "cg" if n == 16 else "ca"  # .cg takes 16 bytes only

        def cp_async(typingctx, saddr, arr, idx):
            if not (isinstance(saddr, types.Integer) and isinstance(arr, types.Array) and arr.ndim == 1
                    and isinstance(idx, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                ary = context.make_array(sig.args[1])(context, builder, args[1])
                byte = builder.mul(_to_i64(builder, args[2]), ir.Constant(_I64, n))
                src = builder.add(builder.ptrtoint(ary.data, _I64), byte)
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I32, _I64]),
                                   f"cp.async.{cache}.shared.global [$0], [$1], {n};", "r,l,~{memory}",
                                   side_effect=True)
                builder.call(asm, [_to_i32(builder, args[0]), src])
                return context.get_dummy_value()

            return types.void(saddr, arr, idx), codegen

        cp_async.__name__ = cp_async.__qualname__ = f"cp_async_{n}"
        return intrinsic(cp_async)

    cp_async_16 = _cp_async_intrinsic(16)
    cp_async_8 = _cp_async_intrinsic(8)
    cp_async_4 = _cp_async_intrinsic(4)

    def _bare_asm_intrinsic(name: str, ptx: str):
        def typer(typingctx):
            def codegen(context, builder, sig, args):
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), ptx, "~{memory}", side_effect=True)
                builder.call(asm, [])
                return context.get_dummy_value()

            return types.void(), codegen

        typer.__name__ = typer.__qualname__ = name
        return intrinsic(typer)

    cp_async_commit = _bare_asm_intrinsic("cp_async_commit", "cp.async.commit_group;")

    def _lds_intrinsic(n: int):
        regs = ", ".join(f"${k}" for k in range(n))
        ptx = f"ld.shared.v{n}.u32 {{{regs}}}, [${n}];" if n > 1 else "ld.shared.u32 $0, [$1];"

        def lds(typingctx, saddr):
            if not isinstance(saddr, types.Integer):
                return None
            rt = types.UniTuple(types.uint32, n) if n > 1 else types.uint32

            def codegen(context, builder, sig, args):
                out = ir.LiteralStructType([_I32] * n) if n > 1 else _I32
                asm = ir.InlineAsm(ir.FunctionType(out, [_I32]), ptx, ",".join(["=r"] * n + ["r"]), side_effect=True)
                res = builder.call(asm, [_to_i32(builder, args[0])])
                if n == 1:
                    return res
                return context.make_tuple(builder, rt, [builder.extract_value(res, k) for k in range(n)])

            return rt(saddr), codegen

        lds.__name__ = lds.__qualname__ = f"lds_v{n}" if n > 1 else "lds"
        return intrinsic(lds)

    lds_v4 = _lds_intrinsic(4)
    lds_v2 = _lds_intrinsic(2)
    lds = _lds_intrinsic(1)

_WAITS: dict = {}


def cp_async_wait_for(n: int):
    """The device function ``cp_async_wait()``: ``cp.async.wait_group n`` (module docstring)."""
    if not 0 <= int(n) <= MAX_PENDING:
        raise ValueError(f"cp_async_wait_for: n must be 0..{MAX_PENDING}, got {n}")
    n = int(n)
    if SIMULATED:
        return _WAIT_TWIN
    if MLIR:  # pragma: no cover - compiled on a GPU only
        return _mlir.cp_async_wait_for(n)
    if n not in _WAITS:  # pragma: no cover - compiled on a GPU only
        _WAITS[n] = _bare_asm_intrinsic(f"cp_async_wait_{n}", f"cp.async.wait_group {n};")
    return _WAITS[n]


# ------------------------------------------------------------------------------- numba-cuda-mlir
if MLIR:  # pragma: no cover - compiled on a GPU only
    from . import intrinsics_async_mlir as _mlir

    globals().update({name: getattr(_mlir, name) for name in TWINS})
