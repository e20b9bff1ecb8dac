"""Side streams for work that one call overlaps with its own launches: forked from the caller's stream and joined back
before the call returns.

The overlapped dequantize + cuBLAS route (``kernels.dequant_overlap``) dequantizes the next chunk of the weights on a
second stream while the caller's stream runs the GEMM of the previous one. ``lane_for(device_id)`` gives the calling
thread its ``Lane`` on that device: a non-blocking stream and the events of a two-buffer pipeline, made on the
thread's first use (a plan makes it for the building thread at build time, outside any capture). A call

* records ``fork`` on the caller's stream and makes the lane's stream wait for it (so the side work is ordered after
  everything before the call, the scratch allocation included),
* orders each hand-over with an event: ``ready[b]`` (buffer ``b`` written on the side stream; the caller's stream waits
  for it before its GEMM reads the buffer) and ``done[b]`` (that GEMM finished; the side stream waits for it before it
  writes the buffer again),
* ends with the caller's stream having waited for the side stream's last event, so nothing of the call is left
  running on the side stream once the caller's stream reaches its next work (a scratch free, another node).

``cuStreamWaitEvent`` takes the event's state when it is called, so one lane's events are reused by every call of its
thread. During CUDA-graph capture the same calls record the fork and joins as graph edges: the side stream joins the
capture through ``fork`` and is rejoined by the last wait, as the driver requires. A lane is per thread because its
events are rewritten call by call; it is never made during a capture (``lane_for(..., create=False)``: a thread
without one then runs the call's steps in order on its own stream, the same launches, so the same results).

Under numba's CUDA simulator there are no streams: callers run the steps in order.
"""
from __future__ import annotations

import threading

from .launch import _drv, check

#: ``CU_EVENT_DISABLE_TIMING``: the events only order work (cheaper to record and wait for)
_EVENT_FLAGS = 2
#: buffers of the pipeline (one written on the side stream while the GEMM reads the other)
BUFFERS = 2

_tls = threading.local()


class Lane:
    """One thread's side stream on one device, with the pipeline's events (module docstring); ``high``: the stream
    has the device's highest priority (the block scheduler then starts its pending CTAs before those of
    normal-priority streams as SMs free up)."""

    def __init__(self, device_id: int, high: bool = False):
        d = _drv()
        self.device_id = int(device_id)
        self.high = bool(high)
        flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING
        if high:
            _, greatest = check(d.cuCtxGetStreamPriorityRange(), "cuCtxGetStreamPriorityRange")
            self.stream = int(check(d.cuStreamCreateWithPriority(flags, greatest), "cuStreamCreateWithPriority"))
        else:
            self.stream = int(check(d.cuStreamCreate(flags), "cuStreamCreate"))

        def event():
            return check(d.cuEventCreate(_EVENT_FLAGS), "cuEventCreate")

        self.fork = event()
        self.ready = tuple(event() for _ in range(BUFFERS))
        self.done = tuple(event() for _ in range(BUFFERS))
        self._record, self._wait = d.cuEventRecord, d.cuStreamWaitEvent

    def record(self, event, stream: int) -> None:
        """``event`` completes once the work enqueued on ``stream`` so far is done."""
        check(self._record(event, stream), "cuEventRecord")

    def wait(self, stream: int, event) -> None:
        """Work enqueued on ``stream`` from now on waits for ``event`` (as last recorded)."""
        check(self._wait(stream, event, 0), "cuStreamWaitEvent")


def lane_for(device_id: int, create: bool = True, high: bool = False) -> Lane | None:
    """The calling thread's lane on ``device_id`` (of the highest stream priority with ``high``), made when missing
    and ``create`` (in that device's context); else None. Make lanes outside graph capture."""
    lanes = getattr(_tls, "lanes", None)
    if lanes is None:
        lanes = _tls.lanes = {}
    key = (device_id, bool(high))
    lane = lanes.get(key)
    if lane is None and create:
        from numba import cuda

        with cuda.gpus[device_id]:  # the stream and events belong to that device's context
            lane = lanes[key] = Lane(device_id, high)
    return lane
