"""Timing: CUDA events around batches of eager calls, CUDA-graph replay, host time per call.

Two backends share one interface:

* ``CudaBackend``: the real GPU through ``cuda.bindings.driver`` (events, memset, copies) and
  ``cuda.core`` (stream, graph capture through ``Device().create_graph_builder()``, whose builder
  is passed to the operator as ``stream=``; stream capture through the driver when cuda.core's
  graph API is missing or fails). Buffers are numba device allocations exposed through
  ``__cuda_array_interface__`` (bf16 as ``<V2`` plus a ``dtype`` attribute).
* ``SimBackend``: numba's CUDA simulator (NumPy buffers, host clock, no graphs), so that the whole
  suite can be exercised without a GPU; its numbers mean nothing.

``measure`` times one *subject* (an object with ``launch(i, stream)`` for call ``i`` of a rotation
over ``copies`` operand sets, and optionally ``capture(n)``; ``Rotation`` makes one from a function):
warm-up, a timed pass to size the batches (``estimate_us``), then eager batches between two events
(``events_us``: median / p20 / p80 of the per-call time), graph replays of the same batch
(``graph_us``), and host time per eager call (``perf_counter`` around many calls, then one
synchronize, outside the timed region; the timed pass repeats an untimed pass of the same calls).
Subjects rotate over operand copies, so that host time is wall time per call over many operators,
bounded below by the GPU time per call when the queue fills. The benchmark scripts under
``benchmarks/`` time through the same three functions.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .metrics import quantiles

NAN = float("nan")


def _drv():
    from cuda.bindings import driver

    return driver


def _check(result, what: str):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed with CUDA error {int(err)} ({err})")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


class Buffer:
    """A typed device buffer: ``obj`` is what an operator receives, ``ptr`` its address."""

    def __init__(self, obj, ptr: int, shape: tuple, dtype: np.dtype, owner=None):
        self.obj = obj
        self.ptr = int(ptr)
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.owner = owner

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.shape)) * self.dtype.itemsize


class _CAI:
    """Raw device memory as a CUDA array (what the operator sees as A or out)."""

    __slots__ = ("_cai", "dtype", "shape", "_owner")

    def __init__(self, ptr: int, shape: tuple, dtype: np.dtype, owner):
        typestr = "<V2" if dtype.name == "bfloat16" else dtype.str
        self._cai = {"shape": tuple(shape), "typestr": typestr, "data": (int(ptr), False), "version": 3,
                     "strides": None}
        self.dtype = dtype
        self.shape = tuple(shape)
        self._owner = owner

    @property
    def __cuda_array_interface__(self):
        return self._cai


# ------------------------------------------------------------------------------------- backends

class SimBackend:
    """numba's CUDA simulator: synchronous, host clock, no graphs (exercises the code paths only)."""

    simulated = True
    graph_api = "none (simulator)"
    l2_bytes = 0

    def __init__(self):
        self.stream = 0

    def alloc(self, shape, dtype) -> Buffer:
        a = np.empty(tuple(shape), np.dtype(dtype))
        return Buffer(a, 0, a.shape, a.dtype, a)

    def upload(self, buf: Buffer, host: np.ndarray) -> None:
        buf.owner[...] = np.asarray(host).reshape(buf.shape).astype(buf.dtype, copy=False)

    def poison(self, buf: Buffer) -> None:
        buf.owner.view(np.uint8)[...] = 0xFF

    def rows(self, buf: Buffer, rows) -> np.ndarray:
        return np.array(buf.owner.reshape(buf.shape[0], -1)[np.asarray(rows)], copy=True)

    def sync(self) -> None:
        pass

    def record(self):
        return time.perf_counter()

    def elapsed_ms(self, start, end) -> float:
        return (end - start) * 1e3

    def capture(self, issue: Callable[[Any], None]):
        raise NotImplementedError("no CUDA graphs on the simulator")

    def close(self) -> None:
        pass


class CudaBackend:
    """The real device (see the module docstring)."""

    simulated = False

    def __init__(self, device_id: int = 0):
        from numba import cuda

        cuda.select_device(device_id)
        cuda.current_context()  # the primary context, shared with cuda.core and torch
        self.d = _drv()
        self.device_id = device_id
        self._core_dev = None
        self._core_stream = None
        self.graph_api = "driver stream capture"
        try:
            try:
                from cuda.core import Device
            except ImportError:  # cuda.core < 0.3
                from cuda.core.experimental import Device
            dev = Device(device_id)
            dev.set_current()
            self._core_dev = dev
            self._core_stream = dev.create_stream()
            self.stream = int(self._core_stream.handle)
            if hasattr(dev, "create_graph_builder"):
                self.graph_api = "cuda.core GraphBuilder"
        except Exception as e:  # noqa: BLE001 - any cuda.core problem falls back to the driver
            self.core_error = f"{type(e).__name__}: {e}"
            self.stream = int(_check(self.d.cuStreamCreate(1), "cuStreamCreate"))  # CU_STREAM_NON_BLOCKING
        self._cs = self.d.CUstream(self.stream)
        self._graph_failures: list[str] = []
        attr = self.d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
        self.l2_bytes = int(_check(self.d.cuDeviceGetAttribute(attr, self.d.CUdevice(device_id)),
                                   "cuDeviceGetAttribute"))

    # -- memory ------------------------------------------------------------------------------
    def alloc(self, shape, dtype) -> Buffer:
        from numba import cuda

        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        raw = cuda.device_array(max(int(math.prod(shape)) * dtype.itemsize, 1), np.uint8)
        ptr = raw.__cuda_array_interface__["data"][0]
        return Buffer(_CAI(ptr, shape, dtype, raw), ptr, shape, dtype, raw)

    def upload(self, buf: Buffer, host: np.ndarray) -> None:
        h = np.ascontiguousarray(np.asarray(host).reshape(buf.shape).astype(buf.dtype, copy=False))
        if h.nbytes:
            d = self.d
            _check(d.cuMemcpyHtoDAsync(d.CUdeviceptr(buf.ptr), h.ctypes.data, h.nbytes, self._cs),
                   "cuMemcpyHtoDAsync")
        self.sync()  # h must outlive the copy

    def poison(self, buf: Buffer) -> None:
        """Fill with 0xFF bytes: NaN in fp16, bf16 and fp32, so an unwritten element shows."""
        d = self.d
        _check(d.cuMemsetD8Async(d.CUdeviceptr(buf.ptr), 0xFF, buf.nbytes, self._cs), "cuMemsetD8Async")

    def rows(self, buf: Buffer, rows) -> np.ndarray:
        """Rows of ``buf`` once all work of the context is done: a subject may have written ``buf`` on another
        stream than the harness's (the legacy default stream, which this non-blocking stream does not wait for)."""
        d = self.d
        _check(d.cuCtxSynchronize(), "cuCtxSynchronize")
        width = int(math.prod(buf.shape[1:]))
        row_bytes = width * buf.dtype.itemsize
        out = np.empty((len(rows), width), buf.dtype)
        for i, r in enumerate(rows):
            _check(d.cuMemcpyDtoHAsync(out[i].ctypes.data, d.CUdeviceptr(buf.ptr + int(r) * row_bytes), row_bytes,
                                       self._cs), "cuMemcpyDtoHAsync")
        self.sync()
        return out

    # -- time --------------------------------------------------------------------------------
    def sync(self) -> None:
        _check(self.d.cuStreamSynchronize(self._cs), "cuStreamSynchronize")

    def record(self):
        ev = _check(self.d.cuEventCreate(0), "cuEventCreate")
        _check(self.d.cuEventRecord(ev, self._cs), "cuEventRecord")
        return ev

    def elapsed_ms(self, start, end) -> float:
        d = self.d
        _check(d.cuEventSynchronize(end), "cuEventSynchronize")
        ms = float(_check(d.cuEventElapsedTime(start, end), "cuEventElapsedTime"))
        d.cuEventDestroy(start)
        d.cuEventDestroy(end)
        return ms

    # -- graphs ------------------------------------------------------------------------------
    def capture(self, issue: Callable[[Any], None]):
        """A graph of whatever ``issue(stream_like)`` enqueues; ``.launch()`` replays it on our stream.

        cuda.core's ``GraphBuilder`` first (passed to ``issue`` as the stream), then driver stream
        capture on our own stream (``issue`` gets the int handle). Raises if both fail.
        """
        errors = []
        if self._core_dev is not None and hasattr(self._core_dev, "create_graph_builder"):
            try:
                return self._capture_core(issue)
            except Exception as e:  # noqa: BLE001
                errors.append(f"cuda.core: {type(e).__name__}: {e}")
        try:
            return self.capture_stream(issue)
        except Exception as e:  # noqa: BLE001
            errors.append(f"driver: {type(e).__name__}: {e}")
        raise RuntimeError("; ".join(errors))

    def _capture_core(self, issue):
        gb = self._core_dev.create_graph_builder()
        begin = gb.begin_building
        try:
            begin("relaxed")
        except TypeError:
            begin()
        try:
            issue(gb)
        finally:
            gb.end_building()
        graph = gb.complete()
        try:
            graph.upload(self._core_stream)
        except Exception:  # noqa: BLE001 - upload is an optimisation
            pass
        return _CoreGraph(graph, self._core_stream, gb)

    def capture_stream(self, issue):
        """A graph by driver stream capture on our own stream (``issue`` gets the int handle)."""
        d = self.d
        mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        _check(d.cuStreamBeginCapture(self._cs, mode), "cuStreamBeginCapture")
        try:
            issue(self.stream)
        finally:
            graph = _check(d.cuStreamEndCapture(self._cs), "cuStreamEndCapture")
        exe = _check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        return _DriverGraph(d, graph, exe, self._cs)

    def close(self) -> None:
        pass


class _CoreGraph:
    def __init__(self, graph, stream, builder):
        self.graph, self.stream, self.builder = graph, stream, builder

    def launch(self) -> None:
        self.graph.launch(self.stream)

    def close(self) -> None:
        for obj in (self.graph, self.builder):
            try:
                obj.close()
            except Exception:  # noqa: BLE001
                pass


class _DriverGraph:
    def __init__(self, d, graph, exe, stream):
        self.d, self.graph, self.exe, self.stream = d, graph, exe, stream

    def launch(self) -> None:
        _check(self.d.cuGraphLaunch(self.exe, self.stream), "cuGraphLaunch")

    def close(self) -> None:
        self.d.cuGraphExecDestroy(self.exe)
        self.d.cuGraphDestroy(self.graph)


# -------------------------------------------------------------------------------------- measure

@dataclass
class Budget:
    """How much device time one subject's measurement may take (per method)."""

    target_ms: float = 25.0  # GPU time per method (eager, graph)
    min_samples: int = 5
    max_samples: int = 25
    min_batch_us: float = 40.0  # a batch (events or one graph) covers at least this much GPU time
    max_batch: int = 4096  # calls per batch / nodes per graph
    host_ms: float = 15.0  # GPU time the host-time loop may queue
    host_min_calls: int = 8
    host_max_calls: int = 300


def batch_size(copies: int, est_us: float, b: Budget) -> int:
    """Calls per timed batch: a whole rotation, and enough calls to cover ``min_batch_us``."""
    n = max(1, int(copies))
    if est_us > 0 and math.isfinite(est_us):
        n = max(n, math.ceil(b.min_batch_us / est_us))
    return int(min(n, max(b.max_batch, copies)))


def sample_count(n: int, est_us: float, b: Budget) -> int:
    if not (est_us > 0 and math.isfinite(est_us)):
        return b.min_samples
    return int(max(b.min_samples, min(b.max_samples, math.floor(b.target_ms * 1e3 / (n * est_us)))))


def host_calls(est_us: float, b: Budget) -> int:
    if not (est_us > 0 and math.isfinite(est_us)):
        return b.host_min_calls
    return int(max(b.host_min_calls, min(b.host_max_calls, math.floor(b.host_ms * 1e3 / est_us))))


class Rotation:
    """A subject from a function: ``launch(i, stream)`` issues call ``i`` (on operand copy ``i``) of
    ``copies``; ``capture(n)``, when given, returns a graph of ``n`` calls (else ``backend.capture``)."""

    def __init__(self, launch: Callable[[int, Any], None], copies: int, capture: Callable | None = None):
        self.launch = launch
        self.copies = max(1, int(copies))
        if capture is not None:
            self.capture = capture


def estimate_us(backend, subject) -> float:
    """Warm-up (every copy once: first touch, lazy allocations, compilation), then one timed pass over
    the rotation: GPU microseconds per call, the estimate that sizes batches and graphs."""
    s = backend.stream
    copies = max(1, int(subject.copies))
    for i in range(copies):
        subject.launch(i, s)
    backend.sync()
    e0 = backend.record()
    for i in range(copies):
        subject.launch(i, s)
    e1 = backend.record()
    return backend.elapsed_ms(e0, e1) * 1e3 / copies


def events_us(backend, subject, n: int, r: int) -> tuple:
    """``r`` eager batches of ``n`` calls (rotating over the copies), each between two events:
    per-call (p20, p50, p80) in microseconds."""
    s = backend.stream
    copies = max(1, int(subject.copies))
    marks = []
    k = 0
    for _ in range(r):
        start = backend.record()
        for _j in range(n):
            subject.launch(k % copies, s)
            k += 1
        marks.append((start, backend.record()))
    return quantiles([backend.elapsed_ms(a, z) * 1e3 / n for a, z in marks])


def measure(backend, subject, budget: Budget | None = None, *, graphs: bool = True, host: bool = True) -> dict:
    """Time ``subject`` (see module docstring); returns the timing columns of one row."""
    b = budget or Budget()
    s = backend.stream
    copies = max(1, int(subject.copies))
    launch = subject.launch
    est_us = estimate_us(backend, subject)
    n = batch_size(copies, est_us, b)
    r = sample_count(n, est_us, b)
    p20, p50, p80 = events_us(backend, subject, n, r)
    out = {"us_p20": p20, "us_p50": p50, "us_p80": p80, "n_batch": n, "samples": r, "us_graph": NAN,
           "us_graph_p20": NAN, "us_graph_p80": NAN, "host_us": NAN, "graph_note": ""}
    if graphs:
        out.update(graph_us(backend, subject, n, min(r, b.max_samples)))
    if host:
        # two passes over the same calls, the second timed: the first absorbs whatever a call does
        # once after the graph capture above (per-stream or per-thread state), so the figure is the
        # steady-state host time of an eager call under this rotation
        calls = host_calls(max(p50, 1e-3), b)
        for _ in range(2):
            backend.sync()
            t = time.perf_counter()
            for j in range(calls):
                launch(j % copies, s)
            host_s = time.perf_counter() - t
        backend.sync()
        out["host_us"] = host_s * 1e6 / calls
    return out


def graph_us(backend, subject, n: int, r: int) -> dict:
    """``n`` calls (rotating over the copies) captured in one graph, replayed ``max(3, r)`` times
    between events: ``us_graph`` (median per call), ``us_graph_p20/p80`` and ``graph_note`` (why
    there is no graph time: the simulator, or the capture's or replay's error)."""
    copies = max(1, int(subject.copies))
    nan = {"us_graph": NAN, "us_graph_p20": NAN, "us_graph_p80": NAN}
    try:
        g = subject.capture(n) if hasattr(subject, "capture") else backend.capture(
            lambda stream: [subject.launch(i % copies, stream) for i in range(n)])
    except NotImplementedError as e:
        return {**nan, "graph_note": str(e)}
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        return {**nan, "graph_note": f"capture failed: {type(e).__name__}: {e}"[:300]}
    try:
        g.launch()
        backend.sync()
        marks = []
        for _ in range(max(3, r)):
            a = backend.record()
            g.launch()
            marks.append((a, backend.record()))
        samples = [backend.elapsed_ms(a, z) * 1e3 / n for a, z in marks]
        p20, p50, p80 = quantiles(samples)
        return {"us_graph": p50, "us_graph_p20": p20, "us_graph_p80": p80, "graph_note": ""}
    except Exception as e:  # noqa: BLE001
        return {**nan, "graph_note": f"replay failed: {type(e).__name__}: {e}"[:300]}
    finally:
        try:
            g.close()
        except Exception:  # noqa: BLE001
            pass


def make_backend(device_id: int = 0):
    """``SimBackend`` when numba runs on its simulator, else ``CudaBackend``."""
    from ..launch import simulated

    return SimBackend() if simulated() else CudaBackend(device_id)
