"""Host/device array adaptation: NumPy, numba device arrays, PyTorch, CuPy and any CAI producer.

Kernels see ``DevArray``: a raw, typed view of device memory (pointer, shape, byte strides, NumPy
dtype, and the object that owns the memory). Under numba's CUDA simulator a ``DevArray`` wraps a
NumPy array instead, and ``host_view()`` hands that array to the simulated kernel.

bfloat16 is ``ml_dtypes.bfloat16`` on the host; kernels read it as uint16 bits.

The caller's stream is found here too: an explicit ``stream=`` (int handle, numba stream, cuda.core
Stream or GraphBuilder, torch or CuPy stream, anything with ``__cuda_stream__``), else the current
stream of the framework that produced A (torch's or CuPy's current stream), else the legacy default
stream (0).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["DevArray", "bfloat16", "dtype_name", "stream_handle", "ArrayIn", "adapt_input"]


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def bfloat16() -> np.dtype:
    """The host bfloat16 dtype (``ml_dtypes.bfloat16``)."""
    return _bf16()


_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}


def dtype_name(dt) -> str:
    """'float32' | 'float16' | 'bfloat16' | numpy's name for anything else."""
    dt = np.dtype(dt)
    name = _NAMES.get(dt)
    if name:
        return name
    if dt.name == "bfloat16":
        return "bfloat16"
    return dt.name


def np_dtype(name: str) -> np.dtype:
    return _bf16() if name == "bfloat16" else np.dtype(name)


class DevArray:
    """A typed view of device memory (or of a NumPy array under the simulator)."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "owner")

    def __init__(self, ptr: int, shape, strides, dtype, owner):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = np.dtype(dtype)
        self.owner = owner

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    @property
    def c_contiguous(self) -> bool:
        if self.size == 0:
            return True  # an empty array has no elements to misread, whatever its strides
        expect = self.itemsize
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != expect:
                return False
            expect *= n
        return True

    def view(self, dtype=None, shape=None) -> "DevArray":
        """Reinterpret a C-contiguous array with another dtype and/or shape (same byte count)."""
        dtype = np.dtype(dtype) if dtype is not None else self.dtype
        if not self.c_contiguous:
            raise ValueError("only C-contiguous arrays can be reinterpreted")
        if shape is None:
            shape = (self.nbytes // dtype.itemsize,)
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) * dtype.itemsize != self.nbytes:
            raise ValueError(f"cannot view {self.nbytes} bytes as {shape} of {dtype}")
        strides = _c_strides(shape, dtype.itemsize)
        owner = self.owner
        if isinstance(owner, np.ndarray):  # simulator: keep a NumPy view of the same bytes
            owner = owner.reshape(-1).view(np.uint8).view(dtype).reshape(shape)
        return DevArray(self.ptr, shape, strides, dtype, owner)

    def flat(self) -> "DevArray":
        """The same C-contiguous memory as a 1-D array."""
        owner = self.owner.reshape(-1) if isinstance(self.owner, np.ndarray) else self.owner
        return DevArray(self.ptr, (self.size,), (self.itemsize,), self.dtype, owner)

    def offset(self, nbytes: int, shape) -> "DevArray":
        """A C-contiguous sub-array starting ``nbytes`` into this one (chunking along N)."""
        shape = tuple(int(s) for s in shape)
        owner = self.owner
        if isinstance(owner, np.ndarray):
            flat = owner.reshape(-1).view(np.uint8)
            owner = flat[nbytes:nbytes + math.prod(shape) * self.itemsize].view(self.dtype).reshape(shape)
        return DevArray(self.ptr + nbytes, shape, _c_strides(shape, self.itemsize), self.dtype, owner)

    def host_view(self) -> np.ndarray:
        """Simulator only: the NumPy array a simulated kernel reads (bf16 as uint16 bits)."""
        a = self.owner
        if self.dtype.name == "bfloat16":
            a = a.view(np.uint16)
        return a

    def __repr__(self):
        return f"DevArray(ptr={self.ptr:#x}, shape={self.shape}, dtype={dtype_name(self.dtype)})"


def _c_strides(shape, itemsize):
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


# ----------------------------------------------------------------------------------- streams

def stream_handle(stream: Any) -> int:
    """The integer CUstream handle of ``stream`` (None or 0: the legacy default stream)."""
    if stream is None:
        return 0
    if isinstance(stream, (int, np.integer)):
        return int(stream)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    h = getattr(stream, "handle", None)  # numba Stream, cuda.core Stream
    if h is not None:
        v = getattr(h, "value", h)
        return int(v or 0)
    inner = getattr(stream, "stream", None)  # cuda.core GraphBuilder
    if inner is not None and inner is not stream:
        return stream_handle(inner)
    raise TypeError(f"stream: expected a CUDA stream (int handle, numba/cuda.core/torch/CuPy stream), "
                    f"got {type(stream).__name__}")


# ------------------------------------------------------------------------------- user inputs

class ArrayIn:
    """A user input adapted for the kernels: its ``DevArray``, its kind and its default stream."""

    __slots__ = ("dev", "kind", "default_stream", "device_id", "source")

    def __init__(self, dev: DevArray, kind: str, default_stream: int, device_id: int, source):
        self.dev = dev
        self.kind = kind  # "numpy" | "numba" | "torch" | "cupy" | "cai"
        self.default_stream = default_stream
        self.device_id = device_id
        self.source = source


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _is_cupy(x) -> bool:
    return type(x).__module__.startswith("cupy") and hasattr(x, "data")


def _torch_dtype_to_np(tdt):
    import torch

    table = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
             torch.uint8: np.dtype(np.uint8), torch.int32: np.dtype(np.int32), torch.bfloat16: _bf16(),
             torch.int16: np.dtype(np.int16), torch.int64: np.dtype(np.int64)}
    try:
        return table[tdt]
    except KeyError:
        raise TypeError(f"unsupported torch dtype {tdt}") from None


def adapt_input(x, name: str, simulated: bool) -> ArrayIn:
    """Wrap a NumPy array, numba device array, torch tensor, CuPy array or CAI object.

    NumPy inputs are made C-contiguous (host copies are cheap); device inputs must already be
    C-contiguous, otherwise a ValueError names the input (no hidden device copy).
    """
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        return ArrayIn(DevArray(0, a.shape, a.strides, a.dtype, a), "numpy", 0, -1, x)
    if simulated:
        host = getattr(x, "_ary", None)  # the simulator's FakeCUDAArray
        if isinstance(host, np.ndarray):
            if not host.flags.c_contiguous:
                raise ValueError(f"{name}: device arrays must be C-contiguous (got strides {host.strides})")
            return ArrayIn(DevArray(0, host.shape, host.strides, host.dtype, host), "numba", 0, 0, x)
        raise TypeError(f"{name}: expected a NumPy array or a CUDA array; under the CUDA simulator only NumPy "
                        f"arrays and numba (simulated) device arrays are accepted, got {type(x).__name__}")
    if _is_torch(x):
        if x.device.type != "cuda":
            raise TypeError(f"{name}: torch tensor must be on a CUDA device (got device '{x.device}')")
        import torch

        dt = _torch_dtype_to_np(x.dtype)
        its = dt.itemsize
        dev = DevArray(x.data_ptr(), tuple(x.shape), tuple(s * its for s in x.stride()), dt, x)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        return _contig(ArrayIn(dev, "torch", stream, x.device.index or 0, x), name)
    if _is_cupy(x):
        import cupy

        dev = DevArray(x.data.ptr, x.shape, x.strides, x.dtype, x)
        return _contig(ArrayIn(dev, "cupy", cupy.cuda.get_current_stream().ptr, x.device.id, x), name)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{name}: expected a NumPy array or a CUDA array (numba, torch, CuPy, "
                        f"__cuda_array_interface__), got {type(x).__name__}")
    dt = np.dtype(cai["typestr"]) if cai["typestr"] != "<V2" else _bf16()
    if dt.kind == "V" and dt.itemsize == 2:
        dt = _bf16()
    if hasattr(x, "dtype") and getattr(x.dtype, "name", "") == "bfloat16":
        dt = _bf16()
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or _c_strides(shape, dt.itemsize)
    kind = "numba" if type(x).__module__.startswith("numba") else "cai"
    dev_id = _numba_device_id() if kind == "numba" else 0
    return _contig(ArrayIn(DevArray(cai["data"][0], shape, strides, dt, x), kind, 0, dev_id, x), name)


def _contig(a: ArrayIn, name: str) -> ArrayIn:
    if not a.dev.c_contiguous:
        raise ValueError(f"{name}: device arrays must be C-contiguous (shape {a.dev.shape}, byte strides "
                         f"{a.dev.strides}); make a contiguous copy first")
    return a


def _numba_device_id() -> int:
    from numba import cuda

    return cuda.get_current_device().id


# ------------------------------------------------------------------------------ allocation

def device_empty(shape, dtype, simulated: bool) -> DevArray:
    """Allocate device memory (numba's allocator; NumPy under the simulator)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if simulated:
        a = np.empty(shape, dtype)
        return DevArray(0, shape, a.strides, dtype, a)
    from numba import cuda

    raw = cuda.device_array(max(math.prod(shape) * dtype.itemsize, 1), np.uint8)
    return DevArray(raw.__cuda_array_interface__["data"][0], shape, _c_strides(shape, dtype.itemsize), dtype, raw)


def to_device(a: np.ndarray, simulated: bool, stream: int = 0) -> DevArray:
    """Copy a host array to new device memory (synchronous; construction time only)."""
    a = np.ascontiguousarray(a)
    if simulated:
        return DevArray(0, a.shape, a.strides, a.dtype, a.copy())
    from numba import cuda

    raw = cuda.to_device(a.reshape(-1).view(np.uint8) if a.size else np.zeros(1, np.uint8))
    return DevArray(raw.__cuda_array_interface__["data"][0], a.shape, _c_strides(a.shape, a.itemsize), a.dtype, raw)


def to_host(d: DevArray, stream: int = 0) -> np.ndarray:
    """Copy a device array back to a new NumPy array (synchronises ``stream``)."""
    if isinstance(d.owner, np.ndarray):
        return np.array(d.owner, copy=True)
    out = np.empty(d.shape, d.dtype)
    if out.nbytes:
        from cuda.bindings import driver

        from .launch import check

        check(driver.cuMemcpyDtoHAsync(out.ctypes.data, d.ptr, out.nbytes, stream), "cuMemcpyDtoHAsync")
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
    return out


def copy_h2d(dst: DevArray, src: np.ndarray, stream: int = 0) -> None:
    src = np.ascontiguousarray(src)
    if isinstance(dst.owner, np.ndarray):
        dst.owner[...] = src.reshape(dst.shape).view(dst.owner.dtype) if src.dtype != dst.owner.dtype else src
        return
    if src.nbytes:
        from cuda.bindings import driver

        from .launch import check

        check(driver.cuMemcpyHtoDAsync(dst.ptr, src.ctypes.data, src.nbytes, stream), "cuMemcpyHtoDAsync")


def alloc_output(kind: str, shape, dtype, source, simulated: bool) -> DevArray:
    """Allocate an output of the caller's kind; ``DevArray.owner`` is what the caller gets back.

    torch inputs get a torch tensor (torch's caching allocator, on A's device), CuPy inputs a CuPy
    array, numba/CAI inputs a numba device array, NumPy inputs device scratch copied back later.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if simulated:
        return device_empty(shape, dtype, True)
    if kind == "torch":
        import torch

        tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype_name(dtype)]
        t = torch.empty(shape, dtype=tdt, device=source.device)
        return DevArray(t.data_ptr(), shape, _c_strides(shape, dtype.itemsize), dtype, t)
    if kind == "cupy":
        import cupy

        c = cupy.empty(shape, dtype=dtype)
        return DevArray(c.data.ptr, shape, c.strides, dtype, c)
    from numba import cuda

    arr = cuda.device_array(shape, dtype)
    return DevArray(arr.__cuda_array_interface__["data"][0], shape, _c_strides(shape, dtype.itemsize), dtype, arr)


def result_of(out: DevArray, kind: str, simulated: bool, stream: int):
    """The object handed back to the caller for output ``out`` (see ``alloc_output``)."""
    if kind == "numpy":
        return to_host(out, stream)
    if simulated and kind == "numba":
        from numba import cuda

        return cuda.to_device(out.owner)
    return out.owner
