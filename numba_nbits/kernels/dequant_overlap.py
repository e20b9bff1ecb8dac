"""Dequantize + cuBLAS with the dequantize of the next N-chunk overlapped with the GEMM of the previous one (the
``dequant_overlap`` route; ours, not ORT's chain).

Why
---
Past the fused kernels' M range the route is ORT's chain: dequantize all of B into an fp16/bf16 scratch, then one
cuBLAS GEMM. The dequantize is memory-bound and the GEMM compute-bound, yet they run one after the other, so the
dequantize's time (157 us for 28672x8192 on the H200) is added to every call; at M = 1024 that is a fifth of the
call. Here the weights are dequantized in ``chunks`` pieces of ``rows`` rows into two alternating buffers on a side
stream of the calling thread (``numba_nbits.lanes``), while the caller's stream runs the GEMM of the chunk before:
only the first chunk's dequantize is exposed. The scratch is two chunks instead of all of N.

Schedule (chunk ``i`` in buffer ``b = i % 2``; ``S`` the caller's stream, ``D`` the lane's)
---------------------------------------------------------------------------------------------
allocate the two buffers on ``S``; ``D`` waits for ``S`` (fork); for each chunk: from the third chunk on ``D`` waits
until the GEMM of chunk ``i - 2`` (same buffer) is done, dequantizes chunk ``i`` into ``b`` and records ``ready[b]``;
``S`` waits for ``ready[b]``, runs the chunk's GEMM into its columns of Y and records ``done[b]``; finally ``S`` waits
for everything ``D`` did (join) and frees the buffers. The dequantize and GEMM launches are those of the chunked route
(``DequantGemmPlan``: the same kernels, per-chunk GEMMs at the chunk's column offset in Y), so the result is
that of a chunked call with ``rows`` rows per chunk and the same cuBLAS settings. Within a graph capture the fork and
joins become graph edges; a thread without a lane during capture (lanes are made outside capture) runs the same
launches in order on ``S``.

SMs: a GEMM that fills every SM leaves the concurrent dequantize only the gaps between its waves, so the GEMMs
are sized for ``SMs - reserve_sms`` SMs (``cublasSetSmCountTarget``; ``reserve_sms = 0``: all SMs, the default from
M = ``RESERVE_MAX_M`` on, where the GEMMs are long enough that the SMs they would give up cost more); with
``high_priority`` the side stream has the device's highest priority, so its CTAs start first wherever SMs free up.

Under numba's CUDA simulator (no streams) the steps run in order, chunk ``i`` in buffer ``i % 2`` as on a GPU.
"""
from __future__ import annotations

from .dequant import DequantGemmPlan
from .family import KernelFamily

ROUTE = "dequant_overlap"
#: chunks N is split into by default: the first chunk's dequantize is exposed, and each chunk's GEMM should still
#: fill the GPU
OVERLAP_CHUNKS = 4
#: chunk rows are a multiple of this (whole GEMM tiles)
ROW_ALIGN = 256
#: SMs left out of the GEMMs for the dequantize (``cublasSetSmCountTarget``) when M < ``RESERVE_MAX_M``; from there
#: on the GEMMs take every SM: at M = 4096 leaving 8 SMs out cost 1-8% on four of five shapes, at M = 1024 it won on
#: three (``benchmarks/results/2026-12-05-h100-callB``)
RESERVE_SMS = 8
RESERVE_MAX_M = 2048
#: whether the side stream has the device's highest priority (its dequantize CTAs start first as SMs free up)
HIGH_PRIORITY = False


def chunk_rows(N: int, K_padded: int, itemsize: int, config, chunks: int = OVERLAP_CHUNKS) -> int:
    """Rows per chunk: ``ORT_MATMULNBITS_CHUNK_SIZE`` when set; else N in ``chunks`` pieces rounded up to
    ``ROW_ALIGN`` rows; capped (like the chunked route) so the two buffers stay within the scratch limit."""
    if config.source("chunk_size") != "default":
        rows = config.chunk_size
    else:
        per_chunk = -(-N // chunks)
        rows = -(-per_chunk // ROW_ALIGN) * ROW_ALIGN
    cap = config.scratch_limit_bytes // (2 * K_padded * itemsize)
    if cap >= ROW_ALIGN:
        cap -= cap % ROW_ALIGN
    return max(1, min(rows, N, cap))


class OverlapPlan(DequantGemmPlan):
    """The overlapped form of ``DequantGemmPlan`` (module docstring): two chunk buffers, the dequantize on the
    thread's lane, the GEMMs on the caller's stream sized for ``SMs - reserve_sms`` SMs."""

    def __init__(self, w, problem, config, route: str = ROUTE, chunks: int | None = None,
                 reserve_sms: int | None = None, high_priority: bool | None = None):
        chunks = OVERLAP_CHUNKS if chunks is None else chunks
        if reserve_sms is None:
            reserve_sms = RESERVE_SMS if problem.M < RESERVE_MAX_M else 0
        self.high = HIGH_PRIORITY if high_priority is None else bool(high_priority)
        if chunks < 1 or reserve_sms < 0:
            raise ValueError(f"OverlapPlan needs chunks >= 1 and reserve_sms >= 0, got {chunks}, {reserve_sms}")
        rows = chunk_rows(w.N, w.K_padded, w.np_dtype.itemsize, config, chunks)
        super().__init__(w, problem, config, route, chunked=True, rows=rows, buffers=2)
        self.reserve_sms = reserve_sms
        self.tactic = f"rows{rows}r{reserve_sms}" + ("p" if self.high else "")
        self.sm_target = 0
        if not w.simulated:
            from ..lanes import lane_for
            from .gemv.tactics import sm_count

            sms = sm_count(False)
            self.sm_target = sms - reserve_sms if 0 < reserve_sms < sms else 0
            lane_for(w.device_id, high=self.high)  # the building thread's lane, made outside any capture

    def enqueue(self, a, out, stream: int) -> None:
        if self._pool is None:  # simulator: in order, chunk i in buffer i % 2 (``DequantGemmPlan._parts``)
            return super().enqueue(a, out, stream)
        from ..dispatch.cublas import gemm
        from ..lanes import lane_for
        from ..launch import is_capturing

        w = self.w
        lane = lane_for(w.device_id, create=False, high=self.high)
        if lane is None and not is_capturing(stream):
            lane = lane_for(w.device_id, high=self.high)
        side = stream if lane is None else lane.stream
        pool = self._pool
        ptr = pool.alloc(self.scratch_nbytes, stream)
        try:
            if lane is not None:
                lane.record(lane.fork, stream)
                lane.wait(side, lane.fork)
            last = len(self.chunks) - 1
            for i, ((n0, n, launch), like) in enumerate(zip(self.chunks, self._likes)):
                b = i % 2
                buf = ptr + b * self.chunk_nbytes
                if lane is not None and i >= 2:
                    lane.wait(side, lane.done[b])  # the GEMM of chunk i - 2 has read this buffer
                launch.set_array_ptr(self._out_arg, buf, like)
                launch.launch(side)
                if lane is not None:
                    lane.record(lane.ready[b], side)
                    lane.wait(stream, lane.ready[b])
                gemm(self.handle, stream, a.shape[0], n, w.K, buf, w.K_padded, a.ptr, out.ptr + n0 * out.itemsize,
                     w.N, w.dtype, self.use_tf32, self.options, self.sm_target)
                if lane is not None and i + 2 <= last:
                    lane.record(lane.done[b], stream)
        except BaseException:
            if lane is not None:  # join whatever the side stream has left before the scratch goes back
                lane.record(lane.fork, side)
                lane.wait(stream, lane.fork)
            pool.free(ptr, stream)
            raise
        # the caller's stream waited for the last chunk's ``ready``, recorded after the side stream's last work
        pool.free(ptr, stream)


def supports(problem) -> bool:
    """Every problem dequantize + cuBLAS serves (every bit width, dtype, zero-point kind and g_idx)."""
    return True


def build(weights, problem, config, route: str = ROUTE):
    if route != ROUTE:
        raise ValueError(f"the dequant_overlap family serves the route {ROUTE}, not {route!r}")
    return OverlapPlan(weights, problem, config, route)


FAMILY = KernelFamily("dequant_overlap", supports, build, ("dequant_overlap.py", "dequant.py", "dequant_fast.py"))
