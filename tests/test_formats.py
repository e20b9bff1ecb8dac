"""Exact tests of numba_nbits.formats (CPU only, no numba)."""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numba_nbits import formats as fm

BITS = (2, 4, 8)
BLOCKS = (16, 32, 64, 128)


@st.composite
def code_cases(draw):
    bits = draw(st.sampled_from(BITS))
    bs = draw(st.sampled_from(BLOCKS))
    N = draw(st.integers(1, 7))
    K = draw(st.integers(1, 3 * bs + 5))
    seed = draw(st.integers(0, 2**32 - 1))
    q = np.random.default_rng(seed).integers(0, 1 << bits, (N, K), dtype=np.uint8)
    return bits, bs, q


# ---------------------------------------------------------------- sizes / format table


def test_sizes():
    assert fm.k_blocks(52, 32) == 2 and fm.k_blocks(64, 32) == 2 and fm.k_blocks(0, 16) == 0
    assert fm.blob_size(32, 4) == 16 and fm.blob_size(16, 2) == 4 and fm.blob_size(128, 8) == 128
    assert fm.zp_blob_size(3, 4) == 2 and fm.zp_blob_size(5, 2) == 2 and fm.zp_blob_size(3, 8) == 3
    assert [fm.default_zero_point(b) for b in BITS] == [2, 8, 128]


def test_quant_format():
    f = fm.quant_format(4)
    assert (f.default_zero_point, f.codes_per_byte, f.codes_per_word, f.max_code) == (8, 2, 8, 15)
    assert f.pair_mask == 0x000F000F and fm.quant_format(2).pair_mask == 0x00030003
    assert sorted(fm.FORMATS) == list(BITS) and all(fm.FORMATS[b].bits == b for b in BITS)
    with pytest.raises(Exception):
        f.bits = 8  # frozen
    with pytest.raises(ValueError, match="bits should be 2, 4 or 8, got 3"):
        fm.quant_format(3)


# ---------------------------------------------------------------- hand-written bytes


def test_known_bytes_4bit():
    B = fm.pack_codes(np.array([[1, 2, 3, 4]]), 4, 16)
    assert B.shape == (1, 1, 8)
    assert B[0, 0, :2].tolist() == [0x21, 0x43]
    assert B[0, 0, 2:].tolist() == [0x88] * 6  # padded with the default zero point 8


def test_known_bytes_2bit_and_8bit():
    B = fm.pack_codes(np.array([[1, 2, 3, 0, 3]]), 2, 16, pad_code=0)
    assert B[0, 0].tolist() == [0b00111001, 0b00000011, 0, 0]
    B8 = fm.pack_codes(np.array([[7, 255, 0]]), 8, 16)
    assert B8[0, 0, :4].tolist() == [7, 255, 0, 128]


def test_known_zero_point_bytes():
    assert fm.pack_zero_points(np.array([[1, 2, 3]]), 4).tolist() == [[0x21, 0x03]]
    assert fm.pack_zero_points(np.array([[1, 2, 3]]), 4, pad_code=8).tolist() == [[0x21, 0x83]]
    assert fm.pack_zero_points(np.array([[1, 2, 3, 0, 2]]), 2).tolist() == [[0b00111001, 0b10]]
    assert fm.pack_zero_points(np.array([[9, 200]]), 8).tolist() == [[9, 200]]


# ---------------------------------------------------------------- round trips


@settings(max_examples=150, deadline=None)
@given(code_cases())
def test_pack_unpack_codes_identity(case):
    bits, bs, q = case
    N, K = q.shape
    B = fm.pack_codes(q, bits, bs)
    kb = fm.k_blocks(K, bs)
    assert B.dtype == np.uint8 and B.shape == (N, kb, fm.blob_size(bs, bits))
    assert np.array_equal(fm.unpack_codes(B, K, bits, bs), q)
    full = fm.unpack_codes(B, None, bits, bs)
    assert full.shape == (N, kb * bs)
    assert np.all(full[:, K:] == fm.default_zero_point(bits))
    # repacking the padded codes reproduces the bytes
    assert np.array_equal(fm.pack_codes(full, bits, bs), B)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(BITS), st.integers(1, 6), st.integers(0, 23), st.integers(0, 2**32 - 1))
def test_pack_unpack_zero_points_identity(bits, N, kb, seed):
    zp = np.random.default_rng(seed).integers(0, 1 << bits, (N, kb), dtype=np.uint8)
    packed = fm.pack_zero_points(zp, bits)
    zb = fm.zp_blob_size(kb, bits)
    assert packed.shape == (N, zb) and packed.dtype == np.uint8
    assert np.array_equal(fm.unpack_zero_points(packed, kb, bits), zp)
    # legacy flat form, with N given and inferred
    assert np.array_equal(fm.unpack_zero_points(packed.reshape(-1), kb, bits, N=N), zp)
    if zb:
        assert np.array_equal(fm.unpack_zero_points(packed.reshape(-1), kb, bits), zp)
    # row padding bits are zero
    used = kb * bits
    if used % 8:
        assert np.all(packed[:, -1] >> (used % 8) == 0)
    assert np.array_equal(fm.zero_points_as_float(packed, N, kb, bits), zp.astype(np.float64))


def test_zero_points_as_float_forms():
    assert np.array_equal(fm.zero_points_as_float(None, 2, 3, 4), np.full((2, 3), 8.0))
    typed = np.array([1.5, 2, 3, 4, 5, 6], dtype=np.float16)
    out = fm.zero_points_as_float(typed, 2, 3, 2)
    assert out.dtype == np.float64 and out.shape == (2, 3) and out[0, 0] == 1.5
    bf = typed.astype(ml_dtypes.bfloat16).reshape(2, 3)
    assert np.array_equal(fm.zero_points_as_float(bf, 2, 3, 4), typed.astype(np.float64).reshape(2, 3))


# ---------------------------------------------------------------- quantize == onnxruntime


def _ort_quantize(W, bits, block_size, symmetric):
    """Call ORT exactly like matmul_nbits_quantizer.DefaultWeightOnlyQuantizer.qbits_block_quant."""
    pb = pytest.importorskip("onnxruntime.capi._pybind_state")
    fn = {2: pb.quantize_matmul_2bits, 4: pb.quantize_matmul_4bits, 8: pb.quantize_matmul_8bits}[bits]
    w_kn = np.ascontiguousarray(W.T)  # MatMul weight [K, N]
    K, N = w_kn.shape
    kb = (K + block_size - 1) // block_size
    w_kn = np.pad(w_kn, ((0, kb * block_size - K), (0, 0)))
    kpack = 8 // bits
    packed = np.zeros((N, kb, block_size * bits // 8), np.uint8)
    zp = np.zeros((N, (kb + kpack - 1) // kpack), np.uint8)
    scales = np.zeros((N, kb), W.dtype)
    fn(packed, w_kn, scales, zp, block_size, N, K, symmetric)  # K unpadded, as ORT passes it
    return packed, scales, (None if symmetric else zp)


def _weights(rng, kind, N, K, dtype):
    if kind == "normal":
        W = rng.standard_normal((N, K))
    elif kind == "lattice":  # many exact .5 ties after scaling
        W = rng.integers(-16, 16, (N, K)) * 0.125
    elif kind == "positive_with_zero_block":
        W = rng.uniform(0.0, 3.0, (N, K))
        W[:, :16] = 0.0
    else:  # wide dynamic range
        W = rng.standard_normal((N, K)) * 10.0 ** rng.integers(-4, 4, (N, 1))
    return W.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize(
    "N,K,block_size",
    [(1, 16, 16), (3, 5, 16), (7, 52, 32), (33, 93, 32), (17, 93, 128), (9, 1234, 16), (5, 1234, 128),
     (4, 300, 64), (2, 21, 16), (2, 33, 16), (3, 35, 16)],
)
@pytest.mark.parametrize("kind", ["normal", "lattice", "positive_with_zero_block", "wide"])
def test_quantize_matches_onnxruntime(N, K, block_size, bits, symmetric, dtype, kind):
    rng = np.random.default_rng(zlib.crc32(repr((N, K, block_size, bits, kind)).encode()))
    W = _weights(rng, kind, N, K, dtype)
    B, s, zp = fm.quantize(W, bits, block_size, symmetric)
    rB, rs, rzp = _ort_quantize(W, bits, block_size, symmetric)
    assert B.dtype == np.uint8 and np.array_equal(B, rB)
    assert s.dtype == W.dtype and np.array_equal(s.view(np.uint8), rs.view(np.uint8))
    if symmetric:
        assert zp is None
    else:
        assert zp.dtype == np.uint8 and np.array_equal(zp, rzp)


def test_quantize_pad_code_and_roundtrip_error():
    rng = np.random.default_rng(5)
    W = rng.standard_normal((6, 45)).astype(np.float32)
    for bits in BITS:
        for sym in (True, False):
            B, s, zp = fm.quantize(W, bits, 16, sym, pad_code=fm.default_zero_point(bits))
            B_ort, _, _ = fm.quantize(W, bits, 16, sym)
            codes = fm.unpack_codes(B, None, bits, 16)
            assert np.all(codes[:, 45:] == fm.default_zero_point(bits))
            assert np.array_equal(codes[:, :45], fm.unpack_codes(B_ort, 45, bits, 16))
            Wd = fm.dequantize_host(B, s, zp, K=45, N=6, bits=bits, block_size=16)
            step = np.repeat(np.abs(s), 16, axis=1)[:, :45]
            # half a step, except where the clamp to [0, 2^bits-1] bites (zp rounding or the
            # shorter positive side of symmetric codes): at most one full step
            err = np.abs(Wd - W)
            assert np.all(err <= step * 1.0001)
            assert np.mean(err <= step * 0.5001) > 0.8


def test_quantize_symmetric_scale_sign_and_exact_lattice():
    W = np.zeros((1, 16), np.float32)
    W[0, 3] = -4.0
    W[0, 5] = 2.0
    B, s, zp = fm.quantize(W, 4, 16, True)
    assert zp is None and s[0, 0] == np.float32(0.5)  # -(-4)/8
    W[0, 3] = 4.0
    _, s, _ = fm.quantize(W, 4, 16, True)
    assert s[0, 0] == np.float32(-0.5)
    # values on the lattice survive exactly
    Wd = fm.dequantize_host(*fm.quantize(W, 4, 16, True), K=16, N=1, bits=4, block_size=16)
    assert np.array_equal(Wd, W)


def test_quantize_bfloat16():
    rng = np.random.default_rng(11)
    W32 = rng.standard_normal((5, 70)).astype(np.float32)
    W = W32.astype(ml_dtypes.bfloat16)
    B, s, zp = fm.quantize(W, 4, 32, False)
    assert s.dtype == W.dtype and zp.shape == (5, 2)
    Wd = fm.dequantize_host(B, s, zp, K=70, N=5, bits=4, block_size=32)
    assert Wd.dtype == W.dtype
    err = np.abs(Wd.astype(np.float32) - W.astype(np.float32))
    assert np.all(err <= np.repeat(s.astype(np.float32), 32, axis=1)[:, :70] * 0.51 + 0.02)


# ---------------------------------------------------------------- dequantize_host


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_dequantize_host_dtype_and_flat_inputs(dtype):
    rng = np.random.default_rng(3)
    N, K, bs, bits = 3, 40, 16, 4
    q = rng.integers(0, 16, (N, K))
    B = fm.pack_codes(q, bits, bs)
    s = rng.uniform(-1, 1, (N, 3)).astype(dtype)
    zpc = rng.integers(0, 16, (N, 3))
    zp = fm.pack_zero_points(zpc, bits)
    out = fm.dequantize_host(B, s, zp, K=K, N=N, bits=bits, block_size=bs)
    assert out.dtype == np.dtype(dtype) and out.shape == (N, K)
    exp = ((q - np.repeat(zpc, bs, axis=1)[:, :K]) * np.repeat(s.astype(np.float32), bs, axis=1)[:, :K])
    assert np.array_equal(out, exp.astype(np.float32).astype(dtype))
    flat = fm.dequantize_host(B, s.reshape(-1), zp.reshape(-1), K=K, N=N, bits=bits, block_size=bs)
    assert np.array_equal(flat, out)
    as32 = fm.dequantize_host(B, s, zp, K=K, N=N, bits=bits, block_size=bs, dtype=np.float32)
    assert as32.dtype == np.float32


# ---------------------------------------------------------------- validation errors


def test_validation_errors():
    q = np.zeros((2, 20), np.uint8)
    with pytest.raises(ValueError, match="bits should be 2, 4 or 8, got 3"):
        fm.pack_codes(q, 3, 16)
    with pytest.raises(TypeError, match="bits must be an int"):
        fm.blob_size(16, 4.0)
    with pytest.raises(ValueError, match=r"block_size must be a power of 2, and >= 16. Got 24"):
        fm.pack_codes(q, 4, 24)
    with pytest.raises(ValueError, match=r"block_size must be a power of 2, and >= 16. Got 8"):
        fm.k_blocks(16, 8)
    with pytest.raises(ValueError, match="K must be >= 0, got -1"):
        fm.k_blocks(-1, 16)
    with pytest.raises(ValueError, match=r"q values must be in \[0, 15\] for bits=4"):
        fm.pack_codes(np.full((1, 4), 16), 4, 16)
    with pytest.raises(TypeError, match="q must be an integer array"):
        fm.pack_codes(np.zeros((1, 4), np.float32), 4, 16)
    with pytest.raises(ValueError, match="q must be 2-D"):
        fm.pack_codes(np.zeros(4, np.uint8), 4, 16)
    with pytest.raises(ValueError, match=r"pad_code must be in \[0, 3\] for bits=2, got 4"):
        fm.pack_codes(q, 2, 16, pad_code=4)
    B = fm.pack_codes(q, 4, 16)
    with pytest.raises(TypeError, match="B must be uint8"):
        fm.unpack_codes(B.astype(np.int8), 20, 4, 16)
    with pytest.raises(ValueError, match="B must be 3-D"):
        fm.unpack_codes(B.reshape(2, -1), 20, 4, 16)
    with pytest.raises(ValueError, match=r"B's last dim must be blob_size = block_size\*bits/8 = 16"):
        fm.unpack_codes(B, 20, 8, 16)
    with pytest.raises(ValueError, match=r"B must have k_blocks = ceil\(K/block_size\) = 3"):
        fm.unpack_codes(B, 40, 4, 16)
    with pytest.raises(TypeError, match="zero_points must be uint8 to be unpacked"):
        fm.unpack_zero_points(np.zeros((2, 1), np.int32), 2, 4)
    with pytest.raises(ValueError, match=r"zero_points must have shape \(N, 1\)"):
        fm.unpack_zero_points(np.zeros((2, 2), np.uint8), 2, 4)
    with pytest.raises(ValueError, match=r"flat zero_points must have N\*zp_blob = 3\*1 = 3 elements, got 2"):
        fm.unpack_zero_points(np.zeros(2, np.uint8), 2, 4, N=3)
    with pytest.raises(ValueError, match="not a multiple of zp_blob"):
        fm.unpack_zero_points(np.zeros(3, np.uint8), 3, 4)
    with pytest.raises(ValueError, match="zero_points must be 1-D or 2-D"):
        fm.unpack_zero_points(np.zeros((1, 1, 1), np.uint8), 2, 4)
    with pytest.raises(TypeError, match="zero_points must be uint8 .packed. or float32/float16/bfloat16"):
        fm.zero_points_as_float(np.zeros((2, 2), np.int32), 2, 2, 4)
    with pytest.raises(ValueError, match=r"typed zero_points must have shape \(2, 2\) or \(4,\)"):
        fm.zero_points_as_float(np.zeros((2, 3), np.float32), 2, 2, 4)
    with pytest.raises(TypeError, match="W must be float32, float16 or bfloat16"):
        fm.quantize(np.zeros((2, 16), np.float64))
    with pytest.raises(ValueError, match="W must be 2-D"):
        fm.quantize(np.zeros(16, np.float32))
    with pytest.raises(TypeError, match="symmetric must be a bool"):
        fm.quantize(np.zeros((2, 16), np.float32), symmetric=1)
    s = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="scales must be float32, float16 or bfloat16"):
        fm.dequantize_host(B, s.astype(np.float64), K=20, N=2, bits=4, block_size=16)
    with pytest.raises(ValueError, match=r"scales must have shape \(2, 2\) or \(4,\)"):
        fm.dequantize_host(B, np.ones((2, 3), np.float32), K=20, N=2, bits=4, block_size=16)
    with pytest.raises(ValueError, match="B must have N=3 rows"):
        fm.dequantize_host(B, np.ones((3, 2), np.float32), K=20, N=3, bits=4, block_size=16)
    with pytest.raises(ValueError, match=r"g_idx must be 1-D with K=20 or k_blocks\*block_size=32 entries"):
        fm.dequantize_host(B, s, g_idx=np.zeros(7, np.int32), K=20, N=2, bits=4, block_size=16)
    with pytest.raises(TypeError, match="g_idx must be an integer"):
        fm.dequantize_host(B, s, g_idx=np.zeros(20, np.float32), K=20, N=2, bits=4, block_size=16)
    with pytest.raises(ValueError, match=r"group_index value at index 0 is 99999, which is out of valid range \[0, 2\)"):
        fm.dequantize_host(B, s, g_idx=np.full(32, 99999, np.int32), K=20, N=2, bits=4, block_size=16)
    with pytest.raises(ValueError, match=r"group_index value at index 0 is -1"):
        fm.dequantize_host(B, s, g_idx=np.full(20, -1, np.int32), K=20, N=2, bits=4, block_size=16)
    with pytest.raises(TypeError, match="expected a float32, float16 or bfloat16 dtype"):
        fm.dequantize_host(B, s, K=20, N=2, bits=4, block_size=16, dtype=np.int32)
