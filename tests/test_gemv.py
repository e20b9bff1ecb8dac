"""Fused GEMV family (gemv_w4, gemv_w8, gemv_w2, router) against the float64 oracle.

Every case fills the output with NaN first (every element must be written), compares with
``reference.matmul_nbits_ref`` within ``TOLERANCES``, and re-runs the same plan with new A/Y
buffers (plans are re-pointed per call). One-hot rows of A check the decode exactly: row m of Y
must equal column k_m of the dequantized weight, computed in fp32 and rounded once to the dtype.

On numba's CUDA simulator the shapes are tiny (``shapes.SIM_*``); on a GPU the spec §10 shapes
(``shapes.GPU_*``) are used as well.
"""
from __future__ import annotations

import numpy as np
import pytest
import shapes

from numba_nbits.arrays import device_empty, np_dtype, to_device, to_host
from numba_nbits.config import load_config
from numba_nbits.dispatch.problem import Problem
from numba_nbits.formats import dequantize_host, quantize
from numba_nbits.launch import simulated
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights

SIM = simulated()
DTYPES = ("float32", "float16", "bfloat16")
CONFIG = load_config({})


def _family(bits: int, router: bool = False):
    import importlib

    name = "router" if router else {4: "w4", 8: "w8", 2: "w2"}[bits]
    return importlib.import_module(f"numba_nbits.kernels.gemv.{name}")


def _build(bits, router, w, p):
    """The CUDA-core kernels of each family (the tensor-core path, gemv_mma, is tested in test_gemv_mma.py)."""
    mod = _family(bits, router)
    if router:
        return mod.build(w, p, CONFIG)
    return mod.build(w, p, CONFIG, kernel="cuda_core")


def make(rng, *, bits, N, K, bs, dtype, zp, bias=False, scale=1.0):
    npdt = np_dtype(dtype)
    W = (rng.standard_normal((N, K)) * scale).astype(np.float32).astype(npdt)
    B, S, Z = quantize(W, bits, bs, symmetric=(zp == "none"))
    bvec = (rng.uniform(1, 5, N).astype(np.float32).astype(npdt)) if bias else None
    w = build_weights(B, S, Z, None, bvec, K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    return w, (B, S, Z, bvec)


def run_plan(plan, A, N, npdt):
    M = A.shape[0]
    a = to_device(A, SIM)
    out = device_empty((M, N), npdt, SIM)
    if SIM:
        out.owner[...] = np.nan
    else:
        from numba_nbits.arrays import copy_h2d

        copy_h2d(out, np.full((M, N), np.nan, npdt))
    plan.run(a, out, 0)
    return to_host(out)


def check(rng, *, bits, M, N, K, bs, dtype, zp, router=False, bias=False, reruns=1):
    npdt = np_dtype(dtype)
    w, (B, S, Z, bvec) = make(rng, bits=bits, N=N, K=K, bs=bs, dtype=dtype, zp=zp, bias=bias)
    p = Problem(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype, zero_points=w.zp_kind, has_bias=bias)
    plan = _build(bits, router, w, p)
    for _ in range(reruns):
        A = rng.standard_normal((M, K)).astype(np.float32).astype(npdt)
        y = run_plan(plan, A, N, npdt)
        assert not np.isnan(y.astype(np.float32)).any(), f"unwritten outputs ({plan})"
        ref = matmul_nbits_ref(A, B, S, Z, None, bvec, K=K, N=N, bits=bits, block_size=bs)
        err = relative_error(y, ref)
        assert err <= TOLERANCES[dtype], f"{plan}: relative error {err:.3g} > {TOLERANCES[dtype]}"
    return plan


def check_onehot(rng, *, bits, M, N, K, bs, dtype, zp, ks):
    """Y row m = dequantized W[:, ks[m]] (fp32 dequant rounded once to dtype), bit for bit."""
    npdt = np_dtype(dtype)
    w, (B, S, Z, _) = make(rng, bits=bits, N=N, K=K, bs=bs, dtype=dtype, zp=zp)
    p = Problem(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype, zero_points=w.zp_kind)
    plan = _build(bits, False, w, p)
    A = np.zeros((M, K), np.float32)
    A[np.arange(M), ks] = 1.0
    y = run_plan(plan, A.astype(npdt), N, npdt)
    Wdq = dequantize_host(B, S, Z, K=K, N=N, bits=bits, block_size=bs, dtype=np.float32)
    expect = Wdq[:, ks].T.astype(npdt)
    np.testing.assert_array_equal(y.astype(np.float32), expect.astype(np.float32), err_msg=str(plan))


# ------------------------------------------------------------------------------------ 4-bit

W4_SIM = [(dt, bs, zp) for dt in DTYPES for bs in (16, 32, 64, 128) for zp in ("none", "packed")]


@pytest.mark.parametrize("dtype,bs,zp", W4_SIM)
def test_w4_m1_all_blocks(rng, dtype, bs, zp):
    N, K = shapes.SIM_W4[bs]  # K % bs != 0: the last block is partial
    check(rng, bits=4, M=1, N=N, K=K, bs=bs, dtype=dtype, zp=zp, reruns=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [2, 3, 16])
def test_w4_small_m(rng, dtype, M):
    zp = "packed" if M != 3 else "none"
    bs = {2: 16, 3: 64, 16: 32}[M]
    N, K = {2: (8, 72), 3: (8, 72), 16: (8, 40)}[M]
    check(rng, bits=4, M=M, N=N, K=K, bs=bs, dtype=dtype, zp=zp)


@pytest.mark.parametrize("M,bs,zp", [(1, 32, "packed"), (4, 16, "none"), (16, 128, "packed")])
def test_w4_onehot_decode_exact(rng, M, bs, zp):
    N, K = 8, (136 if bs == 128 else 72)
    ks = np.linspace(0, K - 1, M).astype(int) if M > 1 else np.array([K - 1])
    for dtype in DTYPES:
        check_onehot(rng, bits=4, M=M, N=N, K=K, bs=bs, dtype=dtype, zp=zp, ks=ks)


@pytest.mark.skipif(SIM, reason="GPU shapes")
@pytest.mark.parametrize("M,N,K", shapes.GPU_W4)
@pytest.mark.parametrize("dtype", DTYPES)
def test_w4_gpu_shapes(rng, M, N, K, dtype):
    bs = 16 if K == 744 else 32
    zp = ("none", "packed")[(DTYPES.index(dtype) + K) % 2]  # alternate so both kinds meet every dtype
    check(rng, bits=4, M=M, N=N, K=K, bs=bs, dtype=dtype, zp=zp, reruns=2)


@pytest.mark.skipif(SIM, reason="GPU shapes")
@pytest.mark.parametrize("bs", [16, 64, 128])
@pytest.mark.parametrize("M", [1, 8])
def test_w4_gpu_blocks(rng, bs, M):
    dtype = DTYPES[(bs // 16 + M) % 3]
    check(rng, bits=4, M=M, N=1024, K=4096 + 8, bs=bs, dtype=dtype, zp="packed")


def test_w4_rejects_outside_guards(rng):
    w, _ = make(rng, bits=4, N=8, K=64, bs=32, dtype="float32", zp="none")
    mod = _family(4)
    with pytest.raises(ValueError, match="M=17"):
        mod.build(w, Problem(M=17, N=8, K=64, bits=4, block_size=32, dtype="float32"), CONFIG)


# ------------------------------------------------------------------------------------ 8-bit

W8_SIM = [(dt, bs, zp) for dt in DTYPES for bs in (16, 32, 64, 128, 256) for zp in ("none", "packed")]


@pytest.mark.parametrize("dtype,bs,zp", W8_SIM)
def test_w8_m1_all_blocks(rng, dtype, bs, zp):
    N, K = shapes.SIM_W8[bs]
    check(rng, bits=8, M=1, N=N, K=K, bs=bs, dtype=dtype, zp=zp)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [2, 5])
def test_w8_small_m(rng, dtype, M):
    check(rng, bits=8, M=M, N=8, K=64, bs=32 if M == 2 else 16, dtype=dtype, zp="packed" if M == 5 else "none")


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_w8_cuda_core_beyond_m5(rng, dtype):
    """M = 7: the tensor-core route's range; its CUDA-core fallback (unaligned A) walks M tiles of 5 over blockIdx.y."""
    plan = check(rng, bits=8, M=7, N=8, K=64, bs=32, dtype=dtype, zp="packed")
    assert plan.grid[1] == 2


def test_w8_fp32_keeps_spec_m_limit(rng):
    w, _ = make(rng, bits=8, N=8, K=64, bs=32, dtype="float32", zp="none")
    with pytest.raises(ValueError, match="M=6 outside"):
        _build(8, False, w, Problem(M=6, N=8, K=64, bits=8, block_size=32, dtype="float32"))


@pytest.mark.parametrize("M,bs,zp", [(1, 16, "packed"), (5, 64, "none")])
def test_w8_onehot_decode_exact(rng, M, bs, zp):
    ks = np.array([63, 0, 17, 38, 50][:M])
    for dtype in DTYPES:
        check_onehot(rng, bits=8, M=M, N=8, K=64, bs=bs, dtype=dtype, zp=zp, ks=ks)


@pytest.mark.skipif(SIM, reason="GPU shapes")
@pytest.mark.parametrize("M,N,K", shapes.GPU_W8)
@pytest.mark.parametrize("dtype", DTYPES)
def test_w8_gpu_shapes(rng, M, N, K, dtype):
    bs, zp = ((128, "none"), (32, "packed"))[(DTYPES.index(dtype) + M) % 2]
    check(rng, bits=8, M=M, N=N, K=K, bs=bs, dtype=dtype, zp=zp)


# ------------------------------------------------------------------------------------ 2-bit

W2_SIM = [(dt, bs, zp) for dt in DTYPES for bs in (16, 64, 512) for zp in ("none", "packed")]


@pytest.mark.parametrize("dtype,bs,zp", W2_SIM)
def test_w2_m1(rng, dtype, bs, zp):
    N, K = shapes.SIM_W2[bs]
    check(rng, bits=2, M=1, N=N, K=K, bs=bs, dtype=dtype, zp=zp)


@pytest.mark.parametrize("bs", [32, 128, 256])
def test_w2_m1_more_blocks(rng, bs):
    N, K = shapes.SIM_W2[bs]
    check(rng, bits=2, M=1, N=N, K=K, bs=bs, dtype="float16", zp="packed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [2, 8])
def test_w2_small_m(rng, dtype, M):
    check(rng, bits=2, M=M, N=8, K=80 if M == 2 else 64, bs=16, dtype=dtype, zp="packed" if M == 8 else "none")


@pytest.mark.parametrize("M,K,bs,zp", [(1, 48, 16, "packed"), (8, 128, 32, "none")])
def test_w2_onehot_decode_exact(rng, M, K, bs, zp):
    ks = np.linspace(0, K - 1, M).astype(int) if M > 1 else np.array([K - 1])
    for dtype in DTYPES:
        check_onehot(rng, bits=2, M=M, N=8, K=K, bs=bs, dtype=dtype, zp=zp, ks=ks)


@pytest.mark.skipif(SIM, reason="GPU shapes")
@pytest.mark.parametrize("M,N,K", shapes.GPU_W2)
@pytest.mark.parametrize("dtype", DTYPES)
def test_w2_gpu_shapes(rng, M, N, K, dtype):
    bs, zp = ((64, "none"), (16, "packed"))[(DTYPES.index(dtype) + M) % 2]
    check(rng, bits=2, M=M, N=N, K=K, bs=bs, dtype=dtype, zp=zp)


# ----------------------------------------------------------------------------------- router

@pytest.mark.parametrize("dtype,bs,bias", [("float16", 32, True), ("bfloat16", 64, True), ("float32", 32, False)])
def test_router_small(rng, dtype, bs, bias):
    check(rng, bits=4, M=1, N=8, K=192, bs=bs, dtype=dtype, zp="none", router=True, bias=bias, reruns=2)


@pytest.mark.parametrize("bs", [32, 64] if not SIM else [32])
@pytest.mark.parametrize("dtype", DTYPES if not SIM else ["float16"])
def test_router_gpt_oss_shape(rng, bs, dtype):
    M, N, K = shapes.ROUTER[0]
    for bias in (True, False):
        check(rng, bits=4, M=M, N=N, K=K, bs=bs, dtype=dtype, zp="none", router=True, bias=bias)


@pytest.mark.parametrize("dtype", DTYPES)
def test_router_reads_a_16_bytes_at_a_time_and_an_unaligned_a_with_scalar_loads(rng, dtype):
    """The router's kernel loads A with 16-byte loads; an A whose pointer is not 16-byte aligned (a view into a
    larger buffer) runs the scalar-load build of the same kernel, made on first need; both match the oracle."""
    M, N, K, bs = 1, 8, 192, 32
    npdt = np_dtype(dtype)
    w, (B, S, Z, bvec) = make(rng, bits=4, N=N, K=K, bs=bs, dtype=dtype, zp="none", bias=True)
    plan = _build(4, True, w, Problem(M=M, N=N, K=K, bits=4, block_size=bs, dtype=dtype, zero_points="none",
                                      has_bias=True))
    assert plan.spec.a_vec and plan.kernel.endswith("_av_bias") and plan._fallback is None
    buf = rng.standard_normal((1, K + 8)).astype(np.float32).astype(npdt)
    dbuf = to_device(buf, SIM)
    for shift in (0, 1):  # A from element 1 of the buffer: 2 or 4 bytes past its (aligned) start
        A = buf[:, shift:shift + K]
        a = dbuf.offset(shift * npdt.itemsize, (M, K))
        out = device_empty((M, N), npdt, SIM)
        plan.run(a, out, 0)
        ref = matmul_nbits_ref(A, B, S, Z, None, bvec, K=K, N=N, bits=4, block_size=bs)
        assert relative_error(to_host(out), ref) <= TOLERANCES[dtype]
        assert (plan._fallback is not None) == bool(shift)
    assert not plan._fallback.spec.a_vec and "_av" not in plan._fallback.kernel


def test_router_small_n_gate_through_the_operator(rng):
    """A small-N gate that is not ORT's 32 x 2880 goes through the router GEMV by default (bias fused), its K
    long enough that each lane loops over its chunks twice; with ``NUMBA_NBITS_ROUTER_SMALL_N=0`` the same node
    takes the GEMV and its bias-add; both match the oracle."""
    import numba_nbits as nb

    N, K, bs = 16, 4160, 32  # 130 chunks of 32 codes: two rounds of U_MAX = 4 chunks per lane
    W = (rng.standard_normal((N, K)) * 0.05).astype(np.float16)
    B, S, Z = quantize(W, 4, bs, symmetric=True)
    bvec = rng.uniform(-1, 1, N).astype(np.float16)
    A = rng.standard_normal((1, K)).astype(np.float16)
    ref = matmul_nbits_ref(A, B, S, Z, None, bvec, K=K, N=N, bits=4, block_size=bs)
    for env, route in (({}, "router_gemv"), ({"NUMBA_NBITS_ROUTER_SMALL_N": "0"}, "gemv_w4")):
        op = nb.MatMulNBits(B, S, Z, None, bvec, K=K, N=N, bits=4, block_size=bs, environ=env)
        assert op.route(1) == route
        assert relative_error(np.asarray(op(A)), ref) <= TOLERANCES["float16"]


def test_router_rejects_zero_points(rng):
    w, _ = make(rng, bits=4, N=8, K=64, bs=32, dtype="float16", zp="packed")
    with pytest.raises(ValueError, match="zero points"):
        _family(4, router=True).build(w, Problem(M=1, N=8, K=64, bits=4, block_size=32, dtype="float16",
                                                 zero_points="packed"), CONFIG)


def test_plans_serve_every_admitted_route_problem():
    """Each route of the GEMV family builds a plan for problems its guards admit (no GPU work)."""
    from numba_nbits.dispatch.routes import route_named

    cases = [("gemv_w4", Problem(M=16, N=8, K=40, bits=4, block_size=16, dtype="float32", zero_points="packed")),
             ("gemv_w8", Problem(M=5, N=8, K=256, bits=8, block_size=256, dtype="bfloat16")),
             ("gemv_w2", Problem(M=8, N=8, K=16 * 3, bits=2, block_size=16, dtype="float16")),
             ("router_gemv", Problem(M=1, N=32, K=2880, bits=4, block_size=64, dtype="float16", has_bias=True))]
    for name, p in cases:
        assert route_named(name).first_failure(p, CONFIG) is None, name


def test_family_records_say_what_they_serve():
    """Each GEMV route's ``FAMILY`` (``kernels.family``) supports the problems its route admits, not those its
    kernels cannot serve; ``build`` rejects the latter with the first unmet need."""
    import importlib

    from numba_nbits.dispatch.routes import route_named
    from numba_nbits.kernels import FAMILY_MODULES

    def family(name):  # (``kernels.family(name)`` is shadowed by the submodule ``kernels.family`` once imported)
        return importlib.import_module(FAMILY_MODULES[name], "numba_nbits.kernels").FAMILY

    admitted = [("gemv_w4", Problem(M=16, N=8, K=40, bits=4, block_size=16, dtype="float32", zero_points="packed")),
                ("gemv_w8", Problem(M=5, N=8, K=256, bits=8, block_size=256, dtype="bfloat16")),
                ("gemv_w2", Problem(M=8, N=8, K=16 * 3, bits=2, block_size=16, dtype="float16")),
                ("router_gemv", Problem(M=1, N=32, K=2880, bits=4, block_size=64, dtype="float16", has_bias=True))]
    for name, p in admitted:
        fam = family(route_named(name).family)
        assert fam.supports(p), name
    rejected = [("gemv_w4", Problem(M=17, N=8, K=64, bits=4, block_size=32, dtype="float32"), "M=17 outside"),
                ("gemv_w8", Problem(M=6, N=8, K=64, bits=8, block_size=32, dtype="float32"), "M=6 outside"),
                ("gemv_w2", Problem(M=9, N=8, K=64, bits=2, block_size=32, dtype="float16"), "M=9 outside"),
                ("router_gemv", Problem(M=2, N=8, K=64, bits=4, block_size=32, dtype="float16"), "M=2, needs 1")]
    for name, p, what in rejected:
        fam = family(route_named(name).family)
        assert not fam.supports(p), name
        w, _ = make(np.random.default_rng(0), bits=p.bits, N=p.N, K=p.K, bs=p.block_size, dtype=p.dtype, zp="none")
        with pytest.raises(ValueError, match=f"{name}: unsupported problem \\({what}"):
            fam.build(w, p, CONFIG, name)


@pytest.mark.parametrize("M,bits,bs,tile_cap,grid_cap", [(1, 4, 32, 1, 1), (3, 4, 16, 2, 2), (2, 8, 32, 3, 1),
                                                         (1, 2, 16, 1, 1)])
def test_persistent_rows_and_k_tiles(rng, M, bits, bs, tile_cap, grid_cap):
    """The GPU-only schedules on small shapes: blocks looping over row groups, K in several tiles."""
    from numba_nbits.kernels.gemv import core as gc

    dtype = "float16"
    N, K = 32, (72 if bits == 4 else 96)
    npdt = np_dtype(dtype)
    w, (B, S, Z, _) = make(rng, bits=bits, N=N, K=K, bs=bs, dtype=dtype, zp="packed")
    p = Problem(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype, zero_points="packed")
    mt = {1: 1, 2: 2, 3: 4}[M]
    plan = gc.build_plan(w, p, route="test", mt=mt, r_max=1, u=2, warps=2, grid_cap=grid_cap, tile_cap=tile_cap)
    assert plan.grid[0] == grid_cap
    for _ in range(2):
        A = rng.standard_normal((M, K)).astype(np.float32).astype(npdt)
        y = run_plan(plan, A, N, npdt)
        ref = matmul_nbits_ref(A, B, S, Z, K=K, N=N, bits=bits, block_size=bs)
        assert relative_error(y, ref) <= TOLERANCES[dtype], plan
