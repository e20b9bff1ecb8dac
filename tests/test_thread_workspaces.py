"""The tensor-core GEMV's workspaces (split-K partial sums and counters, permuted activations) are the node's, one per
calling thread (``kernels.gemv.mma.ThreadWorkspace``, ``Launch.per_thread``): a node's plans of every M in one range
share them, and two threads running one plan each get their own."""
import threading

import numpy as np
import pytest
from conftest import SIMULATED

import numba_nbits as nb
from numba_nbits.arrays import to_device, to_host
from numba_nbits.kernels.gemv import tactics
from numba_nbits.kernels.gemv.mma import GemvMmaPlan
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

TAG = "t2w4u1k2s3xhv"  # split-K over 2 CTAs, activations permuted per call: all three workspaces


def _node(rng, N, K, block=64):
    B = rng.integers(0, 256, (N, K // block, block // 2), dtype=np.uint8)
    s = (rng.uniform(0.5, 1.5, (N, K // block)) / (8 * np.sqrt(K))).astype(np.float16)
    return nb.MatMulNBits(B, s, None, K=K, N=N, bits=4, block_size=block), (B, s, N, K, block)


def _run(plan, ins, M, rng):
    B, s, N, K, block = ins
    A = rng.standard_normal((M, K)).astype(np.float16)
    out = to_device(np.full((M, N), np.nan, np.float16), SIMULATED)
    plan.enqueue(to_device(A, SIMULATED), out, 0)
    y = to_host(out).astype(np.float64)
    assert relative_error(y, matmul_nbits_ref(A, B, s, K=K, N=N, bits=4, block_size=block)) <= TOLERANCES["float16"]


def _arrays(plan):
    return {kind: tw.get() for kind, tw in plan._thread_ws}


def test_plans_of_every_m_share_the_nodes_workspaces_and_threads_get_their_own(rng):
    if not SIMULATED and not tactics.wgmma_ok(False):
        pytest.skip("wgmma kernels need an sm_90 GPU and numba-cuda")
    N, K = (64, 256) if SIMULATED else (8192, 2048)
    op, ins = _node(rng, N, K)
    tac = tactics.Tactic.parse(TAG)
    assert tac.ksplit == 2 and tac.pa
    p20, p40 = GemvMmaPlan(op.weights, 20, tac), GemvMmaPlan(op.weights, 40, tac)
    mine = _arrays(p20)
    assert set(mine) == {"splitk_ws", "splitk_cnt", "pa"}
    assert all(mine[k] is v for k, v in _arrays(p40).items())  # one workspace of each kind for M <= 64
    assert mine["splitk_ws"].shape == (2 * 64 * N,) and mine["pa"].shape == (8 * 8 * K // 2,)
    _run(p20, ins, 20, rng)
    _run(p40, ins, 40, rng)
    theirs, errors = [], []

    def work():
        try:
            r = np.random.default_rng(7)
            _run(p40, ins, 40, r)
            _run(p20, ins, 20, r)
            theirs.append(_arrays(p20))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    assert all(theirs[0][k] is not mine[k] for k in mine)
    _run(p40, ins, 40, rng)  # this thread again: its own workspaces, the counters reset by the other's launches
    assert all(v is mine[k] for k, v in _arrays(p40).items())
