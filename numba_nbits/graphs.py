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

Under numba's CUDA simulator there are no graphs; ``capture`` then records ``fn`` and ``replay``
calls it again on the simulator, so graph-shaped code can be tested without a GPU.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from .arrays import stream_handle
from .launch import check, simulated


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
