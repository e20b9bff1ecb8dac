"""The steady-state call path of ``MatMulNBits``: per-call records for ``op(A, out=Y)`` and ``op.bind``.

The general call (``MatMulNBits._check_call``) adapts A and Y into ``DevArray`` views, checks shape,
dtype, device, contiguity and overlap, finds the plan for M and runs it. Once such a call with
``out=`` has succeeded, the operator keeps a ``CallRecord`` under the key ``(type(A), A.shape,
type(Y), Y.shape)``; a later call with that key does one dict lookup and then only

* reads A's and Y's data pointers through the cheapest accessor of their exact type (``Reader``):
  torch ``data_ptr()`` (after ``dtype``, ``get_device()``, ``is_contiguous()``), CuPy ``data.ptr``
  (after ``dtype``, ``data.device_id``, ``flags.c_contiguous``), numba ``gpu_data`` (after
  ``dtype``, ``strides`` and the memory's device), the simulator's host array (after ``dtype`` and
  C-contiguity);
* reads the stream: an explicit ``stream=`` (an int as is), else the producer's current stream
  (torch's raw current-stream read for the tensor's device, CuPy's current stream), else 0;
* checks that Y does not overlap A (two pointer ranges);
* runs the plan's lean form (``Plan.pointer_runner``, one per thread, made on the thread's first
  recorded call): the two data pointers are stored into the runner's own parameter buffer and one
  ``cuLaunchKernel`` per kernel is issued, with no array views built or checked again; plans without a
  lean form (and an unaligned A on the tensor-core GEMV) move the pointers of this thread's two
  pre-built 2-D views (``(M, K)`` and ``(M, N)``) and call ``entry.run(a, y, stream)`` instead.

The second time a record sees the same pair of A and Y pointers it captures that call's launches once
into a ``CallGraph`` (``graphs.py``: recorded on a private stream, instantiated) and from then on
launches the pair with one ``cuGraphLaunch``, which costs less host time than one ``cuLaunchKernel``. A record
keeps ``GRAPHS_PER_RECORD`` pairs (a decode loop reuses a few buffers; the oldest is dropped). A graph bakes
in the addresses only, so memory freed and reallocated at the same address with the recorded layout is
served correctly. The operator's ``numba_nbits.call_graphs`` knob (``NUMBA_NBITS_CALL_GRAPHS``) off: no graphs,
every call launches its kernels. Into a stream that is capturing (a graph being recorded by the caller) the launches are
issued directly, so that capture records what it would without graphs; stream 0 never captures and needs
no query. Plans that print the ``ORT_FPA_INTB_DEBUG`` line on every call get no graphs.

Whatever a reader does not recognise as the recorded layout (another dtype, device, strides, a
non-contiguous tensor, overlap) makes the record answer ``None`` and the call takes the general path,
which raises the same errors as always (or serves the unusual but valid layout). Nothing here
synchronises or compiles, and graphs are made only outside capture, so a recorded call can be captured
into a CUDA graph.

``op.bind(A, out, stream=None)`` makes a ``Bound``: the general checks run once, at bind time, and
the plan is built then (outside capture: during capture a missing plan raises ``CaptureError``). The
bound callable takes no arguments, runs the plan on the fixed views and returns ``out``: the first call
issues the launches (the plan's lean form where it has one), the second captures them into a ``CallGraph``
and from then on a call is one ``cuGraphLaunch`` (into a capturing stream: the launches themselves); with
``stream=None`` it reads the producer's current stream on each call, as ``op(A, out=out)`` does.
It keeps A and out alive, so their memory cannot be freed while it exists.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from . import arrays
from .arrays import DevArray, _FAST, _mk, _adapt_cupy, _adapt_numba, _adapt_torch, _torch_current_stream, stream_handle
from .launch import is_capturing
from .graphs import CallGraph


def _prepare_capture(stream: int) -> None:
    """Before a ``CallGraph`` captures: the capture stream gets its own cuBLAS workspaces, as every stream an
    eager GEMM runs on has (``dispatch/cublas.py``), so graph and eager calls give the same bits."""
    from .dispatch import cublas

    cublas.reserve_workspaces(stream)

GRAPHS_PER_RECORD = 8  # pointer pairs of one recorded layout kept as graphs (the oldest is dropped)
_SEEN_MAX = 64  # first sightings remembered per record before the memory of them is cleared


class Reader:
    """Reads the data pointer of objects laid out like a recorded input ``x``; ``None`` for any other."""

    __slots__ = ("read", "stream_of")

    def __init__(self, read, stream_of):
        self.read = read  # obj -> int pointer (the host ndarray under the simulator) or None
        self.stream_of = stream_of  # () -> the producer's current stream handle, or None for 0


def reader_for(x, simulated: bool) -> Reader | None:
    """The ``Reader`` for inputs of exactly ``type(x)``, dtype and device as ``x`` (already checked by
    the general path); None for kinds without a fast accessor (NumPy, CAI objects, subclasses)."""
    if simulated:
        host = getattr(x, "_ary", None)  # the simulator's FakeCUDAArray
        if not isinstance(host, np.ndarray):
            return None
        dt = host.dtype

        def read_sim(y):
            h = y._ary
            return h if h.dtype is dt and h.flags.c_contiguous else None

        return Reader(read_sim, None)
    fast = _FAST.get(type(x))
    if fast is _adapt_torch:
        tdt, dev = x.dtype, x.get_device()

        def read_torch(y):
            return y.data_ptr() if y.dtype is tdt and y.get_device() == dev and y.is_contiguous() else None

        _torch_current_stream(dev)  # resolves torch's raw current-stream function once
        return Reader(read_torch, functools.partial(arrays._torch_raw_stream, dev))
    if fast is _adapt_cupy:
        import cupy

        dt, dev = x.dtype, x.data.device_id
        current = getattr(getattr(cupy.cuda, "stream", None), "get_current_stream_ptr", None)
        if current is None:
            def current():
                return cupy.cuda.get_current_stream().ptr

        def read_cupy(y):
            m = y.data
            return m.ptr if y.dtype is dt and m.device_id == dev and y.flags.c_contiguous else None

        return Reader(read_cupy, current)
    if fast is _adapt_numba:
        dt, strides = x.dtype, x.strides
        dev = x.gpu_data.context.device.id

        def read_numba(y):
            if y.dtype is not dt or y.strides != strides:
                return None
            gd = y.gpu_data
            try:
                if gd.context.device.id != dev:
                    return None
            except AttributeError:  # memory without a context: the general path decides
                return None
            return gd.device_ctypes_pointer.value or 0

        return Reader(read_numba, None)
    return None


def _layout(v: DevArray) -> DevArray:
    """A C-contiguous view with ``v``'s shape, strides and dtype, pointing nowhere and owning nothing."""
    return _mk(0, v.shape, v.strides, v.dtype, None, True)


class CallRecord:
    """One recorded ``op(A, out=Y)`` layout for a built plan (module docstring)."""

    __slots__ = ("run", "read_a", "read_o", "stream_of", "a_bytes", "o_bytes", "a_view", "o_view", "sim", "_tls",
                 "runner_of", "graph_ok", "graphs", "_seen")

    def __init__(self, run, ra: Reader, ro: Reader, a_view: DevArray, o_view: DevArray, simulated: bool,
                 runner_of=None, graphs: bool = True):
        self.run = run  # entry.run
        self.runner_of = runner_of  # the plan's pointer_runner, or None (the general run only)
        self.read_a, self.read_o, self.stream_of = ra.read, ro.read, ra.stream_of
        self.a_bytes, self.o_bytes = a_view.nbytes, o_view.nbytes
        self.a_view, self.o_view = _layout(a_view), _layout(o_view)  # each thread moves its own copies' pointers
        self.sim = simulated
        self._tls = threading.local()
        self.graph_ok = graphs and not simulated  # the simulator has no graphs
        self.graphs: dict = {}  # (A pointer, Y pointer) -> CallGraph
        self._seen: dict = {}  # pointer pairs seen once

    def __call__(self, A, out, stream):
        """Run the plan for A and ``out`` and return ``out``; None (nothing done) when either is not
        laid out as recorded or they overlap: the caller then takes the general path."""
        pa = self.read_a(A)
        if pa is None:
            return None
        po = self.read_o(out)
        if po is None:
            return None
        if self.sim:
            if np.shares_memory(pa, po):
                return None
            va, vo = self.a_view, self.o_view
            a = DevArray(0, va.shape, va.strides, va.dtype, pa.reshape(va.shape))
            o = DevArray(0, vo.shape, vo.strides, vo.dtype, po.reshape(vo.shape))
            self.run(a, o, 0)
            return out
        if po < pa + self.a_bytes and pa < po + self.o_bytes:
            return None
        if stream is None:
            so = self.stream_of
            s = so() if so is not None else 0
        else:
            s = stream if type(stream) is int else stream_handle(stream)
        g = self.graphs.get((pa, po))
        if g is not None:
            if s == 0 or not is_capturing(s):
                g(s)
                return out
        elif self.graph_ok:
            key = (pa, po)
            seen = self._seen
            if key in seen and (s == 0 or not is_capturing(s)):  # second sighting: keep these launches as a graph
                g = self._new_graph(key)
                g(s)
                return out
            if len(seen) >= _SEEN_MAX:
                seen.clear()
            seen[key] = True
        self._launch(pa, po, s)
        return out

    def _launch(self, pa: int, po: int, s: int) -> None:
        """This thread's launches of the plan for A at ``pa`` and Y at ``po`` into stream ``s``."""
        tls = self._tls
        r = getattr(tls, "runner", None)
        if r is None:  # this thread's first call: its own lean runner (False: none)
            ro = self.runner_of
            r = tls.runner = (ro(self.a_view, self.o_view) if ro is not None else None) or False
        if r and r(pa, po, s):
            return
        views = getattr(tls, "views", None)
        if views is None:
            views = self._tls.views = (_layout(self.a_view), _layout(self.o_view))
        a, o = views
        a.ptr = pa
        o.ptr = po
        self.run(a, o, s)

    def _new_graph(self, key) -> CallGraph:
        """The plan's launches for the pointer pair ``key`` as a ``CallGraph``, kept (the oldest dropped)."""
        pa, po = key
        g = CallGraph(lambda cs: self._launch(pa, po, cs), _prepare_capture)
        graphs = self.graphs
        while len(graphs) >= GRAPHS_PER_RECORD:
            graphs.pop(next(iter(graphs))).close()
        graphs[key] = g
        self._seen.pop(key, None)
        return g


class Bound:
    """``op.bind(A, out, stream)``: the operator on fixed buffers; ``bound()`` runs it, returns ``out``."""

    __slots__ = ("_run", "_a", "_o", "_out", "_keep", "_stream", "_stream_of", "_runner", "_pa", "_po", "_graph",
                 "_graph_ok", "_ran")

    def __init__(self, run, a: DevArray | None, o: DevArray | None, out, keep, stream: int | None,
                 stream_of, runner=None, graph: bool = False):
        self._run = run  # entry.run, or None for M == 0 (nothing to launch)
        # the plan's lean runner (Plan.pointer_runner) for these views, or None; every call stores the same
        # two pointers, so threads sharing it write identical values
        self._runner = runner
        self._pa, self._po = (a.ptr, o.ptr) if runner is not None else (0, 0)
        self._a, self._o = a, o
        self._out = out
        self._keep = keep  # A (and its device copy): the memory the views point at stays alive
        self._stream = stream  # fixed handle, or None: the producer's current stream per call
        self._stream_of = stream_of
        # the launches as one CallGraph, made at the second call outside capture (the first one has run the
        # plan, so whatever a plan sets up on its first run is not captured); binding itself launches nothing
        self._graph = None
        self._graph_ok = graph and run is not None
        self._ran = False

    def _launch(self, s: int) -> None:
        r = self._runner
        if r is None or not r(self._pa, self._po, s):
            self._run(self._a, self._o, s)

    def __call__(self):
        if self._run is None:
            return self._out
        s = self._stream
        if s is None:
            so = self._stream_of
            s = so() if so is not None else 0
        g = self._graph
        if g is not None:
            if s == 0 or not is_capturing(s):
                g(s)
                return self._out
        elif self._graph_ok and self._ran and (s == 0 or not is_capturing(s)):
            g = self._graph = CallGraph(self._launch, _prepare_capture)
            g(s)
            return self._out
        self._launch(s)
        self._ran = True
        return self._out
