"""Command line of ``python -m numba_nbits.perf`` (argument parsing is pure and CPU-testable).

Forms::

    python -m numba_nbits.perf [--quick | --plan NAME] [--sweep ...] [filters] [--out DIR]   # one run (plans: --help)
    python -m numba_nbits.perf --shard I/N [same options]                       # part I of N of that run
    python -m numba_nbits.perf --shard I/N --dry-run                            # cases and est. seconds per shard
    python -m numba_nbits.perf merge DIR [DIR ...] [--out DIR] [--no-plots]     # shards -> one report

``--shard I/N`` (1-based) runs a deterministic part of the expanded case list (``shard.partition``:
groups balanced by estimated cost), so running ``1/N`` .. ``N/N`` with the same other options covers
every case exactly once; each shard writes ``benchmarks/results/<date>-<gpu>-shard<I>of<N>/`` by default and
records the shard in meta.json. ``merge`` (a leading subcommand word, so every older argv keeps its
meaning) concatenates shard directories into one results.csv / summary.md / plots / meta.json
(``numba_nbits.perf.merge``).

Timing runs need a CUDA GPU: on numba's CUDA simulator, or without a GPU, ``main`` prints one line saying
so and returns 2 (``--dry-run`` and ``merge`` need no GPU).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import re
import sys
from pathlib import Path

from . import RESULTS_DIR
from .shapes import ALL_BITS, PLANS, SHAPES, SWEEPS, case_key, expand, parse_dtype
from .shard import ShardSpec, parse_shard

QUICK_BUDGET_S = 90.0
FULL_BUDGET_S = 480.0


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _dtypes(text: str) -> list[str]:
    try:
        return [parse_dtype(x) for x in _names(text)]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _shard(text: str) -> ShardSpec:
    try:
        return parse_shard(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m numba_nbits.perf",
        description="Time MatMulNBits (every eligible route) against peers; write CSV, markdown and plots.",
        epilog=f"Named shapes: {', '.join(SHAPES)} (or NxK). Full sweep ~50 min on an H200 (run it as "
               f"--shard 1/N .. N/N, then `python -m numba_nbits.perf merge DIRS --out DIR`; finish a budget-cut "
               f"sweep with --missing-from DIR), --quick ~1 min.")
    p.add_argument("--quick", action="store_true", help="a few shapes, M in {1,16,256}, 4-bit g32/g128 fp16 "
                                                         "(= --plan quick)")
    p.add_argument("--plan", choices=tuple(PLANS), default=None,
                   help="full (default): every tier of the sweep; quick: as --quick; gemv-grid: the GEMV "
                        "benchmark grid (7 shapes incl. the LM head and the router, M 1-16, 4-bit g32/g128, "
                        "8-bit g128, 2-bit g64, fp16 and bf16: 280 cases); readme: the cases the README's generated "
                        "section shows (9 shapes, M 1/16/256/4096, 4-bit fp16 g128, then g32 with the router A/B)")
    p.add_argument("--sweep", choices=SWEEPS, default="all",
                   help="gemv: M <= 16; gemm: M > 16; router: router shapes and the router A/B; all (default)")
    p.add_argument("--shapes", type=_names, help="comma-separated shape names (replace the plan's shapes)")
    p.add_argument("--M", dest="Ms", type=_ints, help="comma-separated M values (replace the plan's)")
    p.add_argument("--bits", type=_ints, help=f"comma-separated bits from {ALL_BITS}")
    p.add_argument("--block-sizes", dest="blocks", type=_ints, help="comma-separated block sizes")
    p.add_argument("--dtypes", type=_dtypes, help="comma-separated fp16,bf16,fp32")
    p.add_argument("--routes", type=_names, default=["auto", "forced"],
                   help="auto (dispatch's pick), forced (every other eligible route), or route names to force "
                        "(default auto,forced)")
    p.add_argument("--shard", type=_shard, metavar="I/N",
                   help="run part I (1-based) of N of the case list, balanced by estimated cost; shards 1..N "
                        "cover every case once (merge them with `python -m numba_nbits.perf merge`)")
    p.add_argument("--missing-from", type=Path, metavar="DIR",
                   help="only the plan's cases that DIR's results do not hold (a merged or single run whose "
                        "budget skipped some): finish a sweep, then merge DIR with the new shard(s); sharding "
                        "applies to what is left; case_index stays the full plan's position")
    p.add_argument("--out", type=Path, help="output directory (default benchmarks/results/<date>-<gpu>/, "
                                            "with --shard benchmarks/results/<date>-<gpu>-shard<I>of<N>/)")
    p.add_argument("--commit", metavar="SHA", default="",
                   help="commit to record instead of what git reports (a device copy may carry no .git, or a "
                        ".git whose HEAD is not the tree that travelled): rows and meta.json get it, so merge can "
                        "compare shards' commits")
    p.add_argument("--no-peers", action="store_true", help="skip torch / tinygemm / gemlite / ORT peers")
    p.add_argument("--budget-s", type=float, help=f"stop starting cases after this many seconds "
                                                   f"(default {FULL_BUDGET_S:.0f}, --quick {QUICK_BUDGET_S:.0f})")
    p.add_argument("--max-copies", type=int, default=2048, help="cap on rotated operand copies per subject")
    p.add_argument("--l2-factor", type=float, default=2.0, help="rotated working set >= this many L2 sizes")
    p.add_argument("--compile-workers", type=int, default=0,
                   help="compile every case's kernels first in this many parallel processes into the kernel "
                        "cache (the sweep is compile-bound; workers finish before any timing; GPU only)")
    p.add_argument("--no-graphs", action="store_true", help="skip CUDA-graph timing")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the case plan and exit (no GPU)")
    return p


def parse(argv=None) -> argparse.Namespace:
    a = parser().parse_args(argv)
    bad = [b for b in (a.bits or []) if b not in ALL_BITS]
    if bad:
        parser().error(f"--bits: {bad} not in {ALL_BITS}")
    if a.shapes:
        from .shapes import shape_named

        try:
            for s in a.shapes:
                shape_named(s)
        except ValueError as e:
            parser().error(str(e))
    if a.quick and a.plan not in (None, "quick"):
        parser().error(f"--quick and --plan {a.plan} contradict each other")
    a.plan_name = "quick" if a.quick else (a.plan or "full")
    a.quick = a.plan_name == "quick"
    a.plan = PLANS[a.plan_name]
    a.all_cases = expand(a.plan, shapes=a.shapes, Ms=a.Ms, bits=a.bits, blocks=a.blocks, dtypes=a.dtypes,
                         sweep=a.sweep)
    a.pool = a.all_cases
    if a.missing_from is not None:
        try:
            have = measured_cases(a.missing_from)
        except (OSError, ValueError) as e:
            parser().error(f"--missing-from {a.missing_from}: {e}")
        a.pool = [c for c in a.all_cases if c.key not in have]
        if not a.pool:
            parser().error(f"--missing-from {a.missing_from}: every case of the plan is already measured there")
    a.cases = a.pool
    if a.shard is not None:
        from .shard import shard_cases

        if a.shard.count > max(1, len(a.pool)):
            parser().error(f"--shard {a.shard.label}: only {len(a.pool)} cases to split")
        a.cases = shard_cases(a.pool, a.shard)
    if a.budget_s is None:
        a.budget_s = QUICK_BUDGET_S if a.quick else FULL_BUDGET_S
    return a


def measured_cases(d: Path) -> set:
    """``Case.key`` of every case with a row of ours in results directory ``d`` (its results.csv,
    else the results.partial.csv an interrupted run leaves)."""
    import pandas as pd

    d = Path(d)
    src = next((d / n for n in ("results.csv", "results.partial.csv") if (d / n).exists()), None)
    if src is None:
        raise ValueError("neither results.csv nor results.partial.csv: not a results directory")
    df = pd.read_csv(src, keep_default_na=False, dtype={"variant": str, "zp": str, "dtype": str, "shape": str})
    return {case_key(r) for r in df[df["kind"] == "ours"].to_dict("records")}


def default_out(gpu: str, date: _dt.date | None = None, shard: ShardSpec | None = None) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", (gpu or "gpu").lower()).strip("-") or "gpu"
    slug = slug.replace("nvidia-", "")
    tail = f"-{shard.slug}" if shard is not None else ""
    return RESULTS_DIR / f"{(date or _dt.date.today()).isoformat()}-{slug}{tail}"


def plan_text(cases) -> str:
    from collections import Counter

    by_tier = Counter(c.tier for c in cases)
    groups = len({c.group for c in cases})
    lines = [f"{len(cases)} cases in {groups} groups"] + [f"  {t}: {n}" for t, n in by_tier.items()]
    return "\n".join(lines)


def shard_meta(a: argparse.Namespace) -> dict:
    """What meta.json records about the partition (commit, versions and ceilings are in env/ceilings)."""
    from .shard import estimate_s

    if a.shard is None:
        return {}
    return {"shard": {"index": a.shard.index, "count": a.shard.count, "label": a.shard.label,
                      "cases": len(a.cases), "total_cases": len(a.pool), "plan": a.plan_name,
                      "est_s": round(estimate_s(a.cases), 1)}}


def annotate(a: argparse.Namespace, rows: list[dict], meta: dict, argv=()) -> None:
    """Rows get ``case_index`` (plan position, before sharding: merge's ordering) and ``shard``;
    ``--commit`` replaces ``git_commit`` (the caller names the tree; a device copy's git may describe
    another one, e.g. the checkout's branch tip plus ``-dirty``); meta gets ``shard`` and ``argv``."""
    index = {(c.group, c.M): i for i, c in enumerate(a.all_cases)}
    for r in rows:
        key = tuple(r.get(k) for k in ("shape", "bits", "block", "dtype", "zp", "variant"))
        r["case_index"] = index.get((key, r.get("M")))
        r["shard"] = a.shard.label if a.shard is not None else ""
        if a.commit and r.get("kind") != "reference":
            r["git_commit"] = a.commit
    env = meta.setdefault("env", {})
    if a.commit:
        env["git_commit"] = a.commit
    meta.update(shard_meta(a), argv=list(argv))


SIMULATOR_REFUSED = ("numba is running on its CUDA simulator (NUMBA_ENABLE_CUDASIM=1), whose times mean nothing "
                     "and which cannot finish the plan within its budget: the perf suite needs a CUDA GPU "
                     "(--dry-run prints the plan without one)")


def device_problem() -> str:
    """Why the suite cannot time anything here (one line), or "": on the simulator (refused: timing it is
    meaningless, and one simulated case outlasts the whole --quick budget) or without a CUDA GPU."""
    from ..launch import simulated
    from ..probe import why_no_gpu

    if simulated():
        return SIMULATOR_REFUSED
    reason = why_no_gpu()
    return f"no CUDA GPU found ({reason}): the perf suite times kernels on a CUDA GPU (--dry-run prints the " \
           "plan without one)" if reason else ""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["merge"]:
        from .merge import main as merge_main

        return merge_main(argv[1:])
    a = parse(argv)
    if a.dry_run:
        from .shard import estimate_s, plan_table

        if a.shard is not None:
            print(plan_table(a.pool, a.shard.count, a.budget_s))
            print(f"shard {a.shard.label}:")
        else:
            print(f"estimated ~{estimate_s(a.cases):.0f} s on one H200 (budget {a.budget_s:.0f} s)")
        print(plan_text(a.cases))
        for c in a.cases:
            print(f"  {c.tier:12s} {c.shape:14s} M={c.M:<5d} {c.bits}b g{c.block:<4d} {c.dtype:9s} zp={c.zp}"
                  f"{' ' + c.variant if c.variant else ''}")
        return 0
    why = device_problem()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    from .harness import Budget, make_backend
    from .report import write_results
    from .reference_rows import serves as reference_serves
    from .runner import Options, reference_rows_for, run

    backend = make_backend()
    out_holder: dict = {}

    def out_dir(env) -> Path:
        if "dir" not in out_holder:
            out_holder["dir"] = a.out or default_out(env.get("gpu", "gpu"), shard=a.shard)
            out_holder["dir"].mkdir(parents=True, exist_ok=True)
        return out_holder["dir"]

    def partial(rows):  # keep what we have if the run is interrupted
        try:

            from .report import to_frame

            d = out_dir(rows[0]) if rows else None
            if d is not None:
                to_frame(rows).to_csv(d / "results.partial.csv", index=False)
        except Exception:  # noqa: BLE001
            pass

    print(plan_text(a.cases), file=sys.stderr)
    opts = Options(cases=a.cases, routes=tuple(a.routes), peers=not a.no_peers, budget_s=a.budget_s,
                   l2_factor=a.l2_factor, max_copies=a.max_copies, seed=a.seed, graphs=not a.no_graphs,
                   timing=Budget(), on_rows=partial, progress=not a.no_progress,
                   compile_workers=max(0, a.compile_workers))
    rows, meta = run(opts, backend)
    if not meta.get("ort_cuda"):
        gpu = meta.get("env", {}).get("gpu", "")
        if reference_serves(gpu):
            rows = rows + reference_rows_for(rows)
        else:
            meta.setdefault("notes", []).append(
                ("ort_reference", f"ORT's reference table was measured on an H200; not used for this run's GPU ({gpu})"))
    annotate(a, rows, meta, argv)
    d = out_dir(meta["env"])
    write_results(d, rows, meta, plots=not a.no_plots)
    part = d / "results.partial.csv"
    if part.exists():
        part.unlink()
    print((d / "summary.md").read_text())
    print(f"results: {d}", file=sys.stderr)
    return 0
