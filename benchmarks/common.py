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


class TorchDense:
    """fp16 / bf16 dense cuBLAS as torch runs it, the baseline of the GEMM benchmarks: ``torch.matmul`` of the
    activations with the operator's weights dequantized (``numba_nbits.reference.dequantize_ref``) to the
    activations' dtype. Holds enough device copies of W (N x K) to rotate past twice ``l2_bytes`` (at most 16).

    ``TorchDense.of(...)`` is None where torch with CUDA does not import (and on the simulator): the benchmarks
    then leave the dense rows out."""

    def __init__(self, torch, W, dtype: str, l2_bytes: float):
        import math

        self.torch, self.dtype = torch, dtype
        self.tdt = torch.bfloat16 if dtype == "bfloat16" else torch.float16
        N, K = W.shape
        copies = max(1, min(16, math.ceil(2 * l2_bytes / (N * K * 2))))
        self.weights = [torch.from_numpy(W).to(device="cuda", dtype=self.tdt) for _ in range(copies)]

    @classmethod
    def of(cls, hw, *, bits: int, block_size: int, K: int, N: int, dtype: str, l2_bytes: float, sim: bool):
        """The dense baseline of ``hw`` (``perf.subjects.random_weights``' bytes), or None without torch + CUDA."""
        if sim:
            return None
        try:
            import torch
        except Exception:  # noqa: BLE001 - torch is an optional extra; any import failure means no baseline
            return None
        if not torch.cuda.is_available():
            return None
        import numpy as np

        from numba_nbits.reference import dequantize_ref

        W = dequantize_ref(hw.B, hw.scales, None, bits=bits, block_size=block_size, K=K, N=N).astype(np.float32)
        return cls(torch, W, dtype, l2_bytes)

    def launches(self, a_host):
        """For activations ``a_host`` (M x K, NumPy fp16 or ml_dtypes bf16): (fns, Y) where ``fns[i](stream)``
        computes Y = A @ W_i^T on ``stream`` (a CUDA stream handle; 0 the legacy default) and Y is float64
        NumPy of one such call, run here and synchronized."""
        import numpy as np

        torch = self.torch
        av = a_host.view(np.int16) if self.dtype == "bfloat16" else a_host
        at = torch.from_numpy(av).cuda().view(self.tdt)
        yt = torch.empty((a_host.shape[0], self.weights[0].shape[0]), dtype=self.tdt, device="cuda")

        def dense(s, w):
            with torch.cuda.stream(torch.cuda.ExternalStream(int(s) if s else 0)):
                torch.matmul(at, w.t(), out=yt)

        dense(0, self.weights[0])
        torch.cuda.synchronize()
        y = yt.float().cpu().numpy().astype(np.float64)
        return [lambda s, w=w: dense(s, w) for w in self.weights], y
