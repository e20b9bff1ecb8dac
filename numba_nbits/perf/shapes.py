"""Named shapes and the sweep plans of ``python -m numba_nbits.perf`` (pure data, no device work).

A *case* is one timed problem: ``(shape, M, bits, block_size, dtype, zero points)`` plus a variant
(``""`` normally, ``"router_gemv_disabled"`` for the B arm of the router A/B). Every case is run with
the route dispatch picks and with each other eligible route forced, plus the peers.

Plans are lists of *tiers*; a tier is a cartesian product over its axes. The full plan is pruned so
that it takes ~50 minutes on one H200, run as shards (see ``FULL_PLAN`` and benchmarks/README.md):

* every shape, every M, 4-bit, blocks 32 and 128, fp16, symmetric (the ORT reference table's grid);
* 2- and 8-bit: block 64 (plus 8-bit block 128 on the 8B shapes) on three shapes, fewer M;
* bf16 (tinygemm's dtype): 4-bit g32/g128 on four shapes, M <= 1024;
* fp32, asymmetric (packed zero points) and 4-bit block 64: a few shapes, M in {1, 16, 256}.

Tiers are ordered by priority: when the time budget runs out, the later tiers are skipped (and
listed as skipped in the report), never silently dropped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any, Iterable, Mapping, Sequence


@dataclass(frozen=True)
class Shape:
    """A weight matrix ``N x K`` (``Y[M, N] = A[M, K] @ W[N, K]^T``) and where it comes from."""

    name: str
    N: int
    K: int
    role: str  # "proj" | "lm_head" | "router"
    bias: bool = False
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.N}x{self.K}"


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("l3-8b-attn", 4096, 4096, "proj", note="Llama-3 8B q/o projection"),
    Shape("l3-8b-up", 14336, 4096, "proj", note="Llama-3 8B gate/up projection"),
    Shape("l3-8b-down", 4096, 14336, "proj", note="Llama-3 8B down projection"),
    Shape("l3-70b-up", 28672, 8192, "proj", note="Llama-3 70B gate/up projection"),
    Shape("l3-70b-down", 8192, 28672, "proj", note="Llama-3 70B down projection"),
    Shape("lmhead-l3", 128256, 4096, "lm_head", note="Llama-3 LM head (128256 vocab)"),
    Shape("lmhead-o200k", 200064, 3072, "lm_head", note="LM head, o200k vocab, d=3072"),
    Shape("router-gptoss", 32, 2880, "router", bias=True, note="gpt-oss-20b MoE router (bias)"),
    Shape("router-dsv3", 256, 7168, "router", note="DeepSeek-V3 MoE gate"),
)}

ALL_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)
ALL_BITS = (2, 4, 8)
ALL_BLOCKS = (32, 64, 128)
ALL_DTYPES = ("float16", "bfloat16", "float32")
ZERO_POINTS = ("none", "packed")

DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "float16": "float16", "f16": "float16",
                 "bf16": "bfloat16", "bfloat16": "bfloat16",
                 "fp32": "float32", "float": "float32", "float32": "float32", "f32": "float32"}
DTYPE_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}

#: The env variable of the router A/B (spec §5); set to "1" in the B arm.
ROUTER_AB_ENV = "ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION"
ROUTER_AB_VARIANT = "router_gemv_disabled"


@dataclass(frozen=True)
class Tier:
    """A cartesian product of case axes; ``router_ab`` adds the B arm for router shapes."""

    name: str
    shapes: tuple
    Ms: tuple
    bits: tuple
    blocks: tuple
    dtypes: tuple
    zps: tuple = ("none",)
    router_ab: bool = False


@dataclass(frozen=True, order=True)
class Case:
    """One timed problem; ``group`` (everything but M) shares the weights and the built operators."""

    shape: str
    bits: int
    block: int
    dtype: str
    zp: str
    variant: str
    M: int
    tier: str = field(default="", compare=False)

    @property
    def group(self) -> tuple:
        return (self.shape, self.bits, self.block, self.dtype, self.zp, self.variant)

    @property
    def key(self) -> tuple:
        """The case's identity, ``(group, M)``: what ``case_key`` gives for its rows and skip entries."""
        return (self.group, self.M)

    @property
    def spec(self) -> Shape:
        return shape_named(self.shape)


def case_key(r: Mapping[str, Any]) -> tuple:
    """``Case.key`` of a results row or a ``skipped`` entry (a mapping; a missing, None or NaN text field
    reads as "", as the CSV writes an empty variant)."""
    def text(v) -> str:
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    return ((text(r.get("shape")), int(r["bits"]), int(r["block"]), text(r.get("dtype")), text(r.get("zp")),
             text(r.get("variant"))), int(r["M"]))


_PROJ = ("l3-8b-attn", "l3-8b-up", "l3-8b-down", "l3-70b-up", "l3-70b-down")
_LM = ("lmhead-l3", "lmhead-o200k")
_ROUTERS = ("router-gptoss", "router-dsv3")

FULL_PLAN: tuple = (
    Tier("core-g128", _PROJ + _LM + _ROUTERS, ALL_M, (4,), (128,), ("float16",)),
    Tier("core-g32", _PROJ + _LM + _ROUTERS, ALL_M, (4,), (32,), ("float16",), router_ab=True),
    Tier("router-ab", _ROUTERS, (1, 2, 16), (4,), (32, 64), ("float16", "bfloat16"), router_ab=True),
    Tier("bf16", ("l3-8b-attn", "l3-8b-up", "l3-70b-up", "lmhead-l3"), (1, 4, 16, 64, 256, 1024), (4,),
         (32, 128), ("bfloat16",)),
    Tier("bits-2-8", ("l3-8b-attn", "l3-70b-up", "lmhead-l3"), (1, 4, 8, 16, 64, 256, 4096), (2, 8), (64,),
         ("float16",)),
    Tier("bits-8-g128", ("l3-8b-attn", "l3-8b-up"), (1, 4, 16, 256), (8,), (128,), ("float16",)),
    Tier("zero-points", ("l3-8b-attn", "l3-70b-up"), (1, 16, 256), (4,), (128,), ("float16",), ("packed",)),
    Tier("fp32", ("l3-8b-attn", "l3-70b-up"), (1, 16, 256), (4,), (128,), ("float32",)),
    Tier("g64", ("l3-8b-attn", "l3-70b-up", "lmhead-l3"), (1, 16, 256), (4,), (64,), ("float16",)),
)

QUICK_PLAN: tuple = (
    Tier("quick", ("l3-8b-attn", "l3-70b-up", "lmhead-l3"), (1, 16, 256), (4,), (32, 128), ("float16",)),
    Tier("quick-router", ("router-gptoss",), (1, 16), (4,), (32,), ("float16",), router_ab=True),
)

# The GEMV issue's benchmark grid: its 7 (N, K) (Llama-3 projections, the 128256x4096 LM head, the
# 32x2880 router), M 1..16, 4-bit g32 / g128, 8-bit g128 and 2-bit g64, fp16 and bf16 (280 cases).
_GEMV_GRID_SHAPES = _PROJ + ("lmhead-l3", "router-gptoss")
_GEMV_GRID_M = (1, 2, 4, 8, 16)
GEMV_GRID_PLAN: tuple = (
    Tier("gemv-4b", _GEMV_GRID_SHAPES, _GEMV_GRID_M, (4,), (32, 128), ("float16", "bfloat16")),
    Tier("gemv-8b-g128", _GEMV_GRID_SHAPES, _GEMV_GRID_M, (8,), (128,), ("float16", "bfloat16")),
    Tier("gemv-2b-g64", _GEMV_GRID_SHAPES, _GEMV_GRID_M, (2,), (64,), ("float16", "bfloat16")),
)

# The cases the README's generated section shows (``perf.report.readme_summary``: 4-bit fp16, the M of
# ``README_MS``), block 128 first and then block 32 with the router A/B: a current README table in one short run.
README_MS = (1, 16, 256, 4096)
README_PLAN: tuple = (
    Tier("readme-g128", _PROJ + _LM + _ROUTERS, README_MS, (4,), (128,), ("float16",)),
    Tier("readme-g32", _PROJ + _LM + _ROUTERS, README_MS, (4,), (32,), ("float16",), router_ab=True),
)

#: ``--plan`` names.
PLANS = {"full": FULL_PLAN, "quick": QUICK_PLAN, "gemv-grid": GEMV_GRID_PLAN, "readme": README_PLAN}

SWEEPS = ("gemv", "gemm", "router", "all")
GEMV_MAX_M = 16  # --sweep gemv keeps M <= 16 (the fused-GEMV regime), gemm keeps M > 16
ROUTER_AB_MAX_M = 16  # the B arm of the router A/B is run up to this M (the router GEMV serves M = 1)


def shape_named(name: str) -> Shape:
    """A named shape, or an ad-hoc ``NxK`` (e.g. ``"4096x4096"``)."""
    s = SHAPES.get(name)
    if s is not None:
        return s
    parts = name.lower().split("x")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        N, K = int(parts[0]), int(parts[1])
        for s in SHAPES.values():
            if (s.N, s.K) == (N, K):
                return s
        return Shape(name.lower(), N, K, "proj")
    raise ValueError(f"unknown shape {name!r}; named shapes: {', '.join(SHAPES)} (or NxK, e.g. 4096x4096)")


def parse_dtype(name: str) -> str:
    try:
        return DTYPE_ALIASES[name.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; use fp16, bf16 or fp32") from None


def expand(plan: Sequence[Tier], *, shapes: Sequence[str] | None = None, Ms: Sequence[int] | None = None,
           bits: Sequence[int] | None = None, blocks: Sequence[int] | None = None,
           dtypes: Sequence[str] | None = None, sweep: str = "all") -> list[Case]:
    """The cases of ``plan`` in priority order, without duplicates.

    An explicit list replaces that axis in *every* tier (so ``--bits 8`` runs the plan's grid at
    8 bits); ``sweep`` then keeps the GEMV (M <= 16), GEMM (M > 16) or router cases. Each shape,
    routers included, is kept where it fits: a router A/B arm only where the tier asks for it.
    """
    if sweep not in SWEEPS:
        raise ValueError(f"--sweep must be one of {', '.join(SWEEPS)}, got {sweep!r}")
    shape_names = None if shapes is None else tuple(shape_named(s).name for s in shapes)
    out: list[Case] = []
    seen: set = set()
    for t in plan:
        t = replace(t, shapes=shape_names or t.shapes, Ms=tuple(Ms or t.Ms), bits=tuple(bits or t.bits),
                    blocks=tuple(blocks or t.blocks), dtypes=tuple(dtypes or t.dtypes))
        for sh, b, blk, dt, zp, M in product(t.shapes, t.bits, t.blocks, t.dtypes, t.zps, t.Ms):
            spec = shape_named(sh)
            if not _keep(spec, M, sweep):
                continue
            variants = [""]
            if t.router_ab and spec.role == "router" and M <= ROUTER_AB_MAX_M:
                variants.append(ROUTER_AB_VARIANT)
            for v in variants:
                c = Case(spec.name, int(b), int(blk), dt, zp, v, int(M), t.name)
                key = (c.group, c.M)
                if key not in seen:
                    seen.add(key)
                    out.append(c)
    return out


def _keep(spec: Shape, M: int, sweep: str) -> bool:
    if sweep == "all":
        return True
    if sweep == "router":
        return spec.role == "router"
    if spec.role == "router":
        return False
    return M <= GEMV_MAX_M if sweep == "gemv" else M > GEMV_MAX_M


def groups(cases: Iterable[Case]) -> list[tuple[tuple, list[Case]]]:
    """Cases grouped by ``Case.group`` (first-seen order), each group's M ascending."""
    order: dict[tuple, list[Case]] = {}
    for c in cases:
        order.setdefault(c.group, []).append(c)
    return [(g, sorted(cs, key=lambda c: c.M)) for g, cs in order.items()]
