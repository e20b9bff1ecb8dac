"""Why a route was chosen: ``numba_nbits.explain(...)`` and ``python -m numba_nbits.explain``.

Example::

    python -m numba_nbits.explain --M 1 --N 4096 --K 4096 --bits 4 --block-size 32 --bias
    python -m numba_nbits.explain --M 64 --block-size 64 --config ep.cuda.fpa_intb_gemm=1   # fpa_intb

prints the problem, the configuration values that differ from the defaults, and the dispatch chain
with a tick for the chosen route and, for every route before it, the guard that rejected it. Env
vars are read (as the operator would read them) unless ``--no-env`` is given; ``--config KEY=VALUE``
adds session-config keys. ``--routes`` prints the route table (the README's, generated from
``dispatch/routes.py``). Attributes are validated as the operator does (an invalid one: its error on one
line, exit status 2). The compute capability is ``--sm``, else device 0's, else 90 assumed (no GPU); the
output says which.
"""
from __future__ import annotations

import argparse
import sys
from typing import Mapping, Optional

from .config import Config, load_config
from .dispatch.problem import Problem
from .dispatch.routes import ROUTES
from .dispatch.select import Decision, select
from .schema import MatMulNBitsError, check_attributes


ASSUMED_SM = 90


def resolve_sm(sm: Optional[int] = None) -> tuple[int, str]:
    """``(sm, where it came from)``: the given ``sm`` ("--sm"), else device 0's compute capability (asked of
    the driver, without numba), else sm 90 assumed (no GPU; numba's CUDA simulator also counts as sm 90)."""
    if sm is not None:
        return int(sm), "--sm"
    from .probe import device_info

    info = device_info(0)
    if info is not None:
        return info[0], f"device 0: {info[1]}"
    return ASSUMED_SM, "assumed: no GPU found; pass --sm"


def explain(M: int, N: int, K: int, bits: int = 4, block_size: int = 32, dtype: str = "float16",
            zero_points: str = "none", g_idx: bool = False, bias: bool = False, sm: Optional[int] = None,
            config: Mapping | Config | None = None, environ: Optional[Mapping[str, str]] = None,
            weight_prepacked: int = 0) -> Decision:
    """The dispatch decision for a problem (``print(decision.explain())`` shows the chain).

    The attributes are validated as the operator validates them (``schema.check_attributes``: ORT's error
    texts, raised as ``MatMulNBitsError``); ``sm=None`` takes device 0's, else 90 (``resolve_sm``)."""
    check_attributes(K, N, bits, block_size, 0, weight_prepacked)
    sm, _ = resolve_sm(sm)
    if dtype == "bfloat16" and sm < 80:  # as MatMulNBits.__init__
        raise MatMulNBitsError("BFloat16 MatMulNBits is not supported on cuda device with compute "
                               f"capability < 8.0 (this device: sm_{sm})")
    problem = Problem(M=M, N=N, K=K, bits=bits, block_size=block_size, dtype=dtype, zero_points=zero_points,
                      has_g_idx=g_idx, has_bias=bias, sm=sm, weight_prepacked=weight_prepacked)
    return select(problem, load_config(environ, config))


def route_table_markdown() -> str:
    """The route table as markdown: order, route, the family's code (``KernelFamily.sources``), bias
    handling, guards."""
    from .kernels import get_family

    lines = ["| # | route | code | bias | guards (all must hold) |", "|---|---|---|---|---|"]
    for i, r in enumerate(ROUTES, 1):
        guards = "; ".join(f"`{g.text}`" for g in r.guards)
        bias = {"fused": "fused in kernel", "add": "bias-add kernel after"}[r.bias]
        code = ", ".join(f"`kernels/{path}`" for path in get_family(r.family).sources)
        lines.append(f"| {i} | `{r.name}` — {r.summary} | {code} | {bias} | {guards} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from .formats import SUPPORTED_BITS
    from .weights import ZP_KINDS

    p = argparse.ArgumentParser(prog="python -m numba_nbits.explain", description=__doc__.splitlines()[0])
    p.add_argument("--M", type=int, default=1)
    p.add_argument("--N", type=int, default=4096)
    p.add_argument("--K", type=int, default=4096)
    p.add_argument("--bits", type=int, default=4, choices=SUPPORTED_BITS)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--dtype", default="float16", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--zero-points", default="none", choices=ZP_KINDS)
    p.add_argument("--g-idx", action="store_true")
    p.add_argument("--bias", action="store_true")
    p.add_argument("--weight-prepacked", type=int, default=0, choices=(0, 1, 2),
                   help="B prepacked for the fpA_intB route (1: SM80 layout, 2: SM90 layout)")
    p.add_argument("--sm", type=int, default=None,
                   help="compute capability as major*10+minor (default: device 0's, else 90 when there is no GPU)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="session-config key")
    p.add_argument("--no-env", action="store_true", help="ignore environment variables")
    p.add_argument("--routes", action="store_true", help="print the route table and exit")
    args = p.parse_args(argv)
    if args.routes:
        print(route_table_markdown())
        return 0
    cfg = {}
    for kv in args.config:
        k, _, v = kv.partition("=")
        cfg[k] = v
    config = load_config({} if args.no_env else None, cfg)
    sm, sm_source = resolve_sm(args.sm)
    try:
        d = explain(args.M, args.N, args.K, args.bits, args.block_size, args.dtype, args.zero_points, args.g_idx,
                    args.bias, sm, config=config, weight_prepacked=args.weight_prepacked)
    except MatMulNBitsError as e:  # the operator's own attribute errors
        print(f"error: {e}", file=sys.stderr)
        return 2
    prob = Problem(args.M, args.N, args.K, args.bits, args.block_size, args.dtype, args.zero_points, args.g_idx,
                   args.bias, sm, args.weight_prepacked)
    print(f"problem: {prob.describe()}")
    print(f"sm: {sm} ({sm_source})")
    changed = [ln for ln in config.explain().splitlines() if "default" not in ln]
    if changed:
        print("config (non-default):")
        print("\n".join("  " + ln.strip() for ln in changed))
    print("dispatch chain:")
    print(d.explain())
    print(f"route: {d.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
