"""One call's launches as an instantiated CUDA graph: the steady-state path's cheapest launch (``bound.py``).

A ``cuGraphLaunch`` of an instantiated graph costs less host time than a single ``cuLaunchKernel``: the
driver has validated the kernel nodes and their parameters once, at instantiation. ``CallGraph(fn)``
calls ``fn(stream)`` once while a private stream of the thread (non-blocking, made on first use) is
capturing in ``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``, so the launches ``fn`` issues (kernels with their
parameters, the memsets and cuBLAS calls a plan makes) are recorded with the pointers they were given,
not run; the graph is instantiated and ``graph(stream)`` then launches it into any stream (the legacy
default stream 0 included). A launch is ordered after earlier work in that stream and after earlier
launches of the same graph, which is what consecutive calls of one operator on one stream need anyway.

Callers launch a graph only into stream 0, which cannot capture, or into a stream ``is_capturing`` says
is not capturing; into a capturing stream (someone else's graph being recorded) they issue the launches
themselves, so what that capture records is the same as without graphs here.

``prepare(stream)``, when given, runs first, outside capture, for what the captured calls need set up on the
capture stream (``bound.py`` gives it cuBLAS workspaces). ``close()`` (or garbage collection) destroys the executable graph; a launch still running on the GPU
completes (the driver frees an in-flight executable graph when it finishes). Nothing here runs under the
simulator, which has no graphs: ``CallGraph`` raises there, and callers do not make one.
"""
from __future__ import annotations

import functools
import threading

from .driver import _drv, check, simulated

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
    """``fn(stream)``'s launches captured once and instantiated; ``graph(stream)`` launches them (module doc)."""

    __slots__ = ("_exec", "_graph", "_launch", "__weakref__")

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
        self._launch = functools.partial(drv.cuGraphLaunch, exec_)

    def __call__(self, stream: int) -> None:
        """Launch the graph into ``stream`` (a handle; not one that is capturing)."""
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
