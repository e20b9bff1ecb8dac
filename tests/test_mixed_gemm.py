"""Mixed-input tensor-core GEMM (kernels/mixed_gemm.py, the fpA_intB route) against the oracle.

Tiny shapes on the simulator, larger ones on a GPU (same tests)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from numba_nbits.arrays import np_dtype, to_device, to_host
from numba_nbits.dispatch.problem import Problem
from numba_nbits.formats import quantize
from numba_nbits.kernels import mixed_gemm as X
from numba_nbits.launch import simulated
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights

SIM = simulated()


def _make(rng, M, N, K, bs, dtype, zp_kind, bias):
    dt = np_dtype(dtype)
    W = rng.standard_normal((N, K)).astype(np.float32).astype(dt)
    B, sc, zp = quantize(W, 4, bs, symmetric=(zp_kind == "none"))
    if zp_kind == "packed":
        zp = rng.integers(0, 256, zp.shape).astype(np.uint8)
    elif zp_kind == "typed":
        zp = (rng.random((N, K // bs)) * 15).astype(np.float32).astype(dt)
    bi = rng.standard_normal(N).astype(np.float32).astype(dt) if bias else None
    w = build_weights(B, sc, zp, bias=bi, K=K, N=N, bits=4, block_size=bs, simulated=SIM)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float32).astype(dt)
    ref = matmul_nbits_ref(A, B, sc, zp, bias=bi, K=K, N=N, bits=4, block_size=bs)
    return w, A, ref


def _run(w, A, M, tactic=None, arch=None):
    N, K = w.N, w.K
    p = Problem(M=M, N=N, K=K, bits=4, block_size=w.block_size, dtype=w.dtype, zero_points=w.zp_kind,
                has_bias=w.bias is not None)
    assert X.supports(p)
    plan = X.build(w, p, None, tactic, arch)
    big = to_device(np.full((M + 1, N), np.nan, np.float32).astype(w.np_dtype), SIM)
    out = big.offset(0, (M, N))
    a = to_device(A, SIM)
    plan.run(a, out, 0)
    plan.run(a, out, 0)
    y = to_host(big)
    assert np.all(np.isnan(y[M:].astype(np.float32))), "wrote past the output"
    y = y[:M]
    assert not np.any(np.isnan(y.astype(np.float32))), "some outputs were not written"
    return y


if SIM:
    CASES = [  # (M, N, K, block, dtype, zp, bias, tactic, arch)
        (16, 32, 96, 32, "float16", "none", False, "m16", 80),  # half chunk (K % 64 == 32)
        (1, 16, 64, 64, "bfloat16", "packed", True, "m16", 90),
        (17, 48, 128, 64, "float16", "typed", True, "m16", 80),  # two M blocks, partial BN
        (8, 16, 256, 128, "bfloat16", "typed", False, "m16", 90),  # block 128 spans two stages
        (15, 32, 160, 32, "bfloat16", "packed", False, "m16", 90),  # arch 90 with a half chunk
        (32, 16, 64, 32, "float16", "packed", True, "m32", 80),
        (40, 16, 128, 128, "float16", "none", True, "m64", 80),
        (100, 16, 64, 64, "bfloat16", "none", False, "m128", 80),
    ]
else:  # every block x dtype x zp x bias combination once, M and shape cycling through boundary values
    _Ms = itertools.cycle((1, 8, 15, 16, 17, 32, 100, 257))
    _shapes = itertools.cycle(((1024, 2048), (64, 4224), (4096, 4096)))  # 4224 = 33 * 128: odd block count, K % block == 0 (the route's guard)
    CASES = [(next(_Ms), *next(_shapes), bs, dt, zp, bias, None, 80 + 10 * (i % 2))
             for i, (bs, dt, zp, bias) in enumerate(itertools.product(
                 X.BLOCK_SIZES, ("float16", "bfloat16"), ("none", "packed", "typed"), (False, True)))]


@pytest.mark.parametrize("M,N,K,bs,dtype,zp,bias,tactic,arch", CASES)
def test_mixed_gemm_matches_reference(rng, M, N, K, bs, dtype, zp, bias, tactic, arch):
    w, A, ref = _make(rng, M, N, K, bs, dtype, zp, bias)
    y = _run(w, A, M, tactic, arch)
    err = relative_error(y, ref)
    assert err < TOLERANCES[dtype], err


@pytest.mark.skipif(SIM, reason="tactic sweep: GPU only")
@pytest.mark.parametrize("tactic", list(X.TACTICS))
@pytest.mark.parametrize("M", [1, 16, 64, 200, 1024])
def test_mixed_gemm_every_tactic_gpu(rng, tactic, M):
    w, A, ref = _make(rng, M, 1024, 4096, 128, "float16", "packed", True)
    err = relative_error(_run(w, A, M, tactic), ref)
    assert err < TOLERANCES["float16"], err


def test_default_tactic_by_m():
    assert X.default_tactic(1).name == "m16"
    assert X.default_tactic(16).name == "m16"
    assert X.default_tactic(17).name == "m32"
    assert X.default_tactic(64).name == "m64"
    assert X.default_tactic(65).name == "m128"
    for t in X.TACTICS.values():
        assert t.bm * X.RS * 4 <= 48 * 1024  # static shared memory


def test_supports_guards():
    base = dict(N=4096, K=4096, bits=4, block_size=64, dtype="float16")
    assert X.supports(Problem(M=1, **base))
    assert X.supports(Problem(M=4096, zero_points="typed", has_bias=True, **base))
    assert not X.supports(Problem(M=1, **{**base, "dtype": "float32"}))
    assert not X.supports(Problem(M=1, **{**base, "bits": 8}))
    assert not X.supports(Problem(M=1, **{**base, "block_size": 16}))
    assert not X.supports(Problem(M=1, **{**base, "K": 4096 + 32}))
    assert not X.supports(Problem(M=1, **{**base, "N": 4096 + 8}))
    assert not X.supports(Problem(M=1, has_g_idx=True, **base))


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("bs", X.BLOCK_SIZES)
@pytest.mark.parametrize("N,K", [(16, 128), (48, 384), (32, 96)])
def test_prepack_bytes_and_round_trip(rng, arch, bs, N, K):
    if K % bs:
        pytest.skip("K % block_size != 0")
    B = rng.integers(0, 256, (N, K // bs, bs // 2)).astype(np.uint8)
    P = X.pack_weights_for_mixed_gemm(B, N, K, 4, arch, bs)
    assert P.dtype == np.uint8 and P.nbytes == B.nbytes == N * K // 2
    back = X.unpack_weights_from_mixed_gemm(P, N, K, 4, arch, bs)
    np.testing.assert_array_equal(back, B.reshape(N, K // 2))
    # the 2-D q_weight form of B packs the same way
    np.testing.assert_array_equal(X.pack_weights_for_mixed_gemm(B.reshape(N, -1), N, K, 4, arch, bs), P)


def test_prepack_arch_layouts_differ_but_hold_the_same_words(rng):
    N, K, bs = 32, 256, 64
    B = rng.integers(0, 256, (N, K // bs, bs // 2)).astype(np.uint8)
    p80 = X.pack_weights_for_mixed_gemm(B, N, K, 4, 80, bs).view(np.uint32)
    p90 = X.pack_weights_for_mixed_gemm(B, N, K, 4, 90, bs).view(np.uint32)
    assert not np.array_equal(p80, p90)
    T, nch = N // 16, K // 64
    np.testing.assert_array_equal(p80.reshape(T, nch, 128).transpose(1, 0, 2).reshape(-1), p90)


def test_prepack_rejects():
    B = np.zeros((16, 2, 32), np.uint8)
    with pytest.raises(NotImplementedError):
        X.pack_weights_for_mixed_gemm(B, 16, 128, 8, 80, 64)
    with pytest.raises(ValueError):
        X.pack_weights_for_mixed_gemm(B, 16, 128, 4, 75, 64)
    with pytest.raises(ValueError):
        X.pack_weights_for_mixed_gemm(np.zeros((8, 2, 32), np.uint8), 8, 128, 4, 80, 64)  # N % 16
