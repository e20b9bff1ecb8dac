"""Stream-ordered scratch memory: what a call borrows for its own launches and gives back in the same stream.

Dequantize + cuBLAS writes an fp16/bf16 copy of (a chunk of) the weights that only the call's own GEMM reads.
Kept per node, those scratches add up to the fp16 size of the whole model (more than an H200 holds for a 70B model
at 4 bits) although only one node runs at a time on a stream. So the call borrows its scratch here, as ONNX
Runtime takes it from its arena: ``alloc(nbytes, stream)`` inserts an allocation into the caller's stream
(``cuMemAllocFromPoolAsync``) and ``free(ptr, stream)`` gives it back after the call's last launch
(``cuMemFreeAsync``). The driver orders both with the stream's work, so the next node on that stream reuses the
same memory, and another stream gets other memory unless its work is ordered after the free.

One pool per device (``pool_for``), created on first use with a release threshold of "never": memory freed
stays in the pool for the next call instead of going back to the driver at each synchronisation, so a steady
state makes no ``cuMemAlloc`` at all and the pool holds what the largest call in flight per stream needs. During
CUDA-graph capture the two calls become the graph's own allocation and free nodes (the driver's graph memory
pool backs them), so captured calls need no warm-up allocation either.

Under numba's CUDA simulator there are no streams or pools: callers use host arrays instead.
"""
from __future__ import annotations

import threading

from .launch import _drv, check

#: ``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``: keep freed memory in the pool (never trim at synchronisation)
KEEP_ALL = 2 ** 64 - 1

_pools: dict = {}
_lock = threading.Lock()


class ScratchPool:
    """A device's stream-ordered memory pool (module docstring)."""

    def __init__(self, device_id: int):
        d = _drv()
        props = d.CUmemPoolProps()
        props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = int(device_id)
        self.device_id = int(device_id)
        self.pool = check(d.cuMemPoolCreate(props), "cuMemPoolCreate")
        check(d.cuMemPoolSetAttribute(self.pool, d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                      d.cuuint64_t(KEEP_ALL)), "cuMemPoolSetAttribute(RELEASE_THRESHOLD)")
        self._alloc = d.cuMemAllocFromPoolAsync
        self._free = d.cuMemFreeAsync

    def alloc(self, nbytes: int, stream: int) -> int:
        """The address of ``nbytes`` bytes usable by work enqueued on ``stream`` after this call."""
        return int(check(self._alloc(int(nbytes), self.pool, stream), "cuMemAllocFromPoolAsync"))

    def free(self, ptr: int, stream: int) -> None:
        """Give ``ptr`` back once the work enqueued on ``stream`` so far is done."""
        check(self._free(ptr, stream), "cuMemFreeAsync")


def pool_for(device_id: int) -> ScratchPool:
    """The pool of ``device_id`` (created once; call outside graph capture, e.g. at plan build)."""
    p = _pools.get(device_id)
    if p is None:
        with _lock:
            p = _pools.get(device_id)
            if p is None:
                p = _pools[device_id] = ScratchPool(device_id)
    return p
