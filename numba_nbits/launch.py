"""The fast launcher: compile each kernel specialisation once, launch it with pre-packed parameters.

An ordinary numba launch (``kernel[grid, block, stream](*args)``) costs ~38 us of host time on the
H200 (``shared/reference/h200-measurements.md``), more than a decode GEMV takes on the GPU. This
module removes that cost:

* ``Kernel`` holds a ``@cuda.jit`` Python function and its explicit numba signature. It is compiled
  the first time it is needed (never at import), and the loaded ``CUfunction`` is kept.
* ``Launch`` binds a ``Kernel`` to a grid, a block, dynamic shared memory and its arguments. The
  arguments are packed once into numba's kernel ABI (an array argument is ``meminfo, parent,
  nitems, itemsize, data, shape..., strides...``; every slot is 8 bytes wide, scalars sit in the low
  bytes) inside one int64 buffer, with a ``void**`` table pointing at the slots. ``set_array`` /
  ``set_scalar`` rewrite single slots (an activation or output pointer per call), and ``launch``
  is one ``cuLaunchKernel`` call on the caller's stream: nothing is allocated, synchronised or
  compiled, so it is safe while a CUDA graph is being captured. Each thread gets its own copy of
  the parameter buffer (made on its first use of the launch), so threads calling one operator on
  their own streams never see each other's pointers; the driver copies the parameters at launch.
* Under numba's CUDA simulator the same ``Launch`` falls back to the ordinary simulated launch
  with NumPy arrays, after installing the simulator extensions (``kernels/simulator.py``).
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from .arrays import DevArray

_GPU_ONLY_JIT_OPTIONS = ("lineinfo", "launch_bounds", "max_registers", "forceinline", "lto", "extensions")
_COMPILE_LOCK = threading.RLock()


def simulated() -> bool:
    """True when numba runs on its CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before import)."""
    from numba.cuda.core import config

    return bool(config.ENABLE_CUDASIM)


def _drv():
    from cuda.bindings import driver

    return driver


def check(result, what: str):
    """Raise RuntimeError if a cuda-bindings call returned an error; return the remaining values."""
    err = result[0]
    if int(err) != 0:
        drv = _drv()
        _, name = drv.cuGetErrorName(err)
        raise RuntimeError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name} ({int(err)})")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def is_capturing(stream_handle: int) -> bool:
    """Whether ``stream_handle`` is capturing a CUDA graph (always False under the simulator)."""
    if simulated():
        return False
    drv = _drv()
    status = check(drv.cuStreamIsCapturing(drv.CUstream(stream_handle)), "cuStreamIsCapturing")
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


class CaptureError(RuntimeError):
    """Raised when a call would compile, allocate or synchronise while a CUDA graph is captured."""


class Kernel:
    """A ``@cuda.jit`` function with one explicit signature, compiled lazily and once.

    ``argtypes`` are numba types (arrays as ``types.float16[:, ::1]`` etc.; scalars as
    ``types.int64`` / ``types.float32``). ``options`` go to ``cuda.jit`` (GPU-only keywords are
    dropped under the simulator, whose ``jit`` rejects them).
    """

    def __init__(self, pyfunc, argtypes: Sequence[Any], name: str | None = None, **options):
        self.pyfunc = pyfunc
        self.argtypes = tuple(argtypes)
        self.name = name or pyfunc.__name__
        self.options = options
        self._disp = None
        self._func = None
        self._kern = None
        self._layout = None  # per argument: (first slot, number of slots, kind)
        self._max_dyn_shared = 0

    # -- compilation ---------------------------------------------------------------------------
    def dispatcher(self):
        """The numba dispatcher (compiled for ``argtypes`` on a GPU)."""
        if self._disp is None:
            with _COMPILE_LOCK:
                if self._disp is None:
                    from numba import cuda

                    if simulated():
                        opts = {k: v for k, v in self.options.items() if k not in _GPU_ONLY_JIT_OPTIONS}
                        self._disp = cuda.jit(**opts)(self.pyfunc)
                    else:
                        from numba.cuda import types

                        sig = types.void(*self.argtypes)
                        disp = cuda.jit(sig, **self.options)(self.pyfunc)
                        kern = next(iter(disp.overloads.values()))
                        cufunc = kern._codelibrary.get_cufunc()  # loads the module now, not at launch
                        drv = _drv()
                        self._func = drv.CUfunction(int(cufunc.handle))
                        self._kern = kern
                        self._layout = _layout_of(self.argtypes)
                        self._disp = disp
        return self._disp

    @property
    def compiled(self) -> bool:
        return self._disp is not None

    def ensure_dynamic_shared(self, nbytes: int) -> None:
        """Allow more than 48 KiB of dynamic shared memory (numba has no API: NVIDIA/numba-cuda#94)."""
        self.dispatcher()
        if simulated() or nbytes <= max(self._max_dyn_shared, 48 * 1024):
            return
        drv = _drv()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(drv.cuFuncSetAttribute(self._func, attr, int(nbytes)), "cuFuncSetAttribute(max dynamic shared)")
        self._max_dyn_shared = int(nbytes)

    def registers(self) -> int:
        """Registers per thread of the compiled kernel (GPU only)."""
        self.dispatcher()
        return int(self._kern._codelibrary.get_cufunc().attrs.regs)

    def bind(self, grid, block, args: Sequence[Any], shared_mem: int = 0) -> "Launch":
        return Launch(self, grid, block, args, shared_mem)


def _layout_of(argtypes):
    from numba.cuda import types

    layout, slot = [], 0
    for t in argtypes:
        if isinstance(t, types.Array):
            n = 5 + 2 * t.ndim
            layout.append((slot, n, "array", t))
        elif isinstance(t, (types.Integer, types.Float, types.Boolean)):
            n = 1
            layout.append((slot, n, "scalar", t))
        else:
            raise TypeError(f"numba_nbits launcher: unsupported kernel argument type {t}")
        slot += n
    return layout, slot


def _dims(d):
    if isinstance(d, int):
        return (d, 1, 1)
    d = tuple(int(x) for x in d)
    return d + (1,) * (3 - len(d))


class Launch:
    """A kernel bound to its launch geometry and a packed parameter buffer (see module docstring)."""

    __slots__ = ("kernel", "grid", "block", "shared_mem", "_vals", "_ptrs", "_ptrs_addr", "_args", "_tls",
                 "_func", "_layout")

    def __init__(self, kernel: Kernel, grid, block, args: Sequence[Any], shared_mem: int = 0):
        if len(args) != len(kernel.argtypes):
            raise TypeError(f"{kernel.name}: expected {len(kernel.argtypes)} arguments, got {len(args)}")
        self.kernel = kernel
        self.grid = _dims(grid)
        self.block = _dims(block)
        self.shared_mem = int(shared_mem)
        self._tls = threading.local()
        kernel.dispatcher()
        if shared_mem:
            kernel.ensure_dynamic_shared(shared_mem)
        self._args = list(args)
        if simulated():
            self._vals = self._ptrs = self._layout = self._func = None
            self._ptrs_addr = 0
            return
        (layout, nslots) = kernel._layout
        self._layout = layout
        self._func = kernel._func
        self._vals = np.zeros(max(nslots, 1), dtype=np.int64)
        base = self._vals.ctypes.data
        self._ptrs = np.arange(nslots, dtype=np.uint64) * np.uint64(8) + np.uint64(base)
        self._ptrs_addr = int(self._ptrs.ctypes.data)
        for i, a in enumerate(args):
            if layout[i][2] == "array":
                self.set_array(i, a)
            else:
                self.set_scalar(i, a)
        self._tls.bufs = (self._vals, self._ptrs, self._ptrs_addr)

    def _bufs(self):
        """This thread's (values, pointer table, table address), copied from the template on first use."""
        b = getattr(self._tls, "bufs", None)
        if b is None:
            vals = self._vals.copy()
            ptrs = np.arange(vals.size, dtype=np.uint64) * np.uint64(8) + np.uint64(vals.ctypes.data)
            b = self._tls.bufs = (vals, ptrs, int(ptrs.ctypes.data))
        return b

    def set_array(self, i: int, a: DevArray) -> None:
        """Point array argument ``i`` at ``a`` (shape and strides must fit the kernel's signature)."""
        if self._vals is None:
            self._args[i] = a
            return
        first, n, kind, t = self._layout[i]
        vals = self._bufs()[0] if hasattr(self._tls, "bufs") else self._vals
        if a.ndim != t.ndim:
            raise ValueError(f"{self.kernel.name}: argument {i} needs a {t.ndim}-D array, got shape {a.shape}")
        if np.dtype(a.dtype).itemsize != t.dtype.bitwidth // 8:
            raise ValueError(f"{self.kernel.name}: argument {i} needs {t.dtype} elements, got {a.dtype}")
        vals[first:first + n] = (0, 0, a.size, a.itemsize, a.ptr, *a.shape, *a.strides)

    def set_scalar(self, i: int, v) -> None:
        if self._vals is None:
            self._args[i] = v
            return
        first, _, _, t = self._layout[i]
        if t.name == "float32":
            v = int(np.float32(v).view(np.int32))
        elif t.name == "float64":
            v = int(np.float64(v).view(np.int64))
        vals = self._bufs()[0] if hasattr(self._tls, "bufs") else self._vals
        vals[first] = int(v)

    def launch(self, stream: int = 0) -> None:
        """Launch on the stream with handle ``stream`` (an int; 0 is the legacy default stream)."""
        if self._vals is None:
            self._launch_simulated()
            return
        drv = _drv()
        g, b = self.grid, self.block
        err, = drv.cuLaunchKernel(self._func, g[0], g[1], g[2], b[0], b[1], b[2], self.shared_mem,
                                  stream, self._bufs()[2], 0)
        if int(err) != 0:
            check((err,), f"cuLaunchKernel({self.kernel.name})")

    __call__ = launch

    def _launch_simulated(self):
        from .kernels import simulator

        simulator.install()
        disp = self.kernel.dispatcher()
        args = [a.host_view() if isinstance(a, DevArray) else a for a in self._args]
        with _COMPILE_LOCK:  # the simulator runs one launch at a time
            disp[self.grid, self.block, 0, self.shared_mem](*args)
