"""Reports from the tidy results: CSV, markdown summary, PNG plots, and the README section.

``python -m numba_nbits.perf.report --readme benchmarks/results/<dir>`` prints the README's performance
section (``readme_summary``), rendered from a committed results directory; the README is generated
from it, never typed by hand. ``--summary DIR`` rewrites DIR/summary.md and the plots from DIR's CSV.

Nothing here needs tabulate, torch or a GPU (markdown tables are rendered locally; matplotlib, Agg
backend, only for the plots).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

from .reference_rows import SOURCE
from .shapes import DTYPE_SHORT, README_MS, ROUTER_AB_VARIANT, SHAPES

COLUMNS = ["shape", "N", "K", "M", "bits", "block", "dtype", "zp", "bias", "variant", "tier", "kind", "route",
           "forced", "auto_route", "source", "us", "timing", "us_p50", "us_p20", "us_p80", "us_graph", "us_graph_p20",
           "us_graph_p80", "us_kernel", "host_us", "n_batch", "samples", "copies", "working_set_mb", "l2_cold",
           "warmup_s",
           "bytes", "flops", "tb_s", "tflops", "pct_bw", "pct_flops", "pct_roofline", "rel_err", "tol", "correct",
           "error", "note", "check_note", "graph_note", "gpu", "sm_count", "driver", "numba_cuda", "cuda_core", "torch",
           "git_commit", "date", "case_index", "shard"]
CASE = ["shape", "N", "K", "M", "bits", "block", "dtype", "zp", "variant"]
CSV_NAME, META_NAME, SUMMARY_NAME = "results.csv", "meta.json", "summary.md"


def to_frame(rows) -> pd.DataFrame:
    """One tidy DataFrame with the documented columns first (extra columns kept at the end)."""
    df = pd.DataFrame(list(rows))
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = pd.NA
    extra = [c for c in df.columns if c not in COLUMNS]
    df = df[COLUMNS + extra]
    for c in ("variant", "error", "note", "check_note", "graph_note", "zp", "source", "tier", "auto_route", "shard"):
        col = df[c].astype(object)
        df[c] = col.where(col.notna(), "").astype(str)
    df.loc[df["zp"] == "", "zp"] = "none"
    # reference rows (ORT's table) carry only us_p50: that is their time
    df["us"] = pd.to_numeric(df["us"], errors="coerce")
    fill = (df["kind"] == "reference") & df["us"].isna()
    df.loc[fill, "us"] = pd.to_numeric(df.loc[fill, "us_p50"], errors="coerce")
    # ORT's rows (measured by CUPTI, or its reference table's) are kernel time
    df["us_kernel"] = pd.to_numeric(df["us_kernel"], errors="coerce")
    ort = _is_ort(df["route"]) & df["kind"].isin(["peer", "reference"]) & df["us_kernel"].isna()
    df.loc[ort, "us_kernel"] = df.loc[ort, "us"]
    return df


def _ort_route(route) -> bool:
    """Whether a route (or a report column's subject, ``ref:ort_default``) is one of ONNX Runtime's."""
    return str(route).split(":")[-1].startswith("ort_")


def _is_ort(route) -> pd.Series:
    return route.map(_ort_route).astype(bool)


def read_results(results_dir) -> tuple[pd.DataFrame, dict]:
    d = Path(results_dir)
    df = to_frame(pd.read_csv(d / CSV_NAME, keep_default_na=True).to_dict("records"))
    meta = json.loads((d / META_NAME).read_text()) if (d / META_NAME).exists() else {}
    return df, meta


def write_results(out_dir, rows, meta: dict, *, plots: bool = True) -> pd.DataFrame:
    """Write results.csv, meta.json, summary.md (and PNG plots) into ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    df = to_frame(rows)
    df.to_csv(d / CSV_NAME, index=False)
    (d / META_NAME).write_text(json.dumps(meta, indent=1, default=str))
    made = []
    if plots:
        try:
            made = make_plots(df, d)
        except Exception as e:  # noqa: BLE001 - a plot problem must not lose the numbers
            meta.setdefault("notes", []).append(("plots", f"{type(e).__name__}: {e}"))
    (d / SUMMARY_NAME).write_text(summary_markdown(df, meta, plots=made))
    return df


# ---------------------------------------------------------------------------------- tables

def _ok(df: pd.DataFrame) -> pd.Series:
    us = pd.to_numeric(df["us"], errors="coerce")
    err = df["error"].fillna("").astype(str)
    correct = df["correct"].map(lambda v: str(v).lower() in ("true", "1", "1.0"))
    return (err == "") & correct & us.notna() & (us > 0)


def best_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per case (variant ""): dispatch's pick, the best correct route of ours, each peer's and
    reference's time and our speedup over it (``peer_us / best_us``; < 1 is a miss)."""
    df = df[df["variant"].fillna("") == ""].copy()
    df["us"] = pd.to_numeric(df["us"], errors="coerce")
    ok = _ok(df)
    out = []
    for key, g in df.groupby(CASE, sort=False, dropna=False):
        rec = dict(zip(CASE, key))
        ours = g[(g["kind"] == "ours")]
        auto = ours[ours["forced"].map(lambda v: str(v).lower() in ("false", "0", "0.0"))]
        good = ours[ok.loc[ours.index]]
        rec["auto_route"] = auto["route"].iloc[0] if len(auto) else ""
        src = ours if len(ours) else g
        rec["shard"] = str(src["shard"].iloc[0]) if "shard" in src.columns and len(src) else ""
        rec["commit"] = "" if not len(src) or pd.isna(src["git_commit"].iloc[0]) else str(src["git_commit"].iloc[0])
        rec["auto_us"] = float(auto["us"].iloc[0]) if len(auto) and ok.loc[auto.index[0]] else math.nan
        rec["auto_pct_roofline"] = _f(auto["pct_roofline"].iloc[0]) if rec["auto_us"] == rec["auto_us"] else math.nan
        rec["auto_us_kernel"] = _f(auto["us_kernel"].iloc[0]) if rec["auto_us"] == rec["auto_us"] else math.nan
        if len(good):
            b = good.loc[good["us"].idxmin()]
            rec.update(best_route=b["route"], best_us=float(b["us"]), pct_bw=_f(b["pct_bw"]),
                       pct_flops=_f(b["pct_flops"]), pct_roofline=_f(b["pct_roofline"]))
        else:
            rec.update(best_route="(none correct)", best_us=math.nan, pct_bw=math.nan, pct_flops=math.nan,
                       pct_roofline=math.nan)
        for kind in ("peer", "reference"):
            for _, p in g[(g["kind"] == kind)].iterrows():
                name = p["route"] if kind == "peer" else f"ref:{p['route']}"
                pus = float(p["us"]) if (kind == "reference" or ok.loc[p.name]) else math.nan
                rec[f"{name}_us"] = pus
                best = rec["best_us"]
                if _ort_route(p["route"]) and rec["auto_us_kernel"] == rec["auto_us_kernel"]:
                    best = rec["auto_us_kernel"]  # ORT's time is kernel time: against the default call's
                rec[f"vs {name}"] = pus / best if best == best and pus == pus else math.nan
        out.append(rec)
    return pd.DataFrame(out)


def _f(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _fmt(v, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "–"
    if isinstance(v, float):
        if kind == "x":
            s = f"{v:.2f}x"
            return f"**{s} MISS**" if v < 1 else s
        if kind == "%":
            return f"{v:.0f}%"
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


def md_table(df: pd.DataFrame, kinds: dict | None = None) -> str:
    """A GitHub markdown table (no tabulate needed)."""
    kinds = kinds or {}
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c], kinds.get(c, "")) for c in cols) + " |")
    return "\n".join(lines)


def _speed_cols(bt: pd.DataFrame) -> list[str]:
    return [c for c in bt.columns if c.startswith("vs ")]


def _multi(df: pd.DataFrame, col: str) -> bool:
    return col in df.columns and df[col].fillna("").astype(str).replace("", pd.NA).dropna().nunique() > 1


def _ort_text(df: pd.DataFrame) -> str:
    """Where the ORT columns of a report come from: the reference table, or this run's CUPTI timing."""
    if (df["kind"] == "reference").any():
        return (f"`ref:` columns come from the {SOURCE}, not from this run (kernel time by CUPTI; their `vs` ratios "
                "are over the default call's kernel time, `us_kernel`, where this run has it).")
    if ((df["kind"] == "peer") & _is_ort(df["route"])).any():
        return ("ONNX Runtime's columns (`ort_default`, `ort_fpA_intB`) are its kernels' time per node by CUPTI in "
                "this run (launch gaps excluded, L2 flushed before each run; `perf/ort_peer.py`), and their `vs` "
                "ratios are over the default call's kernel time measured the same way (`us_kernel`) where the run "
                "has it; a peer whose output misses the oracle's tolerance shows `–`.")
    return ""


def _precompile_text(meta: dict) -> str:
    pc = meta.get("precompile")
    if not pc:
        return ""
    return (f" (of which {pc.get('seconds', 0):.0f} s compiling the kernels of {pc.get('cases', 0)} cases in "
            f"{pc.get('workers', 0)} parallel processes: {pc.get('kernels_compiled', 0)} kernels"
            + (f", {len(pc['failed'])} workers failed" if pc.get("failed") else "")
            + (f", {pc['cache_errors']} kernel-cache errors" if pc.get("cache_errors") else "") + ")")


def summary_markdown(df: pd.DataFrame, meta: dict, plots=(), *, provenance: bool = True) -> str:
    """summary.md. ``provenance`` (a merged report's extras: merge warnings, ``shard``/``commit``
    columns when rows come from several shards/commits, the Shards table); without it a merge of
    shards renders exactly as one run holding all their rows would."""
    env = meta.get("env", {})
    ceil = meta.get("ceilings", {})
    out = [f"# numba_nbits perf: {env.get('gpu', '?')}, {env.get('date', '')}", "",
           f"commit `{env.get('git_commit', '')}`, numba-cuda {env.get('numba_cuda', '')}, cuda-core "
           f"{env.get('cuda_core', '')}, torch {env.get('torch', '') or 'absent'}, driver {env.get('driver', '')}, "
           f"{env.get('sm_count', '')} SMs, L2 {int(env.get('l2_bytes', 0) or 0) / 2**20:.0f} MiB; graphs via "
           f"{meta.get('graph_api', '?')}; wall {meta.get('wall_s', 0):.0f} s{_precompile_text(meta)}.", "",
           f"Ceilings measured at the start of the run: copy {_fmt(_f(ceil.get('bw_tb_s')))} TB/s; dense GEMM "
           f"fp16 {_fmt(_f(ceil.get('tflops_float16')))}, bf16 {_fmt(_f(ceil.get('tflops_bfloat16')))}, "
           f"fp32 {_fmt(_f(ceil.get('tflops_float32')))}, tf32 {_fmt(_f(ceil.get('tflops_tf32')))} TFLOP/s. "
           f"{ceil.get('ceiling_note', '')}", "",
           "Times are microseconds per call (CUDA-graph replay where capture worked, else CUDA events around "
           "eager batches), weights and activations rotated beyond the L2. `vs X` = X's time / our best "
           "correct route's time (above 1: we are faster; **MISS**: the peer wins). "
           + _ort_text(df), ""]
    prov = [c for c, col in (("shard", "shard"), ("commit", "git_commit")) if provenance and _multi(df, col)]
    warnings = meta.get("merge_warnings", []) if provenance else []
    if warnings:
        out += ["## Merge warnings", ""] + [f"- {w}" for w in warnings] + [""]
    bt = best_table(df)
    if len(bt):
        cols = ["shape", "M", "bits", "block", "dtype", "zp", "auto_route", "auto_us", "best_route", "best_us",
                "pct_bw", "pct_roofline"] + _speed_cols(bt) + prov
        view = bt[cols].copy()
        view["dtype"] = view["dtype"].map(lambda d: DTYPE_SHORT.get(d, d))
        kinds = {c: "x" for c in _speed_cols(bt)}
        kinds.update(pct_bw="%", pct_roofline="%")
        out += ["## Best route per case", "", md_table(view, kinds), ""]
        misses = bt[[any((v == v and v < 1) for v in r[_speed_cols(bt)]) for _, r in bt.iterrows()]] \
            if _speed_cols(bt) else bt.iloc[0:0]
        out += [f"Misses (a peer or reference faster than our best route): {len(misses)} of {len(bt)} cases.", ""]
        dis = bt[(bt["auto_route"] != bt["best_route"]) & bt["best_us"].notna() & bt["auto_us"].notna()]
        if len(dis):
            d2 = dis[["shape", "M", "bits", "block", "dtype", "auto_route", "auto_us", "best_route", "best_us"]].copy()
            d2["dtype"] = d2["dtype"].map(lambda d: DTYPE_SHORT.get(d, d))
            out += ["## Dispatch did not pick the fastest route", "", md_table(d2), ""]
    out += _router_section(df)
    wrong = df[(df["kind"] != "reference") & ~_ok(df)]
    out += ["## Wrong or failed", ""]
    if len(wrong):
        w = wrong[["shape", "M", "bits", "block", "dtype", "zp", "variant", "kind", "route", "forced", "rel_err",
                   "tol", "error", "check_note"] + (["shard"] if "shard" in prov else [])].copy()
        out += [md_table(w), ""]
    else:
        out += ["None: every measured row matched the float64 oracle within its tolerance.", ""]
    skipped = meta.get("skipped", [])
    notes = meta.get("notes", [])
    out += ["## Not measured", ""]
    if skipped:
        sk = pd.DataFrame(skipped)
        by = (["shard"] if provenance and _multi(sk, "shard") else []) + ["tier", "shape", "reason"]
        out += [f"{len(sk)} cases skipped: " + "; ".join(f"{r}: {n}" for r, n in sk.groupby("reason").size().items()),
                "", md_table(sk.groupby(by).size().reset_index(name="cases")), ""]
    for name, text in notes:
        out.append(f"- {name}: {text}")
    if not skipped and not notes:
        out.append("Nothing was skipped.")
    if provenance and meta.get("shards"):
        out += ["", "## Shards", "", _shards_text(meta["shards"])]
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"


def _shards_text(shards: list) -> str:
    rows = []
    for s in shards:
        c, v = s.get("ceilings") or {}, s.get("versions") or {}
        rows.append({"shard": s.get("shard", ""), "dir": s.get("dir", ""),
                     "commit": s.get("git_commit") or "unrecorded",
                     "date": s.get("date", ""), "cases": s.get("cases"), "rows": s.get("rows"),
                     "skipped": s.get("skipped"), "wall_s": _f(s.get("wall_s")), "copy TB/s": _f(c.get("bw_tb_s")),
                     "fp16 TFLOP/s": _f(c.get("tflops_float16")), "numba-cuda": v.get("numba_cuda", ""),
                     "driver": v.get("driver", "")})
    return (f"Merged from {len(shards)} result directories (`python -m numba_nbits.perf merge`); the header's "
            "ceilings are the median over them, each row's % columns use its own shard's ceilings.\n\n"
            + md_table(pd.DataFrame(rows)))


def _router_section(df: pd.DataFrame) -> list[str]:
    routers = {n for n, s in SHAPES.items() if s.role == "router"}
    sub = df[df["shape"].isin(routers) & (df["kind"] == "ours")
             & df["forced"].map(lambda v: str(v).lower() in ("false", "0", "0.0"))]
    if not (sub["variant"] == ROUTER_AB_VARIANT).any():
        return []
    rows = []
    keys = ["shape", "M", "bits", "block", "dtype", "zp"]
    for key, g in sub.groupby(keys, sort=False):
        a = g[g["variant"] == ""]
        b = g[g["variant"] == ROUTER_AB_VARIANT]
        if not len(a) or not len(b):
            continue
        ua, ub = _f(a["us"].iloc[0]), _f(b["us"].iloc[0])
        rows.append({**dict(zip(keys, key)), "route (unset)": a["route"].iloc[0], "us (unset)": ua,
                     "route (=1)": b["route"].iloc[0], "us (=1)": ub,
                     "host_us (unset)": _f(a["host_us"].iloc[0]), "host_us (=1)": _f(b["host_us"].iloc[0]),
                     "unset speedup": (ub / ua if ua == ua and ub == ub and ua > 0 else math.nan)
                     if a["route"].iloc[0] != b["route"].iloc[0] else "same route"})
    if not rows:
        return []
    t = pd.DataFrame(rows)
    return ["## Router A/B (ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION=1 vs unset)", "",
            "Where the variable changes nothing (the router GEMV's gate rejects the case either way) both "
            "columns time the same kernel and the speedup is shown as \"same route\", not as a ratio of noise.",
            "", md_table(t, {"unset speedup": "x"}), ""]


# ------------------------------------------------------------------------------------ plots

def make_plots(df: pd.DataFrame, out_dir) -> list[str]:
    """Latency vs M per (shape, format) with one line per route and peer; % of roofline vs M."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = Path(out_dir)
    made = []
    base = df[df["variant"].fillna("") == ""].copy()
    base["us"] = pd.to_numeric(base["us"], errors="coerce")
    ok = _ok(base) | (base["kind"] == "reference")
    base = base[ok]
    for (shape, bits, block, dtype, zp), g in base.groupby(["shape", "bits", "block", "dtype", "zp"], sort=False):
        if g["M"].nunique() < 2:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        auto = g[(g["kind"] == "ours") & g["forced"].map(lambda v: str(v).lower() in ("false", "0"))]
        ax.plot(auto["M"], auto["us"], "k-o", lw=2.5, label="ours: dispatch pick")
        for (kind, route), s in g.groupby(["kind", "route"], sort=False):
            s = s.groupby("M")["us"].min().sort_index()
            style = {"ours": "-", "peer": "--", "reference": ":"}[kind] if kind in ("ours", "peer", "reference") \
                else "-"
            ax.plot(s.index, s.values, style, marker=".", label=f"{'ref ' if kind == 'reference' else ''}{route}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M")
        ax.set_ylabel("us per call")
        ax.set_title(f"{shape} ({g['N'].iloc[0]}x{g['K'].iloc[0]}), {bits}-bit g{block} {DTYPE_SHORT.get(dtype, dtype)}"
                     f"{'' if zp == 'none' else ' zp'}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
        name = f"latency_{shape}_{bits}b_g{block}_{DTYPE_SHORT.get(dtype, dtype)}_{zp}.png"
        fig.tight_layout()
        fig.savefig(d / name, dpi=110)
        plt.close(fig)
        made.append(name)
    bt = best_table(df)
    if len(bt) and bt["pct_roofline"].notna().any():
        for (bits, block, dtype, zp), g in bt.groupby(["bits", "block", "dtype", "zp"], sort=False):
            if g["M"].nunique() < 2 or not g["pct_roofline"].notna().any():
                continue
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for shape, s in g.groupby("shape", sort=False):
                s = s.sort_values("M")
                ax.plot(s["M"], s["pct_roofline"], "-o", label=shape)
            ax.axhline(100, color="k", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M")
            ax.set_ylabel("% of roofline (best correct route)")
            ax.set_title(f"{bits}-bit g{block} {DTYPE_SHORT.get(dtype, dtype)}{'' if zp == 'none' else ' zp'}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            name = f"roofline_{bits}b_g{block}_{DTYPE_SHORT.get(dtype, dtype)}_{zp}.png"
            fig.tight_layout()
            fig.savefig(d / name, dpi=110)
            plt.close(fig)
            made.append(name)
    return made


# ----------------------------------------------------------------------------------- README



def readme_summary(results_dir, link=None) -> str:
    """The README's short performance section, rendered from a results directory.

    ``link`` is how the README refers to that directory (default: ``results_dir`` as given); pass a
    repository-relative path so the rendered text does not depend on where the checkout lives.
    """
    d = Path(results_dir)
    link = Path(link).as_posix() if link is not None else d.as_posix()
    df, meta = read_results(d)
    env, ceil = meta.get("env", {}), meta.get("ceilings", {})
    bt = best_table(df)
    merged = f", merged from {len(meta['shards'])} shards" if meta.get("shards") else ""
    commit = env.get("git_commit") or "unrecorded"
    lines = [f"Measured on {env.get('gpu', '?')} ({env.get('date', '?')}, commit `{commit}`{merged}) "
             f"by `python -m numba_nbits.perf`; full tables: [`{link}/summary.md`]({link}/summary.md). "
             f"Ceilings in that run: copy {_fmt(_f(ceil.get('bw_tb_s')))} TB/s, fp16 GEMM "
             f"{_fmt(_f(ceil.get('tflops_float16')))} TFLOP/s.", ""]
    if not len(bt):
        return "\n".join(lines + ["(no measured cases)"]) + "\n"
    sel = bt[(bt["bits"] == 4) & (bt["dtype"] == "float16") & (bt["zp"] == "none")]
    if not len(sel):
        sel = bt
    block = 128 if (sel["block"] == 128).any() else int(sel["block"].min())
    sel = sel[sel["block"] == block]
    if sel["M"].isin(README_MS).any():
        sel = sel[sel["M"].isin(README_MS)]
    # What a default call gets: dispatch's own route (the row measured with no route forced), and each
    # peer's time over that route's time. A faster forced route shows only in its own labelled column.
    sel = sel.copy()
    peers = [c[3:] for c in _speed_cols(sel)]
    kernel = sel["auto_us_kernel"].notna().any()
    for name in peers:
        ours = sel["auto_us"]
        if kernel and _ort_route(name):  # kernel time against kernel time
            ours = sel["auto_us_kernel"].where(sel["auto_us_kernel"].notna(), sel["auto_us"])
        sel[f"vs {name}"] = sel[f"{name}_us"] / ours
    speed = [f"vs {n}" for n in peers if sel[f"vs {n}"].notna().any()]
    faster = sel["best_us"].notna() & sel["auto_us"].notna() & (sel["best_route"] != sel["auto_route"]) \
        & (sel["best_us"] < 0.98 * sel["auto_us"])
    sel["best forced route (us)"] = [f"{r['best_route']} ({_fmt(float(r['best_us']))})" if f else ""
                                     for f, (_, r) in zip(faster, sel.iterrows())]
    forced_measured = "forced" in df.columns and bool(df["forced"].fillna(False).astype(bool).any())
    last = ["best forced route (us)"] if forced_measured else []
    kcol = ["auto_us_kernel"] if kernel else []
    view = sel[["shape", "M", "auto_route", "auto_us"] + kcol + ["auto_pct_roofline"] + speed + last].rename(
        columns={"auto_route": "default route", "auto_us": "us", "auto_us_kernel": "kernel us",
                 "auto_pct_roofline": "% roofline"})
    kinds = {c: "x" for c in speed}
    kinds["% roofline"] = "%"
    b4 = sel.iloc[0]
    ref = (" (`ref:` = ONNX Runtime's CUDA kernels, measured earlier on the same GPU model, not in this run)"
           if any(n.startswith("vs ref:") for n in speed) else "")
    lines += [f"{b4['bits']}-bit, block {block}, {DTYPE_SHORT.get(b4['dtype'], b4['dtype'])}: what a default call "
              "gets — the route dispatch picks with no knob set, microseconds per call (CUDA graph, L2-cold), "
              f"and each peer's time over it{ref}. "
              + ("`kernel us` is the same call's kernels alone (CUPTI, L2 flushed before each call, launch gaps "
                 "excluded), the measure ONNX Runtime's columns use: its ratios are kernel time over kernel time. "
                 if kernel else "")
              + ("The last column names a route that only a knob or a forced route reaches, where it was more than "
                 "2% faster." if forced_measured else "Forced routes were not measured in this run."),
              "", md_table(view, kinds), ""]
    n_rows = int((df["kind"] != "reference").sum())
    n_bad = int(((df["kind"] == "ours") & ~_ok(df)).sum())
    n_peer_bad = int(((df["kind"] == "peer") & ~_ok(df)).sum())
    peers_bad = f" (and {n_peer_bad} peer rows outside the oracle's tolerance or failed: `–`)" if n_peer_bad else ""
    lines.append(f"{len(bt)} cases, {n_rows} measured rows, {n_bad} of ours wrong or failed{peers_bad}; "
                 f"{len(meta.get('skipped', []))} cases skipped.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m numba_nbits.perf.report", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--readme", metavar="DIR", help="print the README performance section rendered from DIR")
    g.add_argument("--summary", metavar="DIR", help="rewrite DIR/summary.md and the plots from DIR/results.csv")
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args(argv)
    if a.readme:
        print(readme_summary(a.readme), end="")
        return 0
    df, meta = read_results(a.summary)
    made = [] if a.no_plots else make_plots(df, a.summary)
    Path(a.summary, SUMMARY_NAME).write_text(summary_markdown(df, meta, plots=made))
    print(Path(a.summary, SUMMARY_NAME))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
