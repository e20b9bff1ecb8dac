"""Extensions that let numba's CUDA simulator run numba_nbits kernels unchanged.

numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``) runs one OS thread per CUDA thread but has no
warp primitives and cannot execute ``@intrinsic`` functions (our inline PTX). This module supplies:

* faithful warp primitives (``shfl_sync``, ``shfl_up/down/xor_sync``, ``syncwarp``, ``ballot_sync``,
  ``all_sync``, ``any_sync``, ``activemask``) patched onto the simulator's per-launch
  ``FakeCUDAModule``: every warp gets one barrier per member mask whose parties are the lanes named in
  the mask and present in the (possibly partial) warp; values are exchanged through two alternating
  slot tables, so one barrier wait per primitive suffices. Out-of-range or non-member source lanes
  return the caller's own value, as numba's lowering does. A waiting lane never times out for being
  slow (the simulator's many threads share one interpreter, and a loaded machine can stall a lane for
  minutes); it raises as soon as a lane it waits for cannot arrive: that lane has returned (divergent
  early exit), raised, or waits in ``syncthreads()``.
* strict indexing: a negative index into a global, shared or local array raises IndexError (NumPy
  would wrap it to the array's end; on a GPU it is an out-of-bounds access). Out-of-range positive
  indices raise in NumPy already; the 16-byte twins of ``intrinsics.py`` check their whole span.
  The simulator names a static shared array by the source line that declares it; the wrapper keeps
  that line the kernel's own (not the wrapper's, which would make every shared array of a kernel one).
* a registry of pure-Python *twins* for the inline-PTX intrinsics of ``kernels/intrinsics.py``.
  ``intrinsics.py`` picks the twin when the simulator is on; kernels never branch on simulation.

``install()`` is called by the launcher before the first simulated launch; it is idempotent and
fails loudly if the simulator's private names it relies on have changed.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

_FULL = 0xFFFFFFFF
#: How often a lane waiting in a warp primitive checks that the lanes it waits for can still arrive.
POLL_S = 0.25
#: A wait that sees every missing lane still running yet does not complete raises after this long: lanes
#: waiting for each other in different warp primitives, which the checks cannot see.
STALL_S = 1800.0
_ALLOWED = (int, float, np.int32, np.int64, np.float32, np.float64)
_INSTALLED = False
_LOCK = threading.Lock()


class _WarpSync:
    """A reusable barrier for the lanes ``members`` (a bit mask over threads ``base ..``) of one block."""

    __slots__ = ("cond", "base", "members", "arrived", "gen", "slots")

    def __init__(self, base: int, members: int):
        self.cond = threading.Condition(threading.Lock())
        self.base, self.members = base, members
        self.arrived = self.gen = 0  # bit mask of the members that have arrived in generation ``gen``
        self.slots = ({}, {})

    def wait(self, t, lane: int) -> None:
        """Block lane ``lane`` (thread ``t``) until every member has arrived."""
        with self.cond:
            gen = self.gen
            self.arrived |= 1 << lane
            if self.arrived == self.members:
                self.arrived = 0
                self.gen += 1
                self.cond.notify_all()
                return
            start = time.monotonic()
            while gen == self.gen:
                if not self.cond.wait(POLL_S) and gen == self.gen:
                    self._check(t, time.monotonic() - start)

    def _check(self, t, waited: float) -> None:
        if getattr(t, "abort", False):
            raise RuntimeError("another thread of the simulated block raised")
        threads = getattr(t._manager, "_nbits_threads", {})
        missing = self.members & ~self.arrived
        stuck = []
        for lane in range(missing.bit_length()):
            if not (missing >> lane) & 1:
                continue
            p = threads.get(self.base + lane)
            if p is None:  # its thread is not created yet
                continue
            if p.__dict__.get("_nbits_done"):
                err = f" after raising {p.exception[0]!r}" if p.exception else ""
                stuck.append(f"thread {self.base + lane} has returned{err}")
            elif p.syncthreads_blocked and p.__dict__.get("_nbits_syncs", 0) > t.__dict__.get("_nbits_syncs", 0):
                # in a syncthreads() this lane has not reached. One it has passed is being released: the
                # simulator's manager clears the threads' flags one by one after letting them all go.
                stuck.append(f"thread {self.base + lane} waits in syncthreads()")
        if stuck:
            raise RuntimeError(f"deadlock: thread {t.thread_id} waits in a warp primitive with member threads "
                               f"{self.base} + {self.members:#x} for threads that cannot arrive: "
                               + "; ".join(stuck))
        if waited > STALL_S:
            raise RuntimeError(f"thread {t.thread_id} waited {waited:.0f} s in a warp primitive with member "
                               f"threads {self.base} + {self.members:#x} for {self.base} + {missing:#x}")


def _lanes_present(mod, warp: int) -> int:
    bd = mod.blockDim
    nthreads = bd.x * bd.y * bd.z
    return (1 << max(0, min(32, nthreads - warp * 32))) - 1


def _state(mod, mask: int):
    t = threading.current_thread()
    st = mod.__dict__.get("_nbits_warps")
    if st is None:
        with _LOCK:
            st = mod.__dict__.setdefault("_nbits_warps", ({}, threading.Lock()))
    table, lock = st
    warp, lane = divmod(t.thread_id, 32)
    members = mask & _lanes_present(mod, warp)
    if not (members >> lane) & 1:
        raise RuntimeError(f"lane {lane} called a *_sync warp primitive with mask {mask:#x} that excludes it")
    key = (tuple(t.blockIdx), warp, members)
    with lock:
        ws = table.get(key)
        if ws is None:
            ws = table[key] = _WarpSync(warp * 32, members)
    gen = t.__dict__.get("_nbits_gen", 0)
    t._nbits_gen = gen + 1
    return ws, t, lane, members, gen & 1


def _exchange(mod, mask, value):
    ws, t, lane, members, buf = _state(mod, int(mask))
    slots = ws.slots[buf]
    slots[lane] = value
    ws.wait(t, lane)
    return slots, lane, members


def _check(value):
    # numba-cuda's shfl_*_sync types only int32/int64/float32/float64 (numba/cuda/intrinsics.py)
    if isinstance(value, bool) or not isinstance(value, _ALLOWED):
        raise TypeError(f"shfl_*_sync supports only 32/64-bit ints and floats, got {type(value).__name__}")


def shfl_sync(self, mask, value, src_lane):
    _check(value)
    slots, lane, members = _exchange(self, mask, value)
    src = int(src_lane) & 31
    return slots[src] if (members >> src) & 1 else value


def shfl_up_sync(self, mask, value, delta):
    _check(value)
    slots, lane, members = _exchange(self, mask, value)
    src = lane - int(delta)
    return slots[src] if src >= 0 and (members >> src) & 1 else value


def shfl_down_sync(self, mask, value, delta):
    _check(value)
    slots, lane, members = _exchange(self, mask, value)
    src = lane + int(delta)
    return slots[src] if src < 32 and (members >> src) & 1 else value


def shfl_xor_sync(self, mask, value, lane_mask):
    _check(value)
    slots, lane, members = _exchange(self, mask, value)
    src = lane ^ (int(lane_mask) & 31)
    return slots[src] if (members >> src) & 1 else value


def syncwarp(self, mask=_FULL):
    _exchange(self, mask, None)


def ballot_sync(self, mask, predicate):
    slots, _, members = _exchange(self, mask, bool(predicate))
    return sum(1 << ln for ln, p in slots.items() if p and (members >> ln) & 1)


def all_sync(self, mask, predicate):
    slots, _, members = _exchange(self, mask, bool(predicate))
    return int(all(p for ln, p in slots.items() if (members >> ln) & 1))


def any_sync(self, mask, predicate):
    slots, _, members = _exchange(self, mask, bool(predicate))
    return int(any(p for ln, p in slots.items() if (members >> ln) & 1))


def activemask(self):
    # The simulator cannot observe divergence: report every lane present in the warp.
    return _lanes_present(self, threading.current_thread().thread_id // 32)


def warp_exchange(value):
    """Gather ``value`` from all 32 lanes of the calling thread's warp (helper for intrinsic twins).

    Must be called by every lane of a full warp, like the warp-wide instruction it stands in for
    (``mma.sync``). Returns a list indexed by lane.
    """
    from numba.cuda.simulator import kernel as simkernel

    mod = simkernel._get_kernel_context()
    if mod is None:
        raise RuntimeError("warp_exchange called outside a simulated kernel")
    slots, _, _ = _exchange(mod, _FULL, value)
    return [slots[i] for i in range(32)]


def warpgroup_exchange(value):
    """Gather ``value`` from the 128 threads of the calling thread's warpgroup (threads ``128 i ..
    128 i + 127`` of its block), for the twins of warpgroup instructions (``wgmma``); every one of them
    must call it. Returns a list indexed by the thread's position in the warpgroup."""
    from numba.cuda.simulator import kernel as simkernel

    mod = simkernel._get_kernel_context()
    if mod is None:
        raise RuntimeError("warpgroup_exchange called outside a simulated kernel")
    bd = mod.blockDim
    if (bd.x * bd.y * bd.z) % 128:
        raise RuntimeError(f"a warpgroup instruction needs whole warpgroups of 128 threads; the block has "
                           f"{bd.x * bd.y * bd.z}")
    t = threading.current_thread()
    group, pos = divmod(t.thread_id, 128)
    st = mod.__dict__.get("_nbits_warpgroups")
    if st is None:
        with _LOCK:
            st = mod.__dict__.setdefault("_nbits_warpgroups", ({}, threading.Lock()))
    table, lock = st
    with lock:
        ws = table.get((tuple(t.blockIdx), group))
        if ws is None:
            ws = table[(tuple(t.blockIdx), group)] = _WarpSync(group * 128, (1 << 128) - 1)
    gen = t.__dict__.get("_nbits_wg_gen", 0)
    t._nbits_wg_gen = gen + 1
    slots = ws.slots[gen & 1]
    slots[pos] = value
    ws.wait(t, pos)
    return [slots[i] for i in range(128)]  # the next exchange writes the other table (as _exchange)


def _reject_negative(idx):
    """NumPy wraps a negative index to the array's end; on a GPU it is an out-of-bounds access."""
    for k in (idx if isinstance(idx, tuple) else (idx,)):
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)) and k < 0:
            raise IndexError(f"negative index {int(k)} in a simulated kernel (out of bounds on a GPU)")


class StrictArray(np.ndarray):
    """Shared/local arrays of simulated kernels: NumPy arrays that reject negative indices."""

    def __getitem__(self, idx):
        _reject_negative(idx)
        return super().__getitem__(idx)

    def __setitem__(self, idx, val):
        _reject_negative(idx)
        super().__setitem__(idx, val)


def _strict_getitem(orig):
    def __getitem__(self, idx):
        _reject_negative(idx)
        return orig(self, idx)

    return __getitem__


def _strict_setitem(orig):
    def __setitem__(self, idx, val):
        _reject_negative(idx)
        orig(self, idx, val)

    return __setitem__


def _strict_alloc(orig, shared: bool):
    def array(self, shape, dtype, alignment=None):
        if shared and shape != 0 and alignment is None:  # static: one array per declaring line (as the simulator)
            from numba.cuda import types
            from numba.cuda.np import numpy_support

            f = sys._getframe(1)
            key = (f.f_code.co_filename, f.f_lineno)
            a = self._allocations.get(key)
            if a is None:
                dt = numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype
                a = self._allocations.setdefault(key, np.empty(shape, dt))
        else:
            a = orig(self, shape, dtype, alignment)
        return a.view(StrictArray) if isinstance(a, np.ndarray) else a

    return array


def _install_strict_indexing(kernelapi, devicearray) -> None:
    """Global arrays (``FakeWithinKernelCUDAArray``) and shared/local arrays of simulated kernels
    reject negative indices; out-of-range positive indices already raise IndexError in NumPy."""
    cls = devicearray.FakeWithinKernelCUDAArray
    cls.__getitem__ = _strict_getitem(cls.__getitem__)
    cls.__setitem__ = _strict_setitem(cls.__setitem__)
    for name in ("FakeCUDAShared", "FakeCUDALocal"):
        c = getattr(kernelapi, name)
        c.array = _strict_alloc(c.array, name == "FakeCUDAShared")


def _install_thread_registry(simkernel) -> None:
    """Each simulated thread registers with its block's manager when created, counts the ``syncthreads()``
    it enters and marks itself done when it returns, so a lane waiting in a warp primitive can tell a lane
    that will never arrive from a slow one."""
    cls = simkernel.BlockThread
    init, run, sync = cls.__init__, cls.run, cls.syncthreads

    def __init__(self, f, manager, *args, **kwargs):
        init(self, f, manager, *args, **kwargs)
        with _LOCK:
            manager.__dict__.setdefault("_nbits_threads", {})[self.thread_id] = self

    def run_(self):
        try:
            run(self)
        finally:
            self._nbits_done = True

    def syncthreads(self):
        self._nbits_syncs = self.__dict__.get("_nbits_syncs", 0) + 1
        sync(self)

    cls.__init__, cls.run, cls.syncthreads = __init__, run_, syncthreads


_PRIMITIVES = (shfl_sync, shfl_up_sync, shfl_down_sync, shfl_xor_sync, syncwarp, ballot_sync, all_sync,
               any_sync, activemask)


def install() -> None:
    """Patch the warp primitives onto the simulator (idempotent; simulator only)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from numba.cuda.simulator import kernel as simkernel
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv import devicearray

    missing = [n for n in ("FakeCUDAModule", "FakeCUDAShared", "FakeCUDALocal") if not hasattr(kernelapi, n)]
    missing += [n for n in ("BlockThread", "_get_kernel_context") if not hasattr(simkernel, n)]
    missing += [n for n in ("FakeWithinKernelCUDAArray",) if not hasattr(devicearray, n)]
    if missing:
        raise RuntimeError(f"numba-cuda's simulator changed; numba_nbits cannot extend it (missing {missing})")
    for f in _PRIMITIVES:
        setattr(kernelapi.FakeCUDAModule, f.__name__, f)
    _install_strict_indexing(kernelapi, devicearray)
    _install_thread_registry(simkernel)
    _INSTALLED = True
