"""The float64 oracle vs an independent naive loop, and vs formats.dequantize_host (no numba)."""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest

from numba_nbits import formats as fm
from numba_nbits import reference as ref


def _problem(rng, *, N, K, bits, bs, zp_kind, dtype=np.float32, g_idx=False, bias=False):
    kb = -(-K // bs)
    q = rng.integers(0, 1 << bits, (N, K))
    B = fm.pack_codes(q, bits, bs, pad_code=int(rng.integers(0, 1 << bits)))
    scales = rng.uniform(-1.0, 1.0, (N, kb)).astype(dtype)
    if zp_kind == "none":
        zp = None
    elif zp_kind == "packed":
        zp = fm.pack_zero_points(rng.integers(0, 1 << bits, (N, kb)), bits)
    elif zp_kind == "packed_flat":
        zp = fm.pack_zero_points(rng.integers(0, 1 << bits, (N, kb)), bits).reshape(-1)
    else:  # typed, fractional
        zp = (rng.integers(0, 4 << bits, (N, kb)) / 4.0).astype(dtype)
    g = rng.integers(0, kb, kb * bs).astype(np.int32) if g_idx else None
    b = rng.standard_normal(N).astype(dtype) if bias else None
    return q, B, scales, zp, g, b


CASES = [
    # N, K, bits, bs, zp_kind, g_idx, bias, A lead shape
    (3, 5, 4, 16, "none", False, False, (2,)),
    (5, 37, 4, 16, "packed", False, True, (3,)),
    (4, 33, 2, 16, "packed", True, False, (2, 2)),
    (2, 70, 8, 32, "typed", False, True, (1,)),
    (7, 19, 2, 16, "typed", True, True, (2, 1)),
    (3, 64, 8, 64, "packed_flat", True, False, (4,)),
    (6, 45, 4, 32, "typed", True, True, (2, 3)),
    (1, 16, 2, 16, "none", False, True, (5,)),
    (4, 130, 4, 128, "packed", False, False, (0,)),  # M = 0
    (3, 23, 8, 16, "none", True, True, (2, 0)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("N,K,bits,bs,zp_kind,use_g,use_bias,lead", CASES)
def test_oracle_matches_naive_loop(N, K, bits, bs, zp_kind, use_g, use_bias, lead, dtype):
    rng = np.random.default_rng(zlib.crc32(repr((N, K, bits, bs, zp_kind)).encode()))
    q, B, s, zp, g, b = _problem(rng, N=N, K=K, bits=bits, bs=bs, zp_kind=zp_kind, dtype=dtype,
                                 g_idx=use_g, bias=use_bias)
    A = rng.standard_normal(lead + (K,)).astype(dtype)
    kw = dict(K=K, N=N, bits=bits, block_size=bs)
    y = ref.matmul_nbits_ref(A, B, s, zp, g, b, **kw)
    assert y.dtype == np.float64 and y.shape == lead + (N,)
    y_naive = ref.naive_matmul_nbits(A, B, s, zp, g, b, **kw)
    assert y_naive.shape == y.shape
    np.testing.assert_allclose(y, y_naive, rtol=1e-12, atol=1e-12)
    # the oracle's weights vs formats' host dequantization (float32 compute, rounded once)
    w = ref.dequantize_ref(B, s, zp, g, **kw)
    w_host = fm.dequantize_host(B, s, zp, g, **kw)
    assert w_host.dtype == np.dtype(dtype)
    assert np.array_equal(w_host, w.astype(np.float32).astype(dtype))


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_dequantize_ref_formula(bits):
    rng = np.random.default_rng(bits)
    N, K, bs = 4, 50, 16
    q, B, s, zp, g, _ = _problem(rng, N=N, K=K, bits=bits, bs=bs, zp_kind="packed", g_idx=True)
    zpi = fm.unpack_zero_points(zp, 4, bits).astype(np.float64)
    gk = g[:K]
    expected = (q - zpi[:, gk]) * s.astype(np.float64)[:, gk]
    w = ref.dequantize_ref(B, s.reshape(-1), zp, g[:K], K=K, N=N, bits=bits, block_size=bs)
    assert np.array_equal(w, expected)
    # no g_idx: natural blocks, default zero point
    w0 = ref.dequantize_ref(B, s, None, K=K, N=N, bits=bits, block_size=bs)
    gb = np.arange(K) // bs
    assert np.array_equal(w0, (q - (1 << (bits - 1))) * s.astype(np.float64)[:, gb])


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_one_hot_rows_reproduce_weights(bits, dtype):
    rng = np.random.default_rng(7 + bits)
    N, K, bs = 9, 93, 32
    W = rng.standard_normal((N, K)).astype(dtype)
    B, s, zp = fm.quantize(W, bits, bs, symmetric=(bits != 8))
    w = ref.dequantize_ref(B, s, zp, K=K, N=N, bits=bits, block_size=bs)
    A = np.eye(K, dtype=dtype)
    y = ref.matmul_nbits_ref(A, B, s, zp, K=K, N=N, bits=bits, block_size=bs)
    assert np.array_equal(y, w.T)
    # and the quantizer is within one step of W
    step = np.repeat(np.abs(s.astype(np.float64)), bs, axis=1)[:, :K]
    assert np.all(np.abs(w - W.astype(np.float64)) <= step * 1.0001)


def test_rank_and_shape_errors():
    rng = np.random.default_rng(0)
    _, B, s, _, _, _ = _problem(rng, N=2, K=20, bits=4, bs=16, zp_kind="none")
    kw = dict(K=20, N=2, bits=4, block_size=16)
    with pytest.raises(ValueError, match="A must have rank >= 2"):
        ref.matmul_nbits_ref(np.zeros(20, np.float32), B, s, **kw)
    with pytest.raises(ValueError, match="A's last dim must equal K=20"):
        ref.matmul_nbits_ref(np.zeros((1, 21), np.float32), B, s, **kw)
    with pytest.raises(ValueError, match=r"bias must have shape \(2,\)"):
        ref.matmul_nbits_ref(np.zeros((1, 20), np.float32), B, s, bias=np.zeros(3), **kw)
    with pytest.raises(ValueError, match="B must have shape"):
        ref.dequantize_ref(B, s, K=40, N=2, bits=4, block_size=16)
    with pytest.raises(ValueError, match="scales must have shape"):
        ref.dequantize_ref(B, s[:, :1], **kw)
    with pytest.raises(ValueError, match="g_idx values must be in"):
        ref.dequantize_ref(B, s, g_idx=np.full(20, 5, np.int32), **kw)
    with pytest.raises(ValueError, match="bits should be 2, 4 or 8"):
        ref.dequantize_ref(B, s, K=20, N=2, bits=3, block_size=16)
    with pytest.raises(ValueError, match="block_size must be a power of 2"):
        ref.dequantize_ref(B, s, K=20, N=2, bits=4, block_size=48)


def test_relative_error():
    e = np.array([3.0, 4.0])
    assert ref.relative_error(e, e) == 0.0
    assert ref.relative_error(np.array([3.0, 4.5]), e) == pytest.approx(0.1)
    assert ref.relative_error(np.zeros(2), np.zeros(2)) == 0.0
    assert np.isnan(ref.relative_error(np.array([np.nan, 4.0]), e))
    assert ref.relative_error(np.array([np.nan, 4.0]), np.array([np.nan, 4.0])) == 0.0
    assert ref.relative_error(e.astype(ml_dtypes.bfloat16), e) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        ref.relative_error(e, e[:1])
    assert set(ref.TOLERANCES) == {"float32", "float16", "bfloat16"}
    assert ref.TOLERANCES["float32"] < ref.TOLERANCES["float16"] < ref.TOLERANCES["bfloat16"]


def test_tolerances_hold_for_dtype_rounded_reference():
    """A result computed in fp32 and rounded once to T sits inside TOLERANCES[T]."""
    rng = np.random.default_rng(1)
    N, K, bs = 64, 512, 32
    W = rng.standard_normal((N, K)).astype(np.float32)
    for name, dt in (("float32", np.float32), ("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        B, s, zp = fm.quantize(W.astype(dt), 4, bs, symmetric=True)
        A = rng.standard_normal((8, K)).astype(dt)
        y = ref.matmul_nbits_ref(A, B, s, zp, K=K, N=N, bits=4, block_size=bs)
        w32 = fm.dequantize_host(B, s, zp, K=K, N=N, bits=4, block_size=bs, dtype=np.float32)
        y32 = (A.astype(np.float32) @ w32.T).astype(dt)
        assert ref.relative_error(y32, y) < ref.TOLERANCES[name]


def test_modules_do_not_import_numba():
    import sys

    assert "numba_nbits.formats" in sys.modules and "numba_nbits.reference" in sys.modules
    for mod in (fm, ref):
        src = open(mod.__file__).read()
        assert "import numba" not in src and "from numba" not in src and "os.environ" not in src


def test_rounding_scale_is_the_root_sum_square_of_the_terms():
    rng = np.random.default_rng(5)
    N, K, bits, bs = 3, 40, 8, 32
    _, B, s, zp, g, b = _problem(rng, N=N, K=K, bits=bits, bs=bs, zp_kind="typed", g_idx=True, bias=True)
    A = rng.standard_normal((2, 2, K)).astype(np.float32)
    sc = ref.rounding_scale(A, B, s, zp, g, b, K=K, N=N, bits=bits, block_size=bs)
    w = ref.dequantize_ref(B, s, zp, g, K=K, N=N, bits=bits, block_size=bs)
    assert sc.shape == (2, 2, N)
    for i in range(2):
        for j in range(2):
            for n in range(N):
                terms = [float(A[i, j, k]) * w[n, k] for k in range(K)] + [float(b[n])]
                assert sc[i, j, n] == pytest.approx(np.sqrt(sum(t * t for t in terms)), rel=1e-12)
    with pytest.raises(ValueError, match="scale must have the shape"):
        ref.relative_error(sc, sc, scale=sc[..., :1])
    # the fuzz's one-dequantization form returns exactly the two separate results
    y2, sc2 = ref.matmul_nbits_ref(A, B, s, zp, g, b, K=K, N=N, bits=bits, block_size=bs, return_scale=True)
    np.testing.assert_array_equal(y2, ref.matmul_nbits_ref(A, B, s, zp, g, b, K=K, N=N, bits=bits, block_size=bs))
    np.testing.assert_array_equal(sc2, sc)


@pytest.mark.parametrize("name, dt", [("float32", np.float32), ("float16", np.float16)])
def test_relative_error_scale_judges_a_cancelling_output_by_its_terms(name, dt):
    """A T-rounded-weight result of a badly cancelling single output fails the plain relative error
    (its rounding errors are the products' size, not the sum's) and passes with ``rounding_scale``;
    a wrong result (the zero point off by one) still fails with the scale. (A single wrong code in a
    single cancelling fp16 output can be as small as fp16's own rounding of the 40 weights: no
    measure can tell those apart; with many outputs ``||Y||`` dominates the denominator again.)"""
    rng = np.random.default_rng(7)
    K, N, bits, bs = 40, 1, 8, 128
    for _ in range(2000):  # search a cancelling instance: |y| < |terms|_2 / 200
        B = rng.integers(0, 256, (N, 1, bs), dtype=np.uint8)
        s = rng.uniform(0.5, 2.0, (N, 1)).astype(dt) / dt(128)
        zp = (rng.integers(0, 256, (N, 1)) + rng.choice([0.0, 0.5], (N, 1))).astype(dt)
        b = np.array([rng.standard_normal() * 0.2], dt)
        A = rng.standard_normal((1, K)).astype(dt)
        y = ref.matmul_nbits_ref(A, B, s, zp, None, b, K=K, N=N, bits=bits, block_size=bs)
        sc = ref.rounding_scale(A, B, s, zp, None, b, K=K, N=N, bits=bits, block_size=bs)
        if abs(y[0, 0]) * 200 < sc[0, 0]:
            break
    else:
        pytest.fail("no cancelling instance found")
    w = ref.dequantize_ref(B, s, zp, None, K=K, N=N, bits=bits, block_size=bs)
    # what a kernel computes: weights rounded to T (here with a relative perturbation of u_T, the worst
    # case of that rounding), products summed in fp32, bias added, rounded to T once
    u = float(np.finfo(dt).eps) / 2
    wt = (w * (1 + u * np.sign(A.astype(np.float64)))).astype(np.float32)
    yk = (A.astype(np.float32) @ wt.T + b.astype(np.float32)).astype(dt)
    assert ref.relative_error(yk, y) > ref.TOLERANCES[name]  # the plain measure calls this wrong
    assert ref.relative_error(yk, y, scale=sc) < ref.TOLERANCES[name]
    # a decode bug (the block's zero point read one too high) is still caught
    bad = y - float(A.astype(np.float64).sum()) * float(s[0, 0])
    assert ref.relative_error(bad, y, scale=sc) > ref.TOLERANCES[name]
