"""Numerics per route (every route of ``ROUTES`` with a kernel module, each forced in turn).

* NaN / Inf propagation: NaN or ±Inf in A, in scales or both must land exactly where the float64
  oracle puts them. The data are built so that the answer does not depend on summation order
  (every weight positive, so one +Inf term makes the sum +Inf, etc.).
* fp32 accumulation: K = 65536 on a GPU (4096 on the simulator), A ~ 200-250 and weights ±56, so
  every product is ~13,000 and any 5 consecutive same-sign products overflow fp16 (65504) and
  blow through bf16's 8-bit significand; weights are +56 for the first half of K and -56 for the
  second (with a per-column imbalance), so the true result is small and exactly representable in
  the output dtype. All products are multiples of 128 below 2^31, so an fp32 accumulator is exact
  in any order; an fp16 (or bf16) accumulator overflows or loses everything
  (``test_accumulation_design_discriminates`` shows it). fp32 outputs use a larger imbalance, so
  the result itself does not fit in fp16.
* bitwise reproducibility: the same inputs, three calls (and a second op instance), identical
  bytes.
"""
from __future__ import annotations

import importlib.util

import ml_dtypes
import numpy as np
import pytest
from conftest import SIMULATED, to_dev, to_host

import numba_nbits as nb
from numba_nbits.config import load_config
from numba_nbits.dispatch.problem import Problem
from numba_nbits.dispatch.routes import FORCE_SKIPS, ROUTES
from numba_nbits.kernels import FAMILY_MODULES
from numba_nbits.reference import matmul_nbits_ref, relative_error

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
AVAILABLE = [r for r in ROUTES if importlib.util.find_spec(FAMILY_MODULES[r.family], "numba_nbits.kernels") is not None]
ROUTE_NAMES = [r.name for r in AVAILABLE]
ACC_K = 4096 if SIMULATED else 65536


def route_env(route_name):
    """Environment that lets a route be chosen: chunking forced (small chunks) for the chunked route; small chunks
    (several per buffer) for the overlapped one."""
    if route_name.endswith("chunked"):
        return {"ORT_MATMULNBITS_FORCE_CHUNKED": "1", "ORT_MATMULNBITS_CHUNK_SIZE": "3"}
    if route_name == "dequant_overlap":
        return {"ORT_MATMULNBITS_CHUNK_SIZE": "3"}
    return {}


def route_config(route_name):
    return {"numba_nbits.force_route": route_name, "use_tf32": False, "ep.cuda.fpa_intb_gemm": "1"}


def problem_for(route_name, dtype, K=None, M=3, N=8, zp="none"):
    """(bits, block_size, N, K, M) of a small problem whose guards admit ``route_name``; None if none found."""
    route = next(r for r in AVAILABLE if r.name == route_name)
    config = load_config(route_env(route_name), {k: v for k, v in route_config(route_name).items()
                                                 if k != "numba_nbits.force_route"})
    # the router's one shape last: only the router GEMV needs it, and K=2880 through the simulated
    # mixed GEMM (8-bit fpA_intB admits N=32) costs minutes per call
    shapes = [(N, K or 64), (64, K or 64), (128, K or 128), (32, 2880)]
    for n, k in shapes:
        for bits in (4, 8, 2):
            for block in (32, 16, 64, 128):
                for m in (M, 1):
                    p = Problem(M=m, N=n, K=k, bits=bits, block_size=block, dtype=dtype, zero_points=zp)
                    if all(g.name in FORCE_SKIPS or g(p, config) for g in route.guards):  # as forcing does
                        return bits, block, n, k, m
    return None


def make_op(route_name, B, scales, zero_points=None, bias=None, *, K, N, bits, block):
    op = nb.MatMulNBits(B, scales, zero_points, None, bias, K=K, N=N, bits=bits, block_size=block,
                        config=route_config(route_name), environ=route_env(route_name))
    return op


def _need(route_name, dtype, **kw):
    found = problem_for(route_name, dtype, **kw)
    if found is None:
        pytest.skip(f"no small problem admitted by route {route_name} ({dtype})")
    return found


# ------------------------------------------------------------------------------------ NaN / Inf

NAN_INF_CASES = ["nan_in_A", "inf_in_A", "neg_inf_in_A_last_k", "nan_in_scale", "inf_in_scale", "inf_and_nan",
                 "inf_minus_inf"]


def nan_inf_inputs(rng, case, *, bits, block, N, K, M, dtype):
    dt = DTYPES[dtype]
    kb = -(-K // block)
    top = (1 << bits) - 1  # every code at its maximum: q - zp = 2^(bits-1) - 1 > 0
    byte = {2: 0xFF, 4: 0xFF, 8: 0xFF}[bits]
    assert top > (1 << (bits - 1))
    B = np.full((N, kb, block * bits // 8), byte, np.uint8)
    scales = rng.uniform(0.01, 0.05, (N, kb)).astype(dt)  # positive: every weight > 0
    A = rng.uniform(0.5, 1.0, (M, K)).astype(dt)  # positive
    r = lambda i: i % M  # noqa: E731
    if case == "nan_in_A":
        A[r(1), K // 2] = np.nan
    elif case == "inf_in_A":
        A[r(0), 3] = np.inf
    elif case == "neg_inf_in_A_last_k":
        A[r(2), K - 1] = -np.inf
    elif case == "nan_in_scale":
        scales[N - 3, kb - 1] = np.nan
    elif case == "inf_in_scale":
        scales[2, 0] = np.inf
    elif case == "inf_and_nan":
        A[r(0), 0] = np.inf
        scales[N - 2, kb // 2] = np.nan
        if M > 1:
            A[r(2), K // 3] = -np.inf
    elif case == "inf_minus_inf":
        A[r(1), 0] = np.inf
        A[r(1), K - 1] = -np.inf
    return A, B, scales


def assert_same_nonfinite(Y, ref, tol):
    y = np.asarray(Y).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg="NaN positions differ from the oracle")
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref), err_msg="+Inf positions differ from the oracle")
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(ref), err_msg="-Inf positions differ from the oracle")
    fin = np.isfinite(ref)
    np.testing.assert_allclose(y[fin], ref[fin], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("case", NAN_INF_CASES)
@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_nan_inf_propagation(rng, route, case, dtype):
    if SIMULATED and dtype == "float32" and case not in ("inf_and_nan", "inf_minus_inf"):
        pytest.skip("simulator: fp32 runs the two combined cases only (time)")
    bits, block, N, K, M = _need(route, dtype)
    A, B, scales = nan_inf_inputs(rng, case, bits=bits, block=block, N=N, K=K, M=M, dtype=dtype)
    op = make_op(route, B, scales, K=K, N=N, bits=bits, block=block)
    assert op.route(M) == route
    ref = matmul_nbits_ref(A, B, scales, K=K, N=N, bits=bits, block_size=block)
    assert not np.isfinite(ref).all()
    with np.errstate(all="ignore"):
        Y = op(A)
    assert_same_nonfinite(Y, ref, 1e-2)


# ------------------------------------------------------------------------------------ accumulation

def accum_inputs(*, bits, block, N, K, M, dtype):
    """A ~ 208..240 (multiples of 16), weights +-56; first half of K positive (+ imbalance t_n)."""
    dt = DTYPES[dtype]
    kb = -(-K // block)
    zp = 1 << (bits - 1)
    e = {2: 1, 4: 7, 8: 7}[bits]
    scale = 56.0 / e
    if dtype == "float32":
        t = np.array([(-300, 500, 0, 7, -1, 1000, 2, -999)[i % 8] for i in range(N)])
    else:
        t = np.array([(-2, -1, 0, 1, 2, 1, -2, 0)[i % 8] for i in range(N)])
    assert (np.abs(t) < K // 2 - 1).all()
    k = np.arange(K)
    sign = np.where(k[None, :] < (K // 2 + t[:, None]), 1, -1)  # sum of signs = 2 t_n
    q = np.full((N, kb * block), zp, np.int64)
    q[:, :K] = zp + e * sign
    per = 8 // bits
    qq = q.reshape(N, kb * block // per, per)
    B = np.zeros(qq.shape[:2], np.int64)
    for j in range(per):
        B |= qq[:, :, j] << (bits * j)
    B = B.astype(np.uint8).reshape(N, kb, block * bits // 8)
    scales = np.full((N, kb), scale, dt)
    c = np.array([(240, 224, 208, 240, 224)[i % 5] for i in range(M)], np.float64)
    A = np.repeat(c[:, None], K, axis=1).astype(dt)
    return A, B, scales, c, t


def test_accumulation_design_discriminates():
    """The accumulation data defeats fp16 and bf16 accumulators and is exact in fp32 (any order)."""
    bits, block, N, K, M = 4, 32, 8, ACC_K, 3
    A, B, s, c, t = accum_inputs(bits=bits, block=block, N=N, K=K, M=M, dtype="float16")
    ref = matmul_nbits_ref(A, B, s, K=K, N=N, bits=bits, block_size=block)
    np.testing.assert_array_equal(ref, c[:, None] * 112.0 * t[None, :])
    assert np.abs(ref).max() <= 65504 and (ref.astype(np.float16) == ref).all()  # representable in fp16
    w = nb.dequantize_ref(B, s, K=K, N=N, bits=bits, block_size=block)
    prods = (A[0].astype(np.float64) * w[0])
    with np.errstate(over="ignore"):
        seq16 = np.cumsum(prods.astype(np.float16), dtype=np.float16)
        chunk16 = prods.astype(np.float16).reshape(-1, 32).sum(axis=1, dtype=np.float16)  # per 32-code lane chunk
    assert np.isinf(seq16).any() and np.isinf(chunk16).any()
    bf = ml_dtypes.bfloat16
    acc = bf(0)
    for p in prods[: K // 2]:
        acc = bf(float(acc) + float(p))
    for p in prods[K // 2:]:
        acc = bf(float(acc) + float(p))
    assert abs(float(acc) - ref[0, 0]) > 1000  # bf16 accumulation is off by far more than the result
    f32 = np.float32(0)
    for p in prods.astype(np.float32)[::-1]:
        f32 = np.float32(f32 + p)
    assert f32 == ref[0, 0]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_fp32_accumulation(route, dtype):
    # Simulator: the tensor-core mixed GEMM (fpa_intb) simulates ~100x slower than a GEMV (K=4096: ~2.5 min),
    # so it runs at K=128 there; that still defeats fp16/bf16 accumulators (a 32-code block sums to ~416,000).
    acc_k = 128 if SIMULATED and route == "fpa_intb" else ACC_K
    found = problem_for(route, dtype, K=acc_k, M=2)
    if found is None:
        pytest.skip(f"route {route} admits no K={acc_k} problem for {dtype}")
    bits, block, N, K, M = found
    A, B, s, c, t = accum_inputs(bits=bits, block=block, N=N, K=K, M=M, dtype=dtype)
    op = make_op(route, B, s, K=K, N=N, bits=bits, block=block)
    assert op.route(M) == route
    ref = matmul_nbits_ref(A, B, s, K=K, N=N, bits=bits, block_size=block)
    Y = np.asarray(op(A)).astype(np.float32).astype(np.float64)
    assert np.isfinite(Y).all(), f"{route}: non-finite output (fp16-range overflow in the accumulator?)"
    if dtype == "float32":
        assert np.abs(ref).max() > 65504  # the result itself does not fit in fp16
        assert relative_error(Y, ref) <= 1e-6
    else:
        np.testing.assert_array_equal(Y, ref, err_msg=f"{route}: exact result expected (fp32 accumulation)")


# ------------------------------------------------------------------------------------ reproducibility

@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_bitwise_reproducible(rng, route, dtype):
    if SIMULATED and dtype == "float32" and route != "dequant_cublas":
        pytest.skip("simulator: fp32 checked on the universal route only (time)")
    bits, block, N, K, M = _need(route, dtype, K=64 if SIMULATED else 4096, M=3)
    dt = DTYPES[dtype]
    kb = -(-K // block)
    B = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
    s = (rng.uniform(0.5, 2, (N, kb)) / (2 ** bits * np.sqrt(K)) * rng.choice([-1, 1], (N, kb))).astype(dt)
    bias = rng.uniform(-1, 1, N).astype(dt)
    A = rng.standard_normal((M, K)).astype(dt)
    from numba import cuda

    op = make_op(route, B, s, bias=bias, K=K, N=N, bits=bits, block=block)
    dA = to_dev(A)
    outs = []
    for _ in range(3):
        out = to_dev(np.full((M, N), np.nan, dt))
        op(dA, out=out)
        outs.append(to_host(out).tobytes())
    outs.append(np.asarray(op(A)).tobytes())
    op2 = make_op(route, B, s, bias=bias, K=K, N=N, bits=bits, block=block)
    outs.append(np.asarray(op2(A)).tobytes())
    assert all(o == outs[0] for o in outs), f"{route}: results differ between calls"
