"""The operator contract end to end: MatMulNBits / matmul_nbits vs the float64 oracle.

Runs the universal route (dequantize kernel + cuBLAS; NumPy GEMM under the simulator) for every
dtype, bits, zero-point kind, g_idx, bias, rank-3 A and chunking; checks validation errors, M = 0,
poisoned outputs and one-shot vs class results. Shapes are tiny on the simulator and larger on a GPU.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import SIMULATED

import numba_nbits as nb
from numba_nbits.formats import pack_zero_points
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
UNIVERSAL = {"numba_nbits.force_route": "dequant_cublas", "use_tf32": False}

if SIMULATED:
    SHAPES = [(3, 16, 96, 32), (2, 8, 40, 16)]  # (M, N, K, block): K % block != 0 in the second
else:
    SHAPES = [(3, 16, 96, 32), (2, 8, 40, 16), (100, 288, 1234, 16), (32, 1024, 2048, 128), (1, 4096, 4096, 64)]


def make_inputs(rng, M, N, K, block, bits, dtype, zp="none", g_idx=False, bias=False, lead=()):
    dt = DTYPES[dtype]
    W = (rng.standard_normal((N, K)) * 0.5).astype(np.float32)
    B, scales, zpp = nb.quantize(W.astype(dt) if dtype != "bfloat16" else W, bits=bits, block_size=block,
                                 symmetric=(zp == "none"))
    scales = scales.astype(dt)
    kb = scales.shape[1]
    zero_points = None
    if zp == "packed":
        zero_points = zpp
    elif zp == "typed":
        zero_points = (rng.integers(0, 2**bits, (N, kb)) + rng.choice([0.0, 0.5], (N, kb))).astype(dt)
    gi = None
    if g_idx:
        gi = rng.integers(0, kb, size=kb * block).astype(np.int32)
    b = rng.uniform(1, 5, N).astype(dt) if bias else None
    A = (rng.standard_normal(lead + (M, K)) * 0.5).astype(dt)
    return A, B, scales, zero_points, gi, b


def check(Y, A, B, scales, zero_points, gi, b, *, K, N, bits, block, dtype):
    ref = matmul_nbits_ref(A, B, scales, zero_points, gi, b, K=K, N=N, bits=bits, block_size=block)
    assert Y.shape == ref.shape
    assert np.dtype(Y.dtype) == np.dtype(DTYPES[dtype])
    err = relative_error(np.asarray(Y).astype(np.float64) if dtype != "bfloat16" else Y.astype(np.float32), ref)
    assert err <= TOLERANCES[dtype], f"relative error {err:.3g} > {TOLERANCES[dtype]}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("shape", SHAPES)
def test_universal_route(rng, dtype, bits, shape):
    M, N, K, block = shape
    A, B, s, zp, gi, b = make_inputs(rng, M, N, K, block, bits, dtype, zp="packed", bias=True)
    op = nb.MatMulNBits(B, s, zp, gi, b, K=K, N=N, bits=bits, block_size=block, config=UNIVERSAL)
    assert op.route(M) == "dequant_cublas"
    check(op(A), A, B, s, zp, gi, b, K=K, N=N, bits=bits, block=block, dtype=dtype)


@pytest.mark.parametrize("zp", ["none", "packed", "typed"])
@pytest.mark.parametrize("g_idx", [False, True])
@pytest.mark.parametrize("bits", [4, 8])
def test_zero_points_and_g_idx(rng, zp, g_idx, bits):
    M, N, K, block = 2, 8, 48, 16
    A, B, s, zpv, gi, b = make_inputs(rng, M, N, K, block, bits, "float32", zp=zp, g_idx=g_idx)
    op = nb.MatMulNBits(B, s, zpv, gi, b, K=K, N=N, bits=bits, block_size=block, config=UNIVERSAL)
    check(op(A), A, B, s, zpv, gi, b, K=K, N=N, bits=bits, block=block, dtype="float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_chunked_tiny_chunks(rng, dtype):
    M, N, K, block = 2, 24, 96, 32
    A, B, s, zp, gi, b = make_inputs(rng, M, N, K, block, 4, dtype, zp="packed", bias=True)
    cfg = {"numba_nbits.force_route": "dequant_cublas_chunked"}
    env = {"ORT_MATMULNBITS_FORCE_CHUNKED": "1", "ORT_MATMULNBITS_CHUNK_SIZE": "8"}
    op = nb.MatMulNBits(B, s, zp, gi, b, K=K, N=N, bits=4, block_size=block, config=cfg, environ=env)
    assert op.config.chunk_size == 8
    check(op(A), A, B, s, zp, gi, b, K=K, N=N, bits=4, block=block, dtype=dtype)


def test_env_force_chunked_selects_chunked_route(rng):
    A, B, s, zp, gi, b = make_inputs(rng, 2, 16, 64, 32, 4, "float16", zp="typed")
    env = {"ORT_MATMULNBITS_FORCE_CHUNKED": "1", "ORT_MATMULNBITS_CHUNK_SIZE": "4"}
    op = nb.MatMulNBits(B, s, zp, None, None, K=64, N=16, bits=4, block_size=32, environ=env)
    assert op.route(2) == "dequant_cublas_chunked"
    check(op(A), A, B, s, zp, None, None, K=64, N=16, bits=4, block=32, dtype="float16")


def test_rank3_and_empty(rng):
    A, B, s, zp, gi, b = make_inputs(rng, 3, 8, 32, 16, 4, "float32", lead=(2,))
    op = nb.MatMulNBits(B, s, None, None, None, K=32, N=8, bits=4, block_size=16, config=UNIVERSAL)
    Y = op(A)
    assert Y.shape == (2, 3, 8)
    check(Y, A, B, s, None, None, None, K=32, N=8, bits=4, block=16, dtype="float32")
    empty = op(np.zeros((0, 32), np.float32))
    assert empty.shape == (0, 8)


def test_functional_matches_class(rng):
    A, B, s, zp, gi, b = make_inputs(rng, 2, 8, 32, 16, 4, "float16", zp="packed", bias=True)
    y1 = nb.matmul_nbits(A, B, s, zp, None, b, K=32, N=8, bits=4, block_size=16, config=UNIVERSAL)
    y2 = nb.MatMulNBits(B, s, zp, None, b, K=32, N=8, bits=4, block_size=16, config=UNIVERSAL)(A)
    np.testing.assert_array_equal(y1, y2)


def test_every_output_element_written(rng):
    """Poison the output buffer; every element must be overwritten (and equal the fresh result)."""
    from numba import cuda

    A, B, s, zp, gi, b = make_inputs(rng, 3, 16, 64, 32, 4, "float32", bias=True)
    op = nb.MatMulNBits(B, s, None, None, b, K=64, N=16, bits=4, block_size=32, config=UNIVERSAL)
    out = cuda.to_device(np.full((3, 16), np.nan, np.float32))
    dA = cuda.to_device(A)
    op(dA, out=out)
    Y = out.copy_to_host()
    assert not np.isnan(Y).any()
    check(Y, A, B, s, None, None, b, K=64, N=16, bits=4, block=32, dtype="float32")


def test_device_array_in_device_array_out(rng):
    from numba import cuda

    A, B, s, zp, gi, b = make_inputs(rng, 2, 8, 32, 16, 8, "float16")
    op = nb.MatMulNBits(B, s, None, None, None, K=32, N=8, bits=8, block_size=16, config=UNIVERSAL)
    Y = op(cuda.to_device(A))
    assert hasattr(Y, "copy_to_host")
    check(Y.copy_to_host(), A, B, s, None, None, None, K=32, N=8, bits=8, block=16, dtype="float16")


def test_dequantize_public(rng):
    from numba import cuda

    A, B, s, zp, gi, b = make_inputs(rng, 1, 8, 40, 16, 4, "float16", zp="packed")
    host = nb.dequantize(B, s, zp, K=40, N=8, bits=4, block_size=16)
    assert host.shape == (8, 40) and host.dtype == np.float16
    ref = nb.dequantize_ref(B, s, zp, K=40, N=8, bits=4, block_size=16)
    np.testing.assert_array_equal(host, ref.astype(np.float32).astype(np.float16))
    dev = nb.dequantize(cuda.to_device(B), cuda.to_device(s), cuda.to_device(zp), K=40, N=8, bits=4, block_size=16)
    np.testing.assert_array_equal(dev.copy_to_host(), host)


# ------------------------------------------------------------------------------------ errors

def _valid(rng):
    return make_inputs(rng, 2, 8, 32, 16, 4, "float16", zp="packed", bias=True)


@pytest.mark.parametrize("kwargs, match", [
    (dict(bits=3), "bits should be 2, 4 or 8, got 3"),
    (dict(block_size=24), r"block_size must be a power of 2, and >= 16. Got 24"),
    (dict(block_size=8), r"block_size must be a power of 2, and >= 16. Got 8"),
    (dict(weight_prepacked=3), r"weight_prepacked must be 0 \(not prepacked\), 1 \(SM80 layout\), or 2 \(SM90 layout\), "
                               r"but got 3"),
    (dict(K=33), r"input B must have shape"),
    (dict(N=9), r"input B must have shape"),
    (dict(accuracy_level=7), "accuracy_level must be in 0..4"),
])
def test_attribute_errors(rng, kwargs, match):
    A, B, s, zp, gi, b = _valid(rng)
    args = dict(K=32, N=8, bits=4, block_size=16)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        nb.MatMulNBits(B, s, zp, None, b, **args)


def test_input_errors(rng):
    A, B, s, zp, gi, b = _valid(rng)
    kw = dict(K=32, N=8, bits=4, block_size=16)
    with pytest.raises(ValueError, match="input B must be uint8"):
        nb.MatMulNBits(B.astype(np.int8), s, zp, None, b, **kw)
    with pytest.raises(ValueError, match=r"input scales must have shape \(N, k_blocks\) = \(8, 2\)"):
        nb.MatMulNBits(B, s[:, :1], zp, None, b, **kw)
    with pytest.raises(ValueError, match="input scales must be float32, float16 or bfloat16"):
        nb.MatMulNBits(B, s.astype(np.int32), zp, None, b, **kw)
    with pytest.raises(ValueError, match="'zero_points' and 'scales' should have the same data type"):
        nb.MatMulNBits(B, s, zp.astype(np.float32), None, b, **kw)
    with pytest.raises(ValueError, match=r"input zero_points \(uint8, packed 2 per byte\) must have shape"):
        nb.MatMulNBits(B, s, np.zeros((8, 3), np.uint8), None, b, **kw)
    with pytest.raises(ValueError, match="group_index value at index 0 is 99999, which is out of valid range"):
        nb.MatMulNBits(B, s, None, np.full(32, 99999, np.int32), None, **kw)
    with pytest.raises(ValueError, match="group_index value at index 0 is -1"):
        nb.MatMulNBits(B, s, None, np.full(32, -1, np.int32), None, **kw)
    with pytest.raises(ValueError, match="input g_idx must be int32"):
        nb.MatMulNBits(B, s, None, np.zeros(32, np.int64), None, **kw)
    with pytest.raises(ValueError, match=r"input bias must have shape \(N,\) = \(8,\)"):
        nb.MatMulNBits(B, s, None, None, b[:4], **kw)
    with pytest.raises(ValueError, match="input bias must have the dtype of A and scales"):
        nb.MatMulNBits(B, s, None, None, b.astype(np.float32), **kw)
    with pytest.raises(ValueError, match="weight_prepacked requires fp16 or bf16 input A"):
        nb.MatMulNBits(B, s.astype(np.float32), None, None, None, weight_prepacked=1, **kw)
    with pytest.raises(ValueError, match="Prepacked MatMulNBits weight size mismatch. Expected 128 bytes, got 64"):
        nb.MatMulNBits(B.reshape(-1)[:64], s, None, None, None, weight_prepacked=1, **kw)


def test_call_errors_leave_out_untouched(rng):
    from numba import cuda

    A, B, s, zp, gi, b = _valid(rng)
    op = nb.MatMulNBits(B, s, zp, None, b, K=32, N=8, bits=4, block_size=16)
    poison = np.full((2, 8), 7, np.float16)
    out = cuda.to_device(poison)
    with pytest.raises(ValueError, match="input A's last dimension must equal attribute K=32"):
        op(A[:, :16], out=out)
    with pytest.raises(ValueError, match=r"input A must have the dtype of scales \(float16\), got float32"):
        op(A.astype(np.float32), out=out)
    with pytest.raises(ValueError, match=r"input A must have rank >= 2"):
        op(A[0], out=out)
    with pytest.raises(ValueError, match=r"out must have shape A.shape\[:-1\] \+ \(N,\) = \(2, 8\)"):
        op(A, out=cuda.to_device(np.zeros((2, 9), np.float16)))
    with pytest.raises(ValueError, match="out must have dtype float16"):
        op(A, out=cuda.to_device(np.zeros((2, 8), np.float32)))
    with pytest.raises(TypeError, match="A: expected a NumPy array or a CUDA array"):
        op([[1.0] * 32] * 2)
    np.testing.assert_array_equal(out.copy_to_host(), poison)


def test_config_parse_errors_at_construction(rng):
    A, B, s, zp, gi, b = _valid(rng)
    with pytest.raises(ValueError, match='Failed to parse environment variable - name: "ORT_MATMULNBITS_FORCE_CHUNKED"'):
        nb.MatMulNBits(B, s, zp, None, b, K=32, N=8, bits=4, block_size=16,
                       environ={"ORT_MATMULNBITS_FORCE_CHUNKED": "yes"})
    op = nb.MatMulNBits(B, s, zp, None, b, K=32, N=8, bits=4, block_size=16, config={"ep.cuda.fpa_intb_gemm": "1"},
                        environ={"ORT_FPA_INTB_GEMM": "0"})
    assert op.config.fpa_intb_gemm is True  # session config beats env


def test_forced_route_that_cannot_serve_raises(rng):
    A, B, s, zp, gi, b = make_inputs(rng, 2, 8, 32, 16, 4, "float16", zp="typed")
    op = nb.MatMulNBits(B, s, zp, None, None, K=32, N=8, bits=4, block_size=16,
                        config={"numba_nbits.force_route": "gemv_w4"})
    with pytest.raises(ValueError, match="forced route 'gemv_w4' cannot serve .* zp_not_typed"):
        op(A)
