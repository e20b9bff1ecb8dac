"""Tensor-core small-M GEMV (kernels/gemv/mma.py) against the float64 oracle.

Tiny shapes on the simulator, larger ones on a GPU (same tests, ``SHAPES`` picks)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from numba_nbits.arrays import np_dtype, to_device, to_host
from numba_nbits.dispatch.problem import Problem
from numba_nbits.formats import quantize, unpack_codes
from numba_nbits.kernels.gemv import layout as L
from numba_nbits.kernels.gemv import mma as G
from numba_nbits.kernels.gemv import repack as R
from numba_nbits.kernels.gemv import tactics as GT
from numba_nbits.launch import simulated
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights

SIM = simulated()
DTYPES = ("float16", "bfloat16")


def _make(rng, N, K, bs, dtype, zp_kind, M, bits=4):
    W = rng.standard_normal((N, K)).astype(np.float32).astype(np_dtype(dtype))
    B, sc, zp = quantize(W, bits, bs, symmetric=(zp_kind == "none"))
    if zp_kind == "packed":  # make every zero point and code arbitrary (not just quantizer output)
        zp = rng.integers(0, 256, zp.shape).astype(np.uint8)
        B = rng.integers(0, 256, B.shape).astype(np.uint8)
    w = build_weights(B, sc, zp, K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float32).astype(np_dtype(dtype))
    ref = matmul_nbits_ref(A, B, sc, zp, K=K, N=N, bits=bits, block_size=bs)
    return w, A, ref


def _run(w, A, M, tactic=None, pad_rows=1):
    N, K = w.N, w.K
    dt = w.np_dtype
    p = Problem(M=M, N=N, K=K, bits=w.bits, block_size=w.block_size, dtype=w.dtype, zero_points=w.zp_kind)
    assert GT.supports(p)
    plan = G.build(w, p, None, tactic)
    a = to_device(A, SIM)
    # poisoned output with extra rows after it: the kernel must write every entry of (M, N) and nothing else
    big = to_device(np.full((M + pad_rows, N), np.nan, np.float32).astype(dt), SIM)
    out = big.offset(0, (M, N))
    plan.run(a, out, 0)
    plan.run(a, out, 0)  # rerunnable
    y = to_host(big)
    assert np.all(np.isnan(y[M:].astype(np.float32))), "wrote past the output"
    return y[:M]


def _check(y, ref, dtype):
    assert not np.any(np.isnan(y.astype(np.float32))), "some outputs were not written"
    err = relative_error(y, ref)
    assert err < TOLERANCES[dtype], err


if SIM:
    CASES = [  # (M, N, K, block, dtype, zp, tactic)
        (1, 16, 64, 32, "float16", "none", GT.Tactic(1, 1, 1)),
        (8, 24, 40, 32, "float16", "packed", GT.Tactic(1, 1, 1)),  # N % 16 != 0, K < block multiple
        (15, 16, 64, 16, "bfloat16", "packed", GT.Tactic(1, 1, 1)),
        (16, 8, 128, 64, "float16", "packed", GT.Tactic(1, 2, 1)),
        (5, 40, 136, 128, "bfloat16", "none", GT.Tactic(2, 1, 1)),  # K % 64 != 0, tpw 2 with a partial tile
        (9, 16, 192, 16, "float16", "none", GT.Tactic(1, 2, 2)),  # split-K + unroll, many blocks
        (2, 16, 96, 32, "bfloat16", "packed", GT.Tactic(1, 1, 2)),
        (16, 16, 64, 64, "bfloat16", "none", GT.Tactic(1, 1, 1)),
    ]
    # every block size x dtype x zero-point kind, M cycling through the boundary values
    _Ms = itertools.cycle((1, 8, 15, 16, 3))
    CASES += [(next(_Ms), 24, 72, bs, dt, zp, GT.Tactic(1, 1, 1))
              for bs, dt, zp in itertools.product(GT.BLOCK_SIZES, DTYPES, ("none", "packed"))]
else:
    CASES = [(M, N, K, bs, dt, zp, None)
             for (M, (N, K), bs, dt, zp) in itertools.product(
                 (1, 4, 8, 9, 15, 16), ((1032, 2056), (24, 136)), GT.BLOCK_SIZES, DTYPES, ("none", "packed"))]
    CASES += [(M, 4096, 4096, bs, "float16", "packed", None) for M in (1, 16) for bs in (32, 128)]


T = GT.Tactic
if SIM:  # the M=1 variants: prefetched scales/zero points (pf 1), + activations (pf 2), split-K across CTAs
    VARIANTS = [
        (1, 16, 128, 32, "float16", "none", T(1, 1, 1, pf=1)),
        (1, 24, 192, 16, "bfloat16", "packed", T(1, 2, 1, pf=2)),  # block 16: scales as one 16-byte load
        (3, 40, 136, 128, "float16", "packed", T(2, 1, 1, pf=2)),  # partial tile, K % 64 != 0
        (1, 16, 256, 64, "bfloat16", "none", T(1, 1, 2, pf=1)),
        (9, 16, 128, 32, "float16", "packed", T(1, 1, 1, pf=2)),  # two m-tiles
        (1, 16, 256, 32, "float16", "none", T(1, 1, 1, ksplit=2)),
        (2, 40, 200, 16, "bfloat16", "packed", T(2, 1, 1, pf=1, ksplit=3)),
        (16, 16, 192, 64, "float16", "packed", T(1, 2, 1, pf=2, ksplit=2)),
        (1, 24, 64, 128, "float16", "none", T(1, 1, 1, pf=2, ksplit=4)),  # splits with no K at all
        (1, 16, 320, 32, "float16", "packed", T(1, 1, 1, pf=1, stages=3)),  # 3-stage register ring
        (4, 16, 256, 16, "bfloat16", "none", T(1, 1, 1, pf=2, stages=4)),
        (1, 40, 384, 64, "float16", "none", T(2, 2, 1, pf=2, ksplit=2, stages=3, minb=4)),  # minb: GPU-only
        # ring kernel: 3 groups over 2 persistent CTAs (simulator: 2 SMs), items crossing group boundaries
        (1, 48, 256, 32, "float16", "none", T.parse("t1w2u1p1r3g1")),
        (3, 40, 136, 128, "bfloat16", "packed", T.parse("t2w1u1p1r2g1")),  # partial tile, K % 64 != 0, tpw 2
        (9, 16, 192, 16, "float16", "packed", T.parse("t1w2u1p1r4")),  # two m-tiles, block 16, idle items
        # shared-memory pipeline (cp.async): one block per super-chunk (a 4-byte zero-point word shared by two
        # rows), tpw 2 + unroll 2 with a partial tile, 16-byte scale copies at block 16 with split-K, 5 slots
        (1, 48, 256, 32, "float16", "packed", T.parse("t1w2u1p1s3a")),
        (3, 40, 136, 128, "bfloat16", "packed", T.parse("t2w1u2p1s4a")),
        (9, 16, 192, 16, "float16", "packed", T.parse("t1w2u1p1k2a")),
        (2, 24, 320, 64, "bfloat16", "none", T.parse("t1w1u1p1s5a")),
    ]
else:  # one compile per case: (dtype, zero points) cycle over tactic x block x M
    _dz = itertools.cycle(itertools.product(DTYPES, ("none", "packed")))
    _kk = itertools.cycle((2056, 2048))  # K with a tail (guarded activation loads) and without (``_kf`` kernels)
    VARIANTS = [(M, 1032, next(_kk), bs, *next(_dz), T.parse(tag))
                for tag in ("t1w8u1p1", "t2w4u2p2", "t1w4u1p2k4s3", "t2w8u1p1k3s4", "t1w8u1p1k2s3b4", "t2w8u1p1b4",
                            "t1w8u1p1b4r3g4", "t2w4u1p1b4r4g4", "t1w8u1p1s3a", "t1w4u1p1k2s6a")
                for bs in (16, 32, 128) for M in (1, 16)]


@pytest.mark.parametrize("M,N,K,bs,dtype,zp,tactic", VARIANTS)
def test_gemv_mma_variants(rng, M, N, K, bs, dtype, zp, tactic):
    w, A, ref = _make(rng, N, K, bs, dtype, zp, M)
    _check(_run(w, A, M, tactic), ref, dtype)


@pytest.mark.parametrize("tag", ["t1w1u1p1", "t1w1u2p1"])
@pytest.mark.parametrize("bits,bs", [(4, 32), (4, 128), (8, 16), (2, 64)])
def test_k_full_kernels_read_no_activation_guard(rng, bits, bs, tag):
    """K a multiple of the super-chunk: the ``_kf`` kernel (activation loads unguarded, rows >= M read row
    M - 1; with unroll 2 a stage's activations load first, the second super-chunk's index clamped to the last
    one: K = one super-chunk loads it twice and computes it once); K with a tail: the guarded kernel. Both
    against the oracle, M = 3 and 9 (padded rows in one and two m-tiles)."""
    ks = L.super_chunk(bs, bits)
    tac = GT.Tactic.parse(tag)
    for K in (ks, ks + 8 * (1 if bs == 16 else 2)):
        full = K % ks == 0
        for M in (3, 9):
            w, A, ref = _make(rng, 16, K, bs, "float16", "packed", M, bits)
            p = Problem(M=M, N=16, K=K, bits=bits, block_size=bs, dtype="float16", zero_points="packed")
            plan = G.build(w, p, None, tac)
            assert plan.kernel.endswith("_kf") == full, (K, plan.kernel)
            _check(_run(w, A, M, tac), ref, "float16")
        src = G.generate_source("float16", 2, tac, bs, "packed", bits, False, full)
        assert ("klim" in src) != full and ("else M - 1" in src) == full
        assert ("sca_ = min(" in src) == (full and tac.unroll >= 2)



@pytest.mark.parametrize("bits,bs,zp,tag", [(4, 32, "packed", "t1w2u2p1s3n"), (4, 128, "none", "t2w1u1n"),
                                            (8, 64, "packed", "t1w1u1p1k2no"), (2, 16, "none", "t1w2u1p1n")])
def test_unguarded_prefetch_stays_in_the_tail(rng, bits, bs, zp, tag):
    """``Tactic.unguarded`` (tag ``n``): the prefetch loads of stages past a tile's last super-chunk are not
    tested, so they read the next tile or the packed arrays' zero tail (``layout.TAIL_SUPERS``). One super-chunk
    per row makes the last tile's overrun the largest (stages * unroll * warps * ksplit - 1 super-chunks); the
    simulator's loads index the arrays themselves, so a read past the tail fails the test. Against the oracle,
    M = 1 and 9; the generated source has no ``if scl < n_super`` test."""
    ks = L.super_chunk(bs, bits)
    tac = GT.Tactic.parse(tag)
    assert tac.stages * tac.unroll * tac.warps * tac.ksplit <= L.TAIL_SUPERS
    for M in (1, 9):
        w, A, ref = _make(rng, 32 * tac.tpw, ks, bs, "float16", zp, M, bits)
        _check(_run(w, A, M, tac), ref, "float16")
    src = G.generate_source("float16", 1, tac, bs, zp, bits, False, True)
    assert "if scl < n_super" not in src
    plain = G.generate_source("float16", 1, GT.Tactic.parse(tag.replace("n", "")), bs, zp, bits, False, True)
    assert "if scl < n_super" in plain


def test_unguarded_prefetch_needs_a_register_pipeline_within_the_tail():
    for bad in ("t1w8u1p2n", "t1w8u1p1r3n", "t1w8u1p1s4an", "t1w8u1xn", "t1w8u2p1k2s4n"):
        with pytest.raises(ValueError, match="unguarded"):
            GT.Tactic.parse(bad)
    assert GT.Tactic.parse("t2w4u1p1no").tag == "t2w4u1p1no"
    assert GT.Tactic.parse("t1w8u1p1k2s4n").stages * 2 * 8 == L.TAIL_SUPERS

if SIM:
    LOW_BIT_CASES = [  # (bits, M, N, K, block, dtype, zp, tactic): both planes of 8-bit, both step halves of 2-bit
        (8, 1, 16, 64, 32, "float16", "none", "t1w1u1"),
        (8, 3, 16, 64, 16, "bfloat16", "packed", "t1w1u1"),
        (8, 9, 16, 128, 128, "float16", "packed", "t1w1u1p1r2"),  # two m-tiles, ring kernel, 4 loads per tile
        (2, 1, 16, 128, 64, "float16", "none", "t1w1u1"),
        (2, 2, 24, 136, 32, "bfloat16", "packed", "t1w2u1"),  # K % 128 != 0, partial tile
        (2, 1, 48, 256, 128, "float16", "packed", "t1w2u1p1r3g1"),
        (2, 2, 16, 256, 16, "float16", "packed", "t1w1u1p1r2"),  # 8 blocks per super-chunk: two scale vectors
        (2, 1, 16, 256, 16, "bfloat16", "none", "t1w1u1p1"),  # the same, plain kernel
        (8, 2, 16, 128, 32, "float16", "packed", "t1w1u1p1s3a"),  # shared-memory pipeline: two planes, 2 blocks
        (2, 1, 16, 256, 16, "bfloat16", "packed", "t1w1u2p1a"),  # two 16-byte scale and one zero-point copy
    ]
else:
    _dz8 = itertools.cycle(itertools.product(DTYPES, ("none", "packed")))
    _m8 = itertools.cycle((1, 5, 16, 8))
    LOW_BIT_CASES = [(bits, next(_m8), 1032, 2056, bs, *next(_dz8), tag)  # one compile per case
                     for bits in (2, 8)
                     for tag in ("t1w8u1", "t2w8u1p1", "t1w4u2p1", "t1w8u1p1b4r3g4", "t2w4u1p1k2", "t1w4u1p1s4a")
                     for bs in (16, 32, 64, 128)]


@pytest.mark.parametrize("bits,M,N,K,bs,dtype,zp,tag", LOW_BIT_CASES)
def test_gemv_mma_low_bits(rng, bits, M, N, K, bs, dtype, zp, tag):
    """8-bit (two 4-bit planes, the high one decoded x16) and 2-bit (two 16-k steps per word) codes;
    ``packed`` cases draw every code and zero point at random (all 256 / 4 values)."""
    w, A, ref = _make(rng, N, K, bs, dtype, zp, M, bits)
    _check(_run(w, A, M, GT.Tactic.parse(tag)), ref, dtype)


@pytest.mark.parametrize("bits", (2, 8))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_mma_low_bits_one_hot_exact(rng, bits, dtype):
    """One-hot rows of A read single decoded weights: ``(q - zp) * scale`` exactly, for every code
    value the row holds (8-bit: all 256 codes across the row; 2-bit: all 4)."""
    N, K, bs = 16, 128, 32
    kb = K // bs
    codes = (np.arange(N * K) * 37 % (1 << bits)).astype(np.uint8).reshape(N, K)
    from numba_nbits.formats import pack_codes, pack_zero_points

    B = pack_codes(codes, bits, bs)
    zp = rng.integers(0, 1 << bits, (N, kb)).astype(np.uint8)
    sc = (2.0 ** rng.integers(-3, 3, (N, kb))).astype(np_dtype(dtype))  # powers of two: products stay exact
    w = build_weights(B, sc, pack_zero_points(zp, bits), K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    ks = (0, 1, 17, 33, 64, 127)
    A = np.zeros((len(ks), K), np_dtype(dtype))
    for m, k in enumerate(ks):
        A[m, k] = 1
    y = _run(w, A, len(ks), GT.Tactic(1, 1, 1)).astype(np.float64)
    for m, k in enumerate(ks):
        want = (codes[:, k].astype(np.float64) - zp[:, k // bs]) * sc[:, k // bs].astype(np.float64)
        np.testing.assert_array_equal(y[m], want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemv_mma_prefetched_scale_bits(rng, dtype):
    """pf >= 1 converts scale bits to fp32 itself: negative, zero and (fp16) subnormal scales stay exact."""
    N, K, bs = 16, 64, 32
    w0, A, _ = _make(rng, N, K, bs, dtype, "none", 1)
    sc = np.asarray(w0.host["scales"]).reshape(N, -1).astype(np.float32)
    sc[0::3] *= -1
    sc[1, 0] = 0
    sc[2, 1] = 2.0 ** -20 if dtype == "float16" else 2.0 ** -130  # fp16 subnormal / bf16 subnormal
    sc = sc.astype(np_dtype(dtype))
    w = build_weights(w0.host["B"], sc, None, K=K, N=N, bits=4, block_size=bs, simulated=SIM)
    ref = matmul_nbits_ref(A, w.host["B"], sc, None, K=K, N=N, bits=4, block_size=bs)
    y0 = _run(w, A, 1, T(1, 1, 1, pf=0))
    y1 = _run(w, A, 1, T(1, 1, 1, pf=1))
    _check(y1, ref, dtype)
    np.testing.assert_array_equal(y0.view(np.uint16), y1.view(np.uint16))


def test_smem_tactic_fitted_to_shared_memory():
    """A tuned shared-memory pipeline that does not fit a specialisation's 48 KiB keeps the deepest ring that
    does, else becomes the register pipeline (slot bytes: 256 threads x (weights + scale words [+ zero points]);
    reduction: 8 warps x 4 KiB per m-tile)."""
    from numba_nbits.kernels.gemv.mma_smem import fitted, smem_bytes

    t = T.parse("t1w8u1p1s6a")
    assert smem_bytes(t, 1, 128, "none", 4) == (6 * 256 * 36 + 16, 8 * 4 * 32 * 4)  # + the 16-byte alignment pad
    assert fitted(t, 1, 128, "none", 4) == T.parse("t1w8u1p1s4a")  # 4 x 9216 + 4096
    assert fitted(t, 1, 32, "none", 4) == t  # 6 x 6144 + 4096
    assert fitted(t, 1, 32, "packed", 4) == t  # + 4-byte zero-point words: 6 x 7168 + 4096 = 47104
    assert fitted(t, 2, 32, "packed", 4) == T.parse("t1w8u1p1s5a")  # two m-tiles: 6 x 7168 + 8192 > 49152
    assert fitted(t, 2, 128, "packed", 8) == T.parse("t1w8u1p1a")  # 2 x 18432 + 8192
    assert fitted(T.parse("t1w8u2p1s3a"), 2, 128, "packed", 8) == T.parse("t1w8u2p1")  # 2 x 36864 > 49152


@pytest.mark.skipif(not SIM, reason="moves the simulator's pretend shared-memory window")
def test_smem_ring_rounds_its_base_to_16_bytes(rng):
    """The ring's base is rounded up to 16 bytes in the kernel: a static shared array is only as aligned as
    its declaration (numba-cuda-mlir placed another shared variable first and the ring's 16-byte cp.async
    faulted on the H200). Here every pretend shared array starts 4 bytes past a 16-byte boundary; the
    cp.async / ld.shared twins refuse a misaligned address, so an unrounded base fails this test."""
    from numba_nbits.kernels import intrinsics_sm90 as S

    def reset(start):
        with S._SMEM_LOCK:
            S._SMEM.clear()
            S._NEXT[0] = start

    reset(20)
    try:
        w, A, ref = _make(rng, 24, 320, 32, "float16", "packed", 2)
        _check(_run(w, A, 2, T.parse("t1w1u1p1s3a")), ref, "float16")
        assert S._SMEM and all(base % 16 == 4 for base in S._SMEM)
    finally:
        reset(16)


def test_tactic_tags():
    for tac in (T(), T(2, 4, 1), T(1, 8, 2, 2), T(2, 8, 1, 1, 3), T(1, 4, 1, 0, 4), T(1, 8, 1, 2, 1, 3), T(2, 4, 1, 1, 2, 4),
                T(2, 8, 1, minb=4), T(1, 4, 1, 2, 2, 3, 8), T.parse("t1w8u2p1s6b4a")):
        assert T.parse(tac.tag) == tac
    assert T().tag == "t1w8u2" and T(2, 8, 1, 1, 3).tag == "t2w8u1p1k3" and T(stages=3).tag == "t1w8u2s3"
    assert T(1, 4, 1, 2, 2, 3, 8).tag == "t1w4u1p2k2s3b8"
    for tag in ("t1w8u1p1b4r3g4", "t2w4u1p1r4", "t1w1u1p1r8g16"):
        assert T.parse(tag).tag == tag
    assert T.parse("t1w8u1p1b4r3g4") == T(1, 8, 1, pf=1, minb=4, ring=3, grid=4)
    with pytest.raises(ValueError):
        T(pf=3)
    for bad in (dict(ring=1, pf=1, unroll=1), dict(ring=3, pf=0, unroll=1), dict(ring=3, pf=1, unroll=2),
                dict(ring=3, pf=1, unroll=1, ksplit=2), dict(grid=4, unroll=1, pf=1), dict(smem=True, unroll=1, pf=2),
                dict(smem=True, ring=3, unroll=1, pf=1), dict(smem=True, stages=9, pf=1)):
        with pytest.raises(ValueError):
            T(**bad)
    # the warpgroup kernel's barrier pipeline (m): after v in the tag, only with permuted activations
    for tag in ("t1w8u1s3xhvm", "t1w8u1p1k2s4xhvm"):
        assert T.parse(tag).tag == tag and T.parse(tag).mb
    assert T.parse("t1w8u1s3xhvm") == T(1, 8, 1, stages=3, xa=True, wg=True, pa=True, mb=True)
    with pytest.raises(ValueError, match="barrier pipeline"):
        T(1, 8, 1, stages=3, xa=True, wg=True, mb=True)
    with pytest.raises(ValueError, match="not a gemv_mma tactic tag"):
        T.parse("t1w8u1s3xhmv")


@pytest.mark.parametrize("M,N,K,bs,dtype,zp,tactic", CASES)
def test_gemv_mma_matches_reference(rng, M, N, K, bs, dtype, zp, tactic):
    w, A, ref = _make(rng, N, K, bs, dtype, zp, M)
    y = _run(w, A, M, tactic)
    _check(y, ref, dtype)


@pytest.mark.skipif(SIM, reason="tactic sweep: GPU only")
@pytest.mark.parametrize("tactic", [GT.Tactic(t, wps, u) for t in (1, 2) for wps in (1, 2, 4, 8) for u in (1, 2)])
@pytest.mark.parametrize("M", [1, 16])
def test_gemv_mma_tactics_gpu(rng, tactic, M):
    w, A, ref = _make(rng, 1064, 1096, 32, "float16", "packed", M)
    _check(_run(w, A, M, tactic), ref, "float16")


def test_gemv_mma_all_m_one_weights(rng):
    """Every M from 1 to 16 on the same weights (one m-tile up to 8, two above)."""
    Ms = (1, 8, 9, 16) if SIM else range(1, 17)
    w, A16, _ = _make(rng, 16, 64, 64, "float16", "packed", 16)
    for M in Ms:
        ref = matmul_nbits_ref(A16[:M], w.host["B"], w.host["scales"], w.host["zero_points"], K=w.K, N=w.N,
                               bits=4, block_size=64)
        _check(_run(w, np.ascontiguousarray(A16[:M]), M, GT.Tactic(1, 1, 1) if SIM else None), ref, "float16")


def test_supports_guards():
    base = dict(N=4096, K=4096, bits=4, block_size=32, dtype="float16")
    assert GT.supports(Problem(M=1, **base))
    assert GT.supports(Problem(M=16, **base))
    assert GT.supports(Problem(M=64, **base))  # past 16: the fused_gemm route's kernels
    assert not GT.supports(Problem(M=65, **base))
    # past 64 only where the warpgroup kernel has a tactic (sm_90, 4-bit block 128, N >= 8192)
    wide = {**base, "N": 28672, "K": 8192, "block_size": 128}
    assert GT.supports(Problem(M=96, **wide)) and not GT.supports(Problem(M=96, **wide, sm=80))
    assert GT.supports(Problem(M=128, **wide)) and GT.supports(Problem(M=128, **{**wide, "N": 8192}))
    assert not GT.supports(Problem(M=128, **{**wide, "N": 4096})) and not GT.supports(Problem(M=257, **wide))
    assert not GT.supports(Problem(M=0, **base))
    assert not GT.supports(Problem(M=1, **{**base, "dtype": "float32"}))
    assert GT.supports(Problem(M=1, **{**base, "bits": 8}))
    assert GT.supports(Problem(M=16, **{**base, "bits": 2}))
    assert not GT.supports(Problem(M=1, **{**base, "bits": 3}))
    assert not GT.supports(Problem(M=1, **{**base, "block_size": 256}))
    assert not GT.supports(Problem(M=1, **{**base, "N": 4100}))
    assert not GT.supports(Problem(M=1, **{**base, "K": 4100}))
    assert not GT.supports(Problem(M=1, zero_points="typed", **base))
    assert not GT.supports(Problem(M=1, has_g_idx=True, **base))
    assert GT.supports(Problem(M=1, zero_points="packed", has_bias=True, **base))  # bias added by the route


@pytest.mark.parametrize("bits", L.BITS)
@pytest.mark.parametrize("bs", GT.BLOCK_SIZES)
@pytest.mark.parametrize("N,K", [(8, 40), (40, 200), (32, 256)])
def test_pack_weights_round_trip(rng, bits, bs, N, K):
    kb = -(-K // bs)
    codes = rng.integers(0, 1 << bits, (N, kb * bs)).astype(np.uint8)
    ks, kg, n_super, K_pad = L.geometry(K, bs, bits)
    assert ks % 64 == 0 and ks % bs == 0 and (bits != 2 or ks % 128 == 0)
    words = L.pack_weights(codes, K_pad, bs, bits)
    n_pad = -(-N // L.ROW_PAD) * L.ROW_PAD
    assert words.size * 32 == n_pad * K_pad * bits
    assert words.size == (n_pad // 16) * n_super * L.n_vectors(bits, ks) * 32 * 4
    back = L.unpack_weights(words, N, K_pad, bs, bits)
    np.testing.assert_array_equal(back[:, :kb * bs], codes)
    assert not back[:, kb * bs:].any()


def test_pack_weights_fragment_positions(rng):
    """8-bit: vector 2c / 2c + 1 of a super-chunk = the low / high nibbles in the 4-bit layout; 2-bit:
    word 2*(c % 2) + q // 2 of vector c // 2 holds step q at bit 4n + 2 * (q % 2) (``_step_planes``)."""
    bs = 64
    codes8 = rng.integers(0, 256, (32, 128)).astype(np.uint8)
    w8 = L.pack_weights(codes8, 128, bs, 8).reshape(2, 2, 2, 32, 4)  # T, super, vector, lane, word
    lo = L.pack_codes_for_mma(codes8 & 15, 128, bs).reshape(2, 2, 32, 4)
    hi = L.pack_codes_for_mma(codes8 >> 4, 128, bs).reshape(2, 2, 32, 4)
    np.testing.assert_array_equal(w8[:, :, 0], lo)
    np.testing.assert_array_equal(w8[:, :, 1], hi)
    codes2 = rng.integers(0, 4, (32, 256)).astype(np.uint8)
    w2 = L.pack_weights(codes2, 256, bs, 2).reshape(2, 2, 32, 4)  # T, vector (128 k), lane, word
    w4 = L.pack_codes_for_mma(codes2, 256, bs).reshape(2, 4, 32, 4)  # T, chunk (64 k), lane, step
    for s in range(8):
        ((vec, wi, sh, plane),) = L.step_planes(2, s)
        c, q = divmod(s, 4)
        np.testing.assert_array_equal((w2[:, vec, :, wi] >> np.uint32(sh)) & np.uint32(0x33333333), w4[:, c, :, q])


@pytest.mark.parametrize("bs", GT.BLOCK_SIZES)
@pytest.mark.parametrize("N,K", [(8, 40), (40, 200), (32, 256)])
def test_prepack_round_trip(rng, bs, N, K):
    kb = -(-K // bs)
    codes = rng.integers(0, 16, (N, kb * bs)).astype(np.uint8)
    ks, kg, n_super, K_pad = L.geometry(K, bs)
    words = L.pack_codes_for_mma(codes, K_pad, bs)
    n_pad = -(-N // L.ROW_PAD) * L.ROW_PAD
    assert words.size * 8 == n_pad * K_pad  # 8 codes per word
    back = L.unpack_codes_from_mma(words, N, K_pad, bs)
    np.testing.assert_array_equal(back[:, :kb * bs], codes)
    assert not back[:, kb * bs:].any()


def test_prepack_fragment_positions(rng):
    """Word (tile 0, chunk 0, lane (g, t), step s) nibble r = fragment register r's low half."""
    bs = 64
    codes = rng.integers(0, 16, (32, 64)).astype(np.uint8)
    words = L.pack_codes_for_mma(codes, 64, bs).reshape(2, 1, 32, 4)
    for lane in (0, 5, 31):
        g, t = lane >> 2, lane & 3
        for s in range(4):
            wd = int(words[0, 0, lane, s])
            k0 = 16 * t + 4 * s  # KG = 64, SG = 4: physical k of logical column 2t
            assert (wd >> 0) & 15 == codes[g, k0] and (wd >> 16) & 15 == codes[g, k0 + 1]  # a0
            assert (wd >> 4) & 15 == codes[g + 8, k0] and (wd >> 20) & 15 == codes[g + 8, k0 + 1]  # a1
            assert (wd >> 8) & 15 == codes[g, k0 + 2] and (wd >> 24) & 15 == codes[g, k0 + 3]  # a2
            assert (wd >> 12) & 15 == codes[g + 8, k0 + 2] and (wd >> 28) & 15 == codes[g + 8, k0 + 3]  # a3


def test_prepack_built_once(rng):
    w, A, ref = _make(rng, 16, 64, 32, "float16", "none", 2)
    p1 = R.prepack(w)
    p2 = R.prepack(w)
    assert p1 is p2
    codes = unpack_codes(w.host["B"], w.K, 4, 32)
    words = to_host(p1.bq)
    tail = L.tail_words("bq", 32)
    assert not words[-tail:].any()  # the zero tail (``layout.TAIL_SUPERS``) after the last tile
    back = L.unpack_codes_from_mma(words[:-tail], w.N, p1.K_pad, 32)
    np.testing.assert_array_equal(back[:, :w.K], codes)


def test_ring_tactic_served_from_tuned_table(rng, monkeypatch):
    """A ring tactic reaches plans only through the tuned table (``tuned_tables.tuned_table``, as ``tactics`` reads it): default plans pick it up."""
    N, K, bs = 48, 256, 32
    monkeypatch.setattr(GT, "tuned_table", lambda bits, gpu=GT.DEFAULT_GPU: {(N, K, bs, 1): "t1w2u1p1r3g1"})
    w, A, ref = _make(rng, N, K, bs, "float16", "none", 1)
    p = Problem(M=1, N=N, K=K, bits=4, block_size=bs, dtype="float16", zero_points="none")
    plan = G.build(w, p)
    assert plan.tactic == T.parse("t1w2u1p1r3g1")
    if SIM:
        assert plan.grid == min(3, GT.SIM_SM_COUNT)  # 3 tile groups over the persistent CTAs
    _check(_run(w, A, 1), ref, "float16")


def test_plans_take_the_table_of_their_device(rng, monkeypatch):
    """``build`` asks for the tuned table of the device it runs on (``tuned_tables.device_gpu``: the device's name,
    the default GPU's on the simulator) and serves that GPU's row."""
    N, K, bs = 48, 256, 32
    seen = []
    monkeypatch.setattr(GT, "tuned_table", lambda bits, gpu=GT.DEFAULT_GPU: seen.append(gpu) or (
        {(N, K, bs, 1): "t1w2u2p1"} if gpu == "g9" else {}))
    monkeypatch.setattr(G, "device_gpu", lambda simulated: "g9")
    w, A, ref = _make(rng, N, K, bs, "float16", "none", 1)
    p = Problem(M=1, N=N, K=K, bits=4, block_size=bs, dtype="float16", zero_points="none")
    assert G.build(w, p).tactic == T.parse("t1w2u2p1") and seen == ["g9"]
    assert GT.device_gpu(True) == GT.DEFAULT_GPU
