"""CUDA graphs for decode loops: ``numba_nbits.capture(fn) -> Graph``; ``graph.replay()``.

``fn(stream)`` is called once while ``stream`` (a new non-blocking stream unless one is given) is
capturing; every ``MatMulNBits`` call inside it must pass ``stream=stream`` and an ``out=`` buffer,
and every M it uses must have run once before (``op.warmup(M)`` or one eager call): a call that would
compile or allocate during capture raises ``CaptureError`` telling you to warm up first. The
captured work (our kernels and cuBLAS calls) is replayed by ``graph.replay()`` at ~0.7 us of GPU
launch cost per node and almost no host time.

Capture uses ``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``, so other threads keep working. Graphs made by
other tools capture our ops too: pass their capture stream as ``stream=`` (a cuda.core
``GraphBuilder``, or torch's current stream inside ``torch.cuda.graph``).

``CallGraph`` (end of this module) is the same mechanism for one call's launches, made by the steady-state
call path (``bound.py``) for repeated calls on the same buffers.

Under numba's CUDA simulator there are no graphs; ``capture`` then records ``fn`` and ``replay``
calls it again on the simulator, so graph-shaped code can be tested without a GPU.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional

from .arrays import stream_handle
from .launch import _drv, check, lean_driver, simulated


class Graph:
    """An instantiated CUDA graph (or, under the simulator, the recorded callable)."""

    def __init__(self, exec_handle, graph_handle, stream: int, owned_stream, fn=None):
        self._exec = exec_handle
        self._graph = graph_handle
        self.stream = stream
        self._owned_stream = owned_stream
        self._fn = fn

    def replay(self, stream: Any = None, sync: bool = False) -> None:
        """Launch the graph on ``stream`` (default: the capture stream); optionally wait for it."""
        s = self.stream if stream is None else stream_handle(stream)
        if self._fn is not None:
            self._fn(s)
            return
        from cuda.bindings import driver

        check(driver.cuGraphLaunch(self._exec, s), "cuGraphLaunch")
        if sync:
            check(driver.cuStreamSynchronize(s), "cuStreamSynchronize")

    def synchronize(self) -> None:
        if self._fn is None:
            from cuda.bindings import driver

            check(driver.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def close(self) -> None:
        if self._fn is not None or self._exec is None:
            return
        from cuda.bindings import driver

        driver.cuGraphExecDestroy(self._exec)
        driver.cuGraphDestroy(self._graph)
        if self._owned_stream is not None:
            driver.cuStreamDestroy(self._owned_stream)
        self._exec = self._graph = self._owned_stream = None

    def __del__(self):  # best effort; explicit close() is preferred
        try:
            self.close()
        except Exception:
            pass


def new_stream() -> int:
    """A new non-blocking CUDA stream handle (the legacy default stream cannot be captured)."""
    from cuda.bindings import driver
    from numba import cuda

    cuda.current_context()  # make sure numba's primary context is current
    s = check(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    return s


def capture(fn: Callable[[int], Any], stream: Optional[Any] = None) -> Graph:
    """Capture ``fn(stream)`` into a CUDA graph and instantiate it (see module docstring)."""
    if simulated():
        s = stream_handle(stream) if stream is not None else 0
        fn(s)
        return Graph(None, None, s, None, fn=fn)
    from cuda.bindings import driver

    owned = None
    if stream is None:
        owned = new_stream()
        s = int(owned)
    else:
        s = stream_handle(stream)
        if s == 0:
            raise ValueError("stream: the legacy default stream (0) cannot be captured; pass a created stream "
                             "or None")
    mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    check(driver.cuStreamBeginCapture(s, mode), "cuStreamBeginCapture")
    try:
        fn(s)
    except BaseException:
        driver.cuStreamEndCapture(s)
        raise
    graph = check(driver.cuStreamEndCapture(s), "cuStreamEndCapture")
    exec_ = check(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    return Graph(exec_, graph, s, owned)


# ------------------------------------------------------------------ one call's launches as a graph
# ``CallGraph`` (used by ``bound.py``'s steady-state path; not part of the kernels' cache key, which covers
# ``launch/`` and ``kernels/``):
#
# One call's launches as an instantiated CUDA graph: the steady-state path's cheapest launch (``bound.py``).
#
# A ``cuGraphLaunch`` of an instantiated graph costs less host time than a single ``cuLaunchKernel``: the
# driver has validated the kernel nodes and their parameters once, at instantiation. ``CallGraph(fn)``
# calls ``fn(stream)`` once while a private stream of the thread (non-blocking, made on first use) is
# capturing in ``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``, so the launches ``fn`` issues (kernels with their
# parameters, the memsets and cuBLAS calls a plan makes) are recorded with the pointers they were given,
# not run; the graph is instantiated and ``graph(stream)`` then launches it into any stream (the legacy
# default stream 0 included). A launch is ordered after earlier work in that stream and after earlier
# launches of the same graph, which is what consecutive calls of one operator on one stream need anyway.
#
# Callers launch a graph only into stream 0, which cannot capture, or into a stream ``is_capturing`` says
# is not capturing; into a capturing stream (someone else's graph being recorded) they issue the launches
# themselves, so what that capture records is the same as without graphs here.
#
# ``prepare(stream)``, when given, runs first, outside capture, for what the captured calls need set up on the
# capture stream (``bound.py`` gives it cuBLAS workspaces). ``close()`` (or garbage collection) destroys the
# executable graph; a launch still running on the GPU completes (the driver frees an in-flight executable
# graph when it finishes). Nothing here runs under the simulator, which has no graphs: ``CallGraph`` raises
# there, and callers do not make one.

_TLS = threading.local()


def _capture_stream() -> int:
    """This thread's private capture stream (non-blocking; the legacy default stream cannot capture)."""
    s = getattr(_TLS, "stream", None)
    if s is None:
        from numba import cuda

        cuda.current_context()  # numba's primary context current on this thread
        drv = _drv()
        s = _TLS.stream = int(check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                    "cuStreamCreate"))
    return s


class CallGraph:
    """``fn(stream)``'s launches captured once and instantiated; ``graph(stream)`` launches them (see above)."""

    __slots__ = ("_exec", "_graph", "_launch", "_lean_error", "__weakref__")

    def __init__(self, fn, prepare=None):
        if simulated():
            raise RuntimeError("CallGraph: the CUDA simulator has no graphs")
        drv = _drv()
        s = _capture_stream()
        if prepare is not None:  # work the capture stream needs done outside capture (a GEMM workspace)
            prepare(s)
        check(drv.cuStreamBeginCapture(s, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture")
        try:
            fn(s)
        except BaseException:
            res = drv.cuStreamEndCapture(s)
            if int(res[0]) == 0 and res[1] is not None:
                drv.cuGraphDestroy(res[1])
            raise
        graph = check(drv.cuStreamEndCapture(s), "cuStreamEndCapture")
        try:
            exec_ = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except BaseException:
            drv.cuGraphDestroy(graph)
            raise
        self._graph, self._exec = graph, exec_
        lean = lean_driver()
        if lean is not None:  # integer handles in, an exception on error: the least host time per launch
            self._launch = functools.partial(lean.graph_launch, int(exec_))
            self._lean_error = lean.DriverError
        else:
            self._launch = functools.partial(drv.cuGraphLaunch, exec_)
            self._lean_error = None

    def __call__(self, stream: int) -> None:
        """Launch the graph into ``stream`` (a handle; not one that is capturing)."""
        if self._lean_error is not None:
            try:
                self._launch(stream)
            except self._lean_error as e:
                raise RuntimeError(f"cuGraphLaunch failed: {e}") from e
            return
        err = self._launch(stream)[0]
        if err:
            check((err,), "cuGraphLaunch")

    def close(self) -> None:
        ex, g = self._exec, self._graph
        if ex is None:
            return
        self._exec = self._graph = None
        self._launch = None
        drv = _drv()
        drv.cuGraphExecDestroy(ex)
        drv.cuGraphDestroy(g)

    def __del__(self):  # interpreter shutdown may have taken the driver module already
        try:
            self.close()
        except Exception:
            pass
