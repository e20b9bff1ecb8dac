"""``select(problem, config) -> Decision``: walk the route table, record why each route was skipped."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..config import Config
from .problem import Problem
from .routes import FORCE_SKIPS, ROUTES, Route, route_named


#: spec §7.3, full build: a prepacked B whose node the fpA_intB route cannot serve
PREPACKED_NOT_ELIGIBLE = ("weight_prepacked requires the fpA_intB path, but it is unsupported for this node "
                          "(check bits, block_size, N/K alignment, g_idx, and compute capability >= 7.5)")


@dataclass(frozen=True)
class Decision:
    """The chosen route, how bias is served, and, per skipped route, the guard that rejected it."""

    route: Route
    bias: str  # "none" | "fused" | "add"
    reasons: tuple  # ((route name, guard name, guard text), ...) for routes tried before `route`
    forced: bool = False

    @property
    def name(self) -> str:
        return self.route.name

    def explain(self) -> str:
        """One line per route of the chain: a tick for the chosen one, the rejecting guard for the others."""
        lines = []
        rejected = {r: (g, t) for r, g, t in self.reasons}
        for r in ROUTES:
            if r.name == self.route.name:
                extra = {"none": "", "fused": " (bias fused)", "add": " (+ bias-add kernel)"}[self.bias]
                lines.append(f"  ✔ {r.name:<24} {r.summary}{extra}{' [forced]' if self.forced else ''}")
                break
            if r.name in rejected:
                lines.append(f"  ✘ {r.name:<24} rejected by {rejected[r.name][0]}: needs {rejected[r.name][1]}")
            else:
                lines.append(f"  · {r.name:<24} not tried (forced route)")
        return "\n".join(lines)


def select(problem: Problem, config: Config) -> Decision:
    """The route for ``problem`` under ``config`` (cached per (problem, config))."""
    return _select(problem, config)


@lru_cache(maxsize=4096)
def _select(problem: Problem, config: Config) -> Decision:
    if config.force_route:
        route = route_named(config.force_route)
        if problem.weight_prepacked and route.name != "fpa_intb":
            raise ValueError(f"forced route {route.name!r} cannot serve {problem.describe()}: B is prepacked "
                             f"(weight_prepacked={problem.weight_prepacked}) in the fpA_intB layout, which only "
                             "the fpa_intb route reads")
        bad = next((g for g in route.guards if g.name not in FORCE_SKIPS and not g(problem, config)), None)
        if bad is not None:
            raise ValueError(f"forced route {route.name!r} cannot serve {problem.describe()}: guard {bad.name} "
                             f"({bad.text}) fails")
        return Decision(route, _bias(problem, route), (), forced=True)
    reasons = []
    for route in ROUTES:
        bad = route.first_failure(problem, config)
        if bad is None:
            return Decision(route, _bias(problem, route), tuple(reasons))
        if problem.weight_prepacked:  # a prepacked B is only readable by fpa_intb (spec §7.3)
            raise ValueError(PREPACKED_NOT_ELIGIBLE + f" [guard {bad.name} fails: needs {bad.text}; "
                             f"{problem.describe()}]")
        reasons.append((route.name, bad.name, bad.text))
    raise AssertionError("the universal route accepts every problem")  # pragma: no cover


def _bias(problem: Problem, route: Route) -> str:
    return route.bias if problem.has_bias else "none"


#: routes whose plans read ORT's B layout, which a node keeping only the tensor-core layout no longer has
ONNX_B_ROUTES = ("fpa_intb", "router_gemv")
#: the tensor-core layout's kernels (``mma.sync`` m16n8k16) need sm >= 80
PACKED_LAYOUT_MIN_SM = 80


def packed_layout_serves(problem: Problem, config: Config) -> bool:
    """With ``config.packed_only`` on (off by default, ``NUMBA_NBITS_PACKED_ONLY``: dequantize + cuBLAS from the packed
    layout is 1.6x slower than from B), whether every call of ``problem``'s node (any M) can run on the tensor-core
    GEMV's packed layout alone, so the node need not keep ORT's B beside it (``Weights.keep_packed_only``): fp16/bf16
    weights the layout takes (``kernels.gemv.tactics.supports``: 2/4/8-bit, block 16..128, no or packed zero points, no
    g_idx, N and K multiples of 8) on an sm >= 80 device, B not prepacked, the fpA_intB route off and not forced (its
    kernels and profiler candidates read B), and neither chosen nor forced the router GEMV at M = 1 (a CUDA-core kernel
    on B). Every other route then reads the packed layout: the GEMV routes' tensor-core plans (an unaligned A falls back
    to dequantize + cuBLAS instead of their CUDA-core kernels), ``fused_gemm``, and dequantize + cuBLAS
    (``kernels.gemv.dequant_packed``, the same bytes as from B)."""
    from dataclasses import replace

    from ..kernels.gemv.tactics import supports

    if not config.packed_only:  # opt-in (``numba_nbits.packed_only``): dequantize from the layout is slower
        return False
    p = replace(problem, M=1)
    if p.weight_prepacked or p.sm < PACKED_LAYOUT_MIN_SM or config.fpa_intb_gemm or not supports(p):
        return False
    if config.force_route in ONNX_B_ROUTES:
        return False
    try:
        return select(p, config).name not in ONNX_B_ROUTES
    except ValueError:  # a forced route that cannot serve M = 1: keep B, the call reports it
        return False
