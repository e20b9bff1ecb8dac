"""CPU-only dispatch tests: the route for one canonical problem per route, each guard's boundary, the
rejection reasons, config/env steering, forcing, and the generated route table. No kernel launches."""
from __future__ import annotations

import pytest

from numba_nbits.config import load_config
from numba_nbits.dispatch.problem import Problem
from numba_nbits.dispatch.routes import ROUTE_NAMES, ROUTES, ROUTER_SHAPES
from numba_nbits.dispatch.select import select
from numba_nbits.explain import explain, main, route_table_markdown

CFG = load_config({})


def P(**kw):
    base = dict(M=1, N=4096, K=4096, bits=4, block_size=32, dtype="float16")
    base.update(kw)
    return Problem(**base)


def route(p, cfg=CFG):
    return select(p, cfg).name


def rejected_by(p, route_name, cfg=CFG):
    d = select(p, cfg)
    for r, g, _ in d.reasons:
        if r == route_name:
            return g
    raise AssertionError(f"{route_name} not rejected (chosen: {d.name})")


@pytest.mark.parametrize("problem, expected", [
    (P(N=32, K=2880, block_size=32, has_bias=True), "router_gemv"),
    (P(), "gemv_w4"),
    (P(M=16, block_size=128), "gemv_w4"),
    (P(bits=8, M=5, block_size=128), "gemv_w8"),
    (P(bits=2, M=8, block_size=64), "gemv_w2"),
    (P(M=17), "fused_gemm"),
    (P(M=64, N=131072, K=4096), "fused_gemm"),
    (P(bits=2, M=9, block_size=64), "fused_gemm"),
    (P(M=65), "dequant_cublas"),
    (P(M=2048), "dequant_overlap"),
    (P(M=8192, N=2040), "dequant_cublas"),
    (P(M=17, dtype="float32"), "dequant_cublas"),
    (P(M=65, N=131072, K=4096, block_size=16), "dequant_overlap"),
    (P(M=65, N=131072, K=4096), "fused_gemm"),
    (P(zero_points="typed"), "dequant_cublas"),
    (P(has_g_idx=True), "dequant_cublas"),
])
def test_canonical_route(problem, expected):
    assert route(problem) == expected


def test_bias_modes():
    assert select(P(N=32, K=2880, has_bias=True), CFG).bias == "fused"
    assert select(P(has_bias=True), CFG).bias == "add"  # ORT's retry without bias + bias-add kernel
    assert select(P(M=100, has_bias=True), CFG).bias == "add"
    assert select(P(), CFG).bias == "none"


# ---------------------------------------------------------------------- guard boundaries: 4-bit
@pytest.mark.parametrize("kw, ok, guard", [
    (dict(M=16), True, None), (dict(M=17), False, "m_le_16"),
    (dict(N=4104), True, None), (dict(N=4100), False, "n_mult_8"),
    (dict(K=4104), True, None), (dict(K=4100), False, "k_mult_8"),
    (dict(block_size=16), True, None), (dict(block_size=128), True, None),
    (dict(block_size=256), False, "block_in_16_32_64_128"),
    (dict(zero_points="packed"), True, None), (dict(zero_points="typed"), False, "zp_not_typed"),
    (dict(has_g_idx=True), False, "no_g_idx"),
    (dict(K=4096 * 8, block_size=16, dtype="float32"), False, "smem_gate_w4"),
])
def test_gemv_w4_boundaries(kw, ok, guard):
    p = P(**kw)
    if ok:
        assert route(p) == "gemv_w4"
    else:
        assert route(p) != "gemv_w4"
        assert rejected_by(p, "gemv_w4") == guard


def test_block_256_m1_falls_back_instead_of_throwing():
    # ORT throws "block size 256 is not supported" here; we serve it with the universal route.
    assert route(P(block_size=256)) == "dequant_cublas"


# ---------------------------------------------------------------------- guard boundaries: 8-bit
@pytest.mark.parametrize("kw, ok, guard", [
    (dict(M=5), True, None), (dict(M=6), True, None), (dict(M=16), True, None), (dict(M=17), False, "m_w8"),
    (dict(M=5, dtype="float32"), True, None), (dict(M=6, dtype="float32"), False, "m_w8"),
    (dict(M=6, block_size=256), False, "m_w8"), (dict(M=6, dtype="bfloat16", block_size=16), True, None),
    (dict(block_size=256), True, None), (dict(block_size=512), False, "block_divides_256"),
    (dict(K=4096 + 64, block_size=128), False, "k_mult_block"),
    (dict(N=4100), False, "n_mult_8"),
])
def test_gemv_w8_boundaries(kw, ok, guard):
    base = dict(bits=8, block_size=128)
    base.update(kw)
    p = P(**base)
    if ok:
        assert route(p) == "gemv_w8"
    else:
        assert rejected_by(p, "gemv_w8") == guard


# ---------------------------------------------------------------------- guard boundaries: 2-bit
@pytest.mark.parametrize("kw, ok, guard", [
    (dict(M=8), True, None), (dict(M=9), False, "m_le_8"),
    (dict(K=4104), False, "k_mult_16"),
    (dict(block_size=512), True, None), (dict(block_size=1024), False, "block_divides_512"),
    (dict(K=4096 + 32, block_size=64), False, "k_mult_block"),
])
def test_gemv_w2_boundaries(kw, ok, guard):
    base = dict(bits=2, block_size=64)
    base.update(kw)
    p = P(**base)
    if ok:
        assert route(p) == "gemv_w2"
    else:
        assert rejected_by(p, "gemv_w2") == guard


# ---------------------------------------------------------------------- fused small GEMM (ours)
@pytest.mark.parametrize("kw, ok, guard", [
    (dict(M=17), True, None), (dict(M=64), True, None), (dict(M=65), False, "fused_gemm_m"),
    (dict(M=40, dtype="bfloat16", block_size=128), True, None), (dict(M=17, dtype="float32"), False, "fp16_or_bf16"),
    (dict(M=17, bits=8, block_size=128), True, None), (dict(M=9, bits=2, block_size=64), True, None),
    (dict(M=17, bits=3), False, "bits_in_2_4_8"),
    (dict(M=17, block_size=256), False, "block_in_16_32_64_128"),
    (dict(M=17, zero_points="packed"), True, None), (dict(M=17, zero_points="typed"), False, "zp_not_typed"),
    (dict(M=17, has_g_idx=True), False, "no_g_idx"), (dict(M=17, N=4100), False, "n_mult_8"),
])
def test_fused_gemm_boundaries(kw, ok, guard):
    p = P(**kw)
    if ok:
        assert route(p) == "fused_gemm"
    else:
        assert route(p) != "fused_gemm"
        assert rejected_by(p, "fused_gemm") == guard


@pytest.mark.parametrize("environ, config, on", [
    ({}, {}, True), ({"NUMBA_NBITS_FUSED_GEMM": "0"}, {}, False), ({"NUMBA_NBITS_FUSED_GEMM": "false"}, {}, False),
    ({"NUMBA_NBITS_FUSED_GEMM": "0"}, {"numba_nbits.fused_gemm": True}, True),  # config wins over env
    ({}, {"numba_nbits.fused_gemm": "0"}, False),
])
def test_fused_gemm_switch_restores_orts_chain(environ, config, on):
    cfg = load_config(environ, config)
    assert cfg.fused_gemm is on
    for p, ort in ((P(M=17), "dequant_cublas"), (P(M=12, bits=2, block_size=64), "dequant_cublas"),
                   (P(M=64, N=131072, K=4096), "dequant_cublas_chunked")):
        assert route(p, cfg) == ("fused_gemm" if on else ort)
        if not on:
            assert rejected_by(p, "fused_gemm", cfg) == "fused_gemm_enabled"
    assert route(P(M=16), cfg) == "gemv_w4"  # the GEMV routes take M <= 16 either way


def test_fused_gemm_guard_matches_the_kernels_reach():
    from numba_nbits.dispatch.routes import FUSED_GEMM_MAX_M
    from numba_nbits.kernels.gemv import small_gemm, tactics

    from numba_nbits.dispatch.routes import FUSED_GEMM_WIDE_MAX_M

    assert FUSED_GEMM_MAX_M == tactics.MAX_M and FUSED_GEMM_WIDE_MAX_M == tactics.WG_MAX_M
    assert small_gemm.supports(P(M=FUSED_GEMM_MAX_M)) and not small_gemm.supports(P(M=FUSED_GEMM_MAX_M + 1))
    wide = P(N=28672, K=8192, block_size=128)
    assert small_gemm.supports(P(M=FUSED_GEMM_WIDE_MAX_M, N=28672, K=8192, block_size=128))
    assert not small_gemm.supports(P(M=FUSED_GEMM_WIDE_MAX_M + 1, N=28672, K=8192, block_size=128))
    for m in range(1, 200):
        p = P(M=m, N=wide.N, K=wide.K, block_size=128)
        assert small_gemm.supports(p) == (route(p) == "fused_gemm" or m <= 16), m
    assert [tactics.m_tiles(m) for m in (16, 17, 24, 25, 32, 33, 48, 49, 64, 65, 96, 97, 128)] == \
        [2, 3, 3, 4, 4, 6, 6, 8, 8, 12, 12, 16, 16]


@pytest.mark.parametrize("N, K, M, tag", [
    (28672, 8192, 65, "t1w8u1xhvmo"), (28672, 8192, 96, "t1w8u1xhvmo"), (128256, 4096, 90, "t1w8u1xhvmo"),
    (28672, 8192, 128, "t1w8u1xhvmo"), (128256, 4096, 100, "t1w8u1xhvmo"),
    (8192, 28672, 96, "t2w8u1k4s3xhv"), (8192, 28672, 128, "t2w8u1k4s3xhv"),
    (14336, 4096, 96, "t1w8u1xhvmo"), (14336, 4096, 97, "t1w8u1xhvmo"), (12288, 4096, 128, "t1w8u1xhvmo"),
    (28672, 8192, 129, "t1w8u1xhvmo"), (28672, 8192, 256, "t1w8u1xhvmo"), (14336, 4096, 200, "t1w8u1xhvmo"),
    (8192, 28672, 129, None), (8192, 28672, 256, None),  # 8192..12287 rows: to M = 128
    (4096, 14336, 96, "t1w8u1k4s3xhv"), (4096, 14336, 97, None),  # down projections: 12 m-tiles only
    (4096, 4096, 96, None), (8184, 4096, 96, None),  # short K, or N short of 8192 rows: ORT's chain
    (28672, 8192, 64, None), (28672, 8192, 257, None),
])
def test_fused_gemm_past_64_takes_the_warpgroup_kernel_where_measured_faster(N, K, M, tag):
    """M = 65..256 (``tactics.wide_tactic``): the fused GEMM on sm_90 where its warpgroup kernel was measured faster
    than dequantize + cuBLAS, ORT's chain everywhere else (other sm, bits, blocks, N, or K not whole super-chunks).
    4-bit blocks 32, 64 and 128 take the same tactic; 8-bit only block 128."""
    from numba_nbits.kernels.gemv import tactics

    for block in (32, 64, 128):
        t = tactics.wide_tactic(P(M=M, N=N, K=K, block_size=block))
        assert (t.tag if t else None) == tag, block
    p = P(M=M, N=N, K=K, block_size=128)
    ort = "dequant_cublas_chunked" if N == 128256 else "dequant_cublas"
    # past the fused kernels: the overlapped chain where its size rule holds (N >= 2048 here)
    past = "dequant_overlap" if M > 64 and M * N >= 1 << 23 else ort
    if M > 64:
        assert route(p) == ("fused_gemm" if tag else past)
        assert route(P(M=M, N=N, K=K, block_size=32)) == ("fused_gemm" if tag else past)
        if not tag:
            assert rejected_by(p, "fused_gemm") == "fused_gemm_m"
    for other in (dict(sm=80), dict(bits=2), dict(block_size=16), dict(K=K + 64), dict(dtype="float32")):
        q = P(**{**dict(M=M, N=N, K=K, block_size=128), **other})
        assert not tactics.wide_serves(q), other
    # 8-bit: the barrier pipeline on N >= 24576 rows to M = 128 only, block 128 only
    t8 = tactics.wide_tactic(P(M=M, N=N, K=K, block_size=128, bits=8))
    assert (t8.tag if t8 else None) == ("t1w8u1xhvm" if (tag and N >= 24576 and M <= 128) else None)  # no pre-pass
    assert not tactics.wide_serves(P(M=M, N=N, K=K, block_size=32, bits=8))
    if tag:
        assert route(P(M=M, N=N, K=K, block_size=128, sm=80)) == past
        assert route(p, load_config({"NUMBA_NBITS_FUSED_GEMM": "0"})) == ort


# ---------------------------------------------------------------------- router
def test_router_guards():
    p = P(N=32, K=2880, has_bias=True)
    assert route(p) == "router_gemv"
    assert rejected_by(P(N=32, K=2880, zero_points="packed"), "router_gemv") == "no_zero_points"
    assert rejected_by(P(N=32, K=2880, M=2), "router_gemv") == "m_is_1"
    assert rejected_by(P(N=32, K=2880, block_size=128), "router_gemv") == "block_in_32_64"
    # small-N gates (ours): N <= 256, K <= 8192; ORT's exact gate with router_small_n or fused_gemm off
    for n, k in ((256, 7168), (40, 2880), (8, 64), (256, 8192)):
        assert route(P(N=n, K=k)) == "router_gemv", (n, k)
    for n, k in ((264, 4096), (128, 8224)):
        assert rejected_by(P(N=n, K=k), "router_gemv") == "router_shape", (n, k)
    for env in ({"NUMBA_NBITS_ROUTER_SMALL_N": "0"}, {"NUMBA_NBITS_FUSED_GEMM": "0"}):
        ort = load_config(env)
        assert rejected_by(P(N=256, K=7168), "router_gemv", ort) == "router_shape"
        assert route(P(N=32, K=2880), ort) == "router_gemv"  # ORT's own gate stays
    assert route(P(N=256, K=7168), load_config({}, {"numba_nbits.router_small_n": False})) == "gemv_w4"
    off = load_config({"ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION": "1"})
    assert route(p, off) == "gemv_w4"
    assert rejected_by(p, "router_gemv", off) == "router_enabled"
    assert select(p, off).bias == "add"
    assert (32, 2880) in ROUTER_SHAPES


# ---------------------------------------------------------------------- chunking
def test_chunk_rule():
    """ORT's chunk rule, with our overlapped route and fused GEMM off (``NUMBA_NBITS_DEQUANT_OVERLAP=0``,
    ``NUMBA_NBITS_FUSED_GEMM=0``: ORT's chain)."""
    def cfg(**env):
        return load_config({"NUMBA_NBITS_DEQUANT_OVERLAP": "0", "NUMBA_NBITS_FUSED_GEMM": "0", **env})

    big = P(M=65, N=65537, K=4096)  # N*K_pad*2 = 512 MiB > 256 MiB and N > 2*32768
    assert route(big, cfg()) == "dequant_cublas_chunked"
    assert route(P(M=65, N=65536, K=4096), cfg()) == "dequant_cublas"  # N == 2*chunk: not chunked
    assert route(P(M=65, N=28672, K=8192), cfg()) == "dequant_cublas"  # 448 MiB but N <= 2*chunk
    forced = cfg(ORT_MATMULNBITS_FORCE_CHUNKED="1")
    assert route(P(M=65), forced) == "dequant_cublas_chunked"
    assert route(P(M=65, has_g_idx=True), forced) == "dequant_cublas"  # chunking needs no g_idx
    small_chunks = cfg(ORT_MATMULNBITS_CHUNK_SIZE="1024")
    assert route(P(M=65, N=32768, K=4096), small_chunks) == "dequant_cublas"  # 256 MiB is not > 256 MiB
    assert route(P(M=65, N=32776, K=4096), small_chunks) == "dequant_cublas_chunked"
    limit = cfg(NUMBA_NBITS_SCRATCH_LIMIT_MB="1", ORT_MATMULNBITS_CHUNK_SIZE="64")
    assert route(P(M=65, N=1024, K=1024), limit) == "dequant_cublas_chunked"
    # the overlapped route precedes both where its size rule holds, chunked or not, g_idx or not
    for p in (P(M=1024, N=65537, K=4096), P(M=1024, N=28672, K=8192), P(M=2048, has_g_idx=True),
              P(M=2048, zero_points="typed")):
        assert route(p) == "dequant_overlap"


# ---------------------------------------------------------------------- overlapped dequantize + cuBLAS
@pytest.mark.parametrize("kw, ok, guard", [
    (dict(M=2048), True, None), (dict(M=2047), False, "overlap_size"),  # M * N from 2**23 on
    (dict(M=65, N=131072, block_size=16), True, None), (dict(M=64, N=262144, dtype="float32"), False, "overlap_size"),
    (dict(M=4096, N=2048), True, None), (dict(M=8192, N=2040), False, "overlap_size"),
    (dict(M=4096, N=28672, K=8192, bits=8), True, None), (dict(M=3000, bits=2, dtype="float32"), True, None),
])
def test_overlap_route_boundaries(kw, ok, guard):
    from numba_nbits.dispatch.routes import OVERLAP_MIN_M, OVERLAP_MIN_MN, OVERLAP_MIN_N

    assert (OVERLAP_MIN_M, OVERLAP_MIN_N, OVERLAP_MIN_MN) == (65, 2048, 2 ** 23)
    p = P(**kw)
    if ok:
        assert route(p) == "dequant_overlap" and select(p, CFG).bias == "none"
        assert select(P(**kw, has_bias=True), CFG).bias == "add"
    else:
        assert route(p) != "dequant_overlap"
        assert rejected_by(p, "dequant_overlap") == guard


def test_overlap_route_switches_give_orts_chain():
    p = P(M=1024, N=28672, K=8192)
    assert route(p) == "dequant_overlap"
    for env, guard in (({"NUMBA_NBITS_DEQUANT_OVERLAP": "0"}, "dequant_overlap_enabled"),
                       ({"NUMBA_NBITS_FUSED_GEMM": "0"}, "fused_gemm_enabled")):
        assert route(p, load_config(env)) == "dequant_cublas"
        assert rejected_by(p, "dequant_overlap", load_config(env)) == guard
    assert route(p, load_config({}, {"numba_nbits.dequant_overlap": False})) == "dequant_cublas"
    forced = load_config({"NUMBA_NBITS_FORCE_ROUTE": "dequant_overlap"})
    assert select(P(M=3, N=40, K=256), forced).name == "dequant_overlap"  # forcing skips the size rule


# ---------------------------------------------------------------------- forcing
def test_force_route():
    cfg = load_config({}, {"numba_nbits.force_route": "dequant_cublas"})
    d = select(P(), cfg)
    assert d.name == "dequant_cublas" and d.forced
    env = load_config({"NUMBA_NBITS_FORCE_ROUTE": "dequant_cublas_chunked"})
    assert select(P(), env).name == "dequant_cublas_chunked"  # forcing chunked skips the size rule
    with pytest.raises(ValueError, match="forced route 'gemv_w8' cannot serve .* bits_8"):
        select(P(), load_config({}, {"numba_nbits.force_route": "gemv_w8"}))
    with pytest.raises(ValueError, match="unknown route 'nope'"):
        select(P(), load_config({}, {"numba_nbits.force_route": "nope"}))


def test_reasons_and_explain_text():
    d = select(P(M=2048), CFG)
    assert [r for r, _, _ in d.reasons] == list(ROUTE_NAMES[: ROUTE_NAMES.index("dequant_overlap")])
    text = d.explain()
    assert "✔ dequant_overlap" in text and "rejected by m_le_16" in text and "rejected by fused_gemm_m" in text
    d = select(P(M=2048), load_config({"NUMBA_NBITS_DEQUANT_OVERLAP": "0"}))
    assert [r for r, _, _ in d.reasons] == list(ROUTE_NAMES[: ROUTE_NAMES.index("dequant_cublas")])
    assert "✔ dequant_cublas" in d.explain() and "rejected by dequant_overlap_enabled" in d.explain()
    assert explain(2048, 4096, 4096).name == "dequant_overlap"
    assert explain(65, 4096, 4096).name == "dequant_cublas"
    assert explain(17, 4096, 4096).name == "fused_gemm"


def test_explain_cli(capsys):
    assert main(["--M", "1", "--N", "4096", "--K", "4096", "--bits", "4", "--block-size", "32", "--bias",
                 "--no-env"]) == 0
    out = capsys.readouterr().out
    assert "route: gemv_w4" in out and "(+ bias-add kernel)" in out
    assert main(["--routes"]) == 0
    assert "dequant_cublas" in capsys.readouterr().out


def test_route_table_lists_every_route_and_guard():
    md = route_table_markdown()
    for r in ROUTES:
        assert f"`{r.name}`" in md
        for g in r.guards:
            assert g.text in md


def test_decisions_are_cached():
    p = P(M=3)
    assert select(p, CFG) is select(p, CFG)


def test_families_export_a_uniform_record():
    """fpa_intb and dequant export ``FAMILY``; build takes (weights, problem, config, route)."""
    import importlib
    import inspect

    from numba_nbits.kernels import FAMILY_MODULES
    from numba_nbits.kernels.family import KernelFamily

    for name in ("fpa_intb", "dequant"):
        fam = importlib.import_module(FAMILY_MODULES[name], "numba_nbits.kernels").FAMILY
        assert isinstance(fam, KernelFamily) and fam.name == name
        assert list(inspect.signature(fam.build).parameters) == ["weights", "problem", "config", "route"]
    dq = importlib.import_module("numba_nbits.kernels.dequant")
    assert dq.FAMILY.supports(P(bits=2, zero_points="typed", has_g_idx=True))
    with pytest.raises(ValueError, match="the dequant family serves the routes dequant_cublas, "
                                         "dequant_cublas_chunked, not 'gemv_w4'"):
        dq.build(None, P(), None, "gemv_w4")


def test_fpa_kernel_guard_is_the_family_supports(monkeypatch):
    """fpa_kernel_available asks the fpa_intb family's supports (the mixed GEMM's needs), no second copy."""
    from numba_nbits.dispatch import routes
    from numba_nbits.kernels import fpa_intb, mixed_gemm

    assert fpa_intb.FAMILY.supports is mixed_gemm.supports
    guard = next(g for g in routes.FPA_INTB_GUARDS if g.name == "fpa_kernel_available")
    p = P(M=4, N=64, K=128, block_size=64)
    assert guard(p, load_config({}))
    monkeypatch.setattr(mixed_gemm, "supports", lambda p: False)
    assert not guard(p, load_config({}))


def test_fpa_n_align_per_format():
    """N % 64 for 4-bit, N % 32 for 8-bit (the route's alignment table); other widths never pass."""
    from numba_nbits.dispatch.routes import fpa_n_align

    c = load_config({})
    assert fpa_n_align(P(N=96, bits=8), c) and not fpa_n_align(P(N=96, bits=4), c)
    assert fpa_n_align(P(N=128, bits=4), c) and not fpa_n_align(P(N=128, bits=2), c)
