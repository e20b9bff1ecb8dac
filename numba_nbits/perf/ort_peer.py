"""ONNX Runtime's CUDA MatMulNBits as a peer of the perf suite: its kernels' time, by CUPTI, in the same run.

Two peers per case, the two ways ORT's CUDA EP runs the node (the spec's default chain and its fpA_intB
path):

* ``ort_default``: ORT's normal dispatch (M = 1 GEMV, small-M batched GEMV, the router GEMV, else
  dequantize + cuBLAS);
* ``ort_fpA_intB``: the same with ``ORT_FPA_INTB_GEMM=1`` set while the session is built and run (ORT's
  CUTLASS / TRT-LLM fpA_intB GEMM and GEMV where its build covers the case, else its default chain).

Each runs a one-node ``com.microsoft::MatMulNBits`` model (``matmulnbits_model``: B, scales, zero points and
bias as initializers) through IO binding on our device buffers. ORT launches on its own stream with host work
between nodes, so events on a stream would time its host path; instead the GPU time of ORT's kernels per run is
read from CUPTI (``torch.profiler``'s CUDA activity, which records every kernel of the process): the union of
their intervals (overlapping kernels once, gaps between them not at all; ``kernel_us``). Before each timed run the
L2 is flushed by *reading* a buffer of twice its size (a torch reduction: clean lines, so the kernels evict without
writing back; a memset there instead leaves the L2 dirty, and ORT's M <= 16 times came out 1.02-2.1x those of the
reference table measured by rotation on the same GPU model: ``benchmarks/results/2026-12-06-h200-readme/``), so
the weights come from DRAM, as in our rotated graph replays. The flush's own kernel (ATen's, ``at::native``),
memsets and copies are not counted. The result is kernel time per node, without launch gaps; the default call of
ours is timed the same way (``kernel_time_of_ours``: ``us_kernel``) and ORT's ratios are taken over that.
Without torch's CUDA profiler the peers are skipped with a note (and a run on an H200 adds ORT's reference rows).
"""
from __future__ import annotations

import contextlib
import os
from typing import Optional

import numpy as np

from .metrics import nbits_bytes

#: ORT's switch for its fpA_intB path (``ORT_FPA_INTB_GEMM``), set for the ``ort_fpA_intB`` peer only
FPA_INTB_ENV = "ORT_FPA_INTB_GEMM"
MODES = {"ort_default": {}, "ort_fpA_intB": {FPA_INTB_ENV: "1"}}
WARMUP_RUNS = 3  # the first run of an fpA_intB session profiles its tactics
SAMPLES = 3  # profiler sessions per peer; each times RUNS_PER_SAMPLE runs
RUNS_PER_SAMPLE = 6
_NOT_ORT = ("Memset", "Memcpy")  # CUPTI activities that are copies, not ORT's kernels
_FLUSH_KERNEL = ("at::native::", "_ZN2at6native")  # the flush's reduction (ATen, demangled or not); never ORT's


def ort_cuda_available() -> bool:
    try:
        import onnxruntime as ort

        return "CUDAExecutionProvider" in ort.get_available_providers()
    except Exception:  # noqa: BLE001
        return False


def matmulnbits_model(w, *, opset: int = 21) -> bytes:
    """A one-node ``com.microsoft::MatMulNBits`` model (B, scales, zp, bias as initializers)."""
    from onnx import TensorProto, helper, numpy_helper

    elem = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "bfloat16": TensorProto.BFLOAT16}[w.dtype]
    inits = [numpy_helper.from_array(w.B, "B"), _tensor(w.scales.reshape(-1), "scales", elem)]
    inputs = ["A", "B", "scales"]
    if w.zero_points is not None:
        inits.append(numpy_helper.from_array(w.zero_points.reshape(-1), "zero_points"))
        inputs.append("zero_points")
    if w.bias is not None:
        inputs += ["", "bias"] if w.zero_points is not None else ["", "", "bias"]
        inits.append(_tensor(w.bias, "bias", elem))
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=w.K, N=w.N, bits=w.bits,
                            block_size=w.block)
    graph = helper.make_graph([node], "mnb", [helper.make_tensor_value_info("A", elem, ["M", w.K])],
                              [helper.make_tensor_value_info("Y", elem, ["M", w.N])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = min(model.ir_version, 10)
    return model.SerializeToString()


def _tensor(a, name, elem):
    from onnx import helper

    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        return helper.make_tensor(name, elem, a.shape, a.view(np.uint16).tobytes(), raw=True)
    from onnx import numpy_helper

    return numpy_helper.from_array(a, name)


@contextlib.contextmanager
def environ(values: dict):
    """``os.environ`` with ``values`` set, restored on exit."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def kernel_us(events) -> float:
    """GPU time (us) covered by the kernels among profiler device events ``(name, start_us, duration_us)``: every
    CUDA activity except memsets, copies and the flush's ATen reduction, as the union of their intervals, so
    kernels that overlap on two streams (``dequant_overlap``) count once and the gaps between kernels not at all
    (summing durations counted overlapped kernels twice: 1.2-1.6x a ``dequant_overlap`` call's graph time,
    H100 2026-12-06)."""
    spans = sorted((float(t0), float(t0) + float(us)) for name, t0, us in events
                   if not str(name).startswith(_NOT_ORT) and not any(f in str(name) for f in _FLUSH_KERNEL))
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def cupti_events(run) -> list:
    """``run()`` under ``torch.profiler`` (CUDA activity only): the device events as ``(name, start_us, us)``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
    return [(e.name(), e.start_ns() / 1e3, e.duration_ns() / 1e3) for e in prof.profiler.kineto_results.events()
            if e.device_type() == DeviceType.CUDA]


def cupti_available() -> Optional[str]:
    """None when torch's CUDA profiler can be used here, else why not."""
    try:
        import torch
        from torch.profiler import ProfilerActivity

        if not torch.cuda.is_available() or ProfilerActivity.CUDA not in torch.profiler.supported_activities():
            return "torch's CUDA profiler (CUPTI) not available"
        return None
    except Exception as e:  # noqa: BLE001
        return f"torch's CUDA profiler not importable: {type(e).__name__}"


_FLUSH: dict = {}  # the process's one L2-flush buffer ("t": tensor, "nbytes": its size)


def _alloc_flush(nbytes: int):
    import torch

    return torch.zeros(max(2, nbytes) // 2, dtype=torch.float16, device="cuda")


def flush_buffer(nbytes: int):
    """The process's L2-flush buffer of at least ``nbytes`` (a torch fp16 tensor), made once and shared by every
    peer and case; a larger request replaces it."""
    nbytes = int(nbytes)
    if _FLUSH.get("nbytes", -1) < nbytes:
        _FLUSH.clear()  # free the smaller one first
        _FLUSH.update(t=_alloc_flush(nbytes), nbytes=nbytes)
    return _FLUSH["t"]


class OrtCuda:
    """One ORT mode (``MODES``) on one problem: built, checked and timed through IO binding."""

    kind = "peer"
    forced = False
    copies = 1

    def __init__(self, backend, M: int, w, acts, route: str, flush_bytes: int):
        import onnxruntime as ort

        self.route, self.env = route, MODES[route]
        self.acts = acts
        self.np_dt = np.float16 if w.dtype == "float16" else np.float32
        with environ(self.env):
            self.sess = ort.InferenceSession(matmulnbits_model(w), providers=["CUDAExecutionProvider"])
        self.io = self.sess.io_binding()
        a, y = acts.A[0], acts.Y[0]
        self.io.bind_input("A", "cuda", 0, self.np_dt, [M, w.K], a.ptr)
        self.io.bind_output("Y", "cuda", 0, self.np_dt, [M, w.N], y.ptr)
        self.nbytes = nbits_bytes(M, w.N, w.K, w.bits, w.block, w.dtype, w.zp, w.bias is not None).total
        self._flush = flush_buffer(flush_bytes)

    def _run(self):
        with environ(self.env):
            self.sess.run_with_iobinding(self.io)

    def run_check(self, backend, A_host, rows):
        backend.upload(self.acts.A[0], A_host)
        backend.poison(self.acts.Y[0])
        backend.sync()
        self._run()
        return backend.rows(self.acts.Y[0], rows)

    def time(self, backend) -> dict:
        for _ in range(WARMUP_RUNS):
            self._run()
        out = kernel_time(self._run, backend.d.cuCtxSynchronize, self._flush)
        return {**out, "us_kernel": out["us_p50"], "timing": "cupti",
                "graph_note": "ORT: kernel time per node by CUPTI (launch gaps excluded), L2 flushed before each "
                              f"run; median of {SAMPLES} means"}


def kernel_time(run, sync, flush) -> dict:
    """GPU time (us) of the kernels one ``run()`` launches, by CUPTI: ``SAMPLES`` profiler sessions of
    ``RUNS_PER_SAMPLE`` runs, each run after ``flush.sum()`` (the L2 evicted by reading) with ``sync()`` around
    it; the flush's own kernel, memsets and copies not counted. (p20, p50, p80) of the per-run means as
    ``us_p20/us_p50/us_p80``. The same measure for ORT's node and for a default call of ours."""

    def runs():
        for _ in range(RUNS_PER_SAMPLE):
            flush.sum()  # evict the L2 by reading (clean lines)
            sync()
            run()
            sync()  # whatever stream run() used

    sync()
    samples = []
    for _ in range(SAMPLES):
        us = kernel_us(cupti_events(runs))
        if not us > 0:
            raise RuntimeError("CUPTI recorded no kernel of the timed call")
        samples.append(us / RUNS_PER_SAMPLE)
    from .metrics import quantiles

    p20, p50, p80 = quantiles(samples)
    return {"us_p20": p20, "us_p50": p50, "us_p80": p80, "n_batch": RUNS_PER_SAMPLE, "samples": SAMPLES}


def kernel_time_of_ours(backend, subject, flush_bytes: int) -> dict:
    """``us_kernel``: the kernels of one call of ``subject`` (copy 0), timed as ORT's node is (``kernel_time``);
    ``{}`` where CUPTI cannot be used (the simulator, no torch profiler)."""
    if getattr(backend, "simulated", True) or cupti_available() is not None:
        return {}
    subject.launch(0, backend.stream)
    out = kernel_time(lambda: subject.launch(0, backend.stream), backend.d.cuCtxSynchronize,
                      flush_buffer(flush_bytes))
    return {"us_kernel": out["us_p50"]}


def ort_subjects(backend, M, w, acts, notes: list, flush_bytes: int) -> list:
    """The ORT peers this problem can have (``MODES``), each skipped with a note when it cannot run."""
    if not ort_cuda_available():
        notes.append(("ort_cuda", "onnxruntime CUDAExecutionProvider not available; reference rows added instead (on an H200)"))
        return []
    why = cupti_available()
    if why:
        notes.append(("ort_cuda", f"{why}: ORT's kernels cannot be timed; reference rows added instead (on an H200)"))
        return []
    if w.dtype == "bfloat16":
        notes.append(("ort_cuda", "bf16 IO binding not attempted"))
        return []
    out = []
    for route in MODES:
        try:
            out.append(OrtCuda(backend, M, w, acts, route, flush_bytes))
        except Exception as e:  # noqa: BLE001
            notes.append((route, f"setup failed: {type(e).__name__}: {e}"[:300]))
    return out
