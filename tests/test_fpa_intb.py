"""The fpA_intB route (spec §7): guards via ``select``, the weight_prepacked rules of §7.3, the tactic
profiler (§7.6) with a fake timer, capture lookup-only, and the operator end to end against the oracle.

CPU-only parts launch nothing. The simulator end-to-end cases are tiny (N, K <= 128, M <= 17); the
GPU cases (``requires_gpu``) cover M in {1, 15, 16, 17, 32, 100, 128, 512, 2048} with the real
CUDA-event profiler and graph capture.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from conftest import SIMULATED, exhaustive, requires_gpu, to_dev, to_host

import numba_nbits as nb
from numba_nbits import launch
from numba_nbits import op as op_mod
from numba_nbits.arrays import np_dtype
from numba_nbits.config import Config, load_config
from numba_nbits.dispatch import profiler as prof
from numba_nbits.dispatch.problem import Problem
from numba_nbits.dispatch.profiler import Candidate, TacticProfiler
from numba_nbits.dispatch.select import select
from numba_nbits.formats import quantize
from numba_nbits.kernels import fpa_intb
from numba_nbits.kernels import mixed_gemm as MG
from numba_nbits.kernels.family import Plan
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

ON = load_config({}, {"ep.cuda.fpa_intb_gemm": "1"})
OFF = load_config({})
CAPTURE_TEXT = ("The M bucket was not profiled before CUDA graph capture; run a warmup inference outside capture "
                "first.")


@pytest.fixture(autouse=True)
def _fresh_tactics():
    prof.clear_shared_cache()
    yield
    prof.clear_shared_cache()


def P(**kw):
    base = dict(M=1, N=4096, K=4096, bits=4, block_size=64, dtype="float16")
    base.update(kw)
    return Problem(**base)


def rejected_by(p, cfg=ON):
    d = select(p, cfg)
    assert d.name != "fpa_intb", "fpa_intb was chosen"
    return {r: g for r, g, _ in d.reasons}["fpa_intb"]


# =============================================================================== routing (CPU only)

def test_enable_switch_env_and_config():
    p = P()
    assert select(p, OFF).name == "gemv_w4"
    assert rejected_by(p, OFF) == "fpa_enabled"
    assert select(p, load_config({"ORT_FPA_INTB_GEMM": "1"})).name == "fpa_intb"
    assert select(p, load_config({"ORT_FPA_INTB_GEMM": " On "})).name == "fpa_intb"
    assert select(p, load_config({"ORT_FPA_INTB_GEMM": "off"})).name == "gemv_w4"
    # the session-config key wins over the environment
    assert select(p, load_config({"ORT_FPA_INTB_GEMM": "1"}, {"ep.cuda.fpa_intb_gemm": "0"})).name == "gemv_w4"
    assert select(p, load_config({"ORT_FPA_INTB_GEMM": "0"}, {"ep.cuda.fpa_intb_gemm": "all"})).name == "fpa_intb"
    assert select(p, Config().replace(fpa_intb_gemm=True)).name == "fpa_intb"
    # weight_prepacked != 0 enables it without the switch
    assert select(P(weight_prepacked=1), OFF).name == "fpa_intb"


def test_precedes_every_route_and_fuses_bias():
    for kw in (dict(N=64, K=2880, block_size=32, has_bias=True),  # would be router-like / gemv
               dict(M=1, has_bias=True), dict(M=5, bits=4), dict(M=17), dict(M=2048, zero_points="typed"),
               dict(M=64, N=131072, K=4096),  # would be chunked
               dict(M=3, zero_points="packed")):
        d = select(P(**kw), ON)
        assert d.name == "fpa_intb" and d.reasons == ()
        assert d.bias == ("fused" if kw.get("has_bias") else "none")


@pytest.mark.parametrize("kw, guard", [
    (dict(dtype="float32"), "fpa_dtype"),
    (dict(block_size=16), "block_in_32_64_128"),
    (dict(block_size=256), "block_in_32_64_128"),
    (dict(bits=2), "bits_in_4_8"),
    (dict(has_g_idx=True), "no_g_idx"),
    (dict(N=4096 + 32), "fpa_n_align"),  # 4-bit needs N % 64
    (dict(bits=8, N=4096 + 16), "fpa_n_align"),  # 8-bit needs N % 32
    (dict(K=4096 + 32, block_size=64), "k_mult_block"),
    (dict(sm=70), "sm_75"),
    (dict(weight_prepacked=2, sm=80), "fpa_sm90_layout"),
    (dict(weight_prepacked=2, block_size=32), "fpa_sm90_layout"),
])
def test_guard_rejections(kw, guard):
    p = P(**kw)
    if p.weight_prepacked:  # a prepacked B has nowhere else to go: select raises the spec's text
        with pytest.raises(ValueError, match=rf"weight_prepacked requires the fpA_intB path.*guard {guard} fails"):
            select(p, ON)
    else:
        assert rejected_by(p) == guard


@pytest.mark.parametrize("kw", [dict(block_size=32), dict(block_size=128), dict(sm=75), dict(N=64, K=64),
                                dict(weight_prepacked=2, block_size=128), dict(weight_prepacked=1, sm=80),
                                dict(dtype="bfloat16", zero_points="typed", has_bias=True)])
def test_guard_acceptances(kw):
    assert select(P(**kw), ON).name == "fpa_intb"


def test_eight_bit_waits_for_the_kernel():
    p = P(bits=8, N=4096 + 32)  # N % 32 == 0 is enough for 8-bit
    if MG.supports(p):
        assert select(p, ON).name == "fpa_intb"
    else:
        assert rejected_by(p) == "fpa_kernel_available"


def test_force_route():
    forced = load_config({"NUMBA_NBITS_FORCE_ROUTE": "fpa_intb"})
    d = select(P(M=3), forced)  # forcing needs no enable switch
    assert d.name == "fpa_intb" and d.forced
    with pytest.raises(ValueError, match="forced route 'fpa_intb' cannot serve .* fpa_dtype"):
        select(P(dtype="float32"), forced)
    with pytest.raises(ValueError, match="forced route 'dequant_cublas' cannot serve .* B is prepacked"):
        select(P(weight_prepacked=1), load_config({}, {"numba_nbits.force_route": "dequant_cublas"}))


def test_explain_shows_the_route(capsys):
    from numba_nbits.explain import explain, main

    assert explain(64, 4096, 4096, block_size=64, config={"ep.cuda.fpa_intb_gemm": "1"}).name == "fpa_intb"
    assert main(["--M", "64", "--block-size", "64", "--no-env", "--config", "ep.cuda.fpa_intb_gemm=1"]) == 0
    out = capsys.readouterr().out
    assert "✔ fpa_intb" in out and "route: fpa_intb" in out
    assert main(["--M", "1", "--no-env"]) == 0
    assert "✘ fpa_intb                 rejected by fpa_enabled" in capsys.readouterr().out
    assert main(["--M", "8", "--block-size", "128", "--weight-prepacked", "2", "--no-env", "--sm", "90"]) == 0
    assert "route: fpa_intb" in capsys.readouterr().out


# ================================================================================ profiler (CPU only)

def test_buckets():
    assert prof.initial_buckets(None) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    assert prof.initial_buckets((3, 100)) == (1, 3, 100)
    assert prof.initial_buckets((5,)) == (1, 5)
    assert [prof.next_pow2(m) for m in (0, 1, 2, 3, 17, 1024, 1025)] == [1, 1, 2, 4, 32, 1024, 2048]
    cfg = load_config({"ORT_FPA_INTB_PROFILE_M": "12, 4,x,4"})  # malformed entries ignored (config.py)
    t = _profiler(cfg=cfg)
    assert t.buckets == (1, 4, 12) and t.max_m == 12
    assert [t.bucket(m) for m in (1, 3, 4, 5, 12, 13, 5000)] == [1, 4, 4, 8, 12, 12, 12]
    listed = _profiler(cfg=load_config({}, {"ep.cuda.fpa_intb_profile_m": "3,100"}))
    assert listed.buckets == (1, 3, 100)
    assert [listed.bucket(m) for m in (3, 2, 5, 64, 65, 100, 101)] == [3, 2, 8, 64, 100, 100, 100]


class FakeTimer:
    def __init__(self, table, default=1.0, fail=()):
        self.table, self.default, self.fail = table, default, set(fail)
        self.calls = []

    def __call__(self, cand, m, make_runner, stream):
        self.calls.append((cand.label, m))
        assert callable(make_runner)
        if cand.label in self.fail:
            raise RuntimeError("cannot launch")
        t = self.table.get(cand.label, self.default)
        return t(m) if callable(t) else t


def _profiler(problem=None, cfg=ON, timer=None, prepacked=False, packing_sm=80):
    p = problem or P(weight_prepacked=1 if prepacked else 0)
    return TacticProfiler(p, cfg, packing_sm=packing_sm, prepacked=prepacked,
                          make_runner=lambda c, m: (lambda: (lambda s: None)), timer=timer)


def test_candidates():
    labels = [c.label for c in prof.candidates(P(M=8), ON, prepacked=False)]
    assert labels == [f"mixed_gemm:{t}" for t in MG.TACTICS] + ["gemv:gemv_w4", "dequant_cublas"]
    # ORT's checkTactic keeps GEMV tactics to m < 16, but at 16 the default route (gemv_w4) is added last
    # (the fpa_intb route must never be slower than the route it replaces; see test_knobs.py)
    at16 = [c.label for c in prof.candidates(P(M=16), ON, prepacked=False)]
    assert at16[-2:] == ["dequant_cublas", "gemv:gemv_w4"]
    assert "gemv:gemv_w4" not in [c.label for c in prof.candidates(P(M=32), ON, prepacked=False)]
    # the GEMV route's own guards decide: block 128 with typed zero points is not a GEMV problem
    assert not any(c.kind == "gemv" for c in prof.candidates(P(M=2, zero_points="typed"), ON, prepacked=False))
    assert [c.kind for c in prof.candidates(P(M=2, weight_prepacked=1), ON, prepacked=True)] == ["mixed_gemm"] * len(
        MG.TACTICS)
    assert Candidate.parse("gemv:gemv_w4") == Candidate("gemv", "gemv_w4")
    assert Candidate.parse("dequant_cublas").kind == "dequant_cublas"
    with pytest.raises(ValueError):
        Candidate.parse("cutlass:7")


def test_profiler_picks_the_fastest_and_shares_it():
    timer = FakeTimer({"mixed_gemm:m64": 3e-6, "dequant_cublas": lambda m: 2e-6 if m < 64 else 4e-6,
                       "gemv:gemv_w4": 2.5e-6, "mixed_gemm:m16": 9e-6})
    t = _profiler(timer=timer)
    assert t.get(3).label == "dequant_cublas"  # M=3 -> bucket 4, dequant+cuBLAS fastest
    assert {m for _, m in timer.calls} == {4} and len(timer.calls) == len(MG.TACTICS) + 2
    assert t.profiled == {4: Candidate("dequant_cublas", "dequant_cublas")}
    assert t.timings[4]["dequant_cublas"] == 2e-6
    n = len(timer.calls)
    assert t.get(4).label == "dequant_cublas" and len(timer.calls) == n  # looked up, not re-profiled
    assert t.get(100).label == "mixed_gemm:m64" and {m for _, m in timer.calls[n:]} == {128}
    assert "gemv:gemv_w4" not in t.timings[128]  # no GEMV candidate at m >= 16
    # another node with the same key reuses the choices
    other_timer = FakeTimer({})
    assert _profiler(timer=other_timer).get(3).label == "dequant_cublas" and other_timer.calls == []
    # a different key (bf16) profiles again
    bf = _profiler(problem=P(dtype="bfloat16"), timer=other_timer)
    assert bf.get(3).label == "mixed_gemm:m16" and other_timer.calls  # all tie at 1.0: the first candidate


def test_profiler_skips_failing_candidates_and_fails_with_ort_text():
    t = _profiler(timer=FakeTimer({"mixed_gemm:m32": 5.0}, default=1.0, fail={"mixed_gemm:m16", "mixed_gemm:m64"}))
    assert t.get(40).label == "mixed_gemm:m128"  # the first of the fastest that ran
    assert "mixed_gemm:m16" in t.errors[64] and math.isinf(t.timings[64]["mixed_gemm:m16"])
    all_fail = {f"mixed_gemm:{n}" for n in MG.TACTICS} | {"dequant_cublas", "gemv:gemv_w4"}
    bad = _profiler(problem=P(N=128), timer=FakeTimer({}, fail=all_fail))
    with pytest.raises(RuntimeError, match=r"^No valid fpA_intB MatMulNBits tactic for M=8, N=128, K=4096$"):
        bad.get(8)
    nan = _profiler(problem=P(N=192), timer=FakeTimer({"dequant_cublas": float("nan")}, default=2.0))
    assert nan.get(1).label == "mixed_gemm:m16"  # NaN never wins


def test_capture_is_lookup_only(monkeypatch):
    timer = FakeTimer({"mixed_gemm:m32": 1e-6})
    t = _profiler(timer=timer)
    monkeypatch.setattr(launch, "is_capturing", lambda s: True)
    with pytest.raises(launch.CaptureError) as ei:
        t.get(20, stream=7)
    assert str(ei.value) == ("No valid fpA_intB MatMulNBits tactic for M=20, N=4096, K=4096. " + CAPTURE_TEXT)
    assert timer.calls == []
    monkeypatch.setattr(launch, "is_capturing", lambda s: False)
    t.get(20)  # warm-up outside capture profiles bucket 32
    n = len(timer.calls)
    monkeypatch.setattr(launch, "is_capturing", lambda s: True)
    assert t.get(31).label == "mixed_gemm:m32" and len(timer.calls) == n
    with pytest.raises(launch.CaptureError, match="M=33"):
        t.get(33)


def test_simulator_choice_is_the_default_tactic(monkeypatch):
    monkeypatch.setattr(launch, "simulated", lambda: True)
    assert prof.default_timer() is None
    t = _profiler()
    for m in (1, 16, 17, 50, 300, 5000):
        assert t.get(m).label == f"mixed_gemm:{MG.default_tactic(t.bucket(m)).name}"
    monkeypatch.setattr(launch, "simulated", lambda: False)
    assert isinstance(prof.default_timer(), prof.EventTimer)


def test_event_timer_median_after_warmup(monkeypatch):
    """EventTimer's protocol against a fake driver: warm-up runs untimed, then record/run/record/sync per rep."""
    log, elapsed = [], iter([5.0, 1.0, 3.0, 2.0, 4.0])

    class Drv:
        CUstream = staticmethod(lambda s: ("stream", s))

        def cuEventCreate(self, flags):
            return 0, object()

        def cuEventRecord(self, ev, stream):
            log.append(("record", stream))
            return (0,)

        def cuEventSynchronize(self, ev):
            log.append("sync")
            return (0,)

        def cuEventElapsedTime(self, a, b):
            return 0, next(elapsed)

        def cuEventDestroy(self, ev):
            log.append("destroy")
            return (0,)

    monkeypatch.setattr(launch, "_drv", lambda: Drv())
    built = []

    def make_runner():
        built.append(1)
        return lambda stream: log.append(("run", stream))

    t = prof.EventTimer(warmup=2, reps=5)(Candidate("mixed_gemm", "m16"), 8, make_runner, 7)
    assert t == pytest.approx(3.0e-3) and built == [1]  # median of 5, 3, 1, 2, 4 ms, in seconds
    assert log[:2] == [("run", 7), ("run", 7)]
    assert log[2:6] == [("record", ("stream", 7)), ("run", 7), ("record", ("stream", 7)), "sync"]
    assert log.count(("run", 7)) == 7 and log[-2:] == ["destroy", "destroy"]


def test_persistent_tactic_cache(tmp_path):
    cfg = load_config({"ORT_CUDA_GEMM_TACTIC_CACHE_DIR": str(tmp_path)},
                      {"ep.cuda.fpa_intb_gemm": "1", "ep.cuda.gemm_tactic_cache_prefix": "run1"})
    timer = FakeTimer({"mixed_gemm:m64": 1e-6})
    t = _profiler(cfg=cfg, timer=timer)
    t.get(50)
    path = tmp_path / ("run1" + prof.TSV_SUFFIX)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("n_16b\tk\tdtype") and len(lines) == 2
    assert lines[1].split("\t") == ["1024", "4096", "float16", "int4_groupwise", "4", "64", "none", "1", "80", "64",
                                    "mixed_gemm:m64"]
    with path.open("a") as f:
        f.write("garbage line\n1\t2\t3\n")  # ignored
    prof.clear_shared_cache()  # a new process
    again = FakeTimer({})
    assert _profiler(cfg=cfg, timer=again).get(64).label == "mixed_gemm:m64" and again.calls == []
    # another key (prepacked: no GEMV / dequant candidates) is not served by that line
    assert _profiler(cfg=cfg, timer=again, prepacked=True).get(64).label == "mixed_gemm:m16" and again.calls


def test_packing_sm_rule():
    assert fpa_intb.packing_sm(90, 2) == 90
    assert [fpa_intb.packing_sm(sm, wp) for sm, wp in ((90, 1), (90, 0), (80, 2), (89, 2))] == [80] * 4
    assert fpa_intb.required_weight_prepacked_format(90) == 2
    assert fpa_intb.required_weight_prepacked_format(80) == 1


# ===================================================================== weight_prepacked (construction)

def _inputs(rng, N=64, K=64, bs=32, dtype="float16", zp="none", bias=False, bits=4, M=3):
    dt = np_dtype(dtype)
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, sc, z = quantize(W.astype(dt), bits, bs, symmetric=(zp == "none"))
    sc = sc.astype(dt)
    if zp == "packed":
        z = rng.integers(0, 256, z.shape).astype(np.uint8)
    elif zp == "typed":
        z = (rng.random((N, K // bs)) * (2 ** bits - 1)).astype(np.float32).astype(dt)
    bi = rng.standard_normal(N).astype(np.float32).astype(dt) if bias else None
    A = (rng.standard_normal((M, K)) * 0.5).astype(np.float32).astype(dt)
    return A, B, sc, z, bi


def _op(B, sc, z, bi, N, K, bs, wp=0, config=None, bits=4):
    return nb.MatMulNBits(B, sc, z, None, bi, K=K, N=N, bits=bits, block_size=bs, weight_prepacked=wp,
                          config=config if config is not None else {}, environ={})


def test_prepacked_rules_every_text(rng, monkeypatch):
    A, B, sc, z, bi = _inputs(rng, bs=64)
    P80 = nb.pack_weights_for_mixed_gemm(B, 64, 64, 4, 80, 64)
    with pytest.raises(ValueError, match=r"^weight_prepacked must be 0 \(not prepacked\), 1 \(SM80 layout\), or 2 "
                                         r"\(SM90 layout\), but got 3$"):
        _op(P80, sc, z, bi, 64, 64, 64, wp=3)
    with pytest.raises(ValueError, match=r"^weight_prepacked=2 \(SM90 layout\) supports block_size 64 or 128 only, "
                                         r"but got 32$"):
        _op(*_inputs(rng, bs=32)[1:], 64, 64, 32, wp=2)
    with pytest.raises(ValueError, match=r"^weight_prepacked requires the fpA_intB path, but it is unsupported for "
                                         r"this node \(check bits, block_size, N/K alignment, g_idx, and compute "
                                         r"capability >= 7.5\) \[guard fpa_n_align"):
        _, B32, sc32, z32, _ = _inputs(rng, N=32, bs=64)
        _op(B32, sc32, z32, None, 32, 64, 64, wp=1)  # N % 64 != 0
    with pytest.raises(ValueError, match=r"^weight_prepacked requires fp16 or bf16 input A so the CUDA fpA_intB path "
                                         r"can consume input B$"):
        _op(P80, sc.astype(np.float32), None, None, 64, 64, 64, wp=1)
    with pytest.raises(ValueError, match=r"^Prepacked MatMulNBits weight size mismatch\. Expected 2048 bytes, "
                                         r"got 2047$"):
        _op(P80[:-1], sc, z, bi, 64, 64, 64, wp=1)
    with pytest.raises(ValueError, match=r"weight_prepacked=1: input B is in the fpA_intB layout.*'gemv_w4'"):
        _op(P80, sc, z, bi, 64, 64, 64, wp=1, config={"numba_nbits.force_route": "gemv_w4"})
    monkeypatch.setattr(fpa_intb, "required_weight_prepacked_format", lambda packing: 2)
    with pytest.raises(ValueError, match=r"^weight_prepacked=1 does not match the format required by the selected "
                                         r"fpA_intB kernel: 2$"):
        _op(P80, sc, z, bi, 64, 64, 64, wp=1)
    monkeypatch.undo()
    # the simulated device is sm 90 (MatMulNBits._device); on an sm 80 device the SM90 layout is refused
    monkeypatch.setattr(op_mod.MatMulNBits, "_device", lambda self: (80, 0))
    with pytest.raises(ValueError, match=r"^weight_prepacked=2 \(SM90 layout\) requires a compute capability 9.0 "
                                         r"\(Hopper\) device, but got sm 80$"):
        _op(nb.pack_weights_for_mixed_gemm(B, 64, 64, 4, 90, 64), sc, z, bi, 64, 64, 64, wp=2)
    op80 = _op(P80, sc, z, bi, 64, 64, 64, wp=1)  # the SM80 layout is fine there
    assert op80.route(5) == "fpa_intb" and op80.problem(5).sm == 80


def test_construction_prepacks_only_for_the_route(rng):
    A, B, sc, z, bi = _inputs(rng, bs=64)
    off = _op(B, sc, z, bi, 64, 64, 64)
    assert off.route(3) == "gemv_w4" and not any(k.startswith("mixed_gemm") for k in off.weights._derived)
    on = _op(B, sc, z, bi, 64, 64, 64, config={"ep.cuda.fpa_intb_gemm": "1"})
    assert on.route(3) == "fpa_intb" and "mixed_gemm_w4_sm80" in on.weights._derived
    pre = _op(nb.pack_weights_for_mixed_gemm(B, 64, 64, 4, 90, 64), sc, z, bi, 64, 64, 64, wp=2)
    packed = pre.weights._derived["mixed_gemm_w4_sm90"]
    # B is used in place, not copied or re-packed
    assert np.shares_memory(packed.bq.owner, pre.weights.b.owner) if SIMULATED else packed.bq.ptr == pre.weights.b.ptr


# ============================================================================ end to end (simulator)

def _check(y, A, B, sc, z, bi, N, K, bs, dtype, bits=4):
    ref = matmul_nbits_ref(A, B, sc, z, bias=bi, K=K, N=N, bits=bits, block_size=bs)
    err = relative_error(y, ref)
    assert err < TOLERANCES[dtype], err


E2E = [  # (dtype, weight_prepacked, zero points, bias, block, K, M)
    ("float16", 0, "none", True, 32, 64, 3),
    ("bfloat16", 0, "packed", False, 64, 64, 17),
    ("float16", 1, "typed", True, 64, 64, 5),
    ("bfloat16", 1, "none", True, 32, 64, 1),
    ("float16", 2, "packed", True, 128, 128, 2),
    ("bfloat16", 2, "typed", False, 64, 64, 4),
]


@pytest.mark.parametrize("dtype,wp,zp,bias,bs,K,M", E2E)
def test_op_matches_oracle(rng, dtype, wp, zp, bias, bs, K, M):
    N = 64
    A, B, sc, z, bi = _inputs(rng, N=N, K=K, bs=bs, dtype=dtype, zp=zp, bias=bias, M=M)
    Bin = nb.pack_weights_for_mixed_gemm(B, N, K, 4, 90 if wp == 2 else 80, bs) if wp else B
    op = _op(Bin, sc, z, bi, N, K, bs, wp=wp, config={"ep.cuda.fpa_intb_gemm": "1"} if wp == 0 else {})
    assert op.route(M) == "fpa_intb"
    y = op(A)
    _check(y, A, B, sc, z, bi, N, K, bs, dtype)
    plan = op._entries[M].plan
    t = op.fpa_profiler()
    chosen = t.profiled[t.bucket(M)]
    assert plan.tactic == chosen.label
    if SIMULATED:  # nothing is timed: the mixed GEMM's default tactic for the bucket
        assert chosen.label == f"mixed_gemm:{MG.default_tactic(t.bucket(M)).name}"
    if wp:
        assert chosen.kind == "mixed_gemm"  # only the mixed GEMM reads a prepacked B
    assert plan.packing_sm == (90 if wp == 2 else 80)
    assert plan.weight_format == ("onnx" if chosen.kind != "mixed_gemm" else
                                  f"prepacked_sm{plan.packing_sm}(weight_prepacked={wp})" if wp else
                                  "runtime_prepack_sm80")


def test_offline_packed_equals_runtime_prepacked(rng, monkeypatch):
    # the same tactic for all three nodes (a real profiler could pick dequant+cuBLAS for the ONNX-layout one)
    monkeypatch.setattr(prof, "default_timer", lambda: FakeTimer({"mixed_gemm:m16": 1e-6}))
    N, K, bs, M = 64, 64, 64, 6
    A, B, sc, z, bi = _inputs(rng, N=N, K=K, bs=bs, zp="packed", bias=True, M=M)
    runtime = _op(B, sc, z, bi, N, K, bs, config={"ep.cuda.fpa_intb_gemm": "1"})(A)
    for wp, arch in ((1, 80), (2, 90)):
        offline = _op(nb.pack_weights_for_mixed_gemm(B, N, K, 4, arch, bs), sc, z, bi, N, K, bs, wp=wp)(A)
        np.testing.assert_array_equal(offline.view(np.uint16), runtime.view(np.uint16))


def test_unaligned_A(rng, monkeypatch):
    """The mixed GEMM needs a 16-byte aligned A: ONNX-layout B falls back to dequantize + cuBLAS, prepacked B fails."""
    from numba_nbits.arrays import DevArray, to_device
    from numba_nbits.arrays import to_host as dev_to_host

    monkeypatch.setattr(prof, "default_timer", lambda: FakeTimer({"mixed_gemm:m16": 1e-6}))
    A, B, sc, z, bi = _inputs(rng, bs=32, zp="packed", bias=True, M=2)
    op = _op(B, sc, z, bi, 64, 64, 32, config={"ep.cuda.fpa_intb_gemm": "1"})
    aligned = op(A)
    plan = op._entries[2].plan
    assert plan.candidate.kind == "mixed_gemm"
    src = to_device(np.concatenate([np.zeros(4, A.dtype), A.reshape(-1)]), SIMULATED)
    a = src.offset(8, (2, 64))  # 8 bytes in: not 16-byte aligned
    if SIMULATED:  # simulated device arrays have no addresses; give this view one
        a = DevArray(8, a.shape, a.strides, a.dtype, a.owner)
    assert a.ptr % 16 == 8
    out = to_device(np.zeros((2, 64), A.dtype), SIMULATED)
    plan.run(a, out, 0)
    y = dev_to_host(out)
    _check(y, A, B, sc, z, bi, 64, 64, 32, "float16")
    assert plan._unaligned is not None and relative_error(y, aligned) < TOLERANCES["float16"]
    pre = _op(nb.pack_weights_for_mixed_gemm(B, 64, 64, 4, 80, 32), sc, z, bi, 64, 64, 32, wp=1)
    pre(A)
    with pytest.raises(ValueError, match=r"input A must be 16-byte aligned .* prepacked B \(weight_prepacked=1\)"):
        pre._entries[2].plan.run(a, out, 0)


def test_debug_line(rng, capsys):
    A, B, sc, z, bi = _inputs(rng, bs=32, bias=True, zp="packed", M=2)
    op = nb.MatMulNBits(B, sc, z, None, bi, K=64, N=64, bits=4, block_size=32, config={},
                        environ={"ORT_FPA_INTB_GEMM": "1", "ORT_FPA_INTB_DEBUG": "1"})
    op(A)
    op(A)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[fpA_intB_debug]")]
    assert len(lines) == 2
    line = lines[0]
    plan = op._entries[2].plan
    parts = ["M=2 ", "N=64 ", "K=64 ", "nbits=4 ", "block_size=32 ", f"device_sm={op.sm} ", "packing_sm=80 ",
             "has_bias=1 ", "has_zero_points=1 ", f"weight_format={plan.weight_format} ", "route=fpa_intb ",
             f"kernel={plan.kernel} ", f"tactic={plan.tactic} "]
    if SIMULATED:
        parts += ["weight_format=runtime_prepack_sm80 ", "kernel=mixed_gemm_w4_float16_m16_b32_packed_bias_sm80 ",
                  "tactic=mixed_gemm:m16 "]
    for part in parts:
        assert part in line + " ", (part, line)
    fields = plan.debug_fields()
    assert isinstance(plan, Plan) and set(fields) == {"packing_sm", "weight_format", "kernel", "tactic"}
    for key, value in fields.items():
        assert f"{key}={value} " in line + " ", (key, value, line)
    # the node's one profiler is kept with its weights: the public accessor and the route's plans share it
    assert op.fpa_profiler() is fpa_intb.profiler(op.weights, op.problem(5), op.config)
    assert 2 in op.fpa_profiler().profiled


@pytest.mark.skipif(not SIMULATED, reason="fakes capture with NumPy A; the GPU test below captures for real")
def test_warmup_profiles_buckets_and_capture_rule(rng, monkeypatch):
    A, B, sc, z, bi = _inputs(rng, bs=32, M=3)
    op = _op(B, sc, z, bi, 64, 64, 32, config={"ep.cuda.fpa_intb_gemm": "1"})
    op.warmup(3, 20)
    assert set(op.fpa_profiler().profiled) == {4, 32}
    capturing = lambda s: True  # noqa: E731
    monkeypatch.setattr(launch, "is_capturing", capturing)
    monkeypatch.setattr(op_mod, "is_capturing", capturing)
    with pytest.raises(launch.CaptureError, match=r"^No valid fpA_intB MatMulNBits tactic for M=100, N=64, K=64\. "
                                                  + CAPTURE_TEXT.replace(".", r"\.") + "$"):
        op(A[:1].repeat(100, axis=0))
    with pytest.raises(launch.CaptureError, match="no plan for M=4"):  # bucket 4 profiled, plan for M=4 not built
        op(A[:2].repeat(2, axis=0))
    y = op(A)  # warmed-up M: runs during "capture"
    _check(y, A, B, sc, z, None, 64, 64, 32, "float16")


def test_profiled_choice_drives_the_plan(rng, monkeypatch):
    """With a fake timer making dequant+cuBLAS fastest, the route serves it (bias added) and stays correct."""
    timer = FakeTimer({"dequant_cublas": 1e-6})
    monkeypatch.setattr(prof, "default_timer", lambda: timer)
    A, B, sc, z, bi = _inputs(rng, bs=64, zp="typed", bias=True, M=2)
    op = _op(B, sc, z, bi, 64, 64, 64, config={"ep.cuda.fpa_intb_gemm": "1"})
    y = op(A)
    plan = op._entries[2].plan
    assert plan.tactic == "dequant_cublas" and plan.weight_format == "onnx" and plan.kernel.endswith("+bias_add")
    # the candidate runs bias-less and the bias-add launch is attached to its plan (Plan.add_bias)
    assert isinstance(plan.inner, Plan) and plan.inner.bias_launch is not None
    assert plan.inner.kernel.endswith("+bias_add") and plan.bias_launch is None  # attached once, to the candidate
    _check(y, A, B, sc, z, bi, 64, 64, 64, "float16")


# ================================================================================== GPU (H200)

GPU_MS = (1, 15, 16, 17, 32, 100, 128, 512, 2048)


def _gpu_cases():
    if SIMULATED:
        return []
    combos = itertools.cycle(itertools.product((32, 64, 128), ("none", "packed", "typed"), (False, True)))
    cases = []
    for c, (bits, dtype) in enumerate(itertools.product((4, 8), ("float16", "bfloat16"))):
        for i, M in enumerate(GPU_MS):
            bs, zp, bias = next(combos)
            wp = (0, 1, 2)[i % 3] if bits == 4 else 0
            if wp == 2 and bs == 32:
                wp = 1
            # each case profiles every tactic (~30-100 s cold): by default every M runs for two of the four
            # (bits, dtype) pairs, the other half of the matrix with NUMBA_NBITS_TEST_EXHAUSTIVE=1
            marks = (exhaustive,) if (i + c) % 2 else ()
            cases.append(pytest.param(bits, dtype, M, bs, zp, bias, wp, marks=marks))
    return cases


@requires_gpu
@pytest.mark.parametrize("bits,dtype,M,bs,zp,bias,wp", _gpu_cases())
def test_gpu_fpa_intb_matches_oracle(rng, bits, dtype, M, bs, zp, bias, wp):
    N, K = 1024, 2048
    if not MG.supports(P(M=M, N=N, K=K, bits=bits, block_size=bs, dtype=dtype)):
        pytest.skip(f"mixed_gemm does not support bits={bits} yet")
    from numba import cuda

    A, B, sc, z, bi = _inputs(rng, N=N, K=K, bs=bs, dtype=dtype, zp=zp, bias=bias, bits=bits, M=M)
    major, minor = cuda.get_current_device().compute_capability
    if wp == 2 and major * 10 + minor != 90:
        wp = 1  # the SM90 layout needs an sm 90 device
    Bin = nb.pack_weights_for_mixed_gemm(B, N, K, bits, 90 if wp == 2 else 80, bs) if wp else B
    op = _op(Bin, sc, z, bi, N, K, bs, wp=wp, bits=bits, config={"ep.cuda.fpa_intb_gemm": "1"})
    assert op.route(M) == "fpa_intb"
    Ad = to_dev(A)
    y = to_host(op(Ad))
    _check(y, A, B, sc, z, bi, N, K, bs, dtype, bits=bits)
    t = op.fpa_profiler()
    b = t.bucket(M)
    times = t.timings.get(b)
    assert times, "the bucket was profiled by this call (the tactic cache is cleared per test)"
    best = min(v for v in times.values() if math.isfinite(v))
    assert times[t.profiled[b].label] == best  # the fastest candidate won
    # GEMV-route candidates only for buckets the GEMV routes serve (M <= 16, spec §8); past that an existing route's
    # plan (kind "gemv") is dispatch's own route without fpA_intB, e.g. fused_gemm at M = 17..64
    routes = {k.split(":", 1)[1].split("+")[0] for k in times if k.startswith("gemv:")}
    assert b <= prof.GEMV_MAX_M or not routes & set(prof.GEMV_ROUTES), routes
    assert ("dequant_cublas" in times) == (wp == 0)  # a prepacked B is read by the mixed GEMM only


@requires_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_capture_after_warmup_and_unprofiled_bucket(rng, dtype):
    N, K, bs, M = 1024, 2048, 64, 24
    A, B, sc, z, bi = _inputs(rng, N=N, K=K, bs=bs, dtype=dtype, zp="packed", bias=True, M=M)
    op = _op(B, sc, z, bi, N, K, bs, config={"ep.cuda.fpa_intb_gemm": "1"})
    op.warmup(M)
    Ad = to_dev(A)
    eager = to_host(op(Ad))
    out = to_dev(np.zeros((M, N), A.dtype))
    graph = nb.capture(lambda s: op(Ad, out=out, stream=s))
    graph.replay(sync=True)
    y = to_host(out)
    np.testing.assert_array_equal(y.view(np.uint16), eager.view(np.uint16))
    _check(y, A, B, sc, z, bi, N, K, bs, dtype)
    # an M whose bucket (512) was never profiled cannot be captured
    A2 = to_dev(np.repeat(A[:1], 300, axis=0))
    out2 = to_dev(np.zeros((300, N), A.dtype))
    with pytest.raises(nb.CaptureError, match=r"No valid fpA_intB MatMulNBits tactic for M=300, N=1024, K=2048\. "
                                              r"The M bucket was not profiled before CUDA graph capture"):
        nb.capture(lambda s: op(A2, out=out2, stream=s))
