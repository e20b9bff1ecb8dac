"""What several benchmark scripts share: timing batches of back-to-back host calls, and the ``$OUT`` CSV."""
from __future__ import annotations

import csv
import os
import time


def batch_times_us(fn, calls: int, batches: int, sync, warmup: int) -> list[float]:
    """``warmup`` calls of ``fn``, then ``batches`` batches of ``calls`` back-to-back calls: host microseconds
    per call of each batch. ``sync()`` runs after the warm-up and after each batch, outside the timing."""
    for _ in range(warmup):
        fn()
    sync()
    per = []
    for _ in range(batches):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
        sync()
    return per


def write_out_csv(name: str, fields, rows) -> str | None:
    """Write ``rows`` (dicts with ``fields``) to ``$OUT/name`` when ``OUT`` is set; the path, or None."""
    out = os.environ.get("OUT")
    if not out:
        return None
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    return path
