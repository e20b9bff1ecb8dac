"""The overlapped dequantize + cuBLAS route (``kernels.dequant_overlap``): chunk rows, the two-buffer schedule's
results against the float64 oracle and against ORT's chunked chain, on the simulator (the steps in order) and on a
GPU (the dequantize on the thread's side stream, eager, captured, from a second thread, back to back)."""
import threading

import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu

import numba_nbits as nb
from numba_nbits.config import load_config
from numba_nbits.formats import quantize
from numba_nbits.kernels import dequant_overlap as DO
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

MIB = 1 << 20


def test_chunk_rows_rule():
    cfg = load_config({})
    assert DO.chunk_rows(28672, 8192, 2, cfg) == 7168  # N in 4, whole 256-row tiles
    assert DO.chunk_rows(14336, 4096, 2, cfg) == 3584
    assert DO.chunk_rows(5000, 4096, 2, cfg) == 1280  # 1250 rounded up to 256 rows
    assert DO.chunk_rows(40, 256, 2, cfg) == 40  # one chunk
    assert DO.chunk_rows(28672, 8192, 2, cfg, chunks=8) == 3584
    assert DO.chunk_rows(28672, 8192, 2, load_config({"ORT_MATMULNBITS_CHUNK_SIZE": "1000"})) == 1000
    # two buffers within the scratch limit (1 MiB: 256 rows of 1024 fp16 each), whole tiles where possible
    assert DO.chunk_rows(28672, 1024, 2, load_config({"NUMBA_NBITS_SCRATCH_LIMIT_MB": "1"})) == 256
    assert DO.chunk_rows(28672, 4096, 2, load_config({"NUMBA_NBITS_SCRATCH_LIMIT_MB": "1"})) == 64
    assert DO.chunk_rows(28672, 1 << 20, 4, load_config({"NUMBA_NBITS_SCRATCH_LIMIT_MB": "1"})) == 1


def _problem(rng, N, K, bits=4, bs=32, symmetric=True, dtype=np.float16, bias=False, g_idx=False):
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, sc, zp = quantize(W, bits=bits, block_size=bs, symmetric=symmetric)
    sc = sc.astype(dtype)
    b = (rng.standard_normal(N) * 0.5).astype(dtype) if bias else None
    gi = (np.arange(K) // bs).astype(np.int32)[rng.permutation(K)] if g_idx else None
    return B, sc, zp, gi, b


def _op(ins, N, K, bits, bs, config=None, environ=None):
    B, sc, zp, gi, b = ins
    return nb.MatMulNBits(B, sc, zp, gi, b, K=K, N=N, bits=bits, block_size=bs, config=config,
                          environ=environ or {})


def test_sms_are_reserved_below_reserve_max_m_only():
    """The GEMMs leave ``RESERVE_SMS`` SMs to the dequantize at M < ``RESERVE_MAX_M``, none from there on; an explicit
    ``reserve_sms`` wins."""
    ins = _problem(np.random.default_rng(3), 72, 128)
    op = _op(ins, 72, 128, 4, 32)
    assert DO.RESERVE_SMS > 0
    for M, reserve in ((65, DO.RESERVE_SMS), (DO.RESERVE_MAX_M - 1, DO.RESERVE_SMS), (DO.RESERVE_MAX_M, 0)):
        plan = DO.OverlapPlan(op.weights, op.problem(M), op.config)
        assert plan.reserve_sms == reserve and plan.tactic.endswith(f"r{reserve}")
    assert DO.OverlapPlan(op.weights, op.problem(4096), op.config, reserve_sms=4).reserve_sms == 4


SIM_CASES = [  # (bits, block, symmetric, dtype, bias, g_idx)
    (4, 32, True, np.float16, False, False),
    (4, 64, False, np.float16, True, False),
    (8, 32, False, np.float32, False, True),
    (2, 64, True, np.float16, True, False),
]


@pytest.mark.parametrize("bits, bs, symmetric, dtype, bias, g_idx", SIM_CASES)
def test_overlapped_chunks_match_the_oracle_and_orts_chunked_chain(bits, bs, symmetric, dtype, bias, g_idx):
    """Five chunks of 16 rows (N = 72) in two buffers: chunks 2 and 4 reuse buffer 0; the result is the oracle's
    (tolerance) and, on the simulator, ORT's chunked chain's with the same rows bit for bit."""
    rng = np.random.default_rng(bits * 100 + bs)
    N, K, M = 72, 128, 70 if not SIMULATED else 5
    ins = _problem(rng, N, K, bits, bs, symmetric, dtype, bias, g_idx)
    chunks = {"ORT_MATMULNBITS_CHUNK_SIZE": "16"}
    base = {"use_tf32": False}
    op = _op(ins, N, K, bits, bs, {**base, "numba_nbits.force_route": "dequant_overlap"}, chunks)
    A = rng.standard_normal((M, K)).astype(dtype)
    got = np.asarray(op(A))
    plan = op._entries[M].plan
    assert op.route(M) == "dequant_overlap" and plan.rows == 16 and len(plan.chunks) == 5 and plan.buffers == 2
    assert plan.scratch_nbytes == 2 * 16 * op.weights.K_padded * np.dtype(dtype).itemsize
    assert plan.tactic == f"rows16r{DO.RESERVE_SMS}"
    B, sc, zp, gi, b = ins
    want = matmul_nbits_ref(A.astype(np.float64), B, sc, zp, gi, b, K=K, N=N, bits=bits, block_size=bs)
    assert relative_error(got.astype(np.float64), want) <= TOLERANCES[np.dtype(dtype).name]
    if SIMULATED and not g_idx:  # ORT's chunked route takes no g_idx
        ort = _op(ins, N, K, bits, bs, {**base, "numba_nbits.force_route": "dequant_cublas_chunked"}, chunks)
        assert np.array_equal(np.asarray(ort(A)).view(np.uint8), got.view(np.uint8))


def test_bad_plan_parameters_are_refused():
    rng = np.random.default_rng(1)
    ins = _problem(rng, 16, 64)
    op = _op(ins, 16, 64, 4, 32, {"numba_nbits.force_route": "dequant_overlap"})
    op(np.zeros((2, 64), np.float16))
    plan = op._entries[2].plan
    for kw in (dict(chunks=0), dict(reserve_sms=-1)):
        with pytest.raises(ValueError, match="chunks >= 1 and reserve_sms >= 0"):
            DO.OverlapPlan(plan.w, op.problem(2), load_config({}), **kw)
    with pytest.raises(ValueError, match="serves the route dequant_overlap, not 'dequant_cublas'"):
        DO.build(plan.w, op.problem(2), load_config({}), "dequant_cublas")


# ------------------------------------------------------------------------------------------------ GPU
def _gpu_case(rng, N=8192, K=2048, M=1024, dtype=np.float16):
    ins = _problem(rng, N, K, 4, 128, False, dtype, bias=True)
    op = _op(ins, N, K, 4, 128, {"use_tf32": False})
    return op, ins, N, K, M


def _want(ins, A, N, K):
    B, sc, zp, gi, b = ins
    return matmul_nbits_ref(A.astype(np.float64), B, sc, zp, gi, b, K=K, N=N, bits=4, block_size=128)


@requires_gpu
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_default_call_takes_the_overlapped_route_and_matches_the_oracle(dtype):
    from numba_nbits.arrays import np_dtype

    dt = np_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    rng = np.random.default_rng(7)
    op, ins, N, K, M = _gpu_case(rng, dtype=dt)
    assert op.route(M) == "dequant_overlap"
    A = rng.standard_normal((M, K)).astype(dt)
    got = np.asarray(op(A)).astype(np.float64)
    plan = op._entries[M].plan
    assert plan.rows == 2048 and len(plan.chunks) == 4 and plan.sm_target > 0
    assert relative_error(got, _want(ins, A, N, K)) <= TOLERANCES[dt.name]


@requires_gpu
def test_without_reserved_sms_it_is_orts_chunked_chain_bit_for_bit(monkeypatch):
    """With every SM left to cuBLAS the overlapped route issues the chunked chain's launches (other streams, same
    kernels and GEMMs), so the bytes agree exactly; with SMs reserved they agree within tolerance."""
    from numba import cuda

    monkeypatch.setattr(DO, "RESERVE_SMS", 0)
    rng = np.random.default_rng(8)
    op, ins, N, K, M = _gpu_case(rng)
    A = cuda.to_device(rng.standard_normal((M, K)).astype(np.float16))
    got = op(A).copy_to_host()
    assert op._entries[M].plan.sm_target == 0
    B, sc, zp, gi, b = ins
    chunked = nb.MatMulNBits(B, sc, zp, gi, b, K=K, N=N, bits=4, block_size=128,
                             config={"use_tf32": False, "numba_nbits.force_route": "dequant_cublas_chunked"},
                             environ={"ORT_MATMULNBITS_CHUNK_SIZE": "2048"})
    assert np.array_equal(chunked(A).copy_to_host().view(np.uint16), got.view(np.uint16))


@requires_gpu
def test_back_to_back_calls_captured_calls_and_a_second_thread_agree():
    """Ten calls on one stream without a synchronisation between them (each call's side stream writes the buffers the
    previous call's GEMMs read): each equals the eager call of its input bit for bit. A captured call, replayed, and a
    call captured by a thread without a lane (the same launches in order on the capture stream) match the oracle."""
    from numba import cuda

    rng = np.random.default_rng(9)
    op, ins, N, K, M = _gpu_case(rng)
    As = [cuda.to_device(rng.standard_normal((M, K)).astype(np.float16)) for _ in range(10)]
    eager = []
    for A in As:
        eager.append(op(A).copy_to_host())
    outs = [cuda.device_array((M, N), np.float16) for _ in As]
    s = cuda.stream()
    for A, Y in zip(As, outs):
        op(A, out=Y, stream=s)
    s.synchronize()
    for Y, e in zip(outs, eager):
        assert np.array_equal(Y.copy_to_host().view(np.uint16), e.view(np.uint16))
    assert relative_error(eager[3].astype(np.float64), _want(ins, As[3].copy_to_host(), N, K)) <= 2e-3

    Y = cuda.device_array((M, N), np.float16)
    graph = nb.capture(lambda st: op(As[1], out=Y, stream=st))
    for _ in range(3):
        graph.replay()
    graph.synchronize()
    assert relative_error(Y.copy_to_host().astype(np.float64), _want(ins, As[1].copy_to_host(), N, K)) <= 2e-3

    got, errors = {}, []

    def other():
        try:
            from numba_nbits.lanes import lane_for

            assert lane_for(op.weights.device_id, create=False) is None
            Z = cuda.device_array((M, N), np.float16)
            g = nb.capture(lambda st: op(As[2], out=Z, stream=st))
            g.replay()
            g.synchronize()
            got["captured"] = Z.copy_to_host()
            got["eager"] = op(As[4]).copy_to_host()
            got["lane"] = lane_for(op.weights.device_id, create=False) is not None
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert not errors, errors
    assert got["lane"]
    assert relative_error(got["captured"].astype(np.float64), _want(ins, As[2].copy_to_host(), N, K)) <= 2e-3
    assert np.array_equal(got["eager"].view(np.uint16), eager[4].view(np.uint16))


@requires_gpu
def test_a_high_priority_side_stream_gives_the_same_bytes():
    """The side stream's priority changes when the dequantize CTAs start, not what they compute."""
    from numba import cuda

    from numba_nbits.arrays import adapt_input

    rng = np.random.default_rng(10)
    op, ins, N, K, M = _gpu_case(rng)
    A = cuda.to_device(rng.standard_normal((M, K)).astype(np.float16))
    outs = [cuda.device_array((M, N), np.float16) for _ in range(2)]
    a = adapt_input(A, "A", False, False).dev
    for hp, Y in zip((False, True), outs):
        plan = DO.OverlapPlan(op.weights, op.problem(M), op.config, high_priority=hp)
        assert plan.tactic.endswith("p") == hp
        plan.enqueue(a, adapt_input(Y, "Y", False, False).dev, 0)
    cuda.synchronize()
    got = [Y.copy_to_host() for Y in outs]
    assert np.array_equal(got[0].view(np.uint16), got[1].view(np.uint16))
    B, sc, zp, gi, _ = ins
    want = matmul_nbits_ref(A.copy_to_host().astype(np.float64), B, sc, zp, gi, None, K=K, N=N, bits=4, block_size=128)
    assert relative_error(got[1].astype(np.float64), want) <= 2e-3
