"""Merge shard result directories into one report: ``python -m numba_nbits.perf merge DIR [DIR ...] --out DIR``.

Each DIR is the output of one ``python -m numba_nbits.perf --shard I/N`` run (or of any other run of
the suite). The merge

* concatenates the shards' results.csv into one tidy frame (column ``shard`` says which shard each
  row came from, ``git_commit`` which commit), shards of one partition ordered by plan position
  (``case_index``) so the tables read as one run's would; a shard killed before it finished is read from its
  ``results.partial.csv`` (with a warning);
* refuses shards from different GPUs (``MergeError``);
* warns, in summary.md's "Merge warnings" and in meta.json's ``merge_warnings``, never silently,
  when commits, library versions or the measured ceilings (spread over ``CEILING_TOL``) differ
  between shards, when a shard of 1..N is missing or repeated, or when a case was measured twice;
* with ``--supersede`` (inputs in the order given, oldest first), lets a later input's measurement of a
  case replace every row (ours and peers) of that case from earlier inputs: how a report is updated
  after a kernel change re-measured part of it (a warning counts the replaced cases);
* re-derives summary.md (best route per case, peers, misses, skipped cases of every shard, a
  ``shard`` column and a "Shards" table with each shard's commit, date, ceilings and versions) and
  the plots, and writes meta.json with ``shards`` (one entry per input) and the combined skips.

Rows keep the derived columns (``pct_bw``, ``pct_roofline``) computed against their own shard's
ceilings; meta's ``ceilings`` is the per-key median over shards (each shard's own in ``shards``).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

import pandas as pd

from .report import CASE, CSV_NAME, META_NAME, SUMMARY_NAME, make_plots, summary_markdown, to_frame
from .shapes import case_key

PARTIAL_NAME = "results.partial.csv"
CEILING_TOL = 0.05  # relative spread (max - min) / median above which differing ceilings are reported
VERSION_KEYS = ("numba_cuda", "cuda_core", "torch", "driver")
_SHARD_SUFFIX = re.compile(r"-shard\d+of\d+$")


class MergeError(ValueError):
    """The directories cannot be merged (different GPUs, nothing to read)."""


def _read(d: Path, warnings: list[str]) -> tuple[pd.DataFrame, dict]:
    meta = json.loads((d / META_NAME).read_text()) if (d / META_NAME).exists() else {}
    if (d / CSV_NAME).exists():
        src = d / CSV_NAME
    elif (d / PARTIAL_NAME).exists():
        src = d / PARTIAL_NAME
        warnings.append(f"{d.name}: no {CSV_NAME}, read {PARTIAL_NAME} (the run was interrupted: the cases it "
                        "did not reach are missing and not listed as skipped)")
    else:
        raise MergeError(f"{d}: neither {CSV_NAME} nor {PARTIAL_NAME}: not a results directory")
    df = to_frame(pd.read_csv(src, keep_default_na=True).to_dict("records"))
    if not meta.get("env") and len(df):  # an interrupted run: recover the environment from its rows
        first = df[df["kind"] != "reference"].head(1)
        if len(first):
            meta["env"] = {k: ("" if pd.isna(v) else v) for k, v in first.iloc[0][
                ["gpu", "sm_count", "driver", "numba_cuda", "cuda_core", "torch", "git_commit", "date"]].items()}
    return df, meta


def _label(d: Path, meta: dict) -> str:
    sh = meta.get("shard") or {}
    return sh.get("label") or (f"{sh['index']}/{sh['count']}" if "index" in sh and "count" in sh else d.name)


def _gpu(df: pd.DataFrame, meta: dict) -> set:
    gpus = {str(g) for g in df.loc[df["kind"] != "reference", "gpu"].dropna().unique() if str(g)}
    g = (meta.get("env") or {}).get("gpu")
    if g:
        gpus.add(str(g))
    return gpus


def _distinct(values) -> list:
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def merge_frames(dirs, *, supersede: bool = False) -> tuple[pd.DataFrame, dict]:
    """The merged frame and meta of ``dirs`` (pure: reads, writes nothing); ``supersede``: see the module doc."""
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise MergeError("merge needs at least one results directory")
    warnings: list[str] = []
    loaded = []
    for d in dirs:
        df, meta = _read(d, warnings)
        loaded.append((d, df, meta, _label(d, meta)))
    # shards in index order when every input is a shard, else in the order given
    if all("index" in (m.get("shard") or {}) for _, _, m, _ in loaded):
        loaded.sort(key=lambda t: (t[2]["shard"]["count"], t[2]["shard"]["index"]))

    gpus = {lab: _gpu(df, meta) for _, df, meta, lab in loaded}
    all_gpus = set().union(*gpus.values())
    if len(all_gpus) > 1:
        detail = "; ".join(f"{lab}: {', '.join(sorted(g)) or '?'}" for lab, g in gpus.items())
        raise MergeError(f"shards come from different GPUs ({detail}); merge only runs of one GPU model")

    labels = [lab for _, _, _, lab in loaded]
    for lab in _distinct(labels):
        if labels.count(lab) > 1:
            warnings.append(f"shard {lab} given {labels.count(lab)} times")
    counts = _distinct((m.get("shard") or {}).get("count") for _, _, m, _ in loaded)
    counts = [c for c in counts if c is not None]
    if len(counts) > 1:
        warnings.append(f"shards of different partitions (N = {', '.join(map(str, counts))}): cases may be "
                        "missing or repeated")
    elif counts:
        have = {(m.get("shard") or {}).get("index") for _, _, m, _ in loaded}
        missing = [f"{i}/{counts[0]}" for i in range(1, counts[0] + 1) if i not in have]
        if missing:
            warnings.append(f"shard(s) {', '.join(missing)} not given: their cases are not measured (and not "
                            "listed as skipped)")

    envs = [(lab, m.get("env") or {}) for _, _, m, lab in loaded]
    commits = _distinct(e.get("git_commit") or "unrecorded" for _, e in envs)
    if len(commits) > 1:
        warnings.append("shards come from different commits: " + "; ".join(
            f"{lab}: `{e.get('git_commit') or 'unrecorded'}`" for lab, e in envs))
    for k in VERSION_KEYS:
        vals = _distinct(str(e.get(k, "")) for _, e in envs)
        if len(vals) > 1:
            warnings.append(f"{k} differs between shards: " + "; ".join(f"{lab}: {e.get(k, '') or '?'}"
                                                                         for lab, e in envs))
    ceilings = [(lab, m.get("ceilings") or {}) for _, _, m, lab in loaded]
    merged_ceil: dict = {}
    for k in _distinct(k for _, c in ceilings for k in c):
        nums = [(lab, c[k]) for lab, c in ceilings if isinstance(c.get(k), (int, float)) and c[k] == c[k]]
        if nums:
            vals = [v for _, v in nums]
            med = statistics.median(vals)
            merged_ceil[k] = med
            if med and (max(vals) - min(vals)) / abs(med) > CEILING_TOL:
                warnings.append(f"ceiling {k} differs between shards by more than {CEILING_TOL:.0%}: "
                                + "; ".join(f"{lab}: {v:.4g}" for lab, v in nums))
        else:
            merged_ceil[k] = " / ".join(_distinct(str(c[k]) for _, c in ceilings if c.get(k) not in (None, "")))

    if supersede:  # newest input first: ``later`` holds the cases of the inputs after the current one
        replaced, later = 0, set()
        for i in reversed(range(len(loaded))):
            d, df, meta, lab = loaded[i]
            keys = [None if kind == "reference" else case_key(r)
                    for kind, r in zip(df["kind"], df.to_dict("records"))]
            gone = pd.Series([k is not None and k in later for k in keys], index=df.index, dtype=bool)
            if gone.any():
                replaced += len({k for k, g in zip(keys, gone) if g})
                loaded[i] = (d, df[~gone], meta, lab)
            later.update(k for k in keys if k is not None)
        if replaced:
            warnings.append(f"{replaced} case(s) re-measured by a later input replace the earlier rows (--supersede)")
    frames = []
    for _, df, _, lab in loaded:
        df = df.copy()
        df["shard"] = lab
        frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else to_frame([])
    df = to_frame(df.to_dict("records"))
    if len(counts) == 1 and all("index" in (m.get("shard") or {}) for _, _, m, _ in loaded):
        # shards of one plan: back to plan order, reference rows last, as one run writes them
        # (other inputs, whose case_index belong to different plans, stay in the order given)
        order = pd.DataFrame({"ref": df["kind"] == "reference",
                              "idx": pd.to_numeric(df["case_index"], errors="coerce").fillna(math.inf)})
        df = df.loc[order.sort_values(["ref", "idx"], kind="mergesort").index].reset_index(drop=True)
    measured = df[df["kind"] == "ours"].drop_duplicates(CASE + ["shard"])
    dup = measured[measured.duplicated(CASE, keep=False)]
    if len(dup):
        cases = dup.drop_duplicates(CASE)
        warnings.append(f"{len(cases)} case(s) measured in more than one shard (e.g. {cases.iloc[0]['shape']} "
                        f"M={cases.iloc[0]['M']}): the best route is taken over all their rows")

    first = loaded[0][2]
    env = dict(first.get("env") or {})
    if len(commits) > 1:
        env["git_commit"] = ", ".join(commits)
    dates = _distinct(e.get("date", "") for _, e in envs)
    if len(dates) > 1:
        env["date"] = f"{min(dates)} .. {max(dates)}"
    skipped, notes = [], []
    done = {case_key(r) for r in measured.to_dict("records")}
    for _, _, m, lab in loaded:
        skipped += [{**s, "shard": lab} for s in m.get("skipped", [])]
    later = [s for s in skipped if case_key(s) in done]
    if later:  # e.g. a run with --missing-from finished what an earlier run's budget skipped
        skipped = [s for s in skipped if case_key(s) not in done]
        warnings.append(f"{len(later)} case(s) skipped by one input were measured by another (not listed as "
                        "skipped)")
    # a case skipped by an earlier run and again by the --missing-from run that retried it is one case:
    # keep the last input's entry (its reason is the current one)
    last = {}
    for s in skipped:
        last[case_key(s)] = s
    if len(last) < len(skipped):
        warnings.append(f"{len(skipped) - len(last)} skipped case(s) were skipped by more than one input "
                        "(listed once, with the last input's reason)")
        skipped = list(last.values())
    for _, _, m, lab in loaded:
        for n in m.get("notes", []):
            if list(n) not in notes:
                notes.append(list(n))
    shards = []
    for d, sdf, m, lab in loaded:
        e = m.get("env") or {}
        shards.append({"shard": lab, "dir": d.name, "path": str(d), "git_commit": e.get("git_commit", ""),
                       "date": e.get("date", ""), "gpu": e.get("gpu", ""),
                       "versions": {k: e.get(k, "") for k in VERSION_KEYS},
                       "cases": int(len(sdf[sdf["kind"] == "ours"].drop_duplicates(CASE))),
                       "rows": int((sdf["kind"] != "reference").sum()), "skipped": len(m.get("skipped", [])),
                       "wall_s": m.get("wall_s"), "ceilings": m.get("ceilings") or {}, "plan": m.get("shard")})
    meta = {"env": env, "ceilings": merged_ceil, "skipped": skipped, "notes": notes,
            "graph_api": " / ".join(_distinct(str(m.get("graph_api", "?")) for _, _, m, _ in loaded)),
            "options": first.get("options", {}), "ort_cuda": any(m.get("ort_cuda") for _, _, m, _ in loaded),
            "wall_s": sum(float(m.get("wall_s") or 0) for _, _, m, _ in loaded),
            "shards": shards, "merge_warnings": warnings}
    return df, meta


def default_out(dirs) -> Path:
    """``<parent>/<name without -shardIofN>`` when every input names the same run; else MergeError."""
    dirs = [Path(d) for d in dirs]
    names = {_SHARD_SUFFIX.sub("", d.name) for d in dirs}
    if len(names) != 1 or any(not _SHARD_SUFFIX.search(d.name) for d in dirs):
        raise MergeError("give --out DIR (the inputs are not shards of one run named <name>-shard<I>of<N>)")
    return dirs[0].parent / names.pop()


def merge(dirs, out_dir=None, *, plots: bool = True, supersede: bool = False) -> tuple[pd.DataFrame, dict]:
    """Merge ``dirs`` into ``out_dir``: results.csv, meta.json, summary.md and the plots."""
    out = Path(out_dir) if out_dir is not None else default_out(dirs)
    if any(out.resolve() == Path(d).resolve() for d in dirs):
        raise MergeError(f"--out {out} is one of the inputs")
    df, meta = merge_frames(dirs, supersede=supersede)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / CSV_NAME, index=False)
    made = []
    if plots:
        try:
            made = make_plots(df, out)
        except Exception as e:  # noqa: BLE001 - a plot problem must not lose the numbers
            meta["notes"].append(["plots", f"{type(e).__name__}: {e}"])
    (out / META_NAME).write_text(json.dumps(meta, indent=1, default=str))
    (out / SUMMARY_NAME).write_text(summary_markdown(df, meta, plots=made))
    return df, meta


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m numba_nbits.perf merge", description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="shard result directories")
    p.add_argument("--out", type=Path, help="merged directory (default: the shards' name without -shard<I>of<N>)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--supersede", action="store_true",
                   help="a case measured by a later DIR replaces its rows from earlier DIRs (give DIRs oldest first)")
    a = p.parse_args(argv)
    try:
        df, meta = merge(a.dirs, a.out, plots=not a.no_plots, supersede=a.supersede)
    except MergeError as e:
        p.exit(2, f"{p.prog}: error: {e}\n")
    out = a.out or default_out(a.dirs)
    for w in meta["merge_warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"merged {len(a.dirs)} directories, {len(df)} rows: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
