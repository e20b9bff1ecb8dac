"""Dequantize + cuBLAS keeps one scratch per node and calling thread, shared by the node's plans of every M
(``kernels.dequant.NodeScratch``): a served model's distinct prompt lengths must not each add a copy of the
dequantized weights."""
import threading

import numpy as np
import pytest

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


@pytest.mark.parametrize("route,env", [("dequant_cublas", {}),
                                       ("dequant_cublas_chunked", {"ORT_MATMULNBITS_CHUNK_SIZE": "16"})])
def test_the_plans_of_every_m_share_the_nodes_scratch(route, env, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    op, ins = _op({"numba_nbits.force_route": route})
    for M in (3, 70, 71):
        _check(op, ins, M, seed=M)
        assert op.route(M) == route
    plans = [op._entries[M].plan for M in (3, 70, 71)]
    assert len({id(p.scratch.owner) for p in plans}) == 1
    assert len({id(p._parts(0)[0].owner) for p in plans}) == 1
    assert plans[0].scratch.shape == (plans[0].rows * op.weights.K_padded,)


def test_each_calling_thread_has_its_own_scratch():
    op, ins = _op({"numba_nbits.force_route": "dequant_cublas"})
    _check(op, ins, 5, seed=1)
    mine = op._entries[5].plan._parts(0)[0]
    theirs, errors = [], []

    def work():
        try:
            _check(op, ins, 6, seed=2)
            _check(op, ins, 5, seed=3)
            theirs.extend(op._entries[M].plan._parts(0)[0] for M in (5, 6))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    assert theirs[0].owner is theirs[1].owner and theirs[0].owner is not mine.owner
    _check(op, ins, 6, seed=4)  # this thread, a plan the other thread built: this thread's scratch
    assert op._entries[6].plan._parts(0)[0].owner is mine.owner
