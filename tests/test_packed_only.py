"""Nodes that keep only the tensor-core layout (``Weights.keep_packed_only``): which nodes do
(``dispatch.select.packed_layout_serves``), the dequantize from that layout (``kernels/gemv/dequant_packed.py``) giving
``dequant_fast``'s bytes, and every route of such a node against the oracle and against a node that kept ORT's B."""
import numpy as np
import pytest
from conftest import SIMULATED

from numba_nbits import MatMulNBits
from numba_nbits import op as op_module
from numba_nbits.arrays import device_empty, to_host
from numba_nbits.config import load_config
from numba_nbits.dispatch.problem import Problem
from numba_nbits.dispatch.select import packed_layout_serves
from numba_nbits.kernels import dequant
from numba_nbits.kernels.gemv import dequant_packed, repack
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights


def _inputs(N, K, bits, bs, act, zp, seed):
    import ml_dtypes

    rng = np.random.default_rng(seed)
    kb = -(-K // bs)
    B = rng.integers(0, 256, size=(N, kb, bs * bits // 8), dtype=np.uint8)  # padding codes random too
    dt = np.float16 if act == "float16" else ml_dtypes.bfloat16
    sc = (rng.standard_normal((N, kb)) * 0.05).astype(dt)
    zpa = None
    if zp == "packed":
        cpb = 8 // bits
        zpa = rng.integers(0, 256, size=(N * -(-kb // cpb),), dtype=np.uint8)
    return B, sc, zpa


def _dequant_bytes(w, n0, rows, packed):
    out = device_empty((rows * w.K_padded,), w.np_dtype, w.simulated)
    if packed:
        dequant_packed.bind(w, repack.prepack(w), n0, rows, out, 64).launch(0)
    else:
        b, s, zpp, zpt = dequant._flat_views(w, n0, rows)
        dequant.bind_dequant(b, s, zpp, zpt, w.dummy(np.int32), out, bits=w.bits, act=w.dtype, zp_kind=w.zp_kind,
                             has_gidx=False, n_rows=rows, k_blocks=w.k_blocks, block_size=w.block_size,
                             zp_row=w.zp_row).launch(0)
    return to_host(out).view(np.uint16)


@pytest.mark.parametrize("bits,bs,N,K,act,zp,n0,rows", [
    (4, 128, 33, 300, "float16", "none", 0, 33),
    (4, 32, 40, 100, "float16", "packed", 0, 40),
    (4, 16, 17, 80, "bfloat16", "none", 0, 17),
    (4, 64, 70, 128, "float16", "none", 21, 30),  # a chunk of rows that starts and ends inside 16-row tiles
    (8, 64, 17, 192, "bfloat16", "none", 0, 17),  # bf16 8-bit: the fp32 decode
    (8, 16, 9, 48, "float16", "packed", 0, 9),
    (8, 128, 24, 256, "bfloat16", "packed", 8, 16),
    (2, 64, 35, 200, "bfloat16", "packed", 0, 35),
    (2, 16, 3, 130, "float16", "none", 0, 3),
])
def test_dequant_from_the_packed_layout_gives_dequant_fasts_bytes(bits, bs, N, K, act, zp, n0, rows):
    B, sc, zpa = _inputs(N, K, bits, bs, act, zp, seed=bits * 1000 + bs + N)
    w = build_weights(B, sc, zpa, K=K, N=N, bits=bits, block_size=bs, simulated=SIMULATED)
    np.testing.assert_array_equal(_dequant_bytes(w, n0, rows, True), _dequant_bytes(w, n0, rows, False))


def _problem(**kw):
    base = dict(M=1, N=4096, K=4096, bits=4, block_size=128, dtype="float16", zero_points="none", has_g_idx=False,
                has_bias=False, sm=90, weight_prepacked=0)
    base.update(kw)
    return Problem(**base)


ON = {"NUMBA_NBITS_PACKED_ONLY": "1"}


def test_keeping_only_the_packed_layout_is_opt_in():
    """Off by default (dequantize + cuBLAS from the packed layout is slower than from B): on with the env var or
    the config key, which wins."""
    assert not load_config({}).packed_only
    assert not packed_layout_serves(_problem(), load_config({}))
    assert packed_layout_serves(_problem(), load_config(ON))
    assert not packed_layout_serves(_problem(), load_config(ON, {"numba_nbits.packed_only": False}))
    assert packed_layout_serves(_problem(), load_config({}, {"numba_nbits.packed_only": "1"}))


@pytest.mark.parametrize("kw,env,want", [
    ({}, {}, True),
    ({"dtype": "bfloat16", "bits": 8, "zero_points": "packed", "block_size": 32}, {}, True),
    ({"bits": 2, "block_size": 64, "sm": 80}, {}, True),
    ({"dtype": "float32"}, {}, False),  # the CUDA-core engine reads B
    ({"zero_points": "typed"}, {}, False),
    ({"has_g_idx": True}, {}, False),
    ({"block_size": 256}, {}, False),  # outside the tensor-core layout's blocks
    ({"sm": 75}, {}, False),
    ({"weight_prepacked": 1}, {}, False),
    ({}, {"ORT_FPA_INTB_GEMM": "1"}, False),  # the fpA_intB kernels and their profiler's candidates read B
    ({"N": 32, "K": 2880, "block_size": 32}, {}, False),  # the router GEMV at M = 1
    ({"N": 32, "K": 2880, "block_size": 32}, {"ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION": "1"}, True),
    ({}, {"NUMBA_NBITS_FORCE_ROUTE": "router_gemv"}, False),
    ({}, {"NUMBA_NBITS_FORCE_ROUTE": "dequant_cublas"}, True),
    ({}, {"NUMBA_NBITS_FUSED_GEMM": "0"}, True),
])
def test_which_nodes_keep_only_the_packed_layout(kw, env, want):
    """With the opt-in on, the nodes whose every route reads the tensor-core layout."""
    assert packed_layout_serves(_problem(**kw), load_config({**ON, **env})) is want


def _ops(N, K, bits, bs, act, zp, bias, config=None, seed=0, monkeypatch=None):
    """The node twice: keeping only the packed layout (``numba_nbits.packed_only`` on) and keeping ORT's B."""
    B, sc, zpa = _inputs(N, K, bits, bs, act, zp, seed)
    b = (np.random.default_rng(seed + 1).standard_normal(N) * 0.1).astype(sc.dtype) if bias else None
    kw = dict(K=K, N=N, bits=bits, block_size=bs, config=config)
    packed = MatMulNBits(B, sc, zpa, None, b, **{**kw, "config": {**(config or {}), "numba_nbits.packed_only": True}})
    with monkeypatch.context() as m:
        m.setattr(op_module, "packed_layout_serves", lambda *a: False)
        kept = MatMulNBits(B, sc, zpa, None, b, **kw)
    return packed, kept, (B, sc, zpa, b)


def _act(M, K, act, seed, offset=0):
    import ml_dtypes

    dt = np.float16 if act == "float16" else ml_dtypes.bfloat16
    a = np.random.default_rng(seed).standard_normal(M * K + offset).astype(dt)
    return a[offset:].reshape(M, K)


def _oracle(A, ins, K, N, bits, bs):
    B, sc, zpa, b = ins
    return matmul_nbits_ref(A.astype(np.float64), B, sc, zpa, None, b, K=K, N=N, bits=bits, block_size=bs)


@pytest.mark.parametrize("bits,bs,act,zp,bias", [
    (4, 128, "float16", "none", True),  # (block 128: 4-bit block 32 / 64 of so few rows may be the router's)
    (8, 64, "bfloat16", "packed", False),
    (2, 64, "float16", "packed", True),
])
def test_every_route_of_a_packed_only_node(bits, bs, act, zp, bias, monkeypatch):
    N, K = 48, 256
    packed, kept, ins = _ops(N, K, bits, bs, act, zp, bias, seed=bits, monkeypatch=monkeypatch)
    assert packed.weights.packed_only and packed.weights.b is None
    assert not kept.weights.packed_only and kept.weights.b is not None
    assert "layout=tensor-core only" in packed.weights.describe()
    for M in (1, 9, 20, 70):  # GEMV, 2-bit fused_gemm at 9, fused_gemm, dequantize + cuBLAS
        A = _act(M, K, act, seed=M)
        got = np.asarray(packed(A)).astype(np.float64)
        assert packed.route(M) == kept.route(M)
        assert relative_error(got, _oracle(A, ins, K, N, bits, bs)) <= TOLERANCES[act], (M, packed.route(M))
        if packed.route(M).startswith("dequant"):  # the same scratch bytes: the same GEMM
            np.testing.assert_array_equal(np.asarray(packed(A)).view(np.uint16), np.asarray(kept(A)).view(np.uint16))


def test_forced_chunked_dequant_reads_the_packed_layout(monkeypatch):
    N, K, bs = 56, 128, 128
    cfg = {"numba_nbits.force_route": "dequant_cublas_chunked"}
    monkeypatch.setenv("ORT_MATMULNBITS_CHUNK_SIZE", "24")  # chunks of 24 rows: across 16-row tiles
    packed, kept, ins = _ops(N, K, 4, bs, "float16", "none", False, config=cfg, monkeypatch=monkeypatch)
    assert packed.weights.packed_only
    A = _act(5, K, "float16", seed=3)
    got = np.asarray(packed(A))
    assert packed.route(5) == "dequant_cublas_chunked"
    np.testing.assert_array_equal(got.view(np.uint16), np.asarray(kept(A)).view(np.uint16))
    assert relative_error(got.astype(np.float64), _oracle(A, ins, K, N, 4, bs)) <= TOLERANCES["float16"]


def test_an_unaligned_a_falls_back_to_dequantize_from_the_packed_layout(monkeypatch):
    """The GEMV routes' CUDA-core fallback reads B; a packed-only node runs dequantize + cuBLAS instead."""
    from numba_nbits.arrays import DevArray, to_device

    N, K, M, bs = 32, 128, 2, 128
    packed, _, ins = _ops(N, K, 4, bs, "float16", "none", True, monkeypatch=monkeypatch)
    A = _act(M, K, "float16", seed=5)
    aligned = np.asarray(packed(A)).astype(np.float64)
    assert packed.route(M) == "gemv_w4"
    src = to_device(np.concatenate([np.zeros(4, A.dtype), A.reshape(-1)]), SIMULATED)
    a = src.offset(8, (M, K))  # 8 bytes in: not 16-byte aligned
    if SIMULATED:  # simulated device arrays have no addresses; give this view one
        a = DevArray(8, a.shape, a.strides, a.dtype, a.owner)
    assert a.ptr % 16 == 8
    out = to_device(np.zeros((M, N), A.dtype), SIMULATED)
    plan = packed._entries[M].plan
    plan.run(a, out, 0)
    y = to_host(out).astype(np.float64)
    fb = plan._fallback
    assert fb is not None and fb.route == "dequant_cublas" and fb.kernel.startswith("dequant_packed")
    assert relative_error(y, _oracle(A, ins, K, N, 4, bs)) <= TOLERANCES["float16"]
    assert relative_error(y, aligned) <= TOLERANCES["float16"]


def test_cuda_core_kernels_are_refused_on_packed_only_weights(monkeypatch):
    from numba_nbits.kernels.gemv import w4

    packed, _, _ = _ops(32, 128, 4, 128, "float16", "none", False, monkeypatch=monkeypatch)
    p = packed.problem(1)
    with pytest.raises(ValueError, match="CUDA-core kernels read ORT's B layout"):
        w4.build(packed.weights, p, packed.config, kernel="cuda_core")
    with pytest.raises(RuntimeError, match="keep only the tensor-core layout"):
        packed.weights.onnx_b()
