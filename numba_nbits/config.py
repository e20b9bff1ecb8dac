"""Every environment variable, session-config key and option of ``numba_nbits``, parsed once.

ONNX Runtime steers ``MatMulNBits`` on CUDA with a dozen environment variables and
``ep.cuda.*`` session-config keys (spec section 8). This module is the only place that
knows their names and parse rules. :func:`load_config` turns an environment mapping plus
an optional explicit config mapping into a frozen, hashable :class:`Config`; the
dispatcher and the kernels only ever see that object and never read ``os.environ``.

Precedence, highest first:

1. a :class:`Config` instance passed as ``config`` is returned unchanged;
2. a key of the ``config`` mapping (ORT: session config wins over env);
3. the environment variable;
4. the default.

Parse rules follow ORT's ``env_var_utils.h`` / ``parse_string.h``:

* an unset or **empty** environment variable means "use the default";
* otherwise the whole string must parse, or ``ValueError`` is raised with the text
  ``Failed to parse environment variable - name: "X", value: "Y"``;
* bool accepts only ``0 1 true false True False``; integers are parsed strictly (ASCII
  digits, optional leading ``-``, no whitespace, no trailing characters, in range);
* some knobs have their own rule and error text (fpA_intB enable, profile M list, chunk
  sizes, paired-K and wave-aware GEMV), documented per knob in :data:`ENV_TABLE`.

Config-mapping values may be ``str``, ``bool`` or ``int`` (and a sequence of ints for the
profile-M list, a path for the tactic-cache directory). They are converted to text the
same way for every key (``True`` -> ``"1"``, ``False`` -> ``"0"``, ``7`` -> ``"7"``) and then
parsed with that key's rule, so a key and its environment variable always agree. A key
present in the mapping wins even when its text is empty (an empty value is then parsed
by the key's rule); a value of ``None`` counts as "not given". Integer-valued keys
reject ``bool``. Every configuration problem raises ``ValueError``.

Importing this module reads no environment variable and imports no numba.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "Config",
    "EnvRow",
    "ENV_TABLE",
    "CONFIG_KEYS",
    "ENV_VARS",
    "load_config",
    "env_table_markdown",
]

# --------------------------------------------------------------------------------------
# Names. Environment variables (ORT's, read by the CUDA EP).
ENV_FPA_INTB_GEMM = "ORT_FPA_INTB_GEMM"
ENV_FPA_INTB_PROFILE_M = "ORT_FPA_INTB_PROFILE_M"
ENV_FPA_INTB_DEBUG = "ORT_FPA_INTB_DEBUG"
ENV_DISABLE_ROUTER_GEMV = "ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION"
ENV_FORCE_CHUNKED = "ORT_MATMULNBITS_FORCE_CHUNKED"
ENV_CHUNK_SIZE = "ORT_MATMULNBITS_CHUNK_SIZE"
ENV_M_CHUNK_SIZE = "ORT_MATMULNBITS_M_CHUNK_SIZE"
ENV_GEMV_PAIRED_K = "ORT_FPA_INTB_GEMV_PAIRED_K"
ENV_L2_PREFETCH = "ORT_QUANTIZED_DECODE_L2_PREFETCH"
ENV_TACTIC_CACHE_DIR = "ORT_CUDA_GEMM_TACTIC_CACHE_DIR"
ENV_TACTIC_CACHE_PREFIX = "ORT_CUDA_GEMM_TACTIC_CACHE_PREFIX"
ENV_CUDA_GEMM_OPTIONS = "ORT_CUDA_GEMM_OPTIONS"

# Session-config keys (ORT's).
KEY_FPA_INTB_GEMM = "ep.cuda.fpa_intb_gemm"
KEY_FPA_INTB_PROFILE_M = "ep.cuda.fpa_intb_profile_m"
KEY_M_CHUNK_SIZE = "ep.cuda.matmul_nbits_m_chunk_size"
KEY_GEMV_PAIRED_K = "ep.cuda.fpa_intb_gemv_paired_k"
KEY_GEMV_WAVE_AWARE = "ep.cuda.fpa_intb_gemv_wave_aware"
KEY_TACTIC_CACHE_DIR = "ep.cuda.gemm_tactic_cache_dir"
KEY_TACTIC_CACHE_PREFIX = "ep.cuda.gemm_tactic_cache_prefix"
KEY_TUNING_RESULTS_PREFIX = "ep.cuda.gemm_tactic_cache_tuning_results_prefix"

# CUDA EP provider option.
OPTION_USE_TF32 = "use_tf32"

# The project's own knobs.
ENV_FORCE_ROUTE = "NUMBA_NBITS_FORCE_ROUTE"
KEY_FORCE_ROUTE = "numba_nbits.force_route"
ENV_SCRATCH_LIMIT_MB = "NUMBA_NBITS_SCRATCH_LIMIT_MB"
KEY_SCRATCH_LIMIT_MB = "numba_nbits.scratch_limit_mb"
ENV_CALL_GRAPHS = "NUMBA_NBITS_CALL_GRAPHS"
KEY_CALL_GRAPHS = "numba_nbits.call_graphs"
ENV_FUSED_GEMM = "NUMBA_NBITS_FUSED_GEMM"
KEY_FUSED_GEMM = "numba_nbits.fused_gemm"
ENV_PACKED_ONLY = "NUMBA_NBITS_PACKED_ONLY"
KEY_PACKED_ONLY = "numba_nbits.packed_only"
ENV_DEQUANT_OVERLAP = "NUMBA_NBITS_DEQUANT_OVERLAP"
KEY_DEQUANT_OVERLAP = "numba_nbits.dequant_overlap"
ENV_ROUTER_SMALL_N = "NUMBA_NBITS_ROUTER_SMALL_N"
KEY_ROUTER_SMALL_N = "numba_nbits.router_small_n"
# Process-wide knobs of the compiled-kernel cache (read once, at the first kernel compilation).
ENV_KERNEL_CACHE = "NUMBA_NBITS_KERNEL_CACHE"
ENV_KERNEL_CACHE_DIR = "NUMBA_NBITS_KERNEL_CACHE_DIR"
ENV_BACKEND = "NUMBA_NBITS_BACKEND"  # read once, when backend.py is imported

# Defaults that are numbers in the spec.
DEFAULT_CHUNK_SIZE = 32768  # ORT kDefaultChunkTargetRows (spec section 6)
DEFAULT_SCRATCH_LIMIT_MB = 256  # the 256 MiB dequant-scratch threshold of spec section 6
MIB = 1024 * 1024

PAIRED_K_CHOICES = ("off", "on", "force")

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_STRICT_INT = re.compile(r"-?[0-9]+")
_BOOL_TEXT = {"0": False, "1": True, "true": True, "false": False, "True": True, "False": False}

# --------------------------------------------------------------------------------------
# Parsers. Each takes the raw text, the variable or key name and the origin ("env" or
# "config") and returns the field value or raises ValueError.


def _parse_error(name: str, value: str, origin: str) -> ValueError:
    what = "environment variable" if origin == "env" else "config key"
    return ValueError(f'Failed to parse {what} - name: "{name}", value: "{value}"')


def _strict_int(text: str, bounds: tuple[int, int]) -> int | None:
    """``std::from_chars`` on the whole string: None unless all of it is an in-range int."""
    if not _STRICT_INT.fullmatch(text):
        return None
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        return None
    return value


def _parse_bool(text: str, name: str, origin: str) -> bool:
    try:
        return _BOOL_TEXT[text]
    except KeyError:
        raise _parse_error(name, text, origin) from None


def _parse_int_flag(text: str, name: str, origin: str) -> bool:
    value = _strict_int(text, _INT32)
    if value is None:
        raise _parse_error(name, text, origin)
    return value != 0


def _parse_int32(text: str, name: str, origin: str) -> int:
    value = _strict_int(text, _INT32)
    if value is None:
        raise _parse_error(name, text, origin)
    return value


def _parse_chunk_size(text: str, name: str, origin: str) -> int:
    value = _strict_int(text, _INT64)
    if value is None:
        raise _parse_error(name, text, origin)
    return value if value >= 1 else DEFAULT_CHUNK_SIZE


def _parse_fpa_intb_enabled(text: str, name: str, origin: str) -> bool:
    # ORT ParseFpAIntBEnabled: never fails.
    return text.strip().lower() not in ("", "0", "off")


def _parse_profile_m(text: str, name: str, origin: str) -> tuple[int, ...] | None:
    buckets = set()
    for entry in text.split(","):
        value = _strict_int(entry.strip(), _INT64)
        if value is not None and value > 0:  # malformed or non-positive entries are ignored
            buckets.add(value)
    return tuple(sorted(buckets)) or None


def _parse_m_chunk_size(text: str, name: str, origin: str) -> int:
    value = _strict_int(text, _INT64)
    if value is None or value < 0:
        raise ValueError(f'Invalid MatMulNBits M chunk size - name: "{name}", value: "{text}"')
    return value


def _parse_paired_k(text: str, name: str, origin: str) -> str:
    choice = {"0": "off", "off": "off", "1": "on", "force": "force"}.get(text)
    if choice is None:
        raise ValueError(
            f'Invalid MatMulNBits paired-K GEMV option - name: "{name}", value: "{text}" '
            '(expected "0", "off", "1" or "force")'
        )
    return choice


def _parse_wave_aware(text: str, name: str, origin: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(
            f'Invalid MatMulNBits wave-aware GEMV option - name: "{name}", value: "{text}" '
            '(expected "0" or "1")'
        )
    return text == "1"


def _parse_verbatim(text: str, name: str, origin: str) -> str | None:
    return text or None


def _parse_route(text: str, name: str, origin: str) -> str | None:
    return text.strip() or None


def _parse_scratch_limit(text: str, name: str, origin: str) -> int:
    value = _strict_int(text, _INT64)
    if value is None:
        raise _parse_error(name, text, origin)
    if value <= 0:
        raise ValueError(f'{name} must be a positive number of MiB, got "{text}"')
    return value * MIB


# --------------------------------------------------------------------------------------
# The knob table: one entry per Config field; ENV_TABLE and load_config both derive from it.


@dataclass(frozen=True)
class _Knob:
    field: str
    env: str | None  # environment variable, if any
    key: str | None  # config-mapping key, if any
    key_kind: str  # "config" (session config) or "option" (provider option)
    parse: Callable[[str, str, str], Any]
    value_type: str  # accepted config types: "bool", "int", "str", "list", "path"
    default_text: str
    rule: str
    effect: str


_KNOBS: tuple[_Knob, ...] = (
    _Knob(
        "fpa_intb_gemm", ENV_FPA_INTB_GEMM, KEY_FPA_INTB_GEMM, "config",
        _parse_fpa_intb_enabled, "bool", "off",
        'ParseFpAIntBEnabled: trim + lowercase; "", "0", "off" = off, anything else = on '
        "(never fails); config wins over env",
        "enable the fpA_intB mixed-GEMM route for non-prepacked weights "
        "(weight_prepacked != 0 forces it on)",
    ),
    _Knob(
        "fpa_intb_profile_m", ENV_FPA_INTB_PROFILE_M, KEY_FPA_INTB_PROFILE_M, "config",
        _parse_profile_m, "list", "unset (buckets 1, 2, 4, ..., 2048)",
        "comma list; entries trimmed, positive ints kept, malformed entries ignored, "
        "de-duplicated and sorted; empty result = unset; config wins over env",
        "M buckets the fpA_intB tactic profiler tunes first; the last one is the max profiled M",
    ),
    _Knob(
        "fpa_intb_debug", ENV_FPA_INTB_DEBUG, None, "config",
        _parse_int_flag, "bool", "0",
        "int, != 0 = on",
        "print one [fpA_intB_debug] line (M, N, K, bits, block, sm, kernel, tactic) per call",
    ),
    _Knob(
        "disable_router_gemv", ENV_DISABLE_ROUTER_GEMV, None, "config",
        _parse_bool, "bool", "false",
        "bool",
        "disable the gpt-oss router GEMV (M=1, N=32, K=2880); the shape then takes the "
        "generic M=1 GEMV plus bias-add",
    ),
    _Knob(
        "force_chunked", ENV_FORCE_CHUNKED, None, "config",
        _parse_int_flag, "bool", "0",
        "int, != 0 = on",
        "force the N-chunked dequant + GEMM fallback (and bypass the fpA_intB M-chunk size gate)",
    ),
    _Knob(
        "chunk_size", ENV_CHUNK_SIZE, None, "config",
        _parse_chunk_size, "int", str(DEFAULT_CHUNK_SIZE),
        f"int64; < 1 = {DEFAULT_CHUNK_SIZE}",
        "rows of N per chunk of the chunked dequant + GEMM fallback",
    ),
    _Knob(
        "m_chunk_size", ENV_M_CHUNK_SIZE, KEY_M_CHUNK_SIZE, "config",
        _parse_m_chunk_size, "int", "0 (off)",
        'int >= 0; config wins over env; invalid ("-1", "abc") = '
        'error "Invalid MatMulNBits M chunk size"',
        "fpA_intB M chunking: run M in row chunks of this size (below 8192 rounded down to a bucket) "
        "when M > it and M > floor(256 MiB / ((N + K) * sizeof(T))) (that gate off with "
        "ORT_MATMULNBITS_FORCE_CHUNKED); each chunk uses its own bucket's tactic",
    ),
    _Knob(
        "gemv_paired_k", ENV_GEMV_PAIRED_K, KEY_GEMV_PAIRED_K, "config",
        _parse_paired_k, "bool", "off",
        '"0"/"off" = off, "1" = on (extra candidate), "force" = only that tactic; '
        "anything else is an error; config wins over env",
        "paired-K fp16 int4 GEMV tactic for M 5..8 (K split over a pair of CTAs, fp32 sums): "
        "a profiler candidate of those buckets, or with force their only one",
    ),
    _Knob(
        "gemv_wave_aware", None, KEY_GEMV_WAVE_AWARE, "config",
        _parse_wave_aware, "bool", "0",
        'only "0" or "1"; anything else = error "Invalid MatMulNBits wave-aware GEMV option"',
        "wave-aware fpA_intB GEMV: adds a profiler candidate for M < 16 whose grid fills whole waves "
        "(persistent one-wave grid, or split-K into one wave)",
    ),
    _Knob(
        "l2_prefetch", ENV_L2_PREFETCH, None, "config",
        _parse_bool, "bool", "false",
        "bool",
        "L2 prefetch in the 8-bit M=1 GEMV (sm >= 80): its kernels prefetch the weights two "
        "iterations ahead into L2",
    ),
    _Knob(
        "tactic_cache_dir", ENV_TACTIC_CACHE_DIR, KEY_TACTIC_CACHE_DIR, "config",
        _parse_verbatim, "path", "unset (cache off)",
        "string, verbatim; empty = unset; config wins over env",
        "directory of the persistent fpA_intB tactic cache (TSV)",
    ),
    _Knob(
        "tactic_cache_prefix", ENV_TACTIC_CACHE_PREFIX, KEY_TACTIC_CACHE_PREFIX, "config",
        _parse_verbatim, "path", "unset (cache off)",
        "string, verbatim; empty = unset; config wins over env",
        "file prefix of the persistent tactic cache: `<prefix>.matmulnbits_fpa_intb.tsv`",
    ),
    _Knob(
        "tuning_results_prefix", None, KEY_TUNING_RESULTS_PREFIX, "config",
        _parse_verbatim, "path", "unset",
        "string, verbatim; empty = unset",
        "tuning-results prefix of the persistent tactic cache (no env fallback)",
    ),
    _Knob(
        "cuda_gemm_options", ENV_CUDA_GEMM_OPTIONS, None, "config",
        _parse_int32, "int", "0",
        "int bitmask",
        "half-precision cuBLAS: 0x01 fp16 accumulate, 0x02 disallow reduced-precision "
        "reduction, 0x04 pedantic",
    ),
    _Knob(
        "use_tf32", None, OPTION_USE_TF32, "option",
        _parse_bool, "bool", "true",
        "bool (CUDA EP provider option)",
        "allow TF32 in the fp32 dequant + GEMM fallback",
    ),
    _Knob(
        "force_route", ENV_FORCE_ROUTE, KEY_FORCE_ROUTE, "config",
        _parse_route, "str", "unset",
        "route name, trimmed; empty = unset; validated by dispatch; config wins over env",
        "force one dispatch route (tests, debugging)",
    ),
    _Knob(
        "scratch_limit_bytes", ENV_SCRATCH_LIMIT_MB, KEY_SCRATCH_LIMIT_MB, "config",
        _parse_scratch_limit, "int", str(DEFAULT_SCRATCH_LIMIT_MB),
        "int > 0, in MiB; config wins over env",
        "dequant scratch size (N * K_padded * sizeof(T)) above which the fallback chunks along N",
    ),
    _Knob(
        "call_graphs", ENV_CALL_GRAPHS, KEY_CALL_GRAPHS, "config",
        _parse_bool, "bool", "true",
        "bool: 0/1/true/false; config wins over env",
        "repeated `op(A, out=Y)` pointer pairs and `op.bind(...)()` launch their kernels as one instantiated "
        "CUDA graph from the second call (less host time per call; `bound.py`); false: one `cuLaunchKernel` per "
        "kernel on every call",
    ),
    _Knob(
        "fused_gemm", ENV_FUSED_GEMM, KEY_FUSED_GEMM, "config",
        _parse_bool, "bool", "true",
        "bool: 0/1/true/false; config wins over env",
        "the `fused_gemm` route: the fused tensor-core kernels serve M = 17..64 (and 2-bit M = 9..16; on sm_90 "
        "wide 4-bit block-128 weights to M = 256, 8-bit to 128) instead of ORT's dequantize + cuBLAS; false: ORT's "
        "dispatch chain exactly",
    ),
    _Knob(
        "packed_only", ENV_PACKED_ONLY, KEY_PACKED_ONLY, "config",
        _parse_bool, "bool", "false",
        "bool: 0/1/true/false; config wins over env",
        "a node whose every route reads the tensor-core layout (fp16/bf16, no g_idx, fpA_intB off, ...) frees "
        "ORT's B once that layout is built: half the weights' device memory, but dequantize + cuBLAS (M past the "
        "fused kernels) then dequantizes from the packed layout, 1.6x slower (ORT's chain +13% at M = 1024 on "
        "28672x8192, +33% at M = 256 on 14336x4096, H200)",
    ),
    _Knob(
        "dequant_overlap", ENV_DEQUANT_OVERLAP, KEY_DEQUANT_OVERLAP, "config",
        _parse_bool, "bool", "true",
        "bool: 0/1/true/false; config wins over env",
        "the `dequant_overlap` route: past the fused kernels (M >= 65, N >= 2048, M * N >= 2**23) the weights are "
        "dequantized in N-chunks on a side stream while cuBLAS multiplies the previous chunk (two chunk buffers of "
        "scratch); false: ORT's dequantize + cuBLAS, one step after the other",
    ),
    _Knob(
        "router_small_n", ENV_ROUTER_SMALL_N, KEY_ROUTER_SMALL_N, "config",
        _parse_bool, "bool", "true",
        "bool: 0/1/true/false; config wins over env",
        "the `router_gemv` route also serves small-N gates (4-bit, M = 1, N <= 256, K <= 8192, block 32/64, no zero "
        "points; e.g. DeepSeek-V3's 256x7168), not only ORT's 32x2880: 1.6-2.3x the GEMV it replaces there "
        "(H100); false (or `NUMBA_NBITS_FUSED_GEMM=0`): ORT's exact router gate",
    ),
)

_KNOB_BY_FIELD = {k.field: k for k in _KNOBS}
_KNOB_BY_KEY = {k.key: k for k in _KNOBS if k.key is not None}

#: Every accepted key of the ``config`` mapping.
CONFIG_KEYS: tuple[str, ...] = tuple(k.key for k in _KNOBS if k.key is not None)
#: Every environment variable read by :func:`load_config`.
ENV_VARS: tuple[str, ...] = tuple(k.env for k in _KNOBS if k.env is not None)

_ORIGINS = ("default", "env", "config")


# --------------------------------------------------------------------------------------
# Config


@dataclass(frozen=True)
class Config:
    """Every knob of the operator, parsed. Construct through :func:`load_config`.

    Direct construction (``Config()``, ``Config(force_chunked=True)``) and
    :meth:`replace` validate the values too. ``sources`` records where each value came
    from and takes no part in equality or hashing, so two configs with the same values
    are interchangeable as cache keys.
    """

    fpa_intb_gemm: bool = False
    fpa_intb_profile_m: tuple[int, ...] | None = None
    fpa_intb_debug: bool = False
    disable_router_gemv: bool = False
    force_chunked: bool = False
    chunk_size: int = DEFAULT_CHUNK_SIZE
    m_chunk_size: int = 0
    gemv_paired_k: str = "off"
    gemv_wave_aware: bool = False
    l2_prefetch: bool = False
    tactic_cache_dir: str | None = None
    tactic_cache_prefix: str | None = None
    tuning_results_prefix: str | None = None
    cuda_gemm_options: int = 0
    use_tf32: bool = True
    force_route: str | None = None
    scratch_limit_bytes: int = DEFAULT_SCRATCH_LIMIT_MB * MIB
    call_graphs: bool = True
    fused_gemm: bool = True
    packed_only: bool = False
    dequant_overlap: bool = True
    router_small_n: bool = True
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("fpa_intb_gemm", "fpa_intb_debug", "disable_router_gemv",
                     "force_chunked", "gemv_wave_aware", "l2_prefetch", "use_tf32", "call_graphs", "fused_gemm",
                     "packed_only", "dequant_overlap", "router_small_n"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Config.{name} must be a bool, got {getattr(self, name)!r}")
        for name, low in (("chunk_size", 1), ("m_chunk_size", 0),
                          ("scratch_limit_bytes", 1), ("cuda_gemm_options", None)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Config.{name} must be an int, got {value!r}")
            if low is not None and value < low:
                raise ValueError(f"Config.{name} must be >= {low}, got {value}")
        if self.gemv_paired_k not in PAIRED_K_CHOICES:
            raise ValueError(
                f"Config.gemv_paired_k must be one of {PAIRED_K_CHOICES}, "
                f"got {self.gemv_paired_k!r}"
            )
        for name in ("tactic_cache_dir", "tactic_cache_prefix", "tuning_results_prefix",
                     "force_route"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"Config.{name} must be a str or None, got {value!r}")
            if name == "force_route" and value is not None:
                value = value.strip()
            set_(self, name, value or None)
        set_(self, "fpa_intb_profile_m", _normalise_profile_m(self.fpa_intb_profile_m))

        given = dict(self.sources)
        for name, origin in given.items():
            if name not in _KNOB_BY_FIELD or origin not in _ORIGINS:
                raise ValueError(f"bad Config.sources entry {(name, origin)!r}")
        set_(self, "sources", tuple((k.field, given.get(k.field, "default")) for k in _KNOBS))

    def source(self, field_name: str) -> str:
        """``"default"``, ``"env"`` or ``"config"``: where ``field_name``'s value came from."""
        return dict(self.sources)[field_name]

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied; changed fields are recorded as from ``"config"``."""
        unknown = sorted(set(changes) - set(_KNOB_BY_FIELD))
        if unknown:
            raise ValueError(
                f"unknown Config field(s) {unknown}; valid fields: {', '.join(_KNOB_BY_FIELD)}"
            )
        sources = dict(self.sources)
        sources.update((name, "config") for name in changes)
        return dataclasses.replace(self, **changes, sources=tuple(sources.items()))

    def explain(self) -> str:
        """One line per field: its value and where it came from (variable or key named)."""
        lines = []
        for knob in _KNOBS:
            origin = self.source(knob.field)
            where = {"env": f"env {knob.env}", "config": f"{knob.key_kind} {knob.key}"}.get(
                origin, "default"
            )
            if origin == "config" and knob.key is None:
                where = "explicit"
            lines.append(f"{knob.field} = {getattr(self, knob.field)!r}  ({where})")
        return "\n".join(lines)


def _normalise_profile_m(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"Config.fpa_intb_profile_m must be a sequence of ints, got {value!r}")
    items = list(value)  # type: ignore[call-overload]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
            raise ValueError(
                f"Config.fpa_intb_profile_m entries must be positive ints, got {item!r}"
            )
    return tuple(sorted(set(items))) or None


# --------------------------------------------------------------------------------------
# load_config


def _config_text(knob: _Knob, key: str, value: object) -> str:
    """Convert a config-mapping value to the text its parse rule reads."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        if knob.value_type == "int":
            raise ValueError(f'config key "{key}" expects an int, got {value!r}')
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if knob.value_type == "path" and isinstance(value, os.PathLike):
        return os.fspath(value)
    if knob.value_type == "list" and isinstance(value, (list, tuple)):
        return ",".join(_config_text(knob, key, v) for v in value)
    raise ValueError(
        f'config key "{key}" expects a str, bool or int, got {type(value).__name__} {value!r}'
    )


def load_config(
    environ: Mapping[str, str] | None = None,
    config: Mapping[str, object] | Config | None = None,
) -> Config:
    """Parse the knobs into a :class:`Config`.

    ``environ`` is the environment to read (``None`` means ``os.environ``, read only inside
    this call); ``config`` holds session-config keys / provider options / project keys
    (see :data:`CONFIG_KEYS`) and beats the environment. A :class:`Config` instance passed
    as ``config`` is returned unchanged. The function is pure given its arguments.

    Raises ``ValueError`` for an unknown config key (the message lists the valid keys) and
    for any value its parse rule rejects.
    """
    if isinstance(config, Config):
        return config
    if environ is None:
        environ = os.environ
    config = {} if config is None else config
    unknown = [k for k in config if k not in _KNOB_BY_KEY]
    if unknown:
        raise ValueError(
            f'unknown config key "{unknown[0]}"; valid keys: {", ".join(CONFIG_KEYS)}'
        )

    values: dict[str, Any] = {}
    sources: list[tuple[str, str]] = []
    for knob in _KNOBS:
        if knob.key is not None and config.get(knob.key) is not None:
            text = _config_text(knob, knob.key, config[knob.key])
            values[knob.field] = knob.parse(text, knob.key, "config")
            sources.append((knob.field, "config"))
        elif knob.env is not None and environ.get(knob.env):
            values[knob.field] = knob.parse(environ[knob.env], knob.env, "env")
            sources.append((knob.field, "env"))
    return Config(**values, sources=tuple(sources))


# --------------------------------------------------------------------------------------
# The documentation table


class EnvRow(NamedTuple):
    """One environment variable, session-config key or provider option."""

    name: str
    kind: str  # "env", "config" or "option"
    default: str
    parse: str
    effect: str
    field: str  # the Config field it sets


def _rows() -> tuple[EnvRow, ...]:
    rows = []
    for k in _KNOBS:
        if k.env is not None:
            rows.append(EnvRow(k.env, "env", k.default_text, k.rule, k.effect, k.field))
        if k.key is not None:
            rows.append(EnvRow(k.key, k.key_kind, k.default_text, k.rule, k.effect, k.field))
    return tuple(rows)


#: The process-wide variables (not part of :class:`Config`; shared by every operator of the process): the
#: compiled-kernel cache of ``launch/cache.py`` (read at the first compilation) and the backend (backend.py).
PROCESS_ENV_TABLE: tuple[EnvRow, ...] = (
    EnvRow(ENV_KERNEL_CACHE, "env", "1", "bool: 0/1/true/false; empty = default",
           "keep compiled kernels (cubins) on disk and load them instead of compiling again "
           "(per process, machine and toolchain; see `launch/cache.py`)", "— (process-wide)"),
    EnvRow(ENV_KERNEL_CACHE_DIR, "env", "`$XDG_CACHE_HOME/numba_nbits/kernels` (else `~/.cache/...`)",
           "path; empty = default", "directory of the compiled-kernel cache", "— (process-wide)"),
    EnvRow(ENV_BACKEND, "env", "numba where numba-cuda can compile (numpy < 2.5), else mlir if installed",
           "`numba` or `mlir`, any case; empty = default; else an error", "compiler of the GPU kernels: numba-cuda "
           "or numba-cuda-mlir (`backend.py`; the simulator is numba-cuda's)", "— (process-wide)"),
)

#: One row per environment variable / config key / option, in Config field order.
ENV_TABLE: tuple[EnvRow, ...] = _rows()


def kernel_cache_dir(env: Mapping[str, str]) -> str | None:
    """The compiled-kernel cache directory from ``NUMBA_NBITS_KERNEL_CACHE`` /
    ``NUMBA_NBITS_KERNEL_CACHE_DIR`` of ``env`` (``launch/cache.py`` passes the process environment at the first
    compilation), or None when the cache is off.

    Raises ValueError naming the variable for a value that does not parse."""
    text = env.get(ENV_KERNEL_CACHE, "").strip()
    if text and not _parse_bool(text, ENV_KERNEL_CACHE, "env"):
        return None
    d = env.get(ENV_KERNEL_CACHE_DIR, "").strip()
    if not d:
        base = env.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "numba_nbits", "kernels")
    return d


def env_table_markdown() -> str:
    """:data:`ENV_TABLE` and then :data:`PROCESS_ENV_TABLE` as a GitHub markdown table (for the README)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| name | kind | default | parse | effect | `Config` field |", "|---|---|---|---|---|---|"]
    for row in ENV_TABLE + PROCESS_ENV_TABLE:
        field = f"`{row.field}`" if row in ENV_TABLE else row.field
        d, p, e = cell(row.default), cell(row.parse), cell(row.effect)
        lines.append(f"| `{row.name}` | {row.kind} | {d} | {p} | {e} | {field} |")
    return "\n".join(lines) + "\n"
