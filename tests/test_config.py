"""CPU-only tests of ``numba_nbits.config``: defaults, spec section 8 parse rules and error
texts, config-beats-env precedence, and the documentation table. Dict environments only."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest

from numba_nbits import config as C
from numba_nbits.config import Config, load_config

MIB = 1024 * 1024

DEFAULTS = {
    "fpa_intb_gemm": False,
    "fpa_intb_profile_m": None,
    "fpa_intb_debug": False,
    "disable_router_gemv": False,
    "force_chunked": False,
    "chunk_size": 32768,
    "m_chunk_size": 0,
    "gemv_paired_k": "off",
    "gemv_wave_aware": False,
    "l2_prefetch": False,
    "tactic_cache_dir": None,
    "tactic_cache_prefix": None,
    "tuning_results_prefix": None,
    "cuda_gemm_options": 0,
    "use_tf32": True,
    "force_route": None,
    "scratch_limit_bytes": 256 * MIB,
    "call_graphs": True,
    "fused_gemm": True,
    "packed_only": False,
    "dequant_overlap": True,
    "router_small_n": True,
}

FIELDS = [f.name for f in dataclasses.fields(Config) if f.name != "sources"]


def parse_error(name: str, value: str) -> str:
    return re.escape(f'Failed to parse environment variable - name: "{name}", value: "{value}"')


def env1(name: str, value: str) -> Config:
    return load_config({name: value})


# ----------------------------------------------------------------------------- defaults


def test_defaults_cover_every_field():
    assert sorted(DEFAULTS) == sorted(FIELDS)


@pytest.mark.parametrize("field", FIELDS)
def test_default_with_empty_environment(field):
    cfg = load_config({})
    assert getattr(cfg, field) == DEFAULTS[field]
    assert cfg.source(field) == "default"


def test_default_matches_plain_construction():
    assert load_config({}) == Config()


@pytest.mark.parametrize("name", C.ENV_VARS)
def test_empty_env_var_means_default(name):
    cfg = load_config({name: ""})
    assert cfg == Config()
    assert all(origin == "default" for _, origin in cfg.sources)


def test_none_environ_reads_os_environ_at_call_time(monkeypatch):
    monkeypatch.setenv(C.ENV_CHUNK_SIZE, "64")
    assert load_config().chunk_size == 64
    monkeypatch.delenv(C.ENV_CHUNK_SIZE)
    assert load_config().chunk_size == 32768


def test_unrelated_env_ignored():
    assert load_config({"PATH": "/bin", "ORT_SOMETHING_ELSE": "x"}) == Config()


# ----------------------------------------------------------------------------- bools


BOOL_ENVS = [
    (C.ENV_DISABLE_ROUTER_GEMV, "disable_router_gemv"),
    (C.ENV_L2_PREFETCH, "l2_prefetch"),
    (C.ENV_CALL_GRAPHS, "call_graphs"),
    (C.ENV_FUSED_GEMM, "fused_gemm"),
    (C.ENV_PACKED_ONLY, "packed_only"),
    (C.ENV_DEQUANT_OVERLAP, "dequant_overlap"),
    (C.ENV_ROUTER_SMALL_N, "router_small_n"),
]


@pytest.mark.parametrize("name, field", BOOL_ENVS)
@pytest.mark.parametrize(
    "text, expected",
    [("1", True), ("true", True), ("True", True), ("0", False), ("false", False),
     ("False", False)],
)
def test_bool_env_accepts(name, field, text, expected):
    cfg = env1(name, text)
    assert getattr(cfg, field) is expected
    assert cfg.source(field) == "env"


@pytest.mark.parametrize("name, field", BOOL_ENVS)
@pytest.mark.parametrize("text", ["TRUE", "yes", "on", "2", " 1", "1 ", "-1", "t"])
def test_bool_env_rejects(name, field, text):
    with pytest.raises(ValueError, match=parse_error(name, text)):
        env1(name, text)


# ----------------------------------------------------------------------------- int flags


INT_FLAG_ENVS = [(C.ENV_FPA_INTB_DEBUG, "fpa_intb_debug"), (C.ENV_FORCE_CHUNKED, "force_chunked")]


@pytest.mark.parametrize("name, field", INT_FLAG_ENVS)
@pytest.mark.parametrize(
    "text, expected", [("0", False), ("1", True), ("2", True), ("-1", True), ("-0", False),
                       ("007", True)]
)
def test_int_flag_env(name, field, text, expected):
    assert getattr(env1(name, text), field) is expected


@pytest.mark.parametrize("name, field", INT_FLAG_ENVS)
@pytest.mark.parametrize("text", ["true", " 1", "1 ", "1x", "+1", "1.0", "0x1", "1_0",
                                  "2147483648", "-"])
def test_int_flag_env_rejects(name, field, text):
    with pytest.raises(ValueError, match=parse_error(name, text)):
        env1(name, text)


# ----------------------------------------------------------------------------- ints


@pytest.mark.parametrize(
    "text, expected",
    [("64", 64), ("1", 1), ("0", 32768), ("-5", 32768), ("9223372036854775807", 2**63 - 1)],
)
def test_chunk_size(text, expected):
    assert env1(C.ENV_CHUNK_SIZE, text).chunk_size == expected


@pytest.mark.parametrize("text", ["abc", "64 ", " 64", "64k", "9223372036854775808", "+64"])
def test_chunk_size_rejects(text):
    with pytest.raises(ValueError, match=parse_error(C.ENV_CHUNK_SIZE, text)):
        env1(C.ENV_CHUNK_SIZE, text)


@pytest.mark.parametrize("text, expected", [("0", 0), ("1", 1), ("5", 5), ("-3", -3),
                                            ("2147483647", 2**31 - 1)])
def test_cuda_gemm_options(text, expected):
    assert env1(C.ENV_CUDA_GEMM_OPTIONS, text).cuda_gemm_options == expected


@pytest.mark.parametrize("text", ["0x1", "one", "1 ", "2147483648"])
def test_cuda_gemm_options_rejects(text):
    with pytest.raises(ValueError, match=parse_error(C.ENV_CUDA_GEMM_OPTIONS, text)):
        env1(C.ENV_CUDA_GEMM_OPTIONS, text)


@pytest.mark.parametrize("name, source", [(C.ENV_M_CHUNK_SIZE, "env"),
                                          (C.KEY_M_CHUNK_SIZE, "config")])
@pytest.mark.parametrize("text, expected", [("0", 0), ("1", 1), ("4096", 4096)])
def test_m_chunk_size(name, source, text, expected):
    cfg = env1(name, text) if source == "env" else load_config({}, {name: text})
    assert cfg.m_chunk_size == expected
    assert cfg.source("m_chunk_size") == source


@pytest.mark.parametrize("name, source", [(C.ENV_M_CHUNK_SIZE, "env"),
                                          (C.KEY_M_CHUNK_SIZE, "config")])
@pytest.mark.parametrize("text", ["-1", "abc", "1.5", " 8"])
def test_m_chunk_size_rejects(name, source, text):
    with pytest.raises(ValueError, match="^Invalid MatMulNBits M chunk size") as info:
        env1(name, text) if source == "env" else load_config({}, {name: text})
    assert name in str(info.value)


def test_m_chunk_size_config_int_and_bool():
    assert load_config({}, {C.KEY_M_CHUNK_SIZE: 128}).m_chunk_size == 128
    with pytest.raises(ValueError, match="^Invalid MatMulNBits M chunk size"):
        load_config({}, {C.KEY_M_CHUNK_SIZE: -1})
    with pytest.raises(ValueError, match="expects an int"):
        load_config({}, {C.KEY_M_CHUNK_SIZE: True})


@pytest.mark.parametrize("name, source", [(C.ENV_SCRATCH_LIMIT_MB, "env"),
                                          (C.KEY_SCRATCH_LIMIT_MB, "config")])
def test_scratch_limit(name, source):
    cfg = env1(name, "16") if source == "env" else load_config({}, {name: "16"})
    assert cfg.scratch_limit_bytes == 16 * MIB
    assert load_config({}, {C.KEY_SCRATCH_LIMIT_MB: 1}).scratch_limit_bytes == MIB


@pytest.mark.parametrize("text", ["0", "-1"])
def test_scratch_limit_rejects_non_positive(text):
    with pytest.raises(ValueError, match="must be a positive number of MiB"):
        env1(C.ENV_SCRATCH_LIMIT_MB, text)
    with pytest.raises(ValueError, match="must be a positive number of MiB"):
        load_config({}, {C.KEY_SCRATCH_LIMIT_MB: text})


def test_scratch_limit_rejects_text():
    with pytest.raises(ValueError, match=parse_error(C.ENV_SCRATCH_LIMIT_MB, "1G")):
        env1(C.ENV_SCRATCH_LIMIT_MB, "1G")
    with pytest.raises(ValueError, match=re.escape(
            f'Failed to parse config key - name: "{C.KEY_SCRATCH_LIMIT_MB}", value: "1G"')):
        load_config({}, {C.KEY_SCRATCH_LIMIT_MB: "1G"})


# ----------------------------------------------------------------------------- fpA_intB enable


@pytest.mark.parametrize(
    "text, expected",
    [("1", True), ("on", True), ("all", True), ("true", True), ("4", True), ("-1", True),
     ("garbage", True), ("0", False), ("off", False), ("OFF", False), (" Off ", False),
     (" 0 ", False), ("  ", False), ("\t", False)],
)
def test_fpa_intb_enabled_rule(text, expected):
    assert env1(C.ENV_FPA_INTB_GEMM, text).fpa_intb_gemm is expected
    assert load_config({}, {C.KEY_FPA_INTB_GEMM: text}).fpa_intb_gemm is expected


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), (1, True), (0, False),
                                             (8, True), ("", False)])
def test_fpa_intb_config_types(value, expected):
    # An explicit key wins even when it says "off" and env says "on".
    cfg = load_config({C.ENV_FPA_INTB_GEMM: "1"}, {C.KEY_FPA_INTB_GEMM: value})
    assert cfg.fpa_intb_gemm is expected
    assert cfg.source("fpa_intb_gemm") == "config"


# ----------------------------------------------------------------------------- profile M


@pytest.mark.parametrize(
    "text, expected",
    [("1,2,4", (1, 2, 4)), (" 16 , 1,16, 8 ", (1, 8, 16)), ("64", (64,)),
     ("4,abc,2,-1,0,3x,,1.5", (2, 4)), ("abc", None), (",,", None), ("0,-4", None),
     ("+8,8", (8,)), ("99999999999999999999,3", (3,))],
)
def test_profile_m(text, expected):
    assert env1(C.ENV_FPA_INTB_PROFILE_M, text).fpa_intb_profile_m == expected
    assert load_config({}, {C.KEY_FPA_INTB_PROFILE_M: text}).fpa_intb_profile_m == expected


def test_profile_m_config_types():
    assert load_config({}, {C.KEY_FPA_INTB_PROFILE_M: [32, 1, 32]}).fpa_intb_profile_m == (1, 32)
    assert load_config({}, {C.KEY_FPA_INTB_PROFILE_M: (8,)}).fpa_intb_profile_m == (8,)
    assert load_config({}, {C.KEY_FPA_INTB_PROFILE_M: 16}).fpa_intb_profile_m == (16,)
    # An empty list given explicitly means "no override" and still beats the env var.
    cfg = load_config({C.ENV_FPA_INTB_PROFILE_M: "4"}, {C.KEY_FPA_INTB_PROFILE_M: []})
    assert cfg.fpa_intb_profile_m is None


# ----------------------------------------------------------------------------- paired K, wave


@pytest.mark.parametrize("text, expected", [("0", "off"), ("off", "off"), ("1", "on"),
                                            ("force", "force")])
def test_paired_k(text, expected):
    assert env1(C.ENV_GEMV_PAIRED_K, text).gemv_paired_k == expected
    assert load_config({}, {C.KEY_GEMV_PAIRED_K: text}).gemv_paired_k == expected


@pytest.mark.parametrize("name, source", [(C.ENV_GEMV_PAIRED_K, "env"),
                                          (C.KEY_GEMV_PAIRED_K, "config")])
@pytest.mark.parametrize("text", ["2", "on", "true", "FORCE", " 1", "-1"])
def test_paired_k_rejects(name, source, text):
    with pytest.raises(ValueError, match="^Invalid MatMulNBits paired-K GEMV option") as info:
        env1(name, text) if source == "env" else load_config({}, {name: text})
    assert f'name: "{name}"' in str(info.value)


def test_paired_k_config_bool_and_int():
    assert load_config({}, {C.KEY_GEMV_PAIRED_K: True}).gemv_paired_k == "on"
    assert load_config({}, {C.KEY_GEMV_PAIRED_K: False}).gemv_paired_k == "off"
    assert load_config({}, {C.KEY_GEMV_PAIRED_K: 1}).gemv_paired_k == "on"
    with pytest.raises(ValueError, match="paired-K"):
        load_config({}, {C.KEY_GEMV_PAIRED_K: 2})


@pytest.mark.parametrize("value, expected", [("0", False), ("1", True), (True, True),
                                             (False, False), (0, False), (1, True)])
def test_wave_aware(value, expected):
    assert load_config({}, {C.KEY_GEMV_WAVE_AWARE: value}).gemv_wave_aware is expected


@pytest.mark.parametrize("value", ["", "-1", "2", "on", "true", 2, " 1"])
def test_wave_aware_rejects(value):
    with pytest.raises(ValueError, match="^Invalid MatMulNBits wave-aware GEMV option"):
        load_config({}, {C.KEY_GEMV_WAVE_AWARE: value})


# ----------------------------------------------------------------------------- strings


STRING_KNOBS = [
    (C.ENV_TACTIC_CACHE_DIR, C.KEY_TACTIC_CACHE_DIR, "tactic_cache_dir"),
    (C.ENV_TACTIC_CACHE_PREFIX, C.KEY_TACTIC_CACHE_PREFIX, "tactic_cache_prefix"),
    (None, C.KEY_TUNING_RESULTS_PREFIX, "tuning_results_prefix"),
]


@pytest.mark.parametrize("env, key, field", STRING_KNOBS)
def test_string_knobs_verbatim(env, key, field):
    if env is not None:
        assert getattr(env1(env, " /tmp/a b "), field) == " /tmp/a b "
    assert getattr(load_config({}, {key: "pre"}), field) == "pre"
    assert getattr(load_config({}, {key: ""}), field) is None
    assert getattr(load_config({}, {key: pathlib.Path("/x")}), field) == "/x"


@pytest.mark.parametrize("name, source", [(C.ENV_FORCE_ROUTE, "env"),
                                          (C.KEY_FORCE_ROUTE, "config")])
def test_force_route_trimmed(name, source):
    def load(text):
        return env1(name, text) if source == "env" else load_config({}, {name: text})

    assert load("  gemv_m1 ").force_route == "gemv_m1"
    assert load("   ").force_route is None


def test_use_tf32_option():
    assert load_config({}, {"use_tf32": False}).use_tf32 is False
    assert load_config({}, {"use_tf32": "0"}).use_tf32 is False
    assert load_config({}, {"use_tf32": 1}).use_tf32 is True
    cfg = load_config({}, {"use_tf32": "false"})
    assert cfg.use_tf32 is False and cfg.source("use_tf32") == "config"
    with pytest.raises(ValueError, match=re.escape(
            'Failed to parse config key - name: "use_tf32", value: "yes"')):
        load_config({}, {"use_tf32": "yes"})


def test_config_value_wrong_type():
    with pytest.raises(ValueError, match="expects a str, bool or int"):
        load_config({}, {C.KEY_M_CHUNK_SIZE: 1.5})
    with pytest.raises(ValueError, match="expects a str, bool or int"):
        load_config({}, {C.KEY_FORCE_ROUTE: ["a"]})


# ----------------------------------------------------------------------------- precedence

# (env var, config key, env text, config text, field, expected value from config)
BOTH = [
    (C.ENV_FPA_INTB_GEMM, C.KEY_FPA_INTB_GEMM, "1", "off", "fpa_intb_gemm", False),
    (C.ENV_FPA_INTB_PROFILE_M, C.KEY_FPA_INTB_PROFILE_M, "1,2", "8,4", "fpa_intb_profile_m",
     (4, 8)),
    (C.ENV_M_CHUNK_SIZE, C.KEY_M_CHUNK_SIZE, "64", "128", "m_chunk_size", 128),
    (C.ENV_GEMV_PAIRED_K, C.KEY_GEMV_PAIRED_K, "1", "force", "gemv_paired_k", "force"),
    (C.ENV_TACTIC_CACHE_DIR, C.KEY_TACTIC_CACHE_DIR, "/env", "/cfg", "tactic_cache_dir", "/cfg"),
    (C.ENV_TACTIC_CACHE_PREFIX, C.KEY_TACTIC_CACHE_PREFIX, "e", "c", "tactic_cache_prefix", "c"),
    (C.ENV_FORCE_ROUTE, C.KEY_FORCE_ROUTE, "env_route", "cfg_route", "force_route", "cfg_route"),
    (C.ENV_SCRATCH_LIMIT_MB, C.KEY_SCRATCH_LIMIT_MB, "1", "2", "scratch_limit_bytes", 2 * MIB),
    (C.ENV_CALL_GRAPHS, C.KEY_CALL_GRAPHS, "0", "1", "call_graphs", True),
    (C.ENV_FUSED_GEMM, C.KEY_FUSED_GEMM, "1", "0", "fused_gemm", False),
    (C.ENV_PACKED_ONLY, C.KEY_PACKED_ONLY, "0", "1", "packed_only", True),
    (C.ENV_DEQUANT_OVERLAP, C.KEY_DEQUANT_OVERLAP, "1", "0", "dequant_overlap", False),
    (C.ENV_ROUTER_SMALL_N, C.KEY_ROUTER_SMALL_N, "0", "1", "router_small_n", True),
]


def test_precedence_table_covers_every_key_with_an_env_var():
    both = {(row.field) for row in C.ENV_TABLE if row.kind == "env"} & {
        row.field for row in C.ENV_TABLE if row.kind != "env"}
    assert both == {b[4] for b in BOTH}


@pytest.mark.parametrize("env, key, env_text, cfg_text, field, expected", BOTH)
def test_config_beats_env(env, key, env_text, cfg_text, field, expected):
    from_env = load_config({env: env_text})
    assert from_env.source(field) == "env"
    assert getattr(from_env, field) != expected
    cfg = load_config({env: env_text}, {key: cfg_text})
    assert getattr(cfg, field) == expected
    assert cfg.source(field) == "config"


@pytest.mark.parametrize("env, key, env_text, cfg_text, field, expected", BOTH)
def test_config_wins_even_over_bad_env(env, key, env_text, cfg_text, field, expected):
    # The env var is not parsed at all when the key is given.
    cfg = load_config({env: "-1,not valid"}, {key: cfg_text})
    assert getattr(cfg, field) == expected


@pytest.mark.parametrize("env, key, env_text, cfg_text, field, expected", BOTH)
def test_config_none_value_falls_through_to_env(env, key, env_text, cfg_text, field, expected):
    cfg = load_config({env: env_text}, {key: None})
    assert cfg.source(field) == "env"


def test_config_instance_passthrough():
    explicit = Config(force_chunked=True, chunk_size=64)
    assert load_config({C.ENV_FORCE_CHUNKED: "0", C.ENV_CHUNK_SIZE: "junk"}, explicit) is explicit


def test_unknown_key():
    for key in ("ep.cuda.fpa_intb_gem", "numba_nbits.force_path", "session.foo",
                "ORT_FPA_INTB_GEMM"):
        with pytest.raises(ValueError, match=f'unknown config key "{re.escape(key)}"') as info:
            load_config({}, {key: "1"})
        for valid in C.CONFIG_KEYS:
            assert valid in str(info.value)


def test_all_config_keys_accepted():
    assert set(C.CONFIG_KEYS) == {
        "ep.cuda.fpa_intb_gemm", "ep.cuda.fpa_intb_profile_m",
        "ep.cuda.matmul_nbits_m_chunk_size", "ep.cuda.fpa_intb_gemv_paired_k",
        "ep.cuda.fpa_intb_gemv_wave_aware", "ep.cuda.gemm_tactic_cache_dir",
        "ep.cuda.gemm_tactic_cache_prefix", "ep.cuda.gemm_tactic_cache_tuning_results_prefix",
        "use_tf32", "numba_nbits.force_route", "numba_nbits.scratch_limit_mb", "numba_nbits.call_graphs",
        "numba_nbits.fused_gemm", "numba_nbits.packed_only", "numba_nbits.dequant_overlap",
        "numba_nbits.router_small_n",
    }
    assert set(C.ENV_VARS) == {
        "ORT_FPA_INTB_GEMM", "ORT_FPA_INTB_PROFILE_M", "ORT_FPA_INTB_DEBUG",
        "ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION", "ORT_MATMULNBITS_FORCE_CHUNKED",
        "ORT_MATMULNBITS_CHUNK_SIZE", "ORT_MATMULNBITS_M_CHUNK_SIZE", "ORT_FPA_INTB_GEMV_PAIRED_K",
        "ORT_QUANTIZED_DECODE_L2_PREFETCH", "ORT_CUDA_GEMM_TACTIC_CACHE_DIR",
        "ORT_CUDA_GEMM_TACTIC_CACHE_PREFIX", "ORT_CUDA_GEMM_OPTIONS",
        "NUMBA_NBITS_FORCE_ROUTE", "NUMBA_NBITS_SCRATCH_LIMIT_MB", "NUMBA_NBITS_CALL_GRAPHS", "NUMBA_NBITS_FUSED_GEMM",
        "NUMBA_NBITS_PACKED_ONLY", "NUMBA_NBITS_DEQUANT_OVERLAP", "NUMBA_NBITS_ROUTER_SMALL_N",
    }


def test_everything_at_once():
    env = {name: "1" for name in C.ENV_VARS}
    cfg = load_config(env, {"use_tf32": False, C.KEY_GEMV_WAVE_AWARE: True,
                            C.KEY_TUNING_RESULTS_PREFIX: "t"})
    assert all(origin != "default" for _, origin in cfg.sources)
    assert cfg.fpa_intb_debug and cfg.force_chunked and cfg.l2_prefetch
    assert cfg.chunk_size == 1 and cfg.scratch_limit_bytes == MIB and cfg.force_route == "1"


# ----------------------------------------------------------------------------- Config object


def test_config_is_frozen_and_hashable():
    cfg = load_config({C.ENV_CHUNK_SIZE: "64"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.chunk_size = 1  # type: ignore[misc]
    assert cfg == Config(chunk_size=64)  # sources are not compared
    assert hash(cfg) == hash(Config(chunk_size=64))
    assert len({cfg, Config(chunk_size=64)}) == 1


def test_replace():
    base = load_config({C.ENV_CHUNK_SIZE: "64"})
    new = base.replace(force_chunked=True, force_route="dequant_gemm")
    assert new.force_chunked and new.force_route == "dequant_gemm" and new.chunk_size == 64
    assert new.source("force_chunked") == "config" and new.source("chunk_size") == "env"
    assert base.force_chunked is False
    with pytest.raises(ValueError, match="unknown Config field"):
        base.replace(force_path="x")
    with pytest.raises(ValueError, match="gemv_paired_k"):
        base.replace(gemv_paired_k="sometimes")
    with pytest.raises(ValueError, match="chunk_size"):
        base.replace(chunk_size=0)


@pytest.mark.parametrize(
    "changes",
    [{"use_tf32": 1}, {"m_chunk_size": -1}, {"scratch_limit_bytes": 0}, {"chunk_size": True},
     {"fpa_intb_profile_m": (0, 1)}, {"fpa_intb_profile_m": "1,2"}, {"force_route": 3}],
)
def test_direct_construction_validates(changes):
    with pytest.raises(ValueError):
        Config(**changes)


def test_direct_construction_normalises():
    cfg = Config(fpa_intb_profile_m=[8, 2, 8], force_route="  r ", tactic_cache_dir="")
    assert cfg.fpa_intb_profile_m == (2, 8)
    assert cfg.force_route == "r" and cfg.tactic_cache_dir is None
    assert Config(fpa_intb_profile_m=()).fpa_intb_profile_m is None


def test_sources_and_explain():
    cfg = load_config({C.ENV_CHUNK_SIZE: "64"}, {C.KEY_GEMV_WAVE_AWARE: "1"})
    assert [name for name, _ in cfg.sources] == FIELDS
    assert cfg.source("chunk_size") == "env"
    assert cfg.source("gemv_wave_aware") == "config"
    assert cfg.source("use_tf32") == "default"
    text = cfg.explain()
    assert len(text.splitlines()) == len(FIELDS)
    assert f"chunk_size = 64  (env {C.ENV_CHUNK_SIZE})" in text
    assert f"gemv_wave_aware = True  (config {C.KEY_GEMV_WAVE_AWARE})" in text
    assert "use_tf32 = True  (default)" in text
    assert "fpa_intb_debug = True  (explicit)" in cfg.replace(fpa_intb_debug=True).explain()


# ----------------------------------------------------------------------------- table


def test_table_covers_every_field_and_name():
    assert {row.field for row in C.ENV_TABLE} == set(FIELDS)
    names = [row.name for row in C.ENV_TABLE]
    assert len(names) == len(set(names))
    assert set(names) == set(C.ENV_VARS) | set(C.CONFIG_KEYS)
    for row in C.ENV_TABLE:
        assert row.kind in ("env", "config", "option")
        assert row.default and row.parse and row.effect
        assert (row.kind == "env") == (row.name in C.ENV_VARS)
    assert next(r for r in C.ENV_TABLE if r.name == "use_tf32").kind == "option"


def test_table_markdown():
    md = C.env_table_markdown()
    lines = md.strip().splitlines()
    assert len(lines) == 2 + len(C.ENV_TABLE) + len(C.PROCESS_ENV_TABLE)
    assert lines[1].startswith("|---|")
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[:1] + lines[2:])
    ncols = lines[0].count(" | ")
    for line in lines[2:]:
        assert line.replace("\\|", "").count(" | ") == ncols
    for row in C.ENV_TABLE + C.PROCESS_ENV_TABLE:
        assert f"`{row.name}`" in md


# ----------------------------------------------------------------------------- module hygiene


def test_module_imports_no_numba_and_reads_no_env_at_import():
    tree = ast.parse(pathlib.Path(C.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "dataclasses", "os", "re", "collections", "typing"}
    # os.environ / os.getenv appear only inside load_config (and the module docstring).
    source = pathlib.Path(C.__file__).read_text()
    for node in tree.body[1:]:
        if isinstance(node, ast.FunctionDef) and node.name == "load_config":
            continue
        segment = ast.get_source_segment(source, node) or ""
        assert "os.environ" not in segment and "getenv" not in segment, segment[:80]
