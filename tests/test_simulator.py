"""The simulator's warp primitives (``kernels/simulator.py``): values, and how a wait ends.

A lane waiting in a ``*_sync`` primitive must not give up because its peers are slow (the simulator's
threads share one interpreter; a loaded machine can stall a lane for a long time), and must raise at once,
naming the culprit, when a lane it waits for can never arrive.
"""
import threading
import time

import numpy as np
import pytest
from conftest import SIMULATED
from numba import cuda

pytestmark = pytest.mark.skipif(not SIMULATED, reason="tests numba's CUDA simulator extensions")


@pytest.fixture
def sim(monkeypatch):
    from numba_nbits.kernels import simulator

    simulator.install()
    monkeypatch.setattr(simulator, "POLL_S", 0.01)
    return simulator


@cuda.jit
def _butterfly(out, slow_lane, delay):
    t = cuda.threadIdx.x
    v = t + 1
    if t == slow_lane:
        time.sleep(delay)
    for d in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(0xFFFFFFFF, v, d)
    out[t] = v


@cuda.jit
def _early_return(out, quitter):
    t = cuda.threadIdx.x
    if t == quitter:
        return
    out[t] = cuda.shfl_xor_sync(0xFFFFFFFF, t, 1)


@cuda.jit
def _half_in_syncthreads(out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    else:
        out[t] = cuda.shfl_xor_sync(0xFFFFFFFF, t, 1)


@cuda.jit
def _sync_then_shuffle(out):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    out[t] = cuda.shfl_xor_sync(0xFFFFFFFF, t, 1)


def _expected_sums(threads):
    return np.array([sum(range(32 * (t // 32) + 1, 32 * (t // 32) + 33)) for t in range(threads)])


def test_shfl_xor_butterfly_sums_each_warp(sim):
    out = np.zeros(64, np.int64)
    _butterfly[1, 64](out, -1, 0.0)
    np.testing.assert_array_equal(out, _expected_sums(64))


def test_a_slow_lane_is_waited_for(sim):
    # the lane sleeps 20 polls before its first shuffle; its 31 peers keep waiting and the sums are right
    out = np.zeros(32, np.int64)
    _butterfly[1, 32](out, 7, 20 * sim.POLL_S)
    np.testing.assert_array_equal(out, _expected_sums(32))


def test_a_wait_that_never_completes_raises_after_the_stall_limit(sim, monkeypatch):
    monkeypatch.setattr(sim, "STALL_S", 0.05)
    out = np.zeros(32, np.int64)
    with pytest.raises(RuntimeError, match=r"waited \d+ s in a warp primitive .* for 0 \+ 0x80$"):
        _butterfly[1, 32](out, 7, 2.0)


def test_a_lane_that_returned_is_named_at_once(sim):
    out = np.zeros(32, np.int64)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="deadlock: .*thread 5 has returned"):
        _early_return[1, 32](out, 5)
    assert time.monotonic() - t0 < 30


def test_a_lane_in_syncthreads_is_named_at_once(sim):
    out = np.zeros(32, np.int64)
    with pytest.raises(RuntimeError, match=r"deadlock: .*thread \d+ waits in syncthreads\(\)"):
        _half_in_syncthreads[1, 32](out)


def test_a_lane_released_from_syncthreads_before_its_peers_waits_for_them(sim, monkeypatch):
    """The manager lets the threads out of a syncthreads() one by one (flag cleared, then event set). A lane
    let out first reaches the shuffle while its peers still look blocked in that syncthreads(): it must wait,
    not report a deadlock (CI, 2026-12-03: test_fp32_accumulation[gemv_w4-float32] under load). Made
    deterministic here: the second release stalls 20 polls."""
    from numba.cuda.simulator import kernel as simkernel

    calls = []

    class SlowEvent(threading.Event):
        def set(self):
            calls.append(None)
            if len(calls) == 2:
                time.sleep(20 * sim.POLL_S)
            super().set()

    init = simkernel.BlockThread.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.syncthreads_event = SlowEvent()

    monkeypatch.setattr(simkernel.BlockThread, "__init__", __init__)
    out = np.zeros(32, np.int64)
    _sync_then_shuffle[1, 32](out)
    np.testing.assert_array_equal(out, np.arange(32) ^ 1)
