"""Mixed-input tensor-core GEMM (kernels/mixed_gemm/, the fpA_intB route) against the oracle.

Tiny shapes on the simulator, larger ones on a GPU (same tests)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from numba_nbits.arrays import np_dtype, to_device, to_host
from numba_nbits.dispatch.problem import Problem
from numba_nbits.formats import quantize
from numba_nbits.kernels import mixed_gemm as X
from numba_nbits.kernels.mixed_gemm.source import RS
from numba_nbits.launch import simulated
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights

from conftest import requires_gpu

SIM = simulated()


def _make(rng, M, N, K, bs, dtype, zp_kind, bias, bits=4):
    dt = np_dtype(dtype)
    W = rng.standard_normal((N, K)).astype(np.float32).astype(dt)
    B, sc, zp = quantize(W, bits, bs, symmetric=(zp_kind == "none"))
    if zp_kind == "packed":  # random bytes: for 4-bit both nibbles, so the kernel must pick the right one
        zp = rng.integers(0, 256, zp.shape).astype(np.uint8)
    elif zp_kind == "typed":
        zp = (rng.random((N, K // bs)) * ((1 << bits) - 1)).astype(np.float32).astype(dt)
    bi = rng.standard_normal(N).astype(np.float32).astype(dt) if bias else None
    w = build_weights(B, sc, zp, bias=bi, K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float32).astype(dt)
    ref = matmul_nbits_ref(A, B, sc, zp, bias=bi, K=K, N=N, bits=bits, block_size=bs)
    return w, A, ref


def _run(w, A, M, tactic=None, arch=None, twice=True):
    N, K = w.N, w.K
    p = Problem(M=M, N=N, K=K, bits=w.bits, block_size=w.block_size, dtype=w.dtype, zero_points=w.zp_kind,
                has_bias=w.bias is not None)
    assert X.supports(p)
    plan = X.build(w, p, None, tactic, arch)
    big = to_device(np.full((M + 1, N), np.nan, np.float32).astype(w.np_dtype), SIM)
    out = big.offset(0, (M, N))
    a = to_device(A, SIM)
    plan.run(a, out, 0)
    if twice:  # a plan runs again with the same pre-packed launch
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
@pytest.mark.parametrize("bits", X.BITS)
@pytest.mark.parametrize("tactic", list(X.TACTICS))
@pytest.mark.parametrize("M", [1, 16, 64, 200, 1024])
def test_mixed_gemm_every_tactic_gpu(rng, tactic, M, bits):
    w, A, ref = _make(rng, M, 1024, 4096, 128, "float16", "packed", True, bits)
    err = relative_error(_run(w, A, M, tactic), ref)
    assert err < TOLERANCES["float16"], err


# ------------------------------------------------------------------------------------------ 8-bit

def _assert_only_output_rounding(y, ref, dtype):
    """Every weight is an exact integer on the tensor core and sums are fp32, so the error must be
    (up to fp32 noise) the rounding of Y itself: a lossy code conversion would add to it."""
    err = relative_error(y, ref)
    floor = relative_error(ref.astype(np.float32).astype(np_dtype(dtype)), ref)
    assert err < TOLERANCES[dtype], err
    assert err <= 1.25 * floor + 1e-5, (err, floor)


if SIM:
    CASES8 = [  # (M, N, K, block, dtype, zp, bias, tactic, arch): every tactic, zp kind, block, dtype
        (16, 16, 96, 32, "float16", "none", True, "m16", 80),  # half chunk, default zp 128
        (5, 16, 64, 64, "bfloat16", "none", False, "m32sk", 90),
        (3, 16, 128, 128, "float16", "packed", False, "m64", 90),  # block 128 spans two stages
        (17, 32, 64, 32, "bfloat16", "packed", True, "m16", 80),  # two M blocks, two tiles
        (2, 16, 64, 64, "bfloat16", "typed", True, "m128", 80),
        (9, 16, 64, 64, "float16", "typed", False, "m32", 80),
        (4, 16, 64, 32, "float16", "packed", True, "m16sk", 80),
        (6, 16, 64, 64, "bfloat16", "typed", False, "m64sk", 80),
        (7, 16, 64, 64, "float16", "none", True, "m64w", 90),
        # two weight stages in flight: 4 stages, so stage st + 2 is loaded from st = 1 on
        (3, 32, 256, 64, "float16", "packed", True, "m16skp2", 90),  # K too short to split: wpre only
        (2, 16, 256, 128, "bfloat16", "none", False, "m64p2", 80),
    ]
else:  # a larger shape (K = 2048: 32 stages) per block x dtype x zp; the M sweep is test_mixed_gemm_gpu_m_sweep
    _M8 = itertools.cycle((1, 17, 100))
    CASES8 = [(next(_M8), 1024, 2048, bs, dt, zp, i % 2 == 0, None, 80 + 10 * (i % 2))
              for i, (bs, dt, zp) in enumerate(itertools.product(
                  X.BLOCK_SIZES, ("float16", "bfloat16"), ("none", "packed", "typed")))]


@pytest.mark.parametrize("M,N,K,bs,dtype,zp,bias,tactic,arch", CASES8)
def test_mixed_gemm_8bit_matches_reference(rng, M, N, K, bs, dtype, zp, bias, tactic, arch):
    w, A, ref = _make(rng, M, N, K, bs, dtype, zp, bias, bits=8)
    y = _run(w, A, M, tactic, arch, twice=not SIM)
    _assert_only_output_rounding(y, ref, dtype)


@pytest.mark.parametrize("bits", (8,) if SIM else X.BITS)  # 4-bit on the simulator: CASES cover arch 90
def test_mixed_gemm_arch_80_and_90_give_identical_outputs(rng, bits):
    """Both layouts feed the same fragments in the same order: bit-identical Y."""
    M, N, K, bs = (2, 32, 96, 32) if SIM else (33, 2048, 4096, 64)  # sim: one chunk + a half chunk, 2 tiles
    w, A, ref = _make(rng, M, N, K, bs, "float16", "packed", False, bits)
    y80 = _run(w, A, M, "m16", 80, twice=False)
    y90 = _run(w, A, M, "m16", 90, twice=False)
    np.testing.assert_array_equal(y80.view(np.uint16), y90.view(np.uint16))
    assert relative_error(y80, ref) < TOLERANCES["float16"]


SPLIT_CASES = [  # (bits, M, N, K, block, dtype, zp, bias, splits): 2 splits of the k-stages
    (8, 3, 16, 128, 64, "float16", "none", True, 2),
    (8, 5, 16, 96, 32, "bfloat16", "packed", False, 2),  # the second split is the half chunk
    (4, 3, 16, 256, 128, "float16", "packed", True, 2),  # block 128: splits of two stages
] if SIM else [(b, M, 1024, 4096, bs, "float16", "packed", True, s) for b in X.BITS
               for (M, bs, s) in ((1, 32, 7), (16, 64, 16), (100, 128, 3))]


@pytest.mark.parametrize("bits,M,N,K,bs,dtype,zp,bias,splits", SPLIT_CASES)
def test_mixed_gemm_split_k(rng, bits, M, N, K, bs, dtype, zp, bias, splits):
    """Split-K: each split stores its fp32 partial tile into its own workspace slice; the last one to
    arrive sums the slices in split order, adds the bias in fp32, stores Y rounded once and resets
    the counters, so the plan runs again with bitwise the same result whatever the arrival order."""
    w, A, ref = _make(rng, M, N, K, bs, dtype, zp, bias, bits)
    tac = X.Tactic("split_test", wn=4, wm=1, tpw=2, mtw=2, splitk=splits)
    p = Problem(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype, zero_points=zp, has_bias=bias)
    plan = X.build(w, p, None, tac)
    n_st = K // 64 + (K % 64 == 32)
    assert plan.splits == min(splits, n_st // max(1, bs // 64)) > 1
    a = to_device(A, SIM)
    ys = []
    for _ in range(2):
        out = to_device(np.full((M, N), np.nan, np.float32).astype(w.np_dtype), SIM)
        plan.run(a, out, 0)
        ys.append(to_host(out))
        assert not np.any(to_host(plan.counters))
    _assert_only_output_rounding(ys[0], ref, dtype)
    # exactly the fixed-order sum of the split slices (+ bias in fp32), rounded once
    slices = to_host(plan.workspace).reshape(plan.splits, M, N)
    acc = np.zeros((M, N), np.float32)
    for z in range(plan.splits):
        acc = acc + slices[z]
    if bias:
        acc = acc + to_host(w.bias).view(w.np_dtype).astype(np.float32)[None, :]
    assert np.array_equal(ys[0].view(np.uint16), acc.astype(w.np_dtype).view(np.uint16))
    assert np.array_equal(ys[1].view(np.uint16), ys[0].view(np.uint16))  # bitwise reproducible


@pytest.mark.parametrize("bits", X.BITS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mixed_gemm_split_k_sums_in_split_order(bits, dtype):
    """Crafted so that the order of the fp32 split sums shows in Y: split 0 contributes +2^21 to every
    output, split 1 -2^21, split 2 +1/32, all exact. In split order (2^21 - 2^21) + 1/32 = 1/32; an
    order that adds 1/32 to +-2^21 first loses it (the sum lies in [2^20, 2^21), where the fp32 ulp is
    1/8) and gives 0. On a GPU the splits finish in any order, so this also shows that the reduction
    does not follow arrival order."""
    M, N, K, bs = 3, 16, 192, 64  # three 64-k stages, one quantization block each
    lo = 0  # the most negative code: q - zp = -8 (4-bit) / -128 (8-bit)
    one = (1 << (bits - 1)) + 1  # q - zp = +1
    per = 8 // bits  # codes per byte
    codes = np.empty((N, 3, bs), np.uint8)
    codes[:, 0], codes[:, 1], codes[:, 2] = lo, lo, one
    B = codes.reshape(N, 3, bs // per, per)
    B = (B[..., 0] | (B[..., 1] << 4)).astype(np.uint8) if bits == 4 else codes
    big = 2.0 ** 21 / (64 * (1 << (bits - 1)))  # 4096 (4-bit) / 256 (8-bit): 64 codes x |q - zp| x scale = 2^21
    sc = np.array([[big, big, 2.0 ** -11]] * N).astype(np_dtype(dtype))  # split 2: 64 x 1 x 2^-11 = 1/32
    A = np.concatenate([-np.ones((M, 64)), np.ones((M, 128))], axis=1).astype(np_dtype(dtype))
    w = build_weights(B, sc, None, bias=None, K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    tac = X.Tactic("split_order_test", wn=4, wm=1, tpw=2, mtw=2, splitk=3)
    p = Problem(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype, zero_points="none", has_bias=False)
    plan = X.build(w, p, None, tac)
    assert plan.splits == 3
    ref = matmul_nbits_ref(A, B, sc, None, K=K, N=N, bits=bits, block_size=bs)
    assert np.all(ref == 1 / 32)  # the exact value (float64 oracle)
    a = to_device(A, SIM)
    for _ in range(3):
        out = to_device(np.full((M, N), np.nan, np.float32).astype(w.np_dtype), SIM)
        plan.run(a, out, 0)
        assert np.all(to_host(out).astype(np.float32) == np.float32(1 / 32))


def test_tactic_rejects_bad_fields():
    with pytest.raises(ValueError, match="wpre"):
        X.Tactic("bad", 4, 1, 2, 2, wpre=3)
    with pytest.raises(ValueError, match="splitk"):
        X.Tactic("bad", 4, 1, 2, 2, splitk=-1)


def test_split_count():
    t = X.TACTICS["m16sk"]
    assert X.split_count(X.TACTICS["m16"], 32, 64, 128) == (1, 64)
    assert X.split_count(t, 32, 64, 128) == (16, 4)  # 4096x4096 M=16: 32 tiles -> 512 blocks
    assert X.split_count(t, 1002, 64, 128) == (1, 64)  # enough tiles already
    assert X.split_count(t, 1, 6, 128) == (1, 6)  # fewer than 2 * MIN_SPLIT_STAGES stages
    n, sps = X.split_count(t, 10, 64, 128)
    assert sps % 2 == 0 and n * sps >= 64 and (n - 1) * sps < 64  # block 128: whole blocks per split
    assert X.split_count(X.Tactic("x", 4, 1, 2, 2, splitk=3), 1, 2, 64) == (2, 1)  # at most one per stage


# GPU: every dtype x bits x block x zero-point kind x bias specialisation, each over all the M values
# (weights built once per specialisation; the tactic and arch cycle so every one is compiled too).
GPU_MS = (1, 15, 16, 17, 32, 100, 128, 512, 2048)
_tac_cycle = itertools.cycle(X.TACTICS)
GPU_SPECS = [(dt, bits, bs, zp, bias, next(_tac_cycle), 80 + 10 * (i % 2))
             for i, (dt, bits, bs, zp, bias) in enumerate(itertools.product(
                 ("float16", "bfloat16"), X.BITS, X.BLOCK_SIZES, ("none", "packed", "typed"), (False, True)))]


@requires_gpu
@pytest.mark.parametrize("dtype,bits,bs,zp,bias,tactic,arch", GPU_SPECS)
def test_mixed_gemm_gpu_m_sweep(rng, dtype, bits, bs, zp, bias, tactic, arch):
    N, K = 256, 512
    Mmax = max(GPU_MS)
    w, A, ref = _make(rng, Mmax, N, K, bs, dtype, zp, bias, bits)
    bad = []
    for M in GPU_MS:
        y = _run(w, np.ascontiguousarray(A[:M]), M, tactic, arch)
        err = relative_error(y, ref[:M])
        if not err < TOLERANCES[dtype]:
            bad.append((M, err))
    assert not bad, f"M values over tolerance: {bad}"


@requires_gpu
@pytest.mark.parametrize("bits", X.BITS)
@pytest.mark.parametrize("M", GPU_MS)
def test_mixed_gemm_gpu_default_tactic(rng, bits, M):
    w, A, ref = _make(rng, M, 256, 512, 128, "bfloat16", "packed", True, bits)
    _assert_only_output_rounding(_run(w, A, M), ref, "bfloat16")


def test_default_tactic_by_m():
    assert X.default_tactic(1).name == "m16"
    assert X.default_tactic(16).name == "m16"
    assert X.default_tactic(17).name == "m32"
    assert X.default_tactic(64).name == "m64"
    assert X.default_tactic(65).name == "m128"
    for t in X.TACTICS.values():
        assert t.bm * RS * 4 <= 48 * 1024  # static shared memory


def test_supports_guards():
    base = dict(N=4096, K=4096, bits=4, block_size=64, dtype="float16")
    assert X.supports(Problem(M=1, **base))
    assert X.supports(Problem(M=4096, zero_points="typed", has_bias=True, **base))
    assert not X.supports(Problem(M=1, **{**base, "dtype": "float32"}))
    assert X.supports(Problem(M=1, **{**base, "bits": 8}))
    assert X.supports(Problem(M=7, **{**base, "bits": 8, "N": 32, "K": 96, "block_size": 32}))  # spec: N % 32
    assert not X.supports(Problem(M=1, **{**base, "bits": 2}))
    assert not X.supports(Problem(M=1, **{**base, "bits": 8, "K": 4096 + 32}))
    assert not X.supports(Problem(M=1, **{**base, "block_size": 16}))
    assert not X.supports(Problem(M=1, **{**base, "K": 4096 + 32}))
    assert not X.supports(Problem(M=1, **{**base, "N": 4096 + 8}))
    assert not X.supports(Problem(M=1, has_g_idx=True, **base))


@pytest.mark.parametrize("bits", X.BITS)
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("bs", X.BLOCK_SIZES)
@pytest.mark.parametrize("N,K", [(16, 128), (48, 384), (32, 96)])
def test_prepack_bytes_and_round_trip(rng, arch, bs, N, K, bits):
    if K % bs:
        pytest.skip("K % block_size != 0")
    blob = bs * bits // 8
    B = rng.integers(0, 256, (N, K // bs, blob)).astype(np.uint8)
    P = X.pack_weights_for_mixed_gemm(B, N, K, bits, arch, bs)
    assert P.dtype == np.uint8 and P.nbytes == B.nbytes == N * K * bits // 8
    back = X.unpack_weights_from_mixed_gemm(P, N, K, bits, arch, bs)
    np.testing.assert_array_equal(back, B.reshape(N, -1))
    # the 2-D q_weight form of B packs the same way
    np.testing.assert_array_equal(X.pack_weights_for_mixed_gemm(B.reshape(N, -1), N, K, bits, arch, bs), P)


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("bs,K", [(32, 96), (64, 128), (128, 256)])
def test_prepack_8bit_byte_positions(rng, arch, bs, K):
    """Every code lands where the module docstring says (computed here element by element)."""
    N = 32
    B = rng.integers(0, 256, (N, K)).astype(np.uint8)
    P = X.pack_weights_for_mixed_gemm(B, N, K, 8, arch, bs)
    T, nfull = N // 16, K // 64
    for n in range(N):
        for k in range(K):
            tile, h, g = n // 16, (n % 16) // 8, n % 8
            c, kk = divmod(k, 64)
            half = c == nfull
            kg = 32 if half else min(bs, 64)
            sg = kg // 16
            gam, r = divmod(kk, kg)
            t, r2 = divmod(r, 4 * sg)
            sig, j = divmod(r2, 4)
            s = gam * sg + sig
            v, byte = s // 2, (s % 2) * 8 + 2 * j + h
            lane = 4 * g + t
            if half:
                pos = ((tile * (2 * nfull + 1) + 2 * nfull) if arch == 80 else (T * 2 * nfull + tile)) * 512
            elif arch == 80:
                pos = (tile * (2 * nfull + (K % 64 == 32)) + 2 * c + v) * 512
            else:
                pos = ((c * T + tile) * 2 + v) * 512
            assert P[pos + 16 * lane + byte] == B[n, k], (n, k)


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
        X.pack_weights_for_mixed_gemm(B, 16, 128, 2, 80, 64)
    with pytest.raises(ValueError, match="2048 bytes"):  # 8-bit B is one byte per code
        X.pack_weights_for_mixed_gemm(B, 16, 128, 8, 80, 64)
    with pytest.raises(ValueError):
        X.pack_weights_for_mixed_gemm(B, 16, 128, 4, 75, 64)
    with pytest.raises(ValueError):
        X.pack_weights_for_mixed_gemm(np.zeros((8, 2, 32), np.uint8), 8, 128, 4, 80, 64)  # N % 16


def test_code_layouts_are_the_formats_data():
    """Each served bit width's layout record: chunk bytes, byte vs nibble codes, the bf16 decode path."""
    from numba_nbits.formats import FORMATS
    from numba_nbits.kernels.mixed_gemm.layout import LAYOUTS, code_layout

    assert X.BITS == (4, 8) and set(LAYOUTS) == {FORMATS[4], FORMATS[8]}
    w4, w8 = code_layout(4), code_layout(8)
    assert (w4.tile_chunk_bytes, w4.byte_codes, w4.bf16_via_f32) == (512, False, False)
    assert (w8.tile_chunk_bytes, w8.byte_codes, w8.bf16_via_f32) == (1024, True, True)
    with pytest.raises(KeyError):
        code_layout(2)
