"""Set this run's measured ORT rows aside (``ort_memset_flush.csv``) and put ORT's reference rows in their place.

The run timed ORT's kernels after a memset-based L2 flush, which leaves the L2 dirty: its M <= 16 times came out
1.02-2.1x those of the reference table (ORT 1.31.1, same GPU model, measured by rotation), a bias in our favour.
``numba_nbits/perf/ort_peer.py`` now flushes by reading; until a run with it exists, this directory shows the
reference rows, as ``python -m numba_nbits.perf`` does when ORT's CUDA EP is absent. Run from the repository root:
``python benchmarks/results/2026-12-06-h200-readme/set_ort_aside.py`` (idempotent from the run's own files).
"""
from pathlib import Path

from numba_nbits.perf.report import read_results, to_frame, write_results
from numba_nbits.perf.runner import reference_rows_for

d = Path(__file__).resolve().parent
df, meta = read_results(d)
ort = (df["kind"] == "peer") & df["route"].astype(str).str.startswith("ort_")
if ort.any():
    to_frame(df[ort].to_dict("records")).to_csv(d / "ort_memset_flush.csv", index=False)
rows = df[~ort & (df["kind"] != "reference")].to_dict("records")
rows += reference_rows_for(rows)
note = ("ort_cuda", "ORT's rows of this run (memset L2 flush: biased against ORT) are in ort_memset_flush.csv; "
        "reference rows shown instead")
meta["ort_cuda"] = False
if note not in [tuple(n) for n in meta.get("notes", [])]:
    meta.setdefault("notes", []).append(note)
write_results(d, rows, meta, plots=True)
