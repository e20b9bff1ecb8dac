"""Set aside this run's ``us_kernel`` of ``dequant_overlap`` calls (``us_kernel_summed.csv``) and redraw the summary.

This run summed the CUPTI durations of a call's kernels; ``dequant_overlap`` runs its dequantize kernels on a
second stream, overlapping cuBLAS, so the sum counted the overlapped time twice (1.2-1.6x the call's graph time,
where every single-stream route came out at 0.84-1.06x). ``numba_nbits/perf/ort_peer.kernel_us`` now takes the
union of the kernels' intervals. The other routes' kernel times stand (one stream: union = sum). Without a kernel
time the ORT ratios of those cases fall back to the graph time (``perf/report.py``). Run from the repository root:
``python benchmarks/results/2026-12-06-h100-router-readme/set_kernel_aside.py`` (idempotent).
"""
from pathlib import Path

import pandas as pd

from numba_nbits.perf.report import read_results, write_results

d = Path(__file__).resolve().parent
df, meta = read_results(d)
two_streams = (df["kind"] == "ours") & (df["route"] == "dequant_overlap") & df["us_kernel"].notna()
if two_streams.any():
    df.loc[two_streams].to_csv(d / "us_kernel_summed.csv", index=False)
    df.loc[two_streams, "us_kernel"] = pd.NA
note = ("us_kernel", "dequant_overlap's summed CUPTI durations (two streams, overlap counted twice) set aside in "
        "us_kernel_summed.csv; those cases' ORT ratios use the graph time")
if note not in [tuple(n) for n in meta.get("notes", [])]:
    meta.setdefault("notes", []).append(note)
write_results(d, df.to_dict("records"), meta, plots=True)
