"""What several benchmark scripts share: timing batches of back-to-back host calls, the ``$OUT`` CSV, the
``op(A, out=Y, stream=s)`` harness subject and the device-array kinds a host-path benchmark feeds the operator."""
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


class OpSubject:
    """``op(A, out=Y, stream=s)`` as a ``numba_nbits.perf.harness`` subject (one operand set, not rotated)."""

    copies = 1

    def __init__(self, op, A, Y):
        self.op, self.A, self.Y = op, A, Y

    def launch(self, i, stream):
        self.op(self.A, out=self.Y, stream=stream)


def array_kinds(sim: bool):
    """(kind, to_device(host array), empty(shape, NumPy dtype)) for each input kind that imports here: numba
    device arrays, and on a GPU torch (with CUDA) and CuPy."""
    import numpy as np
    from numba import cuda

    kinds = [("numba", lambda a: cuda.to_device(a), lambda shape, dt: cuda.device_array(shape, dt))]
    if sim:
        return kinds
    try:
        import torch

        if torch.cuda.is_available():
            tdt = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}
            kinds.append(("torch", lambda a: torch.from_numpy(a).cuda(),
                          lambda shape, dt: torch.empty(shape, dtype=tdt[np.dtype(dt)], device="cuda")))
    except ImportError:
        pass
    try:
        import cupy

        kinds.append(("cupy", lambda a: cupy.asarray(a), lambda shape, dt: cupy.empty(shape, dt)))
    except ImportError:
        pass
    return kinds



def torch_dense(backend, hw, M: int, l2_bytes: float, W_cache: dict):
    """The perf CLI's ``torch_dense`` peer (``numba_nbits.perf.peers.TorchDense``: fp16 / bf16 dense cuBLAS,
    ``F.linear`` on ``hw``'s weights dequantized by torch in A's dtype, timed through torch's own graphs) for M rows
    of ``hw`` (``perf.subjects.random_weights``), its A and W copies rotated past twice ``l2_bytes`` (at most 16).
    ``W_cache`` keeps the dequantized W across M. None on the simulator and where torch with CUDA does not import:
    the benchmarks then leave the dense rows out. Check it with ``.run_check(backend, A_host, range(M))``."""
    from numba_nbits.launch import simulated
    from numba_nbits.perf import peers
    from numba_nbits.perf.metrics import dense_bytes, rotation_copies

    torch = None if simulated() else peers.cuda_torch()
    if torch is None:
        return None
    b = dense_bytes(M, hw.N, hw.K, hw.dtype, hw.bias is not None)
    copies = rotation_copies(b.constant + b.A + b.Y, int(l2_bytes), max_copies=16)
    return peers.TorchDense(torch, backend, M, hw, copies, peers.dense_weights(torch, hw, W_cache))


def weight_copies(N: int, K: int, bits: int, block: int, l2_bytes: float, sim: bool) -> int:
    """Copies of an ``N x K`` node (``bits``-bit codes, one fp16 scale per ``block``) whose rotation exceeds twice
    ``l2_bytes`` (at most 16; one on the simulator): ``perf.metrics.rotation_copies`` of the weight bytes."""
    from numba_nbits.perf.metrics import rotation_copies

    return 1 if sim else rotation_copies(int(weight_bytes(N, K, bits, block)), int(l2_bytes), max_copies=16)


def weight_bytes(N: int, K: int, bits: int, block: int) -> float:
    """Bytes a call reads of an ``N x K`` node's codes and fp16 scales."""
    return N * K * bits / 8 + N * (K // block) * 2


class SubjectTimer:
    """Microseconds per call of a ``numba_nbits.perf.harness`` subject: graph replay where the harness captured
    one, else the events median; on the simulator one launch and NaN. ``last`` keeps the last measurement's
    eager (events) and host microseconds per call (host: NaN unless ``host``)."""

    def __init__(self, backend, sim: bool, host: bool = False):
        self.backend, self.sim, self.host = backend, sim, host
        self.last: dict = {}

    def __call__(self, subject) -> float:
        from numba_nbits.perf import harness

        nan = float("nan")
        if self.sim:
            subject.launch(0, 0)
            self.last = dict(eager_us=nan, host_us=nan)
            return nan
        r = harness.measure(self.backend, subject, host=self.host)
        self.last = dict(eager_us=r["us_p50"], host_us=r["host_us"])
        return r["us_graph"] if r["us_graph"] == r["us_graph"] else r["us_p50"]

    def calls(self, fns) -> float:
        """Microseconds per call of ``fns`` (one ``fn(stream)`` per rotated copy)."""
        from numba_nbits.perf import harness

        return self(harness.Rotation(lambda i, s: fns[i % len(fns)](s), len(fns)))
