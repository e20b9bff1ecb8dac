"""Shared-memory barriers (``mbarrier``) and bulk copies (``cp.async.bulk``, sm_90), each with a pure-Python twin
for the simulator.

The pipelined warpgroup kernel (``kernels/gemv/mma_xa.py``, ``Tactic.mb``) fills each slot of its activation ring
with one bulk copy issued by one thread, which the copy engine completes on the slot's "full" barrier, and the
threads that read a slot release it on its "empty" barrier, so no CTA-wide ``bar.sync`` couples the warpgroups.
As in ``intrinsics.py`` the compiled intrinsic or the twin is chosen once at import, kernels never branch on
simulation, and under ``NUMBA_NBITS_BACKEND=mlir`` the names are rebound to numba-cuda-mlir forms (the same PTX
through ``inline_ptx``).

Functions (device side; ``bar`` and ``saddr`` are 32-bit shared-window addresses, ``smem_addr`` plus an offset;
a barrier takes 8 bytes, 8-byte aligned):

* ``mbar_init(bar, count)``: ``mbarrier.init``: phase 0, ``count`` arrivals expected per phase.
* ``mbar_fence_init()``: ``fence.mbarrier_init.release.cluster`` + ``fence.proxy.async.shared::cta``: the
  initialised barriers visible to the copy engine (then a ``syncthreads`` before anyone uses them).
* ``mbar_arrive(bar)``: one arrival (``mbarrier.arrive``, release semantics: this thread's earlier shared-memory
  reads and writes happen before the phase completes).
* ``mbar_arrive_tx(bar, nbytes)``: one arrival that also expects ``nbytes`` more bytes of transactions in this phase
  (``mbarrier.arrive.expect_tx``); the phase completes when every arrival is in and every expected byte landed.
* ``mbar_try_wait(bar, parity)``: 1 when the phase of parity ``parity`` has completed (the barrier has moved to the
  next phase), else 0 after a bounded wait (``mbarrier.try_wait.parity``, acquire semantics); kernels loop on it.
* ``bulk_g2s(saddr, arr, i, nbytes, bar)``: copy ``nbytes`` (a multiple of 16) from the 1-D global array ``arr``
  at byte ``16 * i`` to ``saddr`` (16-byte aligned), completing ``nbytes`` of transactions on ``bar``
  (``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes``). The bytes are written through the
  async proxy: a ``wgmma`` reading them needs no proxy fence; a generic read sees them after the barrier's wait.

Twins: a barrier's state lives in its 8 shared bytes (pending arrivals, count and phase in one word, the
transaction count in the other), changed under one lock; ``bulk_g2s`` copies at once and completes the
transactions; ``mbar_try_wait`` yields the interpreter before it reports an incomplete phase, so the spinning
simulated thread lets the others run.
"""
from __future__ import annotations

import threading
import time

import numpy as np
from numba.cuda.core import config as _nb_config

from .. import backend as _backend
from . import intrinsics_async as _async
from . import intrinsics_sm90 as _sm90

SIMULATED = bool(_nb_config.ENABLE_CUDASIM)
MLIR = not SIMULATED and _backend.NAME == "mlir"  # numba-cuda-mlir compiles the kernels (see the end)
MBAR_BYTES = 8
_PHASE = 1 << 15  # the twin's phase bit in word 0 (pending arrivals below it, the count above)

# --------------------------------------------------------------------------------------- twins
_LOCK = threading.Lock()


def _words(what: str, bar) -> np.ndarray:
    return _async._smem_view(what, bar, MBAR_BYTES).view(np.int32)


def _complete(w: np.ndarray) -> None:
    """Move to the next phase when no arrival and no transaction byte is pending (caller holds the lock)."""
    if w[0] & (_PHASE - 1) == 0 and w[1] == 0:
        count = (int(w[0]) >> 16) & 0x7FFF
        w[0] = np.int32((count << 16) | ((int(w[0]) & _PHASE) ^ _PHASE) | count)


def _mbar_init_py(bar, count):
    if not 1 <= int(count) < _PHASE:
        raise ValueError(f"mbar_init: count must be 1..{_PHASE - 1}, got {int(count)}")
    with _LOCK:
        w = _words("mbar_init", bar)
        w[0] = np.int32((int(count) << 16) | int(count))
        w[1] = 0


def _arrive(what: str, bar, nbytes: int) -> None:
    with _LOCK:
        w = _words(what, bar)
        if w[0] & (_PHASE - 1) == 0:
            raise RuntimeError(f"{what}: more arrivals than the barrier at {int(bar):#x} expects in one phase")
        w[1] += np.int32(nbytes)
        w[0] -= np.int32(1)
        _complete(w)


def _mbar_arrive_py(bar):
    _arrive("mbar_arrive", bar, 0)


def _mbar_arrive_tx_py(bar, nbytes):
    _arrive("mbar_arrive_tx", bar, int(nbytes))


def _mbar_try_wait_py(bar, parity):
    with _LOCK:
        done = ((int(_words("mbar_try_wait", bar)[0]) & _PHASE) != 0) != (int(parity) & 1 != 0)
    if not done:
        time.sleep(0)  # let the simulated threads that will complete the phase run
    return np.uint32(1 if done else 0)


def _bulk_g2s_py(saddr, arr, i, nbytes, bar):
    n = int(nbytes)
    if n <= 0 or n % 16:
        raise ValueError(f"bulk_g2s: nbytes must be a positive multiple of 16, got {n}")
    src = arr.reshape(-1).view(np.uint8)
    j = 16 * int(i)
    if j < 0 or j + n > len(src):
        raise IndexError(f"bulk_g2s: bytes [{j}, {j + n}) of an array of {len(src)}")
    if int(saddr) % 16:
        raise ValueError(f"bulk_g2s: shared address {int(saddr):#x} is not 16-byte aligned")
    _sm90._smem_bytes(int(saddr), n, "bulk_g2s")[:] = src[j:j + n]
    with _LOCK:
        w = _words("bulk_g2s", bar)
        w[1] -= np.int32(n)
        _complete(w)


def _noop():
    return None


TWINS = {"mbar_init": _mbar_init_py, "mbar_fence_init": _noop, "mbar_arrive": _mbar_arrive_py,
         "mbar_arrive_tx": _mbar_arrive_tx_py, "mbar_try_wait": _mbar_try_wait_py, "bulk_g2s": _bulk_g2s_py}

if SIMULATED:
    globals().update(TWINS)
else:  # pragma: no cover - compiled on a GPU only
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    from .intrinsics_sm90 import _I32, _I64, _to_i32, _to_i64

    def _void_asm(builder, ptx: str, cons: str, ins: list):
        fnty = ir.FunctionType(ir.VoidType(), [v.type for v in ins])
        builder.call(ir.InlineAsm(fnty, ptx, cons, side_effect=True), ins)

    @intrinsic
    def mbar_init(typingctx, bar, count):
        if not all(isinstance(x, types.Integer) for x in (bar, count)):
            return None

        def codegen(context, builder, sig, args):
            _void_asm(builder, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}",
                      [_to_i32(builder, args[0]), _to_i32(builder, args[1])])
            return context.get_dummy_value()

        return types.void(bar, count), codegen

    @intrinsic
    def mbar_fence_init(typingctx):
        def codegen(context, builder, sig, args):
            _void_asm(builder, "fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;", "~{memory}", [])
            return context.get_dummy_value()

        return types.void(), codegen

    @intrinsic
    def mbar_arrive(typingctx, bar):
        if not isinstance(bar, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            _void_asm(builder, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}", [_to_i32(builder, args[0])])
            return context.get_dummy_value()

        return types.void(bar), codegen

    @intrinsic
    def mbar_arrive_tx(typingctx, bar, nbytes):
        if not all(isinstance(x, types.Integer) for x in (bar, nbytes)):
            return None

        def codegen(context, builder, sig, args):
            _void_asm(builder, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}",
                      [_to_i32(builder, args[0]), _to_i32(builder, args[1])])
            return context.get_dummy_value()

        return types.void(bar, nbytes), codegen

    @intrinsic
    def mbar_try_wait(typingctx, bar, parity):
        if not all(isinstance(x, types.Integer) for x in (bar, parity)):
            return None

        def codegen(context, builder, sig, args):
            ptx = ("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n"
                   "selp.u32 $0, 1, 0, p;\n}")
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32, _I32]), ptx, "=r,r,r,~{memory}", side_effect=True)
            return builder.call(asm, [_to_i32(builder, args[0]), _to_i32(builder, args[1])])

        return types.uint32(bar, parity), codegen

    @intrinsic
    def bulk_g2s(typingctx, saddr, arr, i, nbytes, bar):
        if not (isinstance(arr, types.Array) and arr.ndim == 1
                and all(isinstance(x, types.Integer) for x in (saddr, i, nbytes, bar))):
            return None

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[1])(context, builder, args[1])
            src = builder.add(builder.ptrtoint(ary.data, _I64), builder.mul(_to_i64(builder, args[2]),
                                                                            ir.Constant(_I64, 16)))
            _void_asm(builder, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                               "[$0], [$1], $2, [$3];", "r,l,r,r,~{memory}",
                      [_to_i32(builder, args[0]), src, _to_i32(builder, args[3]), _to_i32(builder, args[4])])
            return context.get_dummy_value()

        return types.void(saddr, arr, i, nbytes, bar), codegen

# ------------------------------------------------------------------------------- numba-cuda-mlir
if MLIR:  # pragma: no cover - compiled on a GPU only
    from . import intrinsics_bulk_mlir as _mlir

    globals().update({name: getattr(_mlir, name) for name in TWINS})
