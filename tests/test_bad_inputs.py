"""Malformed inputs: every one raises a clear exception whose message names the problem.

Table-driven. Four tables:

* ``CONSTRUCTION`` — attributes and constant inputs of ``MatMulNBits(...)``: wrong dtype / shape /
  rank of B, scales, zero_points, g_idx, bias; K or N disagreeing with the tensors; g_idx out of
  range / wrong dtype / wrong length; ``weight_prepacked`` misuse (3, -1, fp32 A, byte-size
  mismatch, SM90 layout with a block size it does not support); non-int attributes.
* ``BAD_ENV`` / ``BAD_CONFIG`` — a bad value for every environment variable and config key whose
  parse rule can fail (``environ=`` / ``config=`` dicts), plus unknown keys and wrong value types.
  ``test_every_failing_knob_is_covered`` keeps the tables complete as knobs are added to
  ``config.py``: each env var / key is either in the table or listed as never failing (and shown
  to accept garbage).
* ``CALL`` — call-time errors (A's dtype / K / rank / contiguity / type, ``out`` of the wrong
  shape / dtype / contiguity / overlapping A, forced routes that cannot serve, unknown forced
  route). For each the ``out`` buffer is poisoned first and must be byte-identical afterwards.

Valid-but-odd data (NaN / Inf in A or scales) is not an error: ``test_nan_inf_are_data`` checks
that NaN / Inf land exactly where the float64 oracle puts them (dispatch's route; every route is
covered per route in ``test_numerics.py``).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu, to_dev, to_host

import numba_nbits as nb
from numba_nbits import config as cfg
from numba_nbits.reference import matmul_nbits_ref

K, N, BITS, BLOCK = 40, 8, 4, 16  # k_blocks 3, K_padded 48, blob 8, packed zp 2 bytes per row
KB, KP = 3, 48
F16 = np.float16


def valid(rng=None, dtype=F16):
    rng = rng or np.random.default_rng(0)
    B = rng.integers(0, 256, (N, KB, BLOCK * BITS // 8), dtype=np.uint8)
    scales = (rng.uniform(0.01, 0.05, (N, KB)) * rng.choice([-1, 1], (N, KB))).astype(dtype)
    zp = rng.integers(0, 256, (N, 2), dtype=np.uint8)
    g_idx = (np.arange(KP) // BLOCK).astype(np.int32)
    bias = rng.uniform(-1, 1, N).astype(dtype)
    return dict(B=B, scales=scales, zero_points=zp, g_idx=g_idx, bias=bias)


def build(inputs=None, **attrs):
    inputs = valid() if inputs is None else inputs
    a = dict(K=K, N=N, bits=BITS, block_size=BLOCK)
    a.update(attrs)
    return nb.MatMulNBits(inputs["B"], inputs["scales"], inputs.get("zero_points"), inputs.get("g_idx"),
                          inputs.get("bias"), **a)


def with_(**changes):
    """Valid inputs with some replaced (a callable gets the valid value)."""
    def make():
        v = valid()
        for k, c in changes.items():
            v[k] = c(v[k]) if callable(c) else c
        return v
    return make


# ------------------------------------------------------------------------------------ construction

CONSTRUCTION = [
    # B
    ("B_int8", with_(B=lambda b: b.astype(np.int8)), {}, "input B must be uint8, got int8"),
    ("B_float32", with_(B=lambda b: b.astype(np.float32)), {}, "input B must be uint8, got float32"),
    ("B_wrong_blob", with_(B=np.zeros((N, KB, 9), np.uint8)), {}, r"input B must have shape \(N, k_blocks, blob_size\) = \(8, 3, 8\)"),
    ("B_rank2", with_(B=lambda b: b.reshape(N, -1)), {}, r"input B must have shape .* got \(8, 24\)"),
    ("B_rank1", with_(B=lambda b: b.reshape(-1)), {}, r"input B must have shape .* got \(192,\)"),
    ("B_not_array", with_(B="bytes"), {}, r"input B: expected a NumPy array or a CUDA array"),
    # K / N disagree with the tensors
    ("K_attr_more_blocks", None, dict(K=64), r"input B must have shape .* = \(8, 4, 8\) for K=64"),
    ("K_attr_fewer_blocks", None, dict(K=16), r"input B must have shape .* = \(8, 1, 8\) for K=16"),
    ("N_attr_larger", None, dict(N=9), r"input B must have shape .* = \(9, 3, 8\)"),
    ("N_attr_smaller", None, dict(N=4), r"input B must have shape .* = \(4, 3, 8\)"),
    ("block_attr_mismatch", None, dict(block_size=32), r"input B must have shape .* = \(8, 2, 16\)"),
    ("bits_attr_mismatch", None, dict(bits=8), r"input B must have shape .* = \(8, 3, 16\)"),
    # scales
    ("scales_int32", with_(scales=lambda s: s.astype(np.int32)), {}, "input scales must be float32, float16 or bfloat16, got int32"),
    ("scales_float64", with_(scales=lambda s: s.astype(np.float64)), {}, "input scales must be float32, float16 or bfloat16, got float64"),
    ("scales_too_few_blocks", with_(scales=lambda s: s[:, :2]), {}, r"input scales must have shape \(N, k_blocks\) = \(8, 3\) or \(24,\), got \(8, 2\)"),
    ("scales_wrong_N", with_(scales=lambda s: np.vstack([s, s[:1]])), {}, r"input scales must have shape .* got \(9, 3\)"),
    ("scales_flat_wrong", with_(scales=lambda s: s.reshape(-1)[:23]), {}, r"input scales must have shape .* got \(23,\)"),
    ("scales_rank3", with_(scales=lambda s: s.reshape(N, KB, 1)), {}, r"input scales must have shape .* got \(8, 3, 1\)"),
    # zero points
    ("zp_packed_wrong_width", with_(zero_points=np.zeros((N, 3), np.uint8)), {}, r"input zero_points \(uint8, packed 2 per byte\) must have shape \(N, ceil\(k_blocks\*bits/8\)\) = \(8, 2\)"),
    ("zp_packed_wrong_N", with_(zero_points=np.zeros((N + 1, 2), np.uint8)), {}, r"input zero_points \(uint8, .* got \(9, 2\)"),
    ("zp_typed_wrong_dtype", with_(zero_points=np.zeros((N, KB), np.float32)), {}, "Input 'zero_points' and 'scales' should have the same data type when zero_points is not uint8"),
    ("zp_int8", with_(zero_points=np.zeros((N, 2), np.int8)), {}, "Input 'zero_points' and 'scales' should have the same data type"),
    ("zp_typed_wrong_shape", with_(zero_points=np.zeros((N, 2), F16)), {}, r"input zero_points \(typed\) must have shape \(8, 3\) or \(24,\), got \(8, 2\)"),
    # g_idx
    ("g_idx_int64", with_(g_idx=lambda g: g.astype(np.int64)), {}, "input g_idx must be int32, got int64"),
    ("g_idx_uint32", with_(g_idx=lambda g: g.astype(np.uint32)), {}, "input g_idx must be int32, got uint32"),
    ("g_idx_float", with_(g_idx=lambda g: g.astype(np.float32)), {}, "input g_idx must be int32, got float32"),
    ("g_idx_len_K_minus_1", with_(g_idx=lambda g: g[:K - 1]), {}, r"input g_idx must have shape \(K,\) = \(40,\) or \(k_blocks\*block_size,\) = \(48,\), got \(39,\)"),
    ("g_idx_len_Kp_plus_1", with_(g_idx=np.zeros(KP + 1, np.int32)), {}, r"input g_idx must have shape .* got \(49,\)"),
    ("g_idx_2d", with_(g_idx=lambda g: g.reshape(1, -1)), {}, r"input g_idx must have shape .* got \(1, 48\)"),
    ("g_idx_too_large", with_(g_idx=lambda g: np.where(np.arange(KP) == 5, 3, g).astype(np.int32)), {},
     r"group_index value at index 5 is 3, which is out of valid range \[0, 3\)"),
    ("g_idx_negative", with_(g_idx=lambda g: np.where(np.arange(KP) == 41, -1, g).astype(np.int32)), {},
     r"group_index value at index 41 is -1, which is out of valid range \[0, 3\)"),
    ("g_idx_huge", with_(g_idx=np.full(K, 2**31 - 1, np.int32)), {}, r"group_index value at index 0 is 2147483647"),
    # bias
    ("bias_float32", with_(bias=lambda b: b.astype(np.float32)), {}, r"input bias must have the dtype of A and scales \(float16\), got float32"),
    ("bias_len", with_(bias=lambda b: b[:N - 1]), {}, r"input bias must have shape \(N,\) = \(8,\), got \(7,\)"),
    ("bias_2d", with_(bias=lambda b: b.reshape(1, N)), {}, r"input bias must have shape \(N,\) = \(8,\), got \(1, 8\)"),
    # attributes
    ("K_zero", None, dict(K=0), "attribute K must be > 0, got 0"),
    ("K_negative", None, dict(K=-40), "attribute K must be > 0, got -40"),
    ("N_zero", None, dict(N=0), "attribute N must be > 0, got 0"),
    ("K_float", None, dict(K=40.0), "attribute K must be an int, got float"),
    ("N_str", None, dict(N="8"), "attribute N must be an int, got str"),
    ("bits_bool", None, dict(bits=True), "attribute bits must be an int, got bool"),
    ("bits_3", None, dict(bits=3), "bits should be 2, 4 or 8, got 3"),
    ("bits_16", None, dict(bits=16), "bits should be 2, 4 or 8, got 16"),
    ("bits_0", None, dict(bits=0), "bits should be 2, 4 or 8, got 0"),
    ("block_0", None, dict(block_size=0), "block_size must be greater than zero"),
    ("block_negative", None, dict(block_size=-16), "block_size must be greater than zero"),
    ("block_8", None, dict(block_size=8), r"block_size must be a power of 2, and >= 16. Got 8"),
    ("block_24", None, dict(block_size=24), r"block_size must be a power of 2, and >= 16. Got 24"),
    ("block_17", None, dict(block_size=17), r"block_size must be a power of 2, and >= 16. Got 17"),
    ("accuracy_level_5", None, dict(accuracy_level=5), "accuracy_level must be in 0..4"),
    ("accuracy_level_neg", None, dict(accuracy_level=-1), "accuracy_level must be in 0..4"),
    # weight_prepacked misuse
    ("prepacked_3", None, dict(weight_prepacked=3), r"weight_prepacked must be 0 \(not prepacked\), 1 \(SM80 layout\), or 2 \(SM90 layout\), but got 3"),
    ("prepacked_neg", None, dict(weight_prepacked=-1), r"weight_prepacked must be 0 .* but got -1"),
    ("prepacked_fp32", with_(scales=lambda s: s.astype(np.float32), bias=None), dict(weight_prepacked=1),
     "weight_prepacked requires fp16 or bf16 input A"),
    ("prepacked_size", with_(B=lambda b: b.reshape(-1)[:100]), dict(weight_prepacked=1),
     "Prepacked MatMulNBits weight size mismatch. Expected 192 bytes, got 100"),
    ("prepacked_sm90_block16", None, dict(weight_prepacked=2), r"weight_prepacked"),
]


@pytest.mark.parametrize("name, make, attrs, match", CONSTRUCTION, ids=[c[0] for c in CONSTRUCTION])
def test_construction_errors(name, make, attrs, match):
    inputs = make() if make is not None else valid()
    with pytest.raises(ValueError, match=match):
        build(inputs, **attrs)


@pytest.mark.parametrize("missing", ["B", "scales"])
def test_missing_required_input(missing):
    inputs = valid()
    inputs[missing] = None
    with pytest.raises(ValueError, match=f"input {missing}"):
        build(inputs)


def test_two_bit_g_idx_rejected():
    rng = np.random.default_rng(1)
    B = rng.integers(0, 256, (N, KB, BLOCK * 2 // 8), dtype=np.uint8)
    s = np.ones((N, KB), F16)
    with pytest.raises(ValueError, match=r"CUDA 2-bit dequantization does not support g_idx \(reorder_idx\)"):
        nb.MatMulNBits(B, s, None, np.zeros(KP, np.int32), None, K=K, N=N, bits=2, block_size=BLOCK)


# ------------------------------------------------------------------------------------ env / config

#: env var -> bad values (each must raise at construction, naming the variable and the value)
BAD_ENV = {
    "ORT_FPA_INTB_DEBUG": ["yes", "1.0", " 1", "0x1"],
    "ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION": ["yes", "2", "TRUE", "on"],
    "ORT_MATMULNBITS_FORCE_CHUNKED": ["on", "1x", "99999999999", "+1"],
    "ORT_MATMULNBITS_CHUNK_SIZE": ["abc", "1e3", "9" * 25, "64 "],
    "ORT_MATMULNBITS_M_CHUNK_SIZE": ["-1", "abc", "1.5"],
    "ORT_FPA_INTB_GEMV_PAIRED_K": ["2", "on", "FORCE"],
    "ORT_QUANTIZED_DECODE_L2_PREFETCH": ["yes", "-1"],
    "ORT_CUDA_GEMM_OPTIONS": ["0x1", "4294967296", "one"],
    "NUMBA_NBITS_SCRATCH_LIMIT_MB": ["0", "-5", "abc", "1.5"],
    "NUMBA_NBITS_CALL_GRAPHS": ["yes", "2", "off"],
    "NUMBA_NBITS_FUSED_GEMM": ["yes", "2", "off"],
    "NUMBA_NBITS_PACKED_ONLY": ["yes", "2", "off"],
    "NUMBA_NBITS_DEQUANT_OVERLAP": ["yes", "2", "off"],
    "NUMBA_NBITS_ROUTER_SMALL_N": ["yes", "2", "off"],
}
#: env vars that never fail to parse (verbatim strings, ORT's lenient parsers)
NEVER_FAILING_ENV = {"ORT_FPA_INTB_GEMM", "ORT_FPA_INTB_PROFILE_M", "ORT_CUDA_GEMM_TACTIC_CACHE_DIR",
                     "ORT_CUDA_GEMM_TACTIC_CACHE_PREFIX"}
#: validated when the route is chosen (first call / op.route), not at parse time
LATE_ENV = {"NUMBA_NBITS_FORCE_ROUTE"}

BAD_ENV_CASES = [(k, v) for k, vals in BAD_ENV.items() for v in vals]


@pytest.mark.parametrize("var, value", BAD_ENV_CASES, ids=[f"{k}={v!r}" for k, v in BAD_ENV_CASES])
def test_bad_env_value(var, value):
    with pytest.raises(ValueError, match=var) as ei:
        build(environ={var: value})
    assert value.strip() in str(ei.value) or "MiB" in str(ei.value), str(ei.value)


#: config key -> bad values (raise at construction naming the key)
BAD_CONFIG = {
    "use_tf32": ["maybe", 2, "TRUE"],
    "ep.cuda.matmul_nbits_m_chunk_size": ["-1", "abc", True],
    "ep.cuda.fpa_intb_gemv_paired_k": ["2", "on"],
    "ep.cuda.fpa_intb_gemv_wave_aware": ["yes", "2", ""],
    "numba_nbits.scratch_limit_mb": [0, "-1", "x", False],
    "numba_nbits.call_graphs": ["no", 2, "TRUE"],
    "numba_nbits.fused_gemm": ["no", 2, "TRUE"],
    "numba_nbits.packed_only": ["no", 2, "TRUE"],
    "numba_nbits.dequant_overlap": ["no", 2, "TRUE"],
    "numba_nbits.router_small_n": ["no", 2, "TRUE"],
}
NEVER_FAILING_KEYS = {"ep.cuda.fpa_intb_gemm", "ep.cuda.fpa_intb_profile_m", "ep.cuda.gemm_tactic_cache_dir",
                      "ep.cuda.gemm_tactic_cache_prefix", "ep.cuda.gemm_tactic_cache_tuning_results_prefix"}
LATE_KEYS = {"numba_nbits.force_route"}
BAD_CONFIG_CASES = [(k, v) for k, vals in BAD_CONFIG.items() for v in vals]


@pytest.mark.parametrize("key, value", BAD_CONFIG_CASES, ids=[f"{k}={v!r}" for k, v in BAD_CONFIG_CASES])
def test_bad_config_value(key, value):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        build(config={key: value})


@pytest.mark.parametrize("config, match", [
    ({"ep.cuda.no_such_key": "1"}, 'unknown config key "ep.cuda.no_such_key"; valid keys: '),
    ({"ORT_MATMULNBITS_FORCE_CHUNKED": "1"}, 'unknown config key "ORT_MATMULNBITS_FORCE_CHUNKED"'),
    ({"use_tf32": 1.5}, 'config key "use_tf32" expects a str, bool or int, got float'),
    ({"ep.cuda.fpa_intb_gemm": [1]}, 'config key "ep.cuda.fpa_intb_gemm" expects a str, bool or int, got list'),
    ({"numba_nbits.force_route": {"a": 1}}, 'config key "numba_nbits.force_route" expects a str, bool or int'),
    ({"ep.cuda.fpa_intb_profile_m": [1, 2.5]}, 'config key "ep.cuda.fpa_intb_profile_m" expects a str, bool or int'),
], ids=["unknown_key", "env_name_as_key", "float_value", "list_for_bool", "dict_value", "float_in_list"])
def test_bad_config_keys_and_types(config, match):
    with pytest.raises(ValueError, match=match):
        build(config=config)


def test_config_instance_validated():
    with pytest.raises(ValueError, match="Config.chunk_size must be >= 1"):
        build(config=cfg.Config(chunk_size=0))
    with pytest.raises(ValueError, match=r"unknown Config field\(s\) \['chunk'\]"):
        cfg.Config().replace(chunk=3)


def test_every_failing_knob_is_covered():
    """Every env var / config key is either in a bad-value table, validated late, or never fails."""
    envs, keys = set(cfg.ENV_VARS), set(cfg.CONFIG_KEYS)
    assert envs == set(BAD_ENV) | NEVER_FAILING_ENV | LATE_ENV, envs ^ (set(BAD_ENV) | NEVER_FAILING_ENV | LATE_ENV)
    # a config key without its own entry shares the env var's parse rule (tested through the env var)
    keys_via_env = {row.name for row in cfg.ENV_TABLE if row.kind != "env"
                    and any(r.kind == "env" and r.field == row.field and r.name in BAD_ENV for r in cfg.ENV_TABLE)}
    assert keys <= set(BAD_CONFIG) | NEVER_FAILING_KEYS | LATE_KEYS | keys_via_env, \
        keys - (set(BAD_CONFIG) | NEVER_FAILING_KEYS | LATE_KEYS | keys_via_env)
    garbage = " \t%$ not a value ,,-7,x"
    for var in NEVER_FAILING_ENV:
        build(environ={var: garbage})
    for key in NEVER_FAILING_KEYS:
        build(config={key: garbage})


# ------------------------------------------------------------------------------------ call time

def _dev(x):
    from numba import cuda

    return to_dev(x)


def _A(M=2, k=K, dtype=F16, seed=3):
    return np.random.default_rng(seed).standard_normal((M, k)).astype(dtype)


def _overlap_device():
    from numba import cuda

    flat = cuda.to_device(np.zeros(2 * K + 16, F16))
    a = flat[0:2 * K].reshape(2, K)
    return a, flat[2 * K - 8:2 * K + 8].reshape(2, N)


def _overlap_numpy():
    flat = np.zeros(2 * K + 16, F16)
    return flat[0:2 * K].reshape(2, K), flat[2 * K - 8:2 * K + 8].reshape(2, N)


#: (id, op kwargs, A factory, out factory or None (= the poisoned standard out), exception, match)
CALL = [
    ("A_float32", {}, lambda: _A(dtype=np.float32), None, ValueError, r"input A must have the dtype of scales \(float16\), got float32"),
    ("A_bfloat16", {}, lambda: _A(dtype=ml_dtypes.bfloat16), None, ValueError, r"input A must have the dtype of scales \(float16\), got bfloat16"),
    ("A_int32", {}, lambda: _A().astype(np.int32), None, (ValueError, TypeError), r"input A|dtype|int32"),
    ("A_device_float32", {}, lambda: _dev(_A(dtype=np.float32)), None, ValueError, r"input A must have the dtype of scales"),
    ("A_wrong_K", {}, lambda: _A(k=K + 1), None, ValueError, r"input A's last dimension must equal attribute K=40, got shape \(2, 41\)"),
    ("A_K_padded", {}, lambda: _A(k=KP), None, ValueError, r"input A's last dimension must equal attribute K=40"),
    ("A_transposed_K", {}, lambda: _A(M=K, k=2), None, ValueError, r"input A's last dimension must equal attribute K=40"),
    ("A_rank1", {}, lambda: _A()[0], None, ValueError, r"input A must have rank >= 2 \(\[..., K\]\), got shape \(40,\)"),
    ("A_rank0", {}, lambda: np.array(1, F16), None, ValueError, r"input A must have rank >= 2"),
    ("A_noncontiguous_device", {}, lambda: _dev(_A(k=2 * K))[:, ::2], None, ValueError, r"A: device arrays must be C-contiguous"),
    ("A_list", {}, lambda: _A().tolist(), None, TypeError, r"A: expected a NumPy array or a CUDA array"),
    ("A_none", {}, lambda: None, None, TypeError, r"A: expected a NumPy array or a CUDA array"),
    ("out_wrong_N", {}, lambda: _dev(_A()), lambda: _dev(np.zeros((2, N + 1), F16)), ValueError, r"out must have shape A.shape\[:-1\] \+ \(N,\) = \(2, 8\), got \(2, 9\)"),
    ("out_wrong_M", {}, lambda: _dev(_A()), lambda: _dev(np.zeros((3, N), F16)), ValueError, r"out must have shape .* got \(3, 8\)"),
    ("out_flat", {}, lambda: _dev(_A()), lambda: _dev(np.zeros(2 * N, F16)), ValueError, r"out must have shape .* got \(16,\)"),
    ("out_rank3_for_rank2_A", {}, lambda: _dev(_A()), lambda: _dev(np.zeros((1, 2, N), F16)), ValueError, r"out must have shape .* got \(1, 2, 8\)"),
    ("out_float32", {}, lambda: _dev(_A()), lambda: _dev(np.zeros((2, N), np.float32)), ValueError, r"out must have dtype float16, got float32"),
    ("out_bfloat16", {}, lambda: _dev(_A()), lambda: _dev(np.zeros((2, N), ml_dtypes.bfloat16)), ValueError, r"out must have dtype float16, got bfloat16"),
    ("out_noncontiguous", {}, lambda: _dev(_A()), lambda: _dev(np.zeros((2, 2 * N), F16))[:, ::2], ValueError, r"out: device arrays must be C-contiguous"),
    ("out_list", {}, lambda: _dev(_A()), lambda: [[0.0] * N] * 2, TypeError, r"out: expected a NumPy array or a CUDA array"),
    ("force_route_cannot_serve", dict(config={"numba_nbits.force_route": "gemv_w8"}), lambda: _dev(_A()), None,
     ValueError, r"forced route 'gemv_w8' cannot serve .* guard bits_8"),
    ("force_route_g_idx", dict(config={"numba_nbits.force_route": "gemv_w4"}, g_idx=True), lambda: _dev(_A()), None,
     ValueError, r"forced route 'gemv_w4' cannot serve .* guard no_g_idx"),
    ("force_route_router_shape", dict(config={"numba_nbits.force_route": "router_gemv"}), lambda: _dev(_A(M=1)),
     lambda: _dev(np.full((1, N), 7, F16)), ValueError, r"forced route 'router_gemv' cannot serve"),
    ("force_route_unknown_config", dict(config={"numba_nbits.force_route": "nope"}), lambda: _dev(_A()), None,
     ValueError, r"unknown route 'nope'; routes are "),
    ("force_route_unknown_env", dict(environ={"NUMBA_NBITS_FORCE_ROUTE": "gemv_w5"}), lambda: _dev(_A()), None,
     ValueError, r"unknown route 'gemv_w5'"),
]


@pytest.mark.parametrize("name, opkw, make_a, make_out, exc, match", CALL, ids=[c[0] for c in CALL])
def test_call_errors_leave_out_untouched(name, opkw, make_a, make_out, exc, match):
    opkw = dict(opkw)
    inputs = valid()
    if not opkw.pop("g_idx", False):
        inputs["g_idx"] = None
    op = build(inputs, **opkw)
    if make_out is None:
        out = _dev(np.full((2, N), np.nan, F16))
    else:
        out = make_out()
    before = np.array(to_host(out) if hasattr(out, "copy_to_host") else out, copy=True)
    A = make_a()
    with pytest.raises(exc, match=match):
        op(A, out=out)
    after = np.asarray(to_host(out) if hasattr(out, "copy_to_host") else out)
    assert before.tobytes() == after.tobytes(), f"{name}: out was modified by a failing call"


@pytest.mark.parametrize("kind", ["device", "numpy"])
def test_out_overlapping_A(kind):
    if kind == "numpy" and not SIMULATED:
        pytest.skip("NumPy out= is only accepted under the simulator")
    op = build(dict(valid(), g_idx=None))
    a, out = _overlap_device() if kind == "device" else _overlap_numpy()
    host_a = _A()
    if kind == "device":
        a.copy_to_device(host_a)
        before = out.copy_to_host()
    else:
        a[...] = host_a
        before = out.copy()
    with pytest.raises(ValueError, match="out must not overlap A"):
        op(a, out=out)
    after = out.copy_to_host() if kind == "device" else out
    assert before.tobytes() == np.asarray(after).tobytes()


def test_rank3_out_shape_mismatch_untouched():
    op = build(dict(valid(), g_idx=None))
    A = _dev(np.random.default_rng(4).standard_normal((2, 3, K)).astype(F16))
    out = _dev(np.full((6, N), 5, F16))  # right size, wrong rank: Y is (2, 3, 8)
    with pytest.raises(ValueError, match=r"out must have shape A.shape\[:-1\] \+ \(N,\) = \(2, 3, 8\), got \(6, 8\)"):
        op(A, out=out)
    assert (out.copy_to_host() == 5).all()


def test_failed_call_does_not_poison_the_op():
    """After a call error the same op still computes correct results (no half-built plan cached)."""
    inputs = dict(valid(), g_idx=None)
    op = build(inputs, config={"numba_nbits.force_route": "gemv_w8"})
    with pytest.raises(ValueError, match="forced route 'gemv_w8' cannot serve"):
        op(_A())
    good = build(inputs)
    A = _A()
    y = good(A)
    with pytest.raises(ValueError):
        good(A.astype(np.float32))
    np.testing.assert_array_equal(good(A), y)


@requires_gpu
@pytest.mark.parametrize("stream", ["bogus", 1.5, object()])
def test_bad_stream(stream):
    op = build(dict(valid(), g_idx=None))
    out = _dev(np.full((2, N), 3, F16))
    with pytest.raises(TypeError, match="stream: expected a CUDA stream"):
        op(_dev(_A()), out=out, stream=stream)
    assert (out.copy_to_host() == 3).all()


# ------------------------------------------------------------------------------------ odd data

def _nan_inf_inputs(rng, case):
    """Inputs whose NaN/Inf positions in Y are unambiguous for any summation order (see comments)."""
    M = 3
    B = np.full((N, KB, BLOCK // 2), 0xFF, np.uint8)  # every code 15: q - zp = 7 > 0 for every weight
    scales = rng.uniform(0.01, 0.05, (N, KB)).astype(F16)  # positive: every weight > 0
    A = rng.uniform(0.5, 1.0, (M, K)).astype(F16)  # positive
    if case == "nan_in_A":
        A[1, 17] = np.nan  # row 1 of Y all NaN
    elif case == "inf_in_A":
        A[0, 3] = np.inf  # row 0 of Y all +inf (all weights > 0, all other terms finite)
    elif case == "neg_inf_in_A":
        A[2, 39] = -np.inf  # last element of K (partial last block)
    elif case == "nan_in_scale":
        scales[5, 1] = np.nan  # column 5 of Y all NaN
    elif case == "inf_in_scale":
        scales[2, 0] = np.inf  # column 2: (q - zp) * inf = +inf per weight, sum +inf
    elif case == "inf_and_nan":
        A[0, 0] = np.inf
        scales[6, 2] = np.nan
        A[2, 10] = -np.inf  # row 2 -inf, column 6 NaN (NaN wins at the crossings)
    elif case == "inf_minus_inf":
        A[1, 0] = np.inf
        A[1, 20] = -np.inf  # +inf + -inf = NaN in all of row 1
    return A, B, scales


NAN_INF_CASES = ["nan_in_A", "inf_in_A", "neg_inf_in_A", "nan_in_scale", "inf_in_scale", "inf_and_nan", "inf_minus_inf"]


def assert_same_nonfinite(Y, ref):
    y = np.asarray(Y).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg="NaN positions differ from the oracle")
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref), err_msg="+Inf positions differ from the oracle")
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(ref), err_msg="-Inf positions differ from the oracle")
    fin = np.isfinite(ref)
    np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("case", NAN_INF_CASES)
def test_nan_inf_are_data(rng, case):
    A, B, scales = _nan_inf_inputs(rng, case)
    op = nb.MatMulNBits(B, scales, K=K, N=N, bits=BITS, block_size=BLOCK)
    ref = matmul_nbits_ref(A, B, scales, K=K, N=N, bits=BITS, block_size=BLOCK)
    assert not np.isfinite(ref).all()
    assert_same_nonfinite(op(A), ref)
