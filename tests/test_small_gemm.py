"""The ``fused_gemm`` route (``kernels/gemv/small_gemm.py``): the tensor-core GEMV kernels past M = 16, checked
against the float64 oracle through default calls, its unaligned-A fallback, its switch, and its tactics."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu

import numba_nbits as nb
from numba_nbits.kernels.gemv import tactics
from numba_nbits.reference import matmul_nbits_ref, relative_error

DT = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TOL = {"float16": 2e-3, "bfloat16": 1e-2}
# the simulator runs each kernel thread by thread: small N and K; on a GPU a shape with a K tail and two warps' K
N_SIM, K_SIM = 32, 256
N_GPU, K_GPU = 520, 1288


def _inputs(rng, *, bits, block, N, K, M, dtype, zp, bias):
    kb = -(-K // block)
    B = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
    s = (rng.uniform(0.5, 1.5, (N, kb)) / (2 ** (bits - 1) * np.sqrt(K))).astype(DT[dtype])
    z = rng.integers(0, 256, (N, -(-kb * bits // 8)), dtype=np.uint8) if zp else None
    b = rng.uniform(-1, 1, N).astype(DT[dtype]) if bias else None
    A = rng.uniform(-1, 1, (M, K)).astype(DT[dtype])
    return A, B, s, z, b


CASES = [  # (bits, block, M, dtype, zero points, bias): every m-tile count, each bit width, both dtypes
    (4, 32, 17, "float16", False, True),
    (4, 128, 30, "bfloat16", True, False),
    (8, 64, 40, "float16", True, True),
    (2, 64, 12, "float16", False, False),  # 2-bit M = 9..16: past gemv_w2's M <= 8
    (4, 16, 64, "float16", False, False),
]


@pytest.mark.parametrize("bits, block, M, dtype, zp, bias", CASES)
def test_default_call_matches_oracle(rng, bits, block, M, dtype, zp, bias):
    N, K = (N_SIM, K_SIM) if SIMULATED else (N_GPU, K_GPU)
    if bits == 2:
        K -= K % 64  # a whole number of 2-bit blocks (the packed layout's need, not the route's)
    A, B, s, z, b = _inputs(rng, bits=bits, block=block, N=N, K=K, M=M, dtype=dtype, zp=zp, bias=bias)
    op = nb.MatMulNBits(B, s, z, None, b, K=K, N=N, bits=bits, block_size=block)
    assert op.route(M) == "fused_gemm"
    ref = matmul_nbits_ref(A, B, s, z, bias=b, K=K, N=N, bits=bits, block_size=block)
    Y = np.asarray(op(A)).astype(np.float64)
    assert relative_error(Y, ref) <= TOL[dtype]
    plan = op._entries[M].plan
    assert f"_mt{tactics.m_tiles(M)}_" in plan.kernel and plan.kernel.endswith("+bias_add") == bias


def test_switch_off_gives_orts_route_and_the_same_answer(rng):
    N, K, M = N_SIM, K_SIM, 20
    A, B, s, _, _ = _inputs(rng, bits=4, block=32, N=N, K=K, M=M, dtype="float16", zp=False, bias=False)
    on = nb.MatMulNBits(B, s, K=K, N=N, bits=4, block_size=32)
    off = nb.MatMulNBits(B, s, K=K, N=N, bits=4, block_size=32, config={"numba_nbits.fused_gemm": False})
    assert on.route(M) == "fused_gemm" and off.route(M) == "dequant_cublas"
    ref = matmul_nbits_ref(A, B, s, K=K, N=N, bits=4, block_size=32)
    for op in (on, off):
        assert relative_error(np.asarray(op(A)).astype(np.float64), ref) <= TOL["float16"]


def test_unaligned_A_falls_back_to_dequantize_cublas(rng):
    from numba_nbits.arrays import DevArray, to_device, to_host

    N, K, M = N_SIM, K_SIM, 18
    A, B, s, _, b = _inputs(rng, bits=4, block=64, N=N, K=K, M=M, dtype="float16", zp=False, bias=True)
    op = nb.MatMulNBits(B, s, None, None, b, K=K, N=N, bits=4, block_size=64)
    aligned = np.asarray(op(A))
    plan = op._entries[M].plan
    src = to_device(np.concatenate([np.zeros(4, A.dtype), A.reshape(-1)]), SIMULATED)
    a = src.offset(8, (M, K))  # 8 bytes in: not 16-byte aligned
    if SIMULATED:  # simulated device arrays have no addresses; give this view one
        a = DevArray(8, a.shape, a.strides, a.dtype, a.owner)
    assert a.ptr % 16 == 8
    out = to_device(np.zeros((M, N), A.dtype), SIMULATED)
    plan.run(a, out, 0)
    y = to_host(out).astype(np.float64)
    assert plan._fallback is not None and plan._fallback.route == "dequant_cublas"
    ref = matmul_nbits_ref(A, B, s, bias=b, K=K, N=N, bits=4, block_size=64)
    assert relative_error(y, ref) <= TOL["float16"]
    assert relative_error(y, aligned.astype(np.float64)) <= TOL["float16"]


@pytest.mark.parametrize("N, M, tag", [
    (28672, 17, "t2w4u1"), (28672, 32, "t1w8u1p1"), (28672, 48, "t2w4u1p1"), (28672, 64, "t2w4u1"),
    (4096, 24, "t1w8u1p1"), (4096, 40, "t1w4u2p1"), (4096, 64, "t1w4u2p1"),
])
def test_plain_gemm_tactic_rule(N, M, tag):
    assert tactics.plain_gemm_tactic(N, M).tag == tag
    assert tactics.gemm_tactic(N, M).tag == tag  # without K and block: the plain kernel


@pytest.mark.parametrize("N, K, block, bits, M, tag", [
    (28672, 8192, 128, 4, 64, "t2w4u1s4x"), (14336, 4096, 32, 4, 25, "t2w4u1s4x"),
    (14336, 4096, 32, 4, 24, "t2w4u1"),  # 3 m-tiles: the plain kernel
    (8192, 28672, 64, 4, 32, "t2w4u1k4s4x"),  # below XA_NOSPLIT_N: K split 4 ways at 4 m-tiles
    (8192, 28672, 64, 4, 40, "t2w4u1p1"),  # ... and the plain kernel past them
    (4096, 14336, 128, 4, 64, "t1w4u2p1"),  # few rows: the plain kernel
    (28672, 8200, 128, 4, 64, "t2w4u1"),  # a K tail: the plain kernel
    (28672, 8192, 16, 4, 64, "t2w4u1"),  # block 16: the plain kernel
    (28672, 8192, 128, 8, 64, "t2w4u1"),  # 8-bit: the plain kernel
])
def test_default_tactic_past_16_takes_shared_activations_where_fitted(N, K, block, bits, M, tag):
    assert tactics.default_tactic(N, K, block, M, bits).tag == tag


@pytest.mark.parametrize("N, K, block, bits, M, tag", [
    (28672, 8192, 128, 4, 64, "t2w8u1s3xhv"), (24576, 4096, 128, 4, 49, "t2w8u1s3xhv"),  # A permuted per call
    (128256, 4096, 128, 4, 64, "t2w8u1s3b2xhv"),  # LM heads: launch bounds for two CTAs per SM
    (28672, 8192, 128, 4, 32, "t2w8u1s3b2xhv"), (128256, 4096, 128, 4, 25, "t2w8u1s3b2xhv"),  # 4 m-tiles: too
    (8192, 28672, 128, 4, 64, "t2w8u1k4s3xh"),  # few rows: K split 4 ways, A as it is
    (8192, 28672, 128, 4, 32, "t2w4u1k4s4x"),  # ... and at 4 m-tiles the mma.sync kernel
    (28672, 8192, 128, 4, 48, "t2w4u1s4x"),  # 6 m-tiles: the mma.sync kernel
    (14336, 4096, 128, 4, 64, "t1w8u1s3xhvm"),  # 12288..24575 rows, 8 m-tiles: the barrier pipeline
    (12288, 4096, 128, 4, 57, "t1w8u1s3xhvm"), (24575, 4096, 128, 4, 64, "t1w8u1s3xhvm"),
    (14336, 4096, 128, 4, 32, "t2w4u1s4x"), (14336, 4096, 128, 4, 48, "t2w4u1s4x"),  # ... 4 / 6 m-tiles: mma.sync
    (4096, 14336, 128, 4, 64, "t1w4u2p1"),  # 4096 rows: the plain kernel
    (28672, 8192, 32, 4, 64, "t2w8u1s3xhv"), (28672, 8192, 64, 4, 64, "t2w8u1s3xhv"),  # blocks 32 / 64 ...
    (28672, 8192, 32, 4, 32, "t2w4u1s4x"), (28672, 8192, 64, 4, 25, "t2w4u1s4x"),  # ... but not at 4 m-tiles
    (128256, 4096, 32, 4, 32, "t2w8u1s3b2xhv"),  # ... unless N >= WG_MINB_N
    # 8-bit: the barrier pipeline at 4 / 8 m-tiles on N >= 24576 rows, the plain kernel elsewhere
    (28672, 8192, 128, 8, 64, "t1w8u1xhvm"), (28672, 8192, 128, 8, 32, "t1w8u1xhvm"),
    (24576, 1024, 128, 8, 25, "t1w8u1xhvm"), (28672, 8192, 128, 8, 48, "t2w4u1p1"),
    (24575, 4096, 128, 8, 64, "t2w4u1"), (28672, 8192, 32, 8, 64, "t2w4u1"), (28672, 8192, 128, 8, 24, "t2w4u1"),
])
def test_default_tactic_takes_warpgroup_mmas_on_hopper_where_fitted(N, K, block, bits, M, tag):
    """With ``wg_ok`` (an sm_90 GPU) the 8-m-tile rule takes ``wgmma`` on wide weights."""
    assert tactics.default_tactic(N, K, block, M, bits, wg_ok=True).tag == tag
    assert not tactics.default_tactic(N, K, block, M, bits).wg  # elsewhere never


@requires_gpu
@pytest.mark.parametrize("N, K, M, tag, dtype, bits, block", [(*case, 4, 128) for case in [
    (24576, 1024, 60, "t2w8u1s3xhv", "float16"), (24576, 1024, 30, "t2w8u1s3b2xhv", "bfloat16"),
    # past M = 64 (``tactics.wide_tactic``): 12 / 16 m-tiles
    (24576, 1024, 96, "t1w8u1xhvmo", "bfloat16"), (8192, 2048, 128, "t2w8u1k4s3xhv", "float16"),
    (12288, 1024, 70, "t1w8u1xhvmo", "float16"), (24576, 1024, 112, "t1w8u1xhvmo", "float16"),
    (24576, 1024, 128, "t1w8u1xhvmo", "bfloat16"), (24576, 1024, 200, "t1w8u1xhvmo", "float16"),
    (16384, 2048, 256, "t1w8u1xhvmo", "bfloat16"), (4096, 12288, 80, "t1w8u1k4s3xhv", "float16"),
    (16384, 1024, 64, "t1w8u1s3xhvm", "float16"),  # 8 m-tiles on 12288..24575 rows: the barrier pipeline
]] + [  # 8-bit (``tactics.WG8_BITS``): the barrier pipeline at 4 / 8 / 12 / 16 m-tiles on N >= 24576 rows
    (24576, 1024, 32, "t1w8u1xhvm", "float16", 8, 128), (24576, 1024, 64, "t1w8u1xhvm", "bfloat16", 8, 128),
    (24576, 1024, 80, "t1w8u1xhvm", "float16", 8, 128), (24576, 1024, 128, "t1w8u1xhvm", "bfloat16", 8, 128),
] + [(*case, 4, block) for *case, block in [  # 4-bit blocks 32 / 64 (``tactics.WG_BLOCKS``): block 128's tactics,
    # but the mma.sync ``t2w4u1s4x`` at 4 m-tiles below ``WG_MINB_N`` rows (``WG_MT4_BLOCKS``)
    (24576, 1024, 60, "t2w8u1s3xhv", "float16", 32), (65536, 1024, 30, "t2w8u1s3b2xhv", "bfloat16", 64),
    (24576, 1024, 30, "t2w4u1s4x", "float16", 32),
    (24576, 1024, 96, "t1w8u1xhvmo", "bfloat16", 32), (8192, 2048, 128, "t2w8u1k4s3xhv", "float16", 64),
    (16384, 2048, 256, "t1w8u1xhvmo", "float16", 32), (4096, 12288, 80, "t1w8u1k4s3xhv", "bfloat16", 32),
    (16384, 1024, 64, "t1w8u1s3xhvm", "float16", 64),
]])
def test_default_call_takes_warpgroup_mmas_on_hopper(rng, N, K, M, tag, dtype, bits, block):
    """On an sm_90 GPU (either compiler) a default call at M = 25..256 on wide weights runs the tactic the rules
    name (``wgmma`` kernels, route ``fused_gemm``), within tolerance of the oracle."""
    if not tactics.wgmma_ok(False):
        pytest.skip("needs an sm_90 GPU")
    A, B, s, _, b = _inputs(rng, bits=bits, block=block, N=N, K=K, M=M, dtype=dtype, zp=False, bias=True)
    op = nb.MatMulNBits(B, s, None, None, b, K=K, N=N, bits=bits, block_size=block)
    Y = np.asarray(op(A)).astype(np.float64)
    plan = op._entries[M].plan
    assert op.explain(M).name == "fused_gemm" and plan.tactic.tag == tag
    ref = matmul_nbits_ref(A, B, s, bias=b, K=K, N=N, bits=bits, block_size=block)
    assert relative_error(Y, ref) <= TOL[dtype]
    if dtype != "float16":
        return
    # the steady-state path (a recorded call layout: the plan's pointer runner) gives the same bytes
    from numba import cuda

    Ad = cuda.to_device(A)
    outs = [cuda.device_array((M, N), A.dtype) for _ in range(2)]
    got = [op(Ad, out=o).copy_to_host() for o in outs]
    np.testing.assert_array_equal(got[0].view(np.uint16), got[1].view(np.uint16))
    np.testing.assert_array_equal(got[1].astype(np.float64), Y)


@pytest.mark.parametrize("bits, block, N, K, M, tag, zp, dtype", [
    (4, 128, 48, 256, 20, "t1w2u1s3x", False, "float16"),  # 2 CTAs, the second's second warp past N
    (4, 32, 40, 256, 33, "t2w2u1k2x", True, "bfloat16"),  # split-K over 2 CTAs, packed zero points
    (8, 64, 24, 256, 64, "t1w2u1k2s4x", True, "float16"),  # two-plane codes
    (2, 128, 32, 256, 17, "t1w2u1x", False, "float16"),
    # Hopper's warpgroup MMAs (``wg``): a second CTA with three warps past N, m-tiles 3 / 4 / 8
    (4, 128, 80, 256, 24, "t1w4u1s3xh", False, "float16"),
    (4, 32, 64, 256, 30, "t2w4u1k2xh", True, "bfloat16"),  # two tiles per warp, split-K, zero points
    (8, 64, 64, 256, 64, "t1w4u1s4xh", False, "float16"),  # two-plane codes: two wgmma per step
    # past the route's M = 64: 12 and 16 m-tiles (wgmma n = 96 / 128)
    (4, 128, 64, 256, 90, "t1w4u1s3xh", False, "float16"),
    (4, 64, 80, 256, 128, "t1w4u1s3xh", True, "bfloat16"),
    # MMAs waited for every second super-chunk (p1): 7 super-chunks (an odd last one), split-K over 5 (2 + 3)
    (4, 64, 80, 448, 40, "t1w4u1p1s3xh", False, "float16"),
    (4, 32, 64, 320, 60, "t2w4u1p1k2s4xh", True, "bfloat16"),
    # activations permuted per call into the slots' order (v): 16-byte ring copies; with p1; 12 m-tiles, 8-bit
    (4, 128, 80, 256, 24, "t1w4u1s3xhv", False, "float16"),
    (4, 64, 80, 448, 40, "t1w4u1p1s3xhv", True, "bfloat16"),
    (4, 128, 64, 256, 90, "t1w4u1s3xhv", False, "float16"),
    (4, 64, 80, 256, 128, "t1w4u1s3xhv", True, "bfloat16"),  # 16 m-tiles, zero points
    (4, 128, 64, 256, 200, "t1w4u1s3xhv", False, "float16"),  # 32 m-tiles (wgmma n = 256)
    (8, 64, 64, 256, 64, "t1w4u1s4xhv", False, "float16"),
    # the barrier pipeline (m): bulk copies of A, full / empty barriers; 7 super-chunks over 3 and 4 slots (every
    # slot reused, both phase parities), two warpgroups, split-K over 3, zero points, 32 m-tiles
    (4, 64, 80, 448, 40, "t1w8u1s3xhvm", False, "float16"),
    (4, 64, 64, 448, 64, "t1w8u1k3s4xhvm", True, "bfloat16"),
    (4, 128, 64, 256, 200, "t1w4u1xhvm", False, "float16"),
    # with p1: pairs of super-chunks released after one wait, 7 (an odd last one) and split-K 2 (3 + 4)
    (4, 64, 80, 448, 40, "t1w8u1p1s3xhvm", True, "float16"),
    (4, 64, 64, 448, 60, "t1w8u1p1k2s4xhvm", False, "bfloat16"),
    # what the defaults may widen to (not defaults yet): 8-bit (two planes) and block 32 in the barrier pipeline
    (8, 64, 64, 256, 64, "t1w8u1s3xhvm", True, "float16"),  # 4 super-chunks over 3 slots
    (8, 128, 64, 256, 128, "t1w4u1xhvm", False, "bfloat16"),
    (4, 32, 64, 448, 60, "t1w8u1s3xhvm", False, "float16"),
    (4, 32, 64, 256, 100, "t1w4u1xhvm", True, "bfloat16"),
])
def test_shared_activation_kernel_matches_oracle(rng, bits, block, N, K, M, tag, zp, dtype):
    """``Tactic.xa`` (``mma_xa``): the CTA's warps on different tiles, A from a shared-memory ring; with
    ``wg`` the warpgroups' ``wgmma`` reads it (sm_90 GPUs and the simulator)."""
    from numba_nbits.arrays import to_device, to_host
    from numba_nbits.kernels.gemv.mma import GemvMmaPlan

    if "h" in tag and not SIMULATED and not tactics.wgmma_ok(False):
        pytest.skip("wgmma kernels need an sm_90 GPU and numba-cuda")
    if not SIMULATED:
        N, K = 8 * N, 16 * K
    A, B, s, z, _ = _inputs(rng, bits=bits, block=block, N=N, K=K, M=M, dtype=dtype, zp=zp, bias=False)
    op = nb.MatMulNBits(B, s, z, K=K, N=N, bits=bits, block_size=block)
    tac = tactics.Tactic.parse(tag)
    assert tac.xa and tac.tag == tag
    plan = GemvMmaPlan(op.weights, M, tac)
    assert plan.grid == math.ceil(math.ceil(N / (16 * tac.tpw)) / tac.warps) * tac.ksplit
    assert plan.kernel.endswith("_kf") and f"_{tag}_" in plan.kernel
    out = to_device(np.full((M, N), np.nan, DT[dtype]), SIMULATED)
    for _ in range(2):  # twice: the split-K counters reset themselves
        plan.enqueue(to_device(A, SIMULATED), out, 0)
        y = to_host(out).astype(np.float64)
        assert not np.isnan(y).any()
        ref = matmul_nbits_ref(A, B, s, z, K=K, N=N, bits=bits, block_size=block)
        assert relative_error(y, ref) <= TOL[dtype]


@requires_gpu
@pytest.mark.parametrize("N, K, M, dtype, bias", [(12288, 1024, 32, "float16", True), (8192, 2048, 25, "bfloat16", False)])
def test_default_call_takes_shared_activations_on_wide_weights(rng, N, K, M, dtype, bias):
    """A default call past M = 24 on >= 8192 rows of 4-bit weights runs the shared-activation kernel
    (``tactics.gemm_tactic``), bias added after it, within tolerance of the oracle."""
    A, B, s, _, b = _inputs(rng, bits=4, block=128, N=N, K=K, M=M, dtype=dtype, zp=False, bias=bias)
    op = nb.MatMulNBits(B, s, None, None, b, K=K, N=N, bits=4, block_size=128)
    assert op.route(M) == "fused_gemm"
    Y = np.asarray(op(A)).astype(np.float64)
    assert op._entries[M].plan.tactic.xa
    ref = matmul_nbits_ref(A, B, s, bias=b, K=K, N=N, bits=4, block_size=128)
    assert relative_error(Y, ref) <= TOL[dtype]


def test_shared_activation_tactics_are_checked(rng):
    from numba_nbits.kernels.gemv.mma import build
    from numba_nbits.kernels.gemv.mma_xa import applies

    for bad in ("t1w8u2s4x", "t1w8u1p1s4x", "t1w8u1r4x", "t1w8u1s3ax", "t1w8u1s9x", "t1w8u1p1xh", "t1w8u1p2s4xh",
                "t1w6u1s3xh"):
        with pytest.raises(ValueError):
            tactics.Tactic.parse(bad)
    assert applies(8192, 128, 4) and not applies(8200, 128, 4) and not applies(8192, 16, 4)
    with pytest.raises(ValueError, match="need the warpgroup form"):
        from numba_nbits.kernels.gemv.mma import generate_source

        generate_source("float16", 16, tactics.Tactic.parse("t1w4u1s3x"), 128, "none", 4, kfull=True)
    _, B, s, _, _ = _inputs(rng, bits=4, block=32, N=32, K=200, M=20, dtype="float16", zp=False, bias=False)
    op = nb.MatMulNBits(B, s, K=200, N=32, bits=4, block_size=32)
    with pytest.raises(ValueError, match="multiple of the super-chunk"):
        build(op.weights, op.problem(20), tactic=tactics.Tactic.parse("t1w2u1x"))


def test_m_class_past_16_has_no_tuned_entry():
    for bits in (2, 4, 8):
        assert not any(key[3] > 16 for key in tactics.tuned_table(bits))
    assert tactics.m_class(17) == 24 and tactics.m_class(64) == 64
