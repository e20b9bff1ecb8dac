"""Parity with ONNX Runtime itself: a one-node ``com.microsoft.MatMulNBits`` model run by onnxruntime's
CPU provider, over ORT's own test shape lists (spec §10.3-10.5), must match numba_nbits within ORT's
tolerance rule ``|actual - expected| <= atol + rtol * |expected|`` (spec §10.1).

The simulator runs the small shapes of each list; a GPU runs all of them. Inputs are quantized with
``numba_nbits.quantize`` (byte-identical to ORT's quantizer, see test_formats.py).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SIMULATED

import numba_nbits as nb

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

# (M, N, K, block_size) from test/contrib_ops/matmul_4bits_test.cc (Float32 level 0)
SHAPES_4BIT = [(1, 1, 16, 16), (1, 2, 16, 16), (1, 32, 16, 16), (1, 32, 32, 16), (1, 32, 16, 128),
               (1, 288, 16, 16), (1, 288, 1024, 16), (1, 288, 1024, 128), (1, 288, 93, 32), (1, 288, 93, 128),
               (1, 288, 1234, 16), (2, 1, 16, 16), (2, 2, 16, 16), (100, 1, 16, 16), (100, 2, 16, 16),
               (100, 32, 16, 16), (100, 32, 32, 16), (100, 32, 16, 128), (100, 288, 16, 16), (100, 288, 1024, 16),
               (100, 288, 1024, 128), (100, 288, 93, 32), (100, 288, 93, 128), (100, 288, 1234, 16)]
# matmul_8bits_test.cc (Float32 lists), without the duplicates of the 4-bit list
SHAPES_8BIT = [(1, 4, 32, 16), (2, 4, 32, 16), (1, 4, 64, 16), (1, 256, 32, 16), (2, 288, 1024, 128),
               (1, 40, 576, 32), (2, 40, 576, 32), (100, 288, 192, 64), (2, 5120, 3072, 32)] + SHAPES_4BIT[:8]
# matmul_2bits_test.cc (Float32 levels 0 and 4)
SHAPES_2BIT = [(1, 1, 16, 16), (1, 2, 16, 16), (1, 32, 16, 16), (1, 32, 32, 16), (1, 32, 16, 128),
               (1, 288, 16, 16), (2, 1, 16, 16), (2, 2, 16, 16), (4, 1, 16, 16), (4, 2, 16, 16), (4, 32, 16, 16),
               (4, 32, 32, 16), (4, 32, 16, 128), (4, 288, 16, 16), (100, 1, 16, 16), (100, 2, 16, 16),
               (100, 32, 16, 16), (100, 32, 32, 16), (100, 32, 16, 128), (100, 288, 16, 16)]

SIM_BUDGET = 6000  # simulated threads per case: the dequant kernel runs N*K_padded*bits/32 threads


def _small(M, N, K, bs, bits):
    # the simulator runs ~1000 threads/s: keep N small (the fused GEMVs launch warps per row group)
    k_pad = -(-K // bs) * bs
    return N <= 64 and N * k_pad * bits // 32 <= SIM_BUDGET and M * N <= 4000


def shapes(lst, bits):
    return [s for s in lst if not SIMULATED or _small(*s, bits)]


def run_ort(A, B, scales, zp, g_idx, bias, *, K, N, bits, block_size):
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, list(A.shape))]
    inits = [numpy_helper.from_array(B, "B"), numpy_helper.from_array(scales, "scales")]
    names = ["A", "B", "scales"]
    for name, arr in (("zero_points", zp), ("g_idx", g_idx), ("bias", bias)):
        if arr is not None:
            inits.append(numpy_helper.from_array(arr, name))
            names.append(name)
        else:
            names.append("")
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["Y"], domain="com.microsoft", K=K, N=N, bits=bits,
                            block_size=block_size)
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)  # IR 10: readable by every onnxruntime >= 1.17
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"A": A})[0]


def close(actual, expected, atol, rtol):
    diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bad = diff > atol + rtol * np.abs(expected)
    assert not bad.any(), f"{bad.sum()} of {bad.size} elements differ; worst {diff.max():.3g}"


def inputs(rng, M, N, K, bs, bits, zp):
    W = rng.normal(0, 0.25, (N, K)).astype(np.float32)
    B, scales, zpp = nb.quantize(W, bits=bits, block_size=bs, symmetric=not zp)
    A = rng.normal(0, 0.25, (M, K)).astype(np.float32)
    return A, B, scales, zpp


def parity(rng, shape, zp, *, bits, tol):
    """fp32 A, symmetric or packed-zp weights: ORT CPU vs numba_nbits (TF32 off), |d| <= tol + tol*|e|."""
    M, N, K, bs = shape
    A, B, s, zpp = inputs(rng, M, N, K, bs, bits, zp)
    expected = run_ort(A, B, s, zpp, None, None, K=K, N=N, bits=bits, block_size=bs)
    actual = nb.MatMulNBits(B, s, zpp, K=K, N=N, bits=bits, block_size=bs, config={"use_tf32": False})(A)
    close(actual, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("shape", shapes(SHAPES_4BIT, 4))
def test_4bit_parity(rng, shape, zp):
    parity(rng, shape, zp, bits=4, tol=1e-4)


@pytest.mark.parametrize("shape", shapes(SHAPES_4BIT, 4)[:8])
def test_4bit_parity_bias_and_g_idx(rng, shape):
    M, N, K, bs = shape
    A, B, s, zpp = inputs(rng, M, N, K, bs, 4, False)
    kb = s.shape[1]
    g_idx = (np.arange(kb * bs) // bs).astype(np.int32)  # ORT's test grouping (spec §10.2)
    bias = rng.uniform(1, 5, N).astype(np.float32)
    expected = run_ort(A, B, s, None, g_idx, bias, K=K, N=N, bits=4, block_size=bs)
    actual = nb.MatMulNBits(B, s, None, g_idx, bias, K=K, N=N, bits=4, block_size=bs, config={"use_tf32": False})(A)
    close(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("shape", shapes(SHAPES_8BIT, 8))
def test_8bit_parity(rng, shape, zp):
    parity(rng, shape, zp, bits=8, tol=1e-3)


@pytest.mark.parametrize("zp", [False, True])
@pytest.mark.parametrize("shape", shapes(SHAPES_2BIT, 2))
def test_2bit_parity(rng, shape, zp):
    parity(rng, shape, zp, bits=2, tol=1e-3)


@pytest.mark.parametrize("shape", [(1, 288, 93, 32), (2, 32, 48, 16)])
def test_fp16_parity(rng, shape):
    M, N, K, bs = shape
    W = rng.normal(0, 0.25, (N, K)).astype(np.float16)
    B, s, zpp = nb.quantize(W, bits=4, block_size=bs, symmetric=False)
    A = rng.normal(0, 0.25, (M, K)).astype(np.float16)
    expected = run_ort(A.astype(np.float32), B, s.astype(np.float32), zpp, None, None, K=K, N=N, bits=4,
                       block_size=bs)
    actual = nb.MatMulNBits(B, s, zpp, K=K, N=N, bits=4, block_size=bs)(A)
    close(actual, expected, atol=0.055, rtol=0.02)  # ORT's fp16 tolerance (spec §10.3)
