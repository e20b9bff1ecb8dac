"""Issue 18 items 4-5: the knobs of spec §8 that steer kernels (L2 prefetch, paired-K and wave-aware GEMV
tactics, fpA_intB M chunking) and the fpA_intB profiler never losing to the route it replaces.

Simulator cases are tiny (N <= 64, K <= 256); each asserts a visible effect of its knob (kernel name,
generated source, candidate list, chunk count), so a knob that does nothing fails its test.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu

from numba_nbits.arrays import np_dtype, to_device, to_host
from numba_nbits.config import Config, load_config
from numba_nbits.dispatch.problem import Problem
from numba_nbits.formats import quantize
from numba_nbits.kernels.gemv import core as gc
from numba_nbits.kernels.gemv import core_source as gcs
from numba_nbits.kernels.gemv import mma as G
from numba_nbits.kernels.gemv import tactics as gemv_tactics
from numba_nbits.kernels.gemv import w8 as gemv_w8
from numba_nbits.launch import simulated
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.weights import build_weights

SIM = simulated()


def _make(rng, N, K, bs, dtype, M, bits=4, zp_kind="none"):
    W = rng.standard_normal((N, K)).astype(np.float32).astype(np_dtype(dtype))
    B, sc, zp = quantize(W, bits, bs, symmetric=(zp_kind == "none"))
    w = build_weights(B, sc, zp, K=K, N=N, bits=bits, block_size=bs, simulated=SIM)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float32).astype(np_dtype(dtype))
    ref = matmul_nbits_ref(A, B, sc, zp, K=K, N=N, bits=bits, block_size=bs)
    return w, A, ref


def _fp16_case(rng, N, K, bs, M):
    """Symmetric 4-bit ORT bytes of a random fp16 (N, K) weight, an fp16 (M, K) A and the oracle."""
    W = rng.standard_normal((N, K)).astype(np.float16)
    B, sc, zp = quantize(W, 4, bs, symmetric=True)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
    return B, sc, zp, A, matmul_nbits_ref(A, B, sc, zp, K=K, N=N, bits=4, block_size=bs)


def _problem(w, M, **kw):
    return Problem(M=M, N=w.N, K=w.K, bits=w.bits, block_size=w.block_size, dtype=w.dtype, zero_points=w.zp_kind,
                   **kw)


def _run(plan, A, N):
    a = to_device(A, SIM)
    out = to_device(np.zeros((A.shape[0], N), A.dtype), SIM)
    plan.run(a, out, 0)
    return to_host(out)


def _ok(y, ref, dtype):
    err = relative_error(y, ref)
    assert err < TOLERANCES[dtype], err


# ====================================================================== L2 prefetch (8-bit, M = 1)

PF_ON = load_config({"ORT_QUANTIZED_DECODE_L2_PREFETCH": "1"})


def test_l2_prefetch_gate():
    p = Problem(M=1, N=64, K=256, bits=8, block_size=32, dtype="float16")
    assert gemv_w8.l2_prefetch(p, PF_ON)
    assert not gemv_w8.l2_prefetch(p, Config()) and not gemv_w8.l2_prefetch(p, None)
    assert not gemv_w8.l2_prefetch(Problem(M=2, N=64, K=256, bits=8, block_size=32, dtype="float16"), PF_ON)
    assert not gemv_w8.l2_prefetch(Problem(M=1, N=64, K=256, bits=8, block_size=32, dtype="float16", sm=75), PF_ON)


def test_l2_prefetch_source_only_with_the_knob():
    for tag in ("t1w8u1", "t2w4u1p1s3", "t1w8u1p1b4r3g4"):
        tac = gemv_tactics.Tactic.parse(tag)
        gen = G.generate_source  # the ring generator for ring tactics
        assert "prefetch_l2" not in gen("float16", 1, tac, 32, "none", 8)
        assert "prefetch_l2" in gen("float16", 1, tac, 32, "none", 8, True)
    spec = gcs.Spec("float32", 8, 32, "none", 16, 1, 4, 2, 8)
    assert "prefetch_l2" not in gcs.generate_source(spec)
    on = gcs.Spec("float32", 8, 32, "none", 16, 1, 4, 2, 8, l2pf=True)
    assert "prefetch_l2" in gcs.generate_source(on) and on.name == spec.name + "_l2pf"


@pytest.mark.parametrize("dtype,tag", [("float16", "t1w1u1"), ("bfloat16", "t1w1u1p1r2")])
def test_l2_prefetch_tensor_core_plan(rng, dtype, tag):
    # 4 super-chunks per row, prefetch 2 stages ahead: the prefetches of super-chunks 0 and 1 are issued
    # (the twin checks their range) and those of 2 and 3 are guarded off
    w, A, ref = _make(rng, 16, 256, 32, dtype, 1, bits=8)
    tac = gemv_tactics.Tactic.parse(tag)
    off = gemv_w8.build(w, _problem(w, 1), Config(), tactic=tac)
    on = gemv_w8.build(w, _problem(w, 1), PF_ON, tactic=tac)
    assert not off.kernel.endswith("_l2pf") and on.kernel == off.kernel + "_l2pf"
    _ok(_run(off, A, w.N), ref, dtype)
    _ok(_run(on, A, w.N), ref, dtype)
    # M = 2 is not the M = 1 kernel: no prefetch
    w2, A2, ref2 = _make(rng, 16, 256, 32, dtype, 2, bits=8)
    assert not gemv_w8.build(w2, _problem(w2, 2), PF_ON, tactic=tac).kernel.endswith("_l2pf")


def test_l2_prefetch_cuda_core_plan(rng):
    # fp32 A: the CUDA-core engine; K = 8192 8-bit = 512 16-byte chunks per row, so lanes prefetch
    w, A, ref = _make(rng, 8, 8192, 128, "float32", 1, bits=8)
    off = gemv_w8.build(w, _problem(w, 1), Config())
    on = gemv_w8.build(w, _problem(w, 1), PF_ON)
    assert on.spec.l2pf and not off.spec.l2pf and on.spec.name == off.spec.name + "_l2pf"
    _ok(_run(on, A, w.N), ref, "float32")


# ============================================================= fpA_intB profiler candidates (CPU only)

import numba_nbits as nb  # noqa: E402
from numba_nbits.dispatch import profiler as prof  # noqa: E402
from numba_nbits.dispatch.profiler import Candidate, TacticProfiler  # noqa: E402
from numba_nbits.dispatch.select import select  # noqa: E402
from numba_nbits.kernels import fpa_intb  # noqa: E402

from test_fpa_intb import ON, P, _fresh_tactics  # noqa: E402, F401 (the profiler-cache fixture is autouse here too)


def labels(p, cfg=ON, prepacked=False):
    return [c.label for c in prof.candidates(p, cfg, prepacked=prepacked)]


class Timer:
    def __init__(self, table, default=1.0):
        self.table, self.default, self.calls = table, default, []

    def __call__(self, cand, m, make_runner, stream):
        self.calls.append((cand.label, m))
        return self.table.get(cand.label, self.default)


def _profiler(p, cfg=ON, timer=None):
    return TacticProfiler(p, cfg, packing_sm=80, prepacked=False,
                          make_runner=lambda c, m: (lambda: (lambda s: None)), timer=timer)


@pytest.mark.parametrize("kw", [dict(N=18944, K=3584, block_size=32), dict(bits=8, block_size=128),
                                dict(has_bias=True, zero_points="packed"), dict(N=262144, K=4096),
                                dict(dtype="bfloat16", bits=8, block_size=32)])
def test_every_bucket_has_the_route_fpa_intb_replaces(kw):
    off = ON.replace(fpa_intb_gemm=False)
    for m in prof.DEFAULT_BUCKETS:
        p = P(M=m, **kw)
        base = select(p, off).name
        assert prof.baseline(p, ON).name == base
        assert any(c.name == base for c in prof.candidates(p, ON, prepacked=False)), (m, base)


def test_m16_default_gemv_is_a_candidate_and_wins_when_fastest():
    # issue 18 item 5: 18944x3584 block 32 M=16, the mixed GEMM 68 us vs the default GEMV 31 us
    p = P(M=16, N=18944, K=3584, block_size=32)
    assert select(p, ON.replace(fpa_intb_gemm=False)).name == "gemv_w4"
    assert "gemv:gemv_w4" in labels(p)
    timer = Timer({"gemv:gemv_w4": 31e-6}, default=68e-6)
    t = _profiler(p, timer=timer)
    assert t.get(16).label == "gemv:gemv_w4" and t.get(12).label == "gemv:gemv_w4"
    assert ("gemv:gemv_w4", 16) in timer.calls
    # without the baseline the mixed GEMM would have won the bucket: it was timed too
    assert {lab for lab, _ in timer.calls} >= {"mixed_gemm:m16", "dequant_cublas"}


def test_fpa_plan_runs_the_baseline_gemv(rng):
    # the profiled choice builds: fpa_intb plan for M = 12 (bucket 16) serves through gemv_w4
    w, A, ref = _make(rng, 64, 128, 32, "float16", 12)
    p = _problem(w, 12)
    t = fpa_intb.profiler(w, p, ON, timer=Timer({"gemv:gemv_w4": 1e-6}))
    plan = fpa_intb.build(w, p, ON, "fpa_intb")
    assert fpa_intb.profiler(w, p, ON) is t  # the node's one profiler, kept with its weights
    assert plan.tactic == "gemv:gemv_w4" and plan.bucket == 16 and plan.kernel.startswith("gemv_mma_w4")
    _ok(_run(plan, A, w.N), ref, "float16")


# =========================================================================== paired-K (M 5..8)

def _pk(mode):
    return ON.replace(gemv_paired_k=mode)


def test_paired_k_candidates_off_on_force():
    p8 = P(M=8)
    assert not any("paired_k" in lab for lab in labels(p8, _pk("off")))
    on = labels(p8, _pk("on"))
    assert on[on.index("gemv:gemv_w4") + 1] == "gemv:gemv_w4+paired_k" and len(on) == len(labels(p8)) + 1
    assert labels(p8, _pk("force")) == ["gemv:gemv_w4+paired_k"]
    assert labels(P(M=5), _pk("force")) == ["gemv:gemv_w4+paired_k"]
    # outside M 5..8, for bf16 and for 8-bit weights it does not apply: the candidates are unchanged
    for p in (P(M=4), P(M=9), P(M=16), P(M=8, dtype="bfloat16"), P(M=8, bits=8, block_size=128)):
        assert labels(p, _pk("force")) == labels(p, _pk("on")) == labels(p)
    # the choices of different candidate sets are not shared
    assert len({prof.tactic_key(p8, 80, False, _pk(m)) for m in ("off", "on", "force")}) == 3


def test_paired_k_tactic_splits_k_over_a_pair():
    d = gemv_tactics.default_tactic(4096, 4096, 64, 8)
    t = gemv_tactics.paired_k_tactic(4096, 4096, 64, 8)
    assert t.ksplit == 2 and d.ksplit == 1 and (t.tpw, t.warps, t.unroll) == (d.tpw, d.warps, d.unroll)


def test_paired_k_force_runs_it_end_to_end(rng):
    # the simulator times nothing; a single candidate needs no timing, so "force" runs the paired-K kernel
    N, K, bs, M = 64, 256, 32, 6
    B, sc, zp, A, ref = _fp16_case(rng, N, K, bs, M)
    op = nb.MatMulNBits(B, sc, zp, None, None, K=K, N=N, bits=4, block_size=bs, environ={},
                        config={"ep.cuda.fpa_intb_gemm": "1", "ep.cuda.fpa_intb_gemv_paired_k": "force"})
    assert op.route(M) == "fpa_intb"
    _ok(op(A), ref, "float16")
    plan = op._entries[M].plan
    assert plan.tactic == "gemv:gemv_w4+paired_k" and plan.inner.tactic.ksplit == 2
    assert "k2" in plan.kernel
    op_off = nb.MatMulNBits(B, sc, zp, None, None, K=K, N=N, bits=4, block_size=bs, environ={},
                            config={"ep.cuda.fpa_intb_gemm": "1"})
    op_off(A)
    off = op_off._entries[M].plan.tactic
    assert "paired_k" not in off  # a GPU times the candidates (any may win); the simulator takes the mixed GEMM
    assert off.startswith("mixed_gemm:") or not SIMULATED


# ========================================================================= wave-aware (M < 16)

def test_wave_aware_candidates_only_when_on():
    wv = ON.replace(gemv_wave_aware=True)
    for m in (1, 8, 15):
        assert not any("+wave" in lab for lab in labels(P(M=m)))
        got = labels(P(M=m), wv)
        assert got[got.index("gemv:gemv_w4") + 1] == "gemv:gemv_w4+wave"
    assert "gemv:gemv_w8+wave" in labels(P(M=2, bits=8, block_size=128, dtype="bfloat16"), wv)
    assert not any("+wave" in lab for lab in labels(P(M=16), wv))
    assert not any("+wave" in lab for lab in labels(P(M=4, block_size=256, bits=8), wv))  # no tensor-core GEMV


def test_wave_aware_tactic_fills_whole_waves():
    R, sms = gemv_tactics.WAVE_CTAS_PER_SM[1], 132
    big = gemv_tactics.wave_tactic(28672, 8192, 128, 1, 4, sms)  # many tile groups: one persistent wave
    assert big.ring and big.grid == R and big.minb == R and big.ksplit == 1
    small = gemv_tactics.wave_tactic(1024, 8192, 128, 1, 4, sms)  # 64 tile groups: split-K into one wave
    assert small.ksplit == min(8, R * sms // 64) == 8 and not small.ring and small.minb == R
    assert 64 * small.ksplit <= R * sms
    assert gemv_tactics.wave_tactic(28672, 8192, 128, 12, 4, sms).minb == gemv_tactics.WAVE_CTAS_PER_SM[2]


@pytest.mark.parametrize("N,K,bs,M,bits,dtype", [(160, 128, 32, 1, 4, "float16"),  # 10 groups > 1 wave of 8
                                                 (16, 1024, 64, 3, 4, "bfloat16"),  # 1 group: split-K 2
                                                 (96, 128, 128, 2, 8, "float16")])
def test_wave_aware_plan_matches_oracle(rng, N, K, bs, M, bits, dtype):
    w, A, ref = _make(rng, N, K, bs, dtype, M, bits=bits)
    p = _problem(w, M)
    route = f"gemv_w{bits}"
    plan = fpa_intb.build_candidate(w, p, ON, Candidate("gemv", f"{route}+wave"), 80)
    tac, mma = plan.tactic, plan.mma
    R = gemv_tactics.WAVE_CTAS_PER_SM[1]
    wave = R * G.sm_count(SIMULATED)
    groups = -(-N // (16 * tac.tpw))
    assert mma.grid == (min(groups, wave) if tac.ring else groups * tac.ksplit) and mma.grid <= wave
    assert tac != gemv_tactics.default_tactic(N, K, bs, M, bits)
    _ok(_run(plan, A, N), ref, dtype)


# ============================================================================ fpA_intB M chunking

def test_m_chunk_rows_rule():
    b = prof.initial_buckets(None)
    cfg = Config(m_chunk_size=1000)
    # 18944 x 3584 fp16: cutoff floor(256 MiB / (22528 * 2)) = 5957 -> bucket 4096; Mc 1000 -> bucket 512
    assert fpa_intb.m_chunk_rows(4096, 18944, 3584, 2, cfg, b) == 0
    assert fpa_intb.m_chunk_rows(4097, 18944, 3584, 2, cfg, b) == 512
    assert fpa_intb.m_chunk_rows(600, 18944, 3584, 2, cfg.replace(force_chunked=True), b) == 512
    assert fpa_intb.m_chunk_rows(512, 18944, 3584, 2, cfg.replace(force_chunked=True), b) == 0  # M <= Mc
    assert fpa_intb.m_chunk_rows(9000, 18944, 3584, 2, Config(), b) == 0  # Mc 0 = off
    assert fpa_intb.m_chunk_rows(20000, 18944, 3584, 2, Config(m_chunk_size=9000), b) == 9000  # >= 8192 as is
    assert fpa_intb.m_chunk_rows(20, 64, 64, 2, Config(m_chunk_size=6, force_chunked=True), (1, 3, 100)) == 4
    assert fpa_intb.m_chunk_rows(20, 64, 64, 2, Config(m_chunk_size=3, force_chunked=True), (1, 3, 100)) == 3


@pytest.mark.parametrize("mc,force,chunks", [(2, True, 3), (3, True, 3), (0, True, 1), (2, False, 1)])
def test_m_chunked_plan_matches_oracle(rng, mc, force, chunks):
    N, K, bs, M = 64, 64, 32, 5
    W = rng.standard_normal((N, K)).astype(np.float16)
    B, sc, zp = quantize(W, 4, bs, symmetric=True)
    bias = rng.standard_normal(N).astype(np.float16)
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float16)
    ref = matmul_nbits_ref(A, B, sc, zp, bias=bias, K=K, N=N, bits=4, block_size=bs)
    env = {"ORT_MATMULNBITS_FORCE_CHUNKED": "1"} if force else {}
    op = nb.MatMulNBits(B, sc, zp, None, bias, K=K, N=N, bits=4, block_size=bs, environ=env,
                        config={"ep.cuda.fpa_intb_gemm": "1", "ep.cuda.matmul_nbits_m_chunk_size": mc})
    assert op.route(M) == "fpa_intb"
    _ok(op(A), ref, "float16")
    plan = op._entries[M].plan
    assert len(plan.chunks) == chunks and sum(n for _, n in plan.chunks) == M
    if chunks > 1:  # Mc = 3 rounds down to bucket 2: rows 0-1, 2-3, 4
        assert plan.m_chunk_size == 2 and plan.chunks == ((0, 2), (2, 2), (4, 1))
        assert plan.tactic.endswith(";m_chunks=3x2") and set(plan.plans) == {2, 1}
        assert sorted(op.fpa_profiler().profiled) == [1, 2]  # each chunk ran its own bucket's tactic
    else:
        assert plan.m_chunk_size == 0 and ";m_chunks" not in plan.tactic


# ============================================================================ GPU (real kernels)



@requires_gpu
@pytest.mark.parametrize("N,K,bs,dtype", [(4096, 4096, 32, "float16"), (4096, 4096, 128, "bfloat16"),
                                          (1032, 8192, 64, "float16"), (4096, 4096, 128, "float32")])
def test_gpu_l2_prefetch(rng, N, K, bs, dtype):
    w, A, ref = _make(rng, N, K, bs, dtype, 1, bits=8)
    p = _problem(w, 1, sm=90)
    plan = gemv_w8.build(w, p, PF_ON)
    assert plan.kernel.endswith("_l2pf")
    _ok(_run(plan, A, N), ref, dtype)
    for tag in ("t1w8u1p1b4r3g4", "t2w8u1p1s3"):  # ring and 3-stage kernels with the prefetch
        if dtype != "float32":
            _ok(_run(gemv_w8.build(w, p, PF_ON, tactic=gemv_tactics.Tactic.parse(tag)), A, N), ref, dtype)


@requires_gpu
@pytest.mark.parametrize("N,K,bs,M", [(4096, 4096, 32, 5), (4096, 4096, 128, 8), (14336, 4096, 64, 6)])
def test_gpu_paired_k(rng, N, K, bs, M):
    w, A, ref = _make(rng, N, K, bs, "float16", M, zp_kind="packed")
    plan = fpa_intb.build_candidate(w, _problem(w, M), ON, Candidate("gemv", "gemv_w4+paired_k"), 80)
    assert plan.tactic.ksplit == 2
    _ok(_run(plan, A, N), ref, "float16")
    _ok(_run(plan, A, N), ref, "float16")  # the split-K counters reset for the next launch


@requires_gpu
@pytest.mark.parametrize("N,K,bs,M,bits,dtype", [(8192, 4096, 32, 1, 4, "float16"),  # ring, one persistent wave
                                                 (4096, 4096, 128, 4, 4, "bfloat16"),  # split-K 2
                                                 (1024, 8192, 64, 1, 4, "float16"),  # split-K 8
                                                 (8192, 4096, 128, 12, 4, "float16"),  # two m-tiles
                                                 (8192, 4096, 128, 1, 8, "bfloat16"), (8192, 4096, 64, 3, 2, "float16")])
def test_gpu_wave_aware(rng, N, K, bs, M, bits, dtype):
    w, A, ref = _make(rng, N, K, bs, dtype, M, bits=bits)
    plan = fpa_intb.build_candidate(w, _problem(w, M), ON, Candidate("gemv", f"gemv_w{bits}+wave"), 80)
    mma, tac = plan.mma, plan.tactic
    MT = 1 if M <= 8 else 2
    R = gemv_tactics.WAVE_CTAS_PER_SM[MT]
    sms = G.sm_count(False)
    assert mma.grid <= R * sms
    _ok(_run(plan, A, N), ref, dtype)
    # the launch bounds give at least R resident CTAs (what the grid assumes); report the real number
    smem = (2 if tac.ring else 1) * tac.warps * 128 * MT * 4
    resident = gc.resident_blocks(mma._kernel, 32 * tac.warps, smem)
    print(f"{mma.kernel}: grid {mma.grid}, resident CTAs/SM {resident}, assumed {R}")
    assert resident >= R


@requires_gpu
def test_gpu_m_chunked(rng):
    N, K, bs, M = 4096, 4096, 64, 100
    B, sc, zp, A, ref = _fp16_case(rng, N, K, bs, M)
    op = nb.MatMulNBits(B, sc, zp, None, None, K=K, N=N, bits=4, block_size=bs,
                        environ={"ORT_MATMULNBITS_FORCE_CHUNKED": "1"},
                        config={"ep.cuda.fpa_intb_gemm": "1", "ep.cuda.matmul_nbits_m_chunk_size": 40})
    _ok(op(A), ref, "float16")
    plan = op._entries[M].plan
    assert plan.chunks == ((0, 32), (32, 32), (64, 32), (96, 4))
