"""Dequantize + cuBLAS keeps no scratch per plan: on a GPU each call borrows it from the device's stream-ordered pool
(``numba_nbits.scratch``) and gives it back in its stream; under the simulator (no streams) it is one host scratch per
node and calling thread, shared by the node's plans of every M (``kernels.dequant.NodeScratch``). Either way a served
model's distinct prompt lengths do not each add a copy of the dequantized weights."""
import threading

import numpy as np
import pytest
from conftest import SIMULATED

import numba_nbits as nb
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error


def _op(config=None, seed=0):
    rng = np.random.default_rng(seed)
    N, K, bs = 40, 256, 64
    B = rng.integers(0, 256, (N, K // bs, bs // 2), dtype=np.uint8)
    sc = (rng.standard_normal((N, K // bs)) * 0.05).astype(np.float16)
    op = nb.MatMulNBits(B, sc, None, K=K, N=N, bits=4, block_size=bs, config=config)
    return op, (B, sc, N, K, bs)


def _check(op, ins, M, seed):
    B, sc, N, K, bs = ins
    A = np.random.default_rng(seed).standard_normal((M, K)).astype(np.float16)
    got = np.asarray(op(A)).astype(np.float64)
    want = matmul_nbits_ref(A.astype(np.float64), B, sc, K=K, N=N, bits=4, block_size=bs)
    assert relative_error(got, want) <= TOLERANCES["float16"]


def _scratch_of(plan):
    """The plan's scratch in this thread (simulator), or its pool (GPU)."""
    return plan._parts(0)[0].owner if SIMULATED else plan._pool


@pytest.mark.parametrize("route,env", [("dequant_cublas", {}),
                                       ("dequant_cublas_chunked", {"ORT_MATMULNBITS_CHUNK_SIZE": "16"})])
def test_the_plans_of_every_m_share_one_scratch(route, env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    op, ins = _op({"numba_nbits.force_route": route})
    for M in (3, 70, 71):
        _check(op, ins, M, seed=M)
        assert op.route(M) == route
    plans = [op._entries[M].plan for M in (3, 70, 71)]
    assert len({id(_scratch_of(p)) for p in plans}) == 1
    assert plans[0].scratch_nbytes == plans[0].rows * op.weights.K_padded * 2
    if not SIMULATED:  # nothing kept per plan: the scratch is borrowed per call
        from numba_nbits.scratch import pool_for

        assert all(p.scratch is None and p._pool is pool_for(op.weights.device_id) for p in plans)


def test_each_calling_thread_has_its_own_scratch():
    op, ins = _op({"numba_nbits.force_route": "dequant_cublas"})
    _check(op, ins, 5, seed=1)
    mine = _scratch_of(op._entries[5].plan)
    theirs, errors = [], []

    def work():
        try:
            _check(op, ins, 6, seed=2)
            _check(op, ins, 5, seed=3)
            theirs.extend(_scratch_of(op._entries[M].plan) for M in (5, 6))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    assert theirs[0] is theirs[1]
    if SIMULATED:  # a host scratch per thread (on a GPU both borrow from the one pool, each in its own stream)
        assert theirs[0] is not mine
        _check(op, ins, 6, seed=4)  # this thread, a plan the other thread built: this thread's scratch
        assert _scratch_of(op._entries[6].plan) is mine
