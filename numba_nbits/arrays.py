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

from .launch.driver import check

__all__ = ["DevArray", "bfloat16", "dtype_name", "stream_handle", "ArrayIn", "adapt_input"]


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def bfloat16() -> np.dtype:
    """The host bfloat16 dtype (``ml_dtypes.bfloat16``)."""
    return _bf16()


_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)
_NAMES = {_F32: "float32", _F16: "float16"}
_BF16 = None  # the bf16 dtype object once seen (numpy's builtin dtypes are singletons, so `is` finds them)


def dtype_name(dt) -> str:
    """'float32' | 'float16' | 'bfloat16' | numpy's name for anything else."""
    # identity first: hashing an np.dtype (a dict lookup) costs microseconds, and this runs per call
    if dt is _F16:
        return "float16"
    if dt is _F32:
        return "float32"
    if dt is _BF16 and dt is not None:
        return "bfloat16"
    return _dtype_name_slow(dt)


def _dtype_name_slow(dt) -> str:
    global _BF16
    dt = np.dtype(dt)
    name = _NAMES.get(dt)
    if name:
        return name
    if dt.name == "bfloat16":
        _BF16 = dt
        return "bfloat16"
    return dt.name


def np_dtype(name: str) -> np.dtype:
    return _bf16() if name == "bfloat16" else np.dtype(name)


class DevArray:
    """A typed view of device memory (or of a NumPy array under the simulator)."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "owner", "_cc")

    def __init__(self, ptr: int, shape, strides, dtype, owner):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = np.dtype(dtype)
        self.owner = owner
        self._cc = None  # C-contiguity, computed on first use

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: math.prod(self.shape) * self.dtype.itemsize)

    @property
    def c_contiguous(self) -> bool:
        cc = self._cc
        if cc is None:
            cc = self._cc = _is_c_contiguous(self.shape, self.strides, self.dtype.itemsize)
        return cc

    def view(self, dtype=None, shape=None) -> "DevArray":
        """Reinterpret a C-contiguous array with another dtype and/or shape (same byte count)."""
        dtype = self.dtype if dtype is None else _as_dtype(dtype)
        if not self.c_contiguous:
            raise ValueError("only C-contiguous arrays can be reinterpreted")
        nbytes = math.prod(self.shape) * self.dtype.itemsize
        its = dtype.itemsize
        if shape is None:
            shape = (nbytes // its,)
        elif type(shape) is not tuple or len(shape) != 1 or type(shape[0]) is not int:
            shape = tuple(int(s) for s in shape)
        if math.prod(shape) * its != nbytes:
            raise ValueError(f"cannot view {nbytes} bytes as {shape} of {dtype}")
        strides = (its,) if len(shape) == 1 else _c_strides(shape, its)
        owner = self.owner
        if isinstance(owner, np.ndarray):  # simulator: keep a NumPy view of the same bytes
            owner = owner.reshape(-1).view(np.uint8).view(dtype).reshape(shape)
        return _mk(self.ptr, shape, strides, dtype, owner, True)

    def flat(self) -> "DevArray":
        """The same C-contiguous memory as a 1-D array."""
        owner = self.owner.reshape(-1) if isinstance(self.owner, np.ndarray) else self.owner
        return _mk(self.ptr, (math.prod(self.shape),), (self.dtype.itemsize,), self.dtype, owner, True)

    def offset(self, nbytes: int, shape) -> "DevArray":
        """A C-contiguous sub-array starting ``nbytes`` into this one (chunking along N)."""
        shape = tuple(int(s) for s in shape)
        owner = self.owner
        if isinstance(owner, np.ndarray):
            flat = owner.reshape(-1).view(np.uint8)
            owner = flat[nbytes:nbytes + math.prod(shape) * self.itemsize].view(self.dtype).reshape(shape)
        return _mk(self.ptr + int(nbytes), shape, _c_strides(shape, self.itemsize), self.dtype, owner, True)

    def host_view(self) -> np.ndarray:
        """Simulator only: the NumPy array a simulated kernel reads (bf16 as uint16 bits)."""
        a = self.owner
        if self.dtype.name == "bfloat16":
            a = a.view(np.uint16)
        return a

    def __repr__(self):
        return f"DevArray(ptr={self.ptr:#x}, shape={self.shape}, dtype={dtype_name(self.dtype)})"


_new = object.__new__


def _mk(ptr: int, shape: tuple, strides: tuple, dtype: np.dtype, owner, cc=None) -> DevArray:
    """A DevArray from already-normalised fields (int ptr, tuples of ints, np.dtype): the per-call
    constructor, without ``__init__``'s conversions. ``cc``: C-contiguity when already known."""
    d = _new(DevArray)
    d.ptr = ptr
    d.shape = shape
    d.strides = strides
    d.dtype = dtype
    d.owner = owner
    d._cc = cc
    return d


def _is_c_contiguous(shape, strides, itemsize) -> bool:
    if math.prod(shape) == 0:
        return True  # an empty array has no elements to misread, whatever its strides
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


_DTYPES: dict = {}


def _as_dtype(dt) -> np.dtype:
    """``np.dtype(dt)``, memoised for the scalar types the plans pass on every call (np.uint32, ...)."""
    if isinstance(dt, np.dtype):
        return dt
    try:
        return _DTYPES[dt]
    except (KeyError, TypeError):
        pass
    d = np.dtype(dt)
    if isinstance(dt, type) and len(_DTYPES) < 64:
        _DTYPES[dt] = d
    return d


def _c_strides(shape, itemsize):
    if len(shape) == 2:
        return (max(shape[1], 1) * itemsize, itemsize)
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


_TORCH_DTYPES: dict = {}


def _torch_dtype_to_np(tdt):
    table = _TORCH_DTYPES
    if not table:
        import torch

        table.update({torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
                      torch.uint8: np.dtype(np.uint8), torch.int32: np.dtype(np.int32), torch.bfloat16: _bf16(),
                      torch.int16: np.dtype(np.int16), torch.int64: np.dtype(np.int64)})
    try:
        return table[tdt]
    except KeyError:
        raise TypeError(f"unsupported torch dtype {tdt}") from None


def adapt_input(x, name: str, simulated: bool, want_stream: bool = True) -> ArrayIn:
    """Wrap a NumPy array, numba device array, torch tensor, CuPy array or CAI object.

    NumPy inputs are made C-contiguous (host copies are cheap); device inputs must already be
    C-contiguous, otherwise a ValueError names the input (no hidden device copy).
    ``want_stream=False`` skips looking up the producer's current stream (``default_stream`` is then 0):
    an ``out=`` or a call with an explicit ``stream=`` does not need it.

    The common device types (numba ``DeviceNDArray``, ``torch.Tensor``, ``cupy.ndarray``, by exact type)
    take a fast path that reads their attributes directly; everything else, subclasses included,
    takes the generic path. Both apply the same checks with the same messages.
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
    t = type(x)
    fast = _FAST.get(t)
    if fast is None:
        fast = _FAST[t] = _fast_adapter_for(t) if len(_FAST) < 256 else _adapt_generic
    return fast(x, name, want_stream)


_FAST: dict = {}


def _fast_adapter_for(t):
    """The adapter for objects of exactly type ``t`` (looked up once per type)."""
    mod = t.__module__ or ""
    try:
        if mod.startswith("numba"):
            from numba.cuda.cudadrv.devicearray import DeviceNDArray

            if t is DeviceNDArray:
                return _adapt_numba
        elif mod.startswith("torch"):
            import torch

            if t is torch.Tensor:
                return _adapt_torch
        elif mod.startswith("cupy"):
            import cupy

            if t is cupy.ndarray:
                return _adapt_cupy
    except ImportError:
        pass
    return _adapt_generic


def _adapt_generic(x, name: str, want_stream: bool) -> ArrayIn:
    if _is_torch(x):
        return _adapt_torch_any(x, name, want_stream)
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
    dev_id = _numba_array_device_id(x) if kind == "numba" else 0
    return _contig(ArrayIn(DevArray(cai["data"][0], shape, strides, dt, x), kind, 0, dev_id, x), name)


def _adapt_torch_any(x, name: str, want_stream: bool) -> ArrayIn:
    """torch tensors of any (sub)type: the reference path."""
    if x.device.type != "cuda":
        raise TypeError(f"{name}: torch tensor must be on a CUDA device (got device '{x.device}')")
    dt = _torch_dtype_to_np(x.dtype)
    its = dt.itemsize
    dev = DevArray(x.data_ptr(), tuple(x.shape), tuple(s * its for s in x.stride()), dt, x)
    idx = x.device.index or 0
    stream = _torch_current_stream(idx) if want_stream else 0
    return _contig(ArrayIn(dev, "torch", stream, idx, x), name)


def _adapt_torch(x, name: str, want_stream: bool) -> ArrayIn:
    """Exactly ``torch.Tensor``: C-level accessors only (no torch.device objects, no Stream objects)."""
    if not x.is_cuda:
        return _adapt_torch_any(x, name, want_stream)  # raises the device error
    dt = _TORCH_DTYPES.get(x.dtype)  # (not `or`: an np.dtype without fields is falsy)
    if dt is None:
        dt = _torch_dtype_to_np(x.dtype)
    its = dt.itemsize
    st = x.stride()
    strides = (st[0] * its, st[1] * its) if len(st) == 2 else tuple(s * its for s in st)
    idx = x.get_device()
    dev = _mk(x.data_ptr(), tuple(x.shape), strides, dt, x, True if x.is_contiguous() else None)
    a = ArrayIn(dev, "torch", _torch_current_stream(idx) if want_stream else 0, idx, x)
    return a if dev._cc else _contig(a, name)


_torch_raw_stream = None


def _torch_current_stream(idx: int) -> int:
    """Handle of torch's current stream on device ``idx`` (``torch.cuda.current_stream(idx).cuda_stream``)."""
    global _torch_raw_stream
    f = _torch_raw_stream
    if f is None:
        import torch

        f = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own generated code uses
        if f is None:
            def f(i):
                return torch.cuda.current_stream(i).cuda_stream
        _torch_raw_stream = f
    return f(idx)


def _adapt_cupy(x, name: str, want_stream: bool) -> ArrayIn:
    """Exactly ``cupy.ndarray``."""
    mem = x.data
    dt = x.dtype
    dev = _mk(mem.ptr, x.shape, x.strides, dt, x, True if x.flags.c_contiguous else None)
    if want_stream:
        import cupy

        stream = cupy.cuda.get_current_stream().ptr
    else:
        stream = 0
    dev_id = getattr(mem, "device_id", None)
    a = ArrayIn(dev, "cupy", stream, x.device.id if dev_id is None else dev_id, x)
    return a if dev._cc else _contig(a, name)


def _adapt_numba(x, name: str, want_stream: bool) -> ArrayIn:
    """Exactly numba's ``DeviceNDArray``: its pointer, shape, strides and dtype are plain attributes
    (no ``__cuda_array_interface__`` dict); the device is that of the memory's context."""
    dt = x.dtype
    if dt.kind == "V" and dt.itemsize == 2:
        dt = _bf16()
    gd = x.gpu_data
    # an OwnedPointer (what numba's allocations hold) keeps device_ctypes_pointer as a plain attribute;
    # a MemoryPointer (slices) computes it: either way what __cuda_array_interface__ reports
    ptr = (gd.device_ctypes_pointer.value or 0) if gd is not None else 0
    dummy = getattr(x, "_dummy", None)
    cc = True if (dummy is not None and dummy.is_c_contig) else None  # numba's rule is the stricter one
    dev = _mk(ptr, x.shape, x.strides, dt, x, cc)
    a = ArrayIn(dev, "numba", 0, _numba_array_device_id(x), x)
    return a if cc else _contig(a, name)


def _contig(a: ArrayIn, name: str) -> ArrayIn:
    if not a.dev.c_contiguous:
        raise ValueError(f"{name}: device arrays must be C-contiguous (shape {a.dev.shape}, byte strides "
                         f"{a.dev.strides}); make a contiguous copy first")
    return a


def _numba_array_device_id(x) -> int:
    """The device of a numba array's memory (its context's device); the current device if unknown."""
    try:
        return x.gpu_data.context.device.id
    except Exception:
        return _numba_device_id()


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
        t = torch.empty(shape, dtype=tdt, device=source.device)  # (torch's caching allocator: ~no cost)
        return DevArray(t.data_ptr(), shape, _c_strides(shape, dtype.itemsize), dtype, t)
    if kind == "cupy":
        import cupy

        c = cupy.empty(shape, dtype=dtype)
        return DevArray(c.data.ptr, shape, c.strides, dtype, c)
    from numba import cuda

    # numba's allocator: cuMemAlloc plus numba's bookkeeping, tens of microseconds per call on an H200
    # (~35 us); a pool of our own could hand the caller memory still read by work it queued on another
    # stream before dropping the array, so there is none: pass out= (or torch / CuPy arrays, whose
    # caching allocators are stream-aware) for the lowest latency.
    arr = cuda.device_array(shape, dtype)
    gd = arr.gpu_data
    ptr = (gd.device_ctypes_pointer.value or 0) if gd is not None else 0
    return _mk(ptr, shape, _c_strides(shape, dtype.itemsize), dtype, arr, True)


def result_of(out: DevArray, kind: str, simulated: bool, stream: int):
    """The object handed back to the caller for output ``out`` (see ``alloc_output``)."""
    if kind == "numpy":
        return to_host(out, stream)
    if simulated and kind == "numba":
        from numba import cuda

        return cuda.to_device(out.owner)
    return out.owner
