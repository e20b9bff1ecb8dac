"""Tensor-core intrinsics (kernels/intrinsics.py): mma.sync m16n8k16 f16/bf16 and the packing helpers.

The same tests run on the simulator (the pure-Python twins) and on a GPU (the inline PTX), so on a
GPU they assert twin == hardware: the expected values come from ``mma_reference``, the host model
the twin itself uses, and from NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from numba_nbits.arrays import to_device, to_host
from numba_nbits.kernels import intrinsics as K
from numba_nbits.launch import Kernel, simulated

BF16 = (False, True)


def _make_mma_kernel(use_bf16: bool):
    mma = K.mma_bf16 if use_bf16 else K.mma_f16

    def mma_one_warp(af, bf, c, d):
        lane = cuda.threadIdx.x
        r = mma(af[lane, 0], af[lane, 1], af[lane, 2], af[lane, 3], bf[lane, 0], bf[lane, 1],
                c[lane, 0], c[lane, 1], c[lane, 2], c[lane, 3])
        d[lane, 0] = r[0]
        d[lane, 1] = r[1]
        d[lane, 2] = r[2]
        d[lane, 3] = r[3]

    from numba.cuda import types

    u2 = types.Array(types.uint32, 2, "C")
    f2 = types.Array(types.float32, 2, "C")
    return Kernel(mma_one_warp, (u2, u2, f2, f2), name=f"mma_one_warp_{'bf16' if use_bf16 else 'f16'}")


_KERNELS = {}


def _run_mma(afrag, bfrag, c, use_bf16):
    k = _KERNELS.get(use_bf16)
    if k is None:
        k = _KERNELS[use_bf16] = _make_mma_kernel(use_bf16)
    sim = simulated()
    d_a, d_b, d_c = to_device(afrag, sim), to_device(bfrag, sim), to_device(c, sim)
    d_d = to_device(np.full((32, 4), np.nan, np.float32), sim)
    k.bind(1, 32, (d_a, d_b, d_c, d_d)).launch(0)
    return to_host(d_d)


def _round(x, use_bf16):
    if use_bf16:
        import ml_dtypes

        return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("use_bf16", BF16, ids=["f16", "bf16"])
def test_fragment_helpers_round_trip(rng, use_bf16):
    A = _round(rng.standard_normal((16, 16)), use_bf16)
    B = _round(rng.standard_normal((16, 8)), use_bf16)
    a, b = K.matrices_to_mma_fragments(A, B, use_bf16)
    A2, B2 = K.mma_fragments_to_matrices(a, b, use_bf16)
    np.testing.assert_array_equal(A2, A)
    np.testing.assert_array_equal(B2, B)
    # spot-check the PTX fragment layout by hand: lane 5 -> g = 1, t = 1
    lo = a[5, 2] & 0xFFFF
    ref = np.float16(A[1, 2 * 1 + 8]).view(np.uint16) if not use_bf16 else None
    if ref is not None:
        assert lo == ref


@pytest.mark.parametrize("use_bf16", BF16, ids=["f16", "bf16"])
@pytest.mark.parametrize("with_c", [False, True], ids=["c0", "c"])
def test_mma_matches_numpy(rng, use_bf16, with_c):
    A = _round(rng.standard_normal((16, 16)) * 2.0, use_bf16)
    B = _round(rng.standard_normal((16, 8)), use_bf16)
    a, b = K.matrices_to_mma_fragments(A, B, use_bf16)
    c = (rng.standard_normal((32, 4)).astype(np.float32) if with_c else np.zeros((32, 4), np.float32))
    d = _run_mma(a, b, c, use_bf16)
    # reassemble D (16 x 8) from the fragments and compare with a float64 reference
    g, t = np.arange(32) >> 2, np.arange(32) & 3
    D = np.zeros((16, 8))
    D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1] = d[:, 0], d[:, 1], d[:, 2], d[:, 3]
    C = np.zeros((16, 8))
    C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1] = c[:, 0], c[:, 1], c[:, 2], c[:, 3]
    ref = A @ B + C
    scale = np.abs(A) @ np.abs(B) + np.abs(C)
    assert np.all(np.abs(D - ref) <= 1e-6 * scale + 1e-30), np.max(np.abs(D - ref) / (scale + 1e-30))
    # and the host model the twin uses: same fragment layout, and equal to the hardware within fp32
    # rounding of the sum (the H200 rounds its fp32 accumulation differently from the twin's single
    # rounding: 1-ulp differences of the partial sums were measured, hence the |A||B|+|C| scale)
    model = K.mma_reference(a, b, c, use_bf16)
    Dm = np.zeros((16, 8))
    Dm[g, 2 * t], Dm[g, 2 * t + 1], Dm[g + 8, 2 * t], Dm[g + 8, 2 * t + 1] = model[:, 0], model[:, 1], model[:, 2], \
        model[:, 3]
    assert np.all(np.abs(D - Dm) <= 2 ** -22 * scale + 1e-30), np.max(np.abs(D - Dm) / (scale + 1e-30))


@pytest.mark.parametrize("use_bf16", BF16, ids=["f16", "bf16"])
def test_mma_random_fragments_integers_exact(rng, use_bf16):
    """Random raw fragment registers holding small integers: every sum is exact, so hardware,
    twin and NumPy agree bit for bit."""
    A = rng.integers(-15, 16, (16, 16)).astype(np.float64)
    B = rng.integers(-64, 65, (16, 8)).astype(np.float64)
    a, b = K.matrices_to_mma_fragments(A, B, use_bf16)
    c = rng.integers(-1000, 1000, (32, 4)).astype(np.float32)
    d = _run_mma(a, b, c, use_bf16)
    np.testing.assert_array_equal(d, K.mma_reference(a, b, c, use_bf16))


@pytest.mark.parametrize("use_bf16", BF16, ids=["f16", "bf16"])
def test_mma_8bit_integer_fragments_exact(rng, use_bf16):
    """The 8-bit mixed GEMM's weight fragments: integers q - zp in [-255, 255] (exact in fp16 and
    bf16) times small integer activations; every sum fits fp32 exactly, so twin == hardware == NumPy."""
    A = rng.integers(-255, 256, (16, 16)).astype(np.float64)
    A[0, :] = 255
    A[1, :] = -255
    B = rng.integers(-64, 65, (16, 8)).astype(np.float64)
    a, b = K.matrices_to_mma_fragments(A, B, use_bf16)
    c = rng.integers(-1000, 1000, (32, 4)).astype(np.float32)
    d = _run_mma(a, b, c, use_bf16)
    np.testing.assert_array_equal(d, K.mma_reference(a, b, c, use_bf16))
    A2, B2 = K.mma_fragments_to_matrices(a, b, use_bf16)
    np.testing.assert_array_equal(A2, A)  # the integers survived the fp16/bf16 encoding


@pytest.mark.parametrize("use_bf16", BF16, ids=["f16", "bf16"])
def test_mma_random_register_bits(rng, use_bf16):
    """Fully random finite fp16/bf16 bit patterns in every register (twin == hardware)."""
    def finite_bits(shape):
        vals = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, shape))
        return _round(vals, use_bf16)

    a, b = K.matrices_to_mma_fragments(finite_bits((16, 16)), finite_bits((16, 8)), use_bf16)
    c = (rng.standard_normal((32, 4)) * 4).astype(np.float32)
    d = _run_mma(a, b, c, use_bf16)
    A, B = K.mma_fragments_to_matrices(a, b, use_bf16)
    g, t = np.arange(32) >> 2, np.arange(32) & 3
    absd = np.abs(A) @ np.abs(B)
    bound = np.stack([absd[g, 2 * t], absd[g, 2 * t + 1], absd[g + 8, 2 * t], absd[g + 8, 2 * t + 1]], 1)
    bound = 1e-6 * (bound + np.abs(c))
    model = K.mma_reference(a, b, c, use_bf16)
    assert np.all(np.abs(d.astype(np.float64) - model) <= bound + 1e-30)


def _make_pack_kernel():
    def pack_kernel(x, out16, outbf, h16, fa, fb, fc, ff16, ffbf):
        i = cuda.threadIdx.x
        n = out16.shape[0]
        out16[i] = K.pack_f16x2(x[2 * i], x[2 * i + 1])
        outbf[i] = K.pack_bf16x2(x[2 * i], x[2 * i + 1])
        h16[i] = K.f32_to_f16(x[2 * i])
        ff16[i] = K.fma_f16x2(fa[i], fb[i], fc[i])
        ffbf[i] = K.fma_bf16x2(fa[n + i], fb[n + i], fc[n + i])

    from numba.cuda import types

    f1 = types.Array(types.float32, 1, "C")
    u1 = types.Array(types.uint32, 1, "C")
    h1 = types.Array(types.uint16, 1, "C")
    return Kernel(pack_kernel, (f1, u1, u1, h1, u1, u1, u1, u1, u1))


def _make_conv8_kernel():
    """The 8-bit code conversions of kernels/mixed_gemm/source.py, on whole words of 4 codes."""
    def conv8(w, zpw, f16, bf16):
        i = cuda.grid(1)
        if i >= w.shape[0]:
            return
        x = w[i]
        z = zpw[i]
        for r in range(2):
            sh = np.uint32(8 * r)
            zr = (z >> sh) & np.uint32(0xFF)
            # fp16: (0x6400 | q) * 1 - (1024 + zp), both halves at once
            f16[2 * i + r] = K.fma_f16x2(((x >> sh) & np.uint32(0x00FF00FF)) | np.uint32(0x64006400),
                                         np.uint32(0x3C003C00), (np.uint32(0xE400) | zr) * np.uint32(65537))
            # bf16: fp32 (2^23 + q) - (2^23 + zp), packed to bf16x2
            zf = K.u32_as_f32(np.uint32(0x4B000000) | zr)
            bf16[2 * i + r] = K.pack_bf16x2(
                K.u32_as_f32(((x >> sh) & np.uint32(0xFF)) | np.uint32(0x4B000000)) - zf,
                K.u32_as_f32(((x >> (sh + np.uint32(16))) & np.uint32(0xFF)) | np.uint32(0x4B000000)) - zf)

    from numba.cuda import types

    u1 = types.Array(types.uint32, 1, "C")
    return Kernel(conv8, (u1, u1, u1, u1), name="conv8")


def test_8bit_code_conversions_exact(rng):
    """Every (q, zp) byte pair gives exactly q - zp in fp16 and bf16 (the 8-bit mixed GEMM's trick)."""
    import ml_dtypes

    q = np.arange(256 * 256) % 256  # all pairs: q varies fastest, zp = index // 256
    zp = np.arange(256 * 256) // 256
    sel = rng.permutation(q.size)[:4 * 64]  # 64 threads x 4 codes on the simulator ...
    if not simulated():
        sel = np.arange(q.size)  # ... all 65536 pairs on a GPU
    q, zp = q[sel].reshape(-1, 4), zp[sel].reshape(-1, 4)
    q[0], zp[0] = (0, 255, 255, 0), (255, 0, 255, 0)  # the extremes always
    n = q.shape[0]
    # word layout: bytes (c0, c1, c2, c3); register r holds bytes r and r + 2; both bytes of a register
    # share a zero point (one weight row), so zp byte r serves bytes r and r + 2
    zp[:, 2:] = zp[:, :2]
    w = (q[:, 0] | (q[:, 1] << 8) | (q[:, 2] << 16) | (q[:, 3] << 24)).astype(np.uint32)
    zw = (zp[:, 0] | (zp[:, 1] << 8)).astype(np.uint32)
    sim = simulated()
    args = [to_device(w, sim), to_device(zw, sim), to_device(np.zeros(2 * n, np.uint32), sim),
            to_device(np.zeros(2 * n, np.uint32), sim)]
    _make_conv8_kernel().bind(-(-n // 64), 64, args).launch(0)
    f16, bf = to_host(args[2]).reshape(n, 2), to_host(args[3]).reshape(n, 2)
    expect = (q - zp).astype(np.int64)
    for r in range(2):
        for half, byte in ((0, r), (1, r + 2)):
            h16 = ((f16[:, r] >> (16 * half)) & 0xFFFF).astype(np.uint16)
            hbf = ((bf[:, r] >> (16 * half)) & 0xFFFF).astype(np.uint16)
            np.testing.assert_array_equal(h16.view(np.float16).astype(np.int64), expect[:, byte])
            np.testing.assert_array_equal(hbf.view(ml_dtypes.bfloat16).astype(np.float64).astype(np.int64),
                                          expect[:, byte])


def test_pack_and_fma_helpers(rng):
    import ml_dtypes

    n = 32
    x = (rng.standard_normal(2 * n) * np.exp2(rng.integers(-10, 10, 2 * n))).astype(np.float32)
    x[:4] = [1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 65504.0, -0.0]  # ties to even, max, signed zero
    # fma operands: 4-bit magic numbers minus (1024 + zp) -> exact q - zp (fp16), and (128 + q) for bf16
    q = rng.integers(0, 16, (n, 2)).astype(np.uint32)
    zp = rng.integers(0, 16, (n, 2)).astype(np.uint32)
    fa = (q[:, 0] | 0x6400) | ((q[:, 1] | 0x6400) << 16)
    fb = np.full(n, 0x3C003C00, np.uint32)  # fp16 1.0, 1.0
    fc = (zp[:, 0] | 0xE400) | ((zp[:, 1] | 0xE400) << 16)  # -(1024 + zp)
    # bf16: (128 + q) * 1.0 - (128 + zp), appended after the fp16 operands
    fa = np.concatenate([fa, (q[:, 0] | 0x4300) | ((q[:, 1] | 0x4300) << 16)])
    fb = np.concatenate([fb, np.full(n, 0x3F803F80, np.uint32)])
    fc = np.concatenate([fc, (zp[:, 0] | 0xC300) | ((zp[:, 1] | 0xC300) << 16)])
    sim = simulated()
    args = [to_device(x, sim)] + [to_device(np.zeros(n, np.uint32), sim) for _ in range(2)]
    args += [to_device(np.zeros(n, np.uint16), sim)]
    args += [to_device(np.ascontiguousarray(v, np.uint32), sim) for v in (fa, fb, fc)]
    args += [to_device(np.zeros(n, np.uint32), sim) for _ in range(2)]
    _make_pack_kernel().bind(1, n, args).launch(0)
    out16, outbf, h16, ff16, ffbf = (to_host(args[i]) for i in (1, 2, 3, 7, 8))
    e16 = x.astype(np.float16).view(np.uint16).astype(np.uint32)
    np.testing.assert_array_equal(out16, e16[0::2] | (e16[1::2] << 16))
    ebf = x.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    np.testing.assert_array_equal(outbf, ebf[0::2] | (ebf[1::2] << 16))
    np.testing.assert_array_equal(h16, e16[0::2].astype(np.uint16))
    lo = (ff16 & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.int64)
    hi = (ff16 >> 16).astype(np.uint16).view(np.float16).astype(np.int64)
    np.testing.assert_array_equal(lo, q[:, 0].astype(np.int64) - zp[:, 0])
    np.testing.assert_array_equal(hi, q[:, 1].astype(np.int64) - zp[:, 1])
    bf = ml_dtypes.bfloat16
    lo = (ffbf & 0xFFFF).astype(np.uint16).view(bf).astype(np.int64)
    hi = (ffbf >> 16).astype(np.uint16).view(bf).astype(np.int64)
    np.testing.assert_array_equal(lo, q[:, 0].astype(np.int64) - zp[:, 0])
    np.testing.assert_array_equal(hi, q[:, 1].astype(np.int64) - zp[:, 1])


def _make_decode_helpers_kernel():
    def decode_helpers(a, b, c, lop, lo, hi):
        i = cuda.grid(1)
        if i < a.shape[0]:
            lop[i] = K.lop3_andor(a[i], b[i], c[i])
            lo[i] = K.f16lo_to_f32(a[i])
            hi[i] = K.f16hi_to_f32(a[i])

    from numba.cuda import types

    u1 = types.Array(types.uint32, 1, "C")
    f1 = types.Array(types.float32, 1, "C")
    return Kernel(decode_helpers, (u1, u1, u1, u1, f1, f1), name="decode_helpers")


def test_lop3_andor_and_f16_halves_exact(rng):
    """``lop3_andor`` is ``(a & b) | c`` bit for bit; ``f16lo_to_f32`` / ``f16hi_to_f32`` give each half's
    fp16 value exactly (subnormals, signed zeros, the largest finite value and infinities included). On a
    GPU every finite and infinite fp16 pattern is checked in both halves."""
    if simulated():
        halves = rng.integers(0, 1 << 16, 126).astype(np.uint32)
    else:
        halves = np.arange(1 << 16, dtype=np.uint32)
    halves = np.concatenate([[0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00], halves])
    halves = halves[(((halves >> 10) & 0x1F) != 0x1F) | ((halves & 0x3FF) == 0)].astype(np.uint32)  # no NaN
    n = halves.size
    a = halves | (halves[rng.permutation(n)] << 16)
    b = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    sim = simulated()
    args = [to_device(v, sim) for v in (a, b, c)] + [to_device(np.zeros(n, np.uint32), sim)]
    args += [to_device(np.full(n, np.nan, np.float32), sim) for _ in range(2)]
    _make_decode_helpers_kernel().bind(-(-n // 128), 128, args).launch(0)
    lop, lo, hi = (to_host(args[i]) for i in (3, 4, 5))
    np.testing.assert_array_equal(lop, (a & b) | c)
    for got, bits in ((lo, a & 0xFFFF), (hi, a >> 16)):
        want = bits.astype(np.uint16).view(np.float16).astype(np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))  # bit-exact, -0.0 included
