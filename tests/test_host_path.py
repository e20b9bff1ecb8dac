"""The per-call host path: fast input adapters, cheap DevArray views, the launcher's per-thread buffers.

The fast paths (``arrays._adapt_numba`` / ``_adapt_torch`` / ``_adapt_cupy``, the launcher's packed
parameter buffers) only run on a GPU in normal use. Here they are also driven with stand-in objects
on any machine (a stand-in driver records each ``cuLaunchKernel``) and the adapters are compared field
by field with the generic (reference) paths; on a GPU the real numba / torch / CuPy objects are
compared too.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu, to_dev

import numba_nbits as nb
from numba_nbits import arrays, backend, launch
from numba_nbits.arrays import DevArray, _mk, adapt_input
from numba_nbits.launch import driver as launch_driver
from numba_nbits.launch import kernel as launch_kernel


def fields(a):
    d = a.dev
    return (d.ptr, tuple(d.shape), tuple(d.strides), d.dtype, a.kind, a.default_stream, a.device_id)


# ------------------------------------------------------------------------------ DevArray

def test_view_flat_offset_match_the_reference_semantics():
    owner = np.zeros((4, 6), np.float16)
    d = DevArray(0x1000, (4, 6), (12, 2), np.float16, owner)
    assert d.c_contiguous and d.nbytes == 48 and d.size == 24 and d.ndim == 2
    v = d.view(np.uint32, (12,))
    assert (v.ptr, v.shape, v.strides, v.dtype) == (0x1000, (12,), (4,), np.dtype(np.uint32))
    v2 = d.view(np.uint8)
    assert (v2.shape, v2.strides) == ((48,), (1,))
    v3 = d.view(shape=(2, 12))
    assert (v3.shape, v3.strides) == ((2, 12), (24, 2))
    f = d.flat()
    assert (f.shape, f.strides, f.dtype) == ((24,), (2,), np.dtype(np.float16))
    o = d.offset(8, (2, 2))
    assert (o.ptr, o.shape, o.strides) == (0x1008, (2, 2), (4, 2))
    with pytest.raises(ValueError, match="cannot view 48 bytes"):
        d.view(np.uint32, (13,))
    nc = DevArray(0x1000, (4, 6), (24, 2), np.float16, None)
    assert not nc.c_contiguous
    with pytest.raises(ValueError, match="only C-contiguous"):
        nc.view(np.uint32, (12,))
    assert DevArray(0, (0, 5), (7, 3), np.float16, None).c_contiguous  # empty: contiguous whatever the strides
    assert DevArray(0, (1, 5), (999, 2), np.float16, None).c_contiguous  # size-1 dims: any stride
    m = _mk(5, (2, 3), (6, 2), np.dtype(np.float16), None)
    assert m.c_contiguous and m.nbytes == 12


def test_dtype_name_cache():
    import ml_dtypes

    assert arrays.dtype_name(np.float16) == "float16"
    assert arrays.dtype_name(np.dtype(np.float32)) == "float32"
    assert arrays.dtype_name(np.dtype(ml_dtypes.bfloat16)) == "bfloat16"
    assert arrays.dtype_name(np.dtype(ml_dtypes.bfloat16)) == "bfloat16"  # now cached
    assert arrays.dtype_name(np.int32) == "int32"
    assert arrays.dtype_name("float64") == "float64"


# ---------------------------------------------------------------- fast adapters, stand-ins

class _Dummy:
    def __init__(self, c):
        self.is_c_contig = c


class _Ctx:
    class device:
        id = 3


class _GpuData:
    def __init__(self, ptr):
        import ctypes

        self.device_pointer = ptr
        self.device_ctypes_pointer = ctypes.c_size_t(ptr)
        self.context = _Ctx()


class FakeNumba:
    """What ``_adapt_numba`` reads of a numba DeviceNDArray, plus the CAI the generic path reads."""

    def __init__(self, shape, strides, dtype, ptr=0x7000, c=True):
        self.shape, self.strides, self.dtype = shape, strides, np.dtype(dtype)
        self.gpu_data = _GpuData(ptr)
        self._dummy = _Dummy(c)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": self.strides, "data": (self.gpu_data.device_pointer, False),
                "typestr": self.dtype.str, "version": 3}


def test_numba_fast_adapter_matches_generic():
    for shape, strides, c in (((3, 8), (16, 2), True), ((1, 8), (999, 2), True), ((0, 8), (16, 2), True)):
        x = FakeNumba(shape, strides, np.float16, c=c)
        fast = arrays._adapt_numba(x, "A", True)
        gen = arrays._adapt_generic(x, "A", True)
        assert fields(fast)[:4] == fields(gen)[:4]
        assert fast.kind == "numba" and fast.default_stream == 0 and fast.device_id == 3  # the memory's device
    # numba says "not contiguous" but our rule (size-1 dims free) accepts: the fast path must accept too
    x = FakeNumba((1, 8), (999, 2), np.float16, c=False)
    assert arrays._adapt_numba(x, "A", True).dev.c_contiguous
    x = FakeNumba((3, 8), (32, 2), np.float16, c=False)
    with pytest.raises(ValueError, match="A: device arrays must be C-contiguous"):
        arrays._adapt_numba(x, "A", True)
    with pytest.raises(ValueError, match="A: device arrays must be C-contiguous"):
        arrays._adapt_generic(x, "A", True)


class _TDev:
    def __init__(self, kind, index):
        self.type, self.index = kind, index

    def __str__(self):
        return f"{self.type}:{self.index}" if self.index is not None else self.type


class FakeTorch:
    """What the torch adapters read of a tensor."""

    def __init__(self, shape, stride, dtype="float16", cuda=True, index=1, contiguous=True):
        import torch

        self.shape, self._stride = torch.Size(shape), tuple(stride)
        self.dtype = getattr(torch, dtype)
        self.is_cuda = cuda
        self.device = _TDev("cuda" if cuda else "cpu", index if cuda else None)
        self._index = index if cuda else -1
        self._contig = contiguous

    def data_ptr(self):
        return 0x9000

    def stride(self):
        return self._stride

    def get_device(self):
        return self._index

    def is_contiguous(self):
        return self._contig


def test_torch_fast_adapter_matches_reference(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(arrays, "_torch_raw_stream", lambda i: 0x5000 + i)
    for shape, stride, c in (((2, 8), (8, 1), True), ((1, 8), (77, 1), True), ((2, 3, 8), (24, 8, 1), True)):
        x = FakeTorch(shape, stride, contiguous=c)
        assert fields(arrays._adapt_torch(x, "A", True)) == fields(arrays._adapt_torch_any(x, "A", True))
        assert arrays._adapt_torch(x, "A", True).default_stream == 0x5001
        assert arrays._adapt_torch(x, "out", False).default_stream == 0
    x = FakeTorch((2, 8), (16, 1), contiguous=False)
    for f in (arrays._adapt_torch, arrays._adapt_torch_any):
        with pytest.raises(ValueError, match=r"A: device arrays must be C-contiguous \(shape \(2, 8\), byte strides"):
            f(x, "A", True)
        with pytest.raises(TypeError, match="A: torch tensor must be on a CUDA device"):
            f(FakeTorch((2, 8), (8, 1), cuda=False), "A", True)
        with pytest.raises(TypeError, match="unsupported torch dtype"):
            f(FakeTorch((2, 8), (8, 1), dtype="float64"), "A", True)


def test_real_cpu_torch_tensor_is_rejected_outside_the_simulator_branch():
    torch = pytest.importorskip("torch")
    t = torch.zeros(2, 8, dtype=torch.float16)
    with pytest.raises(TypeError, match="A: torch tensor must be on a CUDA device"):
        adapt_input(t, "A", False)
    assert arrays._FAST[torch.Tensor] is arrays._adapt_torch


class _CMem:
    def __init__(self, ptr, dev):
        self.ptr, self.device_id = ptr, dev


class FakeCupy:
    def __init__(self, shape, strides, c=True):
        self.shape, self.strides, self.dtype = shape, strides, np.dtype(np.float16)
        self.data = _CMem(0xA000, 2)
        self.flags = type("F", (), {"c_contiguous": c})()
        self.device = type("D", (), {"id": 2})()


def test_cupy_fast_adapter(monkeypatch):
    x = FakeCupy((2, 8), (16, 2))
    a = arrays._adapt_cupy(x, "out", False)
    assert fields(a) == (0xA000, (2, 8), (16, 2), np.dtype(np.float16), "cupy", 0, 2)
    with pytest.raises(ValueError, match="out: device arrays must be C-contiguous"):
        arrays._adapt_cupy(FakeCupy((2, 8), (32, 2), c=False), "out", False)


def test_unknown_types_take_the_generic_path():
    class Weird:
        pass

    with pytest.raises(TypeError, match="expected a NumPy array or a CUDA array"):
        adapt_input(Weird(), "A", False)
    assert arrays._FAST[Weird] is arrays._adapt_generic


# ------------------------------------------------------------------ launcher, stand-in driver

class _FakeKernel:
    def __init__(self, argtypes):
        self.name = "fake"
        self.argtypes = tuple(argtypes)
        self._layout = launch_kernel._layout_of(self.argtypes)
        self._func = 0xF00

    def dispatcher(self):
        return None

    def ensure(self):
        return None


class _FakeDriver:
    """Stands in for ``cuda.bindings.driver``: ``cuLaunchKernel`` records (its arguments, the first 12 int64
    parameter slots its ``void**`` table points at) and answers the next of ``answers`` (0 when none are left)."""

    def __init__(self):
        self.calls, self.answers = [], []

    def cuLaunchKernel(self, *args):
        import ctypes

        table = args[9]
        ptrs = np.ctypeslib.as_array((ctypes.c_uint64 * 12).from_address(table))
        self.calls.append((args, [ctypes.c_int64.from_address(int(p)).value for p in ptrs]))
        return (self.answers.pop(0) if self.answers else 0,)


def _params(ptr, shape, strides, itemsize):
    """One array argument's parameter slots as the selected compiler lays them out (``backend.array_params``:
    under numba-cuda meminfo, parent, nitems, itemsize, data, shape, strides)."""
    return list(backend.array_params(ptr, shape, strides, itemsize))


def _head(pa, pb):
    """The first 12 slots the fake kernel's launch passes: argument 0 (1-D float16 at ``pa``), then the head of
    argument 1 (2-D uint32 at ``pb``)."""
    return (_params(pa, (8,), (2,), 2) + _params(pb, (2, 4), (16, 4), 4))[:12]


PTR = backend.array_ptr_slot()  # argument 0's data-pointer slot
# numba-cuda-mlir passes an array as a memref descriptor whose first slot, the allocated pointer, kernels never
# read; the lean paths (set_array_ptr on an unchanged layout, pointer_launcher) write only the data pointer
ALLOC = (0,) if backend.compiler() == "mlir" else ()


def _read(vals, *starts):
    """``vals`` less the never-read allocated-pointer slot of the arrays whose slots begin at ``starts``."""
    skip = {st + a for st in starts for a in ALLOC}
    return [v for i, v in enumerate(vals) if i not in skip]


def _fake_launch(monkeypatch):
    """A ``Launch`` built as on a GPU, launching through a ``_FakeDriver`` (returned with it)."""
    from numba.cuda import types

    drv = _FakeDriver()
    monkeypatch.setattr(launch_driver, "_SIMULATED", False)
    monkeypatch.setattr(launch_kernel, "_drv", lambda: drv)
    k = _FakeKernel((types.float16[::1], types.uint32[:, ::1], types.int64))
    a0 = DevArray(0x100, (8,), (2,), np.float16, None)
    b0 = DevArray(0x200, (2, 4), (16, 4), np.uint32, None)
    L = launch.Launch(k, (3, 2), 64, (a0, b0, 7), shared_mem=0)
    return L, drv


def test_launch_rewrites_only_the_pointer_and_launches_once(monkeypatch):
    L, drv = _fake_launch(monkeypatch)
    calls = drv.calls
    L.launch(0)
    args, vals = calls[-1]
    assert args[:8] == (0xF00, 3, 2, 1, 64, 1, 1, 0) and args[8] == 0 and args[10] == 0
    assert vals == _head(0x100, 0x200)  # first 12 slots: array 0, then array 1's head
    L.set_array(0, DevArray(0x140, (8,), (2,), np.float16, None))
    L.launch(0x77)
    args, vals = calls[-1]
    assert args[8] == 0x77 and vals[PTR] == 0x140
    L.set_array(0, DevArray(0x180, (4,), (2,), np.float16, None))  # a new shape: the whole slot range
    L.launch(0)
    new = _params(0x180, (4,), (2,), 2)
    assert calls[-1][1][:len(new)] == new
    with pytest.raises(ValueError, match="needs a 1-D array"):
        L.set_array(0, DevArray(0x180, (2, 2), (4, 2), np.float16, None))
    with pytest.raises(ValueError, match="needs float16 elements"):
        L.set_array(0, DevArray(0x180, (4,), (4,), np.float32, None))
    # the template is never written after construction
    assert int(L._template.vals[PTR]) == 0x100


def test_set_array_ptr_equals_set_array_of_the_view(monkeypatch):
    L, drv = _fake_launch(monkeypatch)
    calls = drv.calls
    like = DevArray(0, (4,), (2,), np.float16, None)
    L.set_array_ptr(0, 0x300, like)  # new layout in this thread: all the argument's slots
    L.launch(0)
    n = backend.array_slots(1)
    assert calls[-1][1][:n] == _params(0x300, (4,), (2,), 2)
    L.set_array_ptr(0, 0x340, like)  # same layout: the pointer only
    L.launch(0)
    assert _read(calls[-1][1][:n], 0) == _read(_params(0x340, (4,), (2,), 2), 0)
    L.set_array(0, DevArray(0x380, (4,), (2,), np.float16, None))
    L.launch(0)
    assert _read(calls[-1][1][:n], 0) == _read(_params(0x380, (4,), (2,), 2), 0)
    got = []
    t = threading.Thread(target=lambda: (L.set_array_ptr(0, 0x3C0, like), L.launch(0), got.append(1)))
    t.start()
    t.join()
    assert got and _read(calls[-1][1][:n], 0) == _read(_params(0x3C0, (4,), (2,), 2), 0)  # a fresh thread starts from the template


def test_launch_threads_have_their_own_buffers(monkeypatch):
    L, drv = _fake_launch(monkeypatch)
    calls = drv.calls
    L.set_array(0, DevArray(0x111, (8,), (2,), np.float16, None))
    seen = {}
    together = threading.Barrier(4)

    def worker(ptr):
        L.set_array(0, DevArray(ptr, (8,), (2,), np.float16, None))
        together.wait()  # all four alive at once, each with its buffer
        seen[ptr] = L._bufs().addr
        L.launch(0)
        together.wait()

    ts = [threading.Thread(target=worker, args=(0x1000 * (i + 1),)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(set(seen.values()) | {L._bufs().addr}) == 5
    assert sorted(c[1][PTR] for c in calls) == [0x1000, 0x2000, 0x3000, 0x4000]
    L.launch(0)
    assert calls[-1][1][PTR] == 0x111  # this thread's pointer survived the others


def test_launch_error_is_reported(monkeypatch):
    pytest.importorskip("cuda.bindings")
    L, drv = _fake_launch(monkeypatch)
    drv.answers = [1]  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel\(fake\) failed: .*\(1\)"):
        L.launch(0)


def test_pointer_launcher_writes_its_own_buffer_and_launches_once(monkeypatch):
    """``Launch.pointer_launcher`` (the steady-state path's lean launch): the ``like`` layouts written once,
    then only the data pointers per call, into a buffer that is neither the template nor the thread's."""
    L, drv = _fake_launch(monkeypatch)
    calls = drv.calls
    like_a = DevArray(0, (4,), (2,), np.float16, None)
    like_b = DevArray(0, (2, 4), (16, 4), np.uint32, None)
    go = L.pointer_launcher(((0, like_a), (1, like_b)))
    go(0x500, 0x600, 0x33)
    args, vals = calls[-1]
    assert args[:8] == (0xF00, 3, 2, 1, 64, 1, 1, 0) and args[8] == 0x33 and args[10] == 0
    b0 = backend.array_slots(1)
    assert _read(vals, 0, b0) == _read((_params(0x500, (4,), (2,), 2) + _params(0x600, (2, 4), (16, 4), 4))[:12], 0, b0)
    assert args[9] not in (L._template.addr, L._bufs().addr)
    b_ptr = backend.array_slots(1) + PTR  # argument 1's data-pointer slot
    go(0x510, 0x610, 0)
    assert calls[-1][1][PTR] == 0x510 and calls[-1][1][b_ptr] == 0x610 and len(calls) == 2
    go1 = L.pointer_launcher(((0, like_a),))
    go1(0x700, 0)
    assert calls[-1][1][PTR] == 0x700 and calls[-1][1][b_ptr] == 0x200  # argument 1 as the template has it
    L.launch(0)
    assert calls[-1][1][PTR] == 0x100  # the Launch's own buffer was not touched
    with pytest.raises(ValueError, match="needs a 1-D array"):
        L.pointer_launcher(((0, like_b),))
    drv.answers = [1]
    pytest.importorskip("cuda.bindings")
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel\(fake\) failed: .*\(1\)"):
        go(0x500, 0x600, 0)


def test_pointer_launcher_retries_once_without_a_context(monkeypatch):
    L, drv = _fake_launch(monkeypatch)
    go = L.pointer_launcher(((0, DevArray(0, (8,), (2,), np.float16, None)),))
    drv.answers = [201, 0]  # CUDA_ERROR_INVALID_CONTEXT, then success
    made = []
    monkeypatch.setattr(launch_kernel, "_make_context_current", lambda: made.append(1))
    go(0x900, 0)
    assert made == [1] and drv.answers == [] and len(drv.calls) == 2 and drv.calls[-1][1][PTR] == 0x900


def test_pointer_launcher_is_gpu_only():
    from numba.cuda import types

    if not SIMULATED:
        pytest.skip("simulator behaviour")
    k = launch.Kernel(lambda x: None, (types.float32[::1],), name="noop")
    L = launch.Launch(k, 1, 1, (DevArray(0, (4,), (4,), np.float32, np.zeros(4, np.float32)),))
    assert L.pointer_launcher(((0, DevArray(0, (4,), (4,), np.float32, None)),)) is None


# ------------------------------------------------------------------------- real GPU objects

@requires_gpu
def test_gpu_fast_adapters_match_generic_on_real_objects():
    from numba import cuda

    base = cuda.to_device(np.arange(64, dtype=np.float16).reshape(8, 8))
    for x in (base, base[2:4], base[3:4, :], cuda.device_array((0, 8), np.float16)):
        assert type(x).__name__ == "DeviceNDArray"
        assert fields(arrays._adapt_numba(x, "A", True))[:5] == fields(arrays._adapt_generic(x, "A", True))[:5]
        assert arrays._adapt_numba(x, "A", True).device_id == cuda.get_current_device().id
    for f in (arrays._adapt_numba, arrays._adapt_generic):
        with pytest.raises(ValueError, match="A: device arrays must be C-contiguous"):
            f(base[:, ::2], "A", True)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        t = torch.arange(64, dtype=torch.float16, device="cuda").reshape(8, 8)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            for x in (t, t[2:4], t[3:4], t.unsqueeze(0)):
                assert fields(arrays._adapt_torch(x, "A", True)) == fields(arrays._adapt_torch_any(x, "A", True))
                assert arrays._adapt_torch(x, "A", True).default_stream == s.cuda_stream
        with pytest.raises(ValueError, match="A: device arrays must be C-contiguous"):
            arrays._adapt_torch(t[:, ::2], "A", True)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        c = cupy.arange(64, dtype=cupy.float16).reshape(8, 8)
        for x in (c, c[2:4], c[3:4]):
            assert fields(arrays._adapt_cupy(x, "A", True)) == fields(arrays._adapt_generic(x, "A", True))


@requires_gpu
def test_gpu_call_from_a_thread_with_no_cuda_context(rng):
    """A thread whose first CUDA call is op(...) on arrays made elsewhere: the launch finds no current
    context, makes numba's current and retries (numba's own per-call lookups used to do that)."""
    from numba import cuda

    from numba_nbits.formats import quantize

    K, N = 256, 128
    B, sc, _ = quantize(rng.standard_normal((N, K)).astype(np.float32), bits=4, block_size=32, symmetric=True)
    op = nb.MatMulNBits(B, sc.astype(np.float16), None, K=K, N=N, bits=4, block_size=32)
    A = to_dev(rng.standard_normal((1, K)).astype(np.float16))
    ref = op(A).copy_to_host()
    o = cuda.device_array((1, N), np.float16)
    errors = []

    def work():
        try:
            op(A, out=o)
        except Exception as e:  # surfaced below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    cuda.synchronize()
    np.testing.assert_array_equal(o.copy_to_host(), ref)


def test_launch_retries_once_without_a_context(monkeypatch):
    L, drv = _fake_launch(monkeypatch)
    drv.answers = [201, 0]  # CUDA_ERROR_INVALID_CONTEXT, then success
    made = []
    monkeypatch.setattr(launch_kernel, "_make_context_current", lambda: made.append(1))
    L.launch(0)
    assert made == [1] and drv.answers == [] and len(drv.calls) == 2


@pytest.mark.skipif(not SIMULATED, reason="simulator behaviour")
def test_simulator_launch_is_unchanged():
    assert launch.simulated() is True and launch.is_capturing(0) is False


def test_bench_host_tiny(tmp_path, monkeypatch):
    """benchmarks/bench_host.py --tiny runs (on the simulator or a GPU) and writes its CSV."""
    import csv
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_host.py"
    spec = importlib.util.spec_from_file_location("bench_host", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("OUT", str(tmp_path))
    assert mod.main(["--tiny"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "bench_host.csv")))
    whats = {(r["M"], r["what"]) for r in rows if r["kind"] == "numba"}
    assert {("1", "op(A, out=O)"), ("1", "op(A)"), ("4", "op(A, out=O)")} <= whats
    assert {r["route"] for r in rows if r["M"] == "4"} == {"dequant_cublas"}
    assert all(float(r["host_us"]) > 0 for r in rows)
    assert all("eager_gpu_us" in r for r in rows)
    routed = {r["route"] for r in rows if "[" in r["what"]}
    assert routed == {"gemv_w4", "gemv_w8", "gemv_w2"}  # the tiny per-route rows (bias on the 4-bit one)


def test_bench_host_flags_only_host_times_near_the_gpu_time():
    """A host time is flagged GPU-bound only within 20% of the GPU time per call either way: a host slower than
    the GPU never waits for it, and a faster one cannot fill the launch queue in a 200-call batch."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_host.py"
    spec = importlib.util.spec_from_file_location("bench_host", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert [mod.gpu_bound(h, 10.0) for h in (3.4, 8.2, 8.4, 10.0, 11.9, 12.1, 30.0)] == [
        False, False, True, True, True, False, False]
    assert mod.gpu_bound(5.0, None) is False


def test_bench_host_covers_every_route():
    """The per-route rows of benchmarks/bench_host.py (full size) plus its two detailed cases take every route of
    the dispatch table: dispatch decides, on the problem and config alone (no kernel runs here)."""
    import importlib.util
    import pathlib

    import numba_nbits as nb
    from numba_nbits.dispatch.routes import ROUTES

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_host.py"
    spec = importlib.util.spec_from_file_location("bench_host", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(0)
    taken = {"gemv_w4", "dequant_cublas"}  # the two detailed cases (M=1 default, M=64 forced)
    for label, bits, n, k, bs, M, bias, config in mod.route_cases(False):
        per_byte = 8 // bits
        B = rng.integers(0, 256, (n, k // bs, bs // per_byte), dtype=np.uint8)
        sc = np.ones((n, k // bs), np.float16)
        b = np.zeros(n, np.float16) if bias else None
        op = nb.MatMulNBits(B, sc, None, None, b, K=k, N=n, bits=bits, block_size=bs, config=config)
        taken.add(op.explain(M).name)
    assert taken == {r.name for r in ROUTES}


# -------------------------------------------------------------- the steady-state call record (bound.py)

def _small_op(rng, **kw):
    from numba_nbits.formats import quantize

    K, N = 64, 16
    B, sc, _ = quantize(rng.standard_normal((N, K)).astype(np.float32), bits=4, block_size=32, symmetric=True)
    return nb.MatMulNBits(B, sc.astype(np.float16), None, K=K, N=N, bits=4, block_size=32, **kw), K, N


def test_second_call_takes_the_record_and_changes_take_the_general_path(rng, monkeypatch):
    from numba import cuda

    op, K, N = _small_op(rng)
    A = to_dev(rng.standard_normal((2, K)).astype(np.float16))
    O = cuda.device_array((2, N), np.float16)
    assert op(A, out=O) is O
    first = O.copy_to_host()
    assert len(op._calls) == 1
    general = op._check_call
    monkeypatch.setattr(op, "_check_call", lambda *a: pytest.fail("the recorded layout took the general path"))
    O2 = cuda.device_array((2, N), np.float16)
    assert op(A, out=O2) is O2  # another buffer of the recorded layout: the record reads its pointer
    np.testing.assert_array_equal(O2.copy_to_host(), first)
    monkeypatch.setattr(op, "_check_call", general)
    # same types and shapes, but what the record does not read as recorded: the general path's errors
    with pytest.raises(ValueError, match="out must not overlap A"):
        buf = cuda.device_array((2 * K,), np.float16)
        op(buf.reshape(2, K), out=buf[:2 * N].reshape(2, N))
    with pytest.raises(Exception) as wrong_dtype:
        op(to_dev(rng.standard_normal((2, K)).astype(np.float32)), out=O)
    assert "float32" in str(wrong_dtype.value)
    with pytest.raises(ValueError, match="A: device arrays must be C-contiguous"):
        op(cuda.device_array((2, 2 * K), np.float16)[:, :K], out=O)
    with pytest.raises(Exception, match=r"\(3, 16\)"):  # another out shape (no record): the general check
        op(to_dev(rng.standard_normal((3, K)).astype(np.float16)), out=O)
    assert len(op._calls) == 1  # failed calls record nothing
    A3 = to_dev(rng.standard_normal((3, K)).astype(np.float16))
    O3 = cuda.device_array((3, N), np.float16)
    op(A3, out=O3)
    assert len(op._calls) == 2
    np.testing.assert_array_equal(O3.copy_to_host(), op(A3).copy_to_host())


def _record_with_stand_ins(monkeypatch, kind, graphs=False):
    """A CallRecord built as on a GPU for stand-in inputs of ``kind``; its run records what it was given
    (``graphs``: whether it keeps repeated pointer pairs as graphs, off unless a test is about that)."""
    import types

    from numba_nbits import bound

    if kind == "torch":
        pytest.importorskip("torch")
        monkeypatch.setitem(arrays._FAST, FakeTorch, arrays._adapt_torch)
        monkeypatch.setattr(arrays, "_torch_raw_stream", lambda i: 0x5000 + i)
        a, o = FakeTorch((2, 8), (8, 1)), FakeTorch((2, 4), (4, 1))
        o.data_ptr = lambda: 0xB000
    elif kind == "cupy":
        cupy = types.ModuleType("cupy")
        cupy.cuda = types.SimpleNamespace(stream=types.SimpleNamespace(get_current_stream_ptr=lambda: 0x6000))
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        monkeypatch.setitem(arrays._FAST, FakeCupy, arrays._adapt_cupy)
        a, o = FakeCupy((2, 8), (16, 2)), FakeCupy((2, 4), (8, 2))
        o.data = _CMem(0xB000, 2)
    else:
        monkeypatch.setitem(arrays._FAST, FakeNumba, arrays._adapt_numba)
        a, o = FakeNumba((2, 8), (16, 2), np.float16), FakeNumba((2, 4), (8, 2), np.float16, ptr=0xB000)
    ra, ro = bound.reader_for(a, False), bound.reader_for(o, False)
    calls = []
    av, ov = arrays._FAST[type(a)](a, "A", False).dev, arrays._FAST[type(o)](o, "out", False).dev
    rec = bound.CallRecord(lambda x, y, s: calls.append((x.ptr, x.shape, y.ptr, y.shape, s)), ra, ro, av, ov, False,
                           graphs=graphs)
    return rec, a, o, calls


@pytest.mark.parametrize("kind", ["torch", "cupy", "numba"])
def test_call_record_reads_pointers_and_streams(monkeypatch, kind):
    rec, a, o, calls = _record_with_stand_ins(monkeypatch, kind)
    assert rec(a, o, None) is o
    stream = {"torch": 0x5001, "cupy": 0x6000, "numba": 0}[kind]  # the producer's current stream
    a_ptr = {"torch": 0x9000, "cupy": 0xA000, "numba": 0x7000}[kind]
    o_ptr = 0xB000
    assert calls[-1] == (a_ptr, (2, 8), o_ptr, (2, 4), stream)
    assert rec(a, o, 0x77) is o and calls[-1][4] == 0x77  # an int stream as is
    rec(a, o, type("S", (), {"__cuda_stream__": lambda self: (0, 0x88)})())
    assert calls[-1][4] == 0x88  # any other stream through stream_handle
    with pytest.raises(TypeError, match="stream: expected a CUDA stream"):
        rec(a, o, "bogus")


def test_call_record_answers_none_for_other_layouts(monkeypatch):
    rec, a, o, calls = _record_with_stand_ins(monkeypatch, "numba")
    assert rec(FakeNumba((2, 8), (32, 2), np.float16, c=False), o, None) is None  # other strides
    assert rec(FakeNumba((2, 8), (32, 4), np.float32), o, None) is None  # other dtype
    other = FakeNumba((2, 8), (16, 2), np.float16)
    other.gpu_data.context = type("C", (), {"device": type("D", (), {"id": 5})})()
    assert rec(other, o, None) is None  # memory on another device
    assert rec(a, FakeNumba((2, 4), (8, 2), np.float16, ptr=0x7008), None) is None  # overlaps A
    assert calls == []
    assert rec(a, FakeNumba((2, 4), (8, 2), np.float16, ptr=0x7020), None) is not None  # just past A's 32 bytes
    rec_t, ta, to, tcalls = _record_with_stand_ins(monkeypatch, "torch")
    assert rec_t(FakeTorch((2, 8), (8, 1), dtype="float32"), to, None) is None
    assert rec_t(FakeTorch((2, 8), (8, 1), index=0), to, None) is None
    assert rec_t(FakeTorch((2, 8), (16, 1), contiguous=False), to, None) is None
    assert rec_t(FakeTorch((2, 8), (8, 1), cuda=False), to, None) is None
    assert tcalls == []


def test_call_record_views_are_per_thread(monkeypatch):
    rec, a, o, calls = _record_with_stand_ins(monkeypatch, "numba")
    rec(a, o, None)
    mine = rec._tls.views
    seen = []
    t = threading.Thread(target=lambda: (rec(a, o, None), seen.append(rec._tls.views)))
    t.start()
    t.join()
    assert seen and seen[0] is not mine and seen[0][0] is not mine[0]
    assert calls[0] == calls[1]


def test_call_record_follows_the_producers_current_stream(monkeypatch):
    pytest.importorskip("torch")
    current = {1: 0x5001}
    monkeypatch.setattr(arrays, "_torch_raw_stream", lambda i: current[i])
    from numba_nbits import bound

    monkeypatch.setitem(arrays._FAST, FakeTorch, arrays._adapt_torch)
    a, o = FakeTorch((2, 8), (8, 1)), FakeTorch((2, 4), (4, 1))
    o.data_ptr = lambda: 0xB000
    seen = []
    rec = bound.CallRecord(lambda x, y, s: seen.append(s), bound.reader_for(a, False), bound.reader_for(o, False),
                           arrays._adapt_torch(a, "A", False).dev, arrays._adapt_torch(o, "out", False).dev, False,
                           graphs=False)
    rec(a, o, None)
    current[1] = 0x6001  # e.g. inside `with torch.cuda.stream(s):`
    rec(a, o, None)
    assert seen == [0x5001, 0x6001]


class _FakeGraph:
    """Stands in for ``CallGraph``: runs ``fn`` on a capture stream once, then records its launches."""

    CAPTURE = 0xC0
    made: list = []

    def __init__(self, fn, prepare=None):
        self.prepared = prepare is not None
        fn(self.CAPTURE)
        self.launches, self.closed = [], False
        _FakeGraph.made.append(self)

    def __call__(self, stream):
        self.launches.append(stream)

    def close(self):
        self.closed = True


def _fake_graphs(monkeypatch, capturing=()):
    """``bound`` with ``_FakeGraph`` for ``CallGraph`` and streams ``capturing`` capturing; stream 0 must not be
    asked about (it cannot capture)."""
    from numba_nbits import bound

    _FakeGraph.made = []
    monkeypatch.setattr(bound, "CallGraph", _FakeGraph)

    def is_capturing(s):
        assert s != 0, "stream 0 cannot capture: no query needed"
        return s in capturing

    monkeypatch.setattr(bound, "is_capturing", is_capturing)
    return bound


def test_call_record_keeps_a_repeated_pointer_pair_as_a_graph(monkeypatch):
    _fake_graphs(monkeypatch, capturing={0x99})
    rec, a, o, calls = _record_with_stand_ins(monkeypatch, "numba", graphs=True)
    key = (0x7000, 0xB000)
    rec(a, o, None)
    assert calls == [(0x7000, (2, 8), 0xB000, (2, 4), 0)] and not _FakeGraph.made  # first sighting: launched
    rec(a, o, None)  # second: captured (the plan ran on the capture stream), then the graph launched
    g, = _FakeGraph.made
    assert calls[-1][4] == _FakeGraph.CAPTURE and len(calls) == 2 and g.launches == [0] and rec.graphs == {key: g}
    assert g.prepared  # the capture stream's cuBLAS workspaces are set up first
    rec(a, o, 0x55)
    assert len(calls) == 2 and g.launches == [0, 0x55]  # the graph alone, into the call's stream
    rec(a, o, 0x99)  # a capturing stream: the launches themselves, into it
    assert calls[-1] == (0x7000, (2, 8), 0xB000, (2, 4), 0x99) and g.launches == [0, 0x55]
    o2 = FakeNumba((2, 4), (8, 2), np.float16, ptr=0xC000)
    rec(a, o2, 0x99)
    rec(a, o2, 0x99)  # seen twice, but only on a capturing stream: no graph is made there
    assert len(_FakeGraph.made) == 1 and calls[-1][2] == 0xC000 and calls[-1][4] == 0x99
    rec(a, o2, 0)
    assert len(_FakeGraph.made) == 2 and _FakeGraph.made[1].launches == [0]


def test_call_record_drops_its_oldest_graph(monkeypatch):
    bound = _fake_graphs(monkeypatch)
    rec, a, _, calls = _record_with_stand_ins(monkeypatch, "numba", graphs=True)
    outs = [FakeNumba((2, 4), (8, 2), np.float16, ptr=0x10000 + 0x100 * i) for i in range(bound.GRAPHS_PER_RECORD + 1)]
    for o in outs:
        rec(a, o, None)
        rec(a, o, None)
    made = _FakeGraph.made
    assert len(made) == bound.GRAPHS_PER_RECORD + 1 and made[0].closed and not any(g.closed for g in made[1:])
    assert len(rec.graphs) == bound.GRAPHS_PER_RECORD and (0x7000, 0x10000) not in rec.graphs
    n = len(calls)
    rec(a, outs[0], None)  # dropped: a first sighting again, launched directly
    assert len(calls) == n + 1 and len(made) == bound.GRAPHS_PER_RECORD + 1


def test_call_record_without_graphs_launches_every_call(monkeypatch):
    _fake_graphs(monkeypatch)
    rec, a, o, calls = _record_with_stand_ins(monkeypatch, "numba", graphs=False)
    for _ in range(3):
        rec(a, o, None)
    assert len(calls) == 3 and not _FakeGraph.made and rec.graphs == {}


def test_bound_launches_its_graph_from_the_second_call_unless_the_stream_is_capturing(monkeypatch):
    bound = _fake_graphs(monkeypatch, capturing={0x99})
    runs = []

    def run(x, y, s):
        runs.append((x.ptr, y.ptr, s))

    a, o = DevArray(0x7000, (2, 8), (16, 2), np.float16, None), DevArray(0xB000, (2, 4), (8, 2), np.float16, None)
    b = bound.Bound(run, a, o, "OUT", None, 0x55, None, graph=True)
    assert not _FakeGraph.made and not runs  # binding launches nothing
    assert b() == "OUT" and runs == [(0x7000, 0xB000, 0x55)] and not _FakeGraph.made  # first call: the launches
    assert b() == "OUT"  # second: captured (the plan ran on the capture stream), then launched
    g, = _FakeGraph.made
    assert runs[-1] == (0x7000, 0xB000, _FakeGraph.CAPTURE) and g.launches == [0x55]
    b()
    assert g.launches == [0x55, 0x55] and len(runs) == 2
    current = [0x99]
    b2 = bound.Bound(run, a, o, "OUT", None, None, lambda: current[0], graph=True)
    b2()
    b2()  # the current stream is capturing: launched, no graph made
    assert runs[-2:] == [(0x7000, 0xB000, 0x99)] * 2 and len(_FakeGraph.made) == 1
    current[0] = 0
    b2()
    assert _FakeGraph.made[1].launches == [0]
    current[0] = 0x99
    b2()  # has a graph, but the stream captures: the launches again
    assert runs[-1] == (0x7000, 0xB000, 0x99) and _FakeGraph.made[1].launches == [0]
    b3 = bound.Bound(run, a, o, "OUT", None, 0, None, graph=False)
    n = len(runs)
    b3()
    b3()
    assert len(_FakeGraph.made) == 2 and runs[n:] == [(0x7000, 0xB000, 0)] * 2
    m0 = bound.Bound(None, None, None, "OUT", None, 0, None, graph=True)  # M == 0: nothing to launch
    assert m0() == "OUT" and m0() == "OUT" and len(_FakeGraph.made) == 2


@pytest.mark.parametrize("config, environ, debug, expected", [
    (None, {}, False, True),  # the default
    ({"numba_nbits.call_graphs": False}, {}, False, False),
    (None, {"NUMBA_NBITS_CALL_GRAPHS": "0"}, False, False),
    ({"numba_nbits.call_graphs": "1"}, {"NUMBA_NBITS_CALL_GRAPHS": "0"}, False, True),  # config wins
    (None, {}, True, False),  # a plan that prints the ORT_FPA_INTB_DEBUG line runs entry.run every call
])
def test_call_graphs_knob_decides_whether_records_and_bound_calls_keep_graphs(rng, config, environ, debug, expected):
    import types

    op, _, _ = _small_op(rng, config=config, environ=environ)
    assert op.config.call_graphs is (expected or debug)
    assert op._call_graphs(types.SimpleNamespace(debug_line="line" if debug else None)) is expected


@pytest.mark.skipif(not SIMULATED, reason="NumPy out= is a simulator-only form")
def test_kinds_without_a_reader_stay_on_the_general_path(rng):
    op, K, N = _small_op(rng)
    A, O = rng.standard_normal((2, K)).astype(np.float16), np.zeros((2, N), np.float16)
    op(A, out=O)
    assert list(op._calls.values()) == [None]  # NumPy: no fast reader; remembered, not looked at again
    first = O.copy()
    O[...] = 0
    assert op(A, out=O) is O
    np.testing.assert_array_equal(O, first)


class _GraphDriver:
    """The driver calls ``CallGraph`` makes, recorded; ``fail`` names one that answers an error."""

    def __init__(self, fail=None):
        import types as pytypes

        self.log, self.fail = [], fail
        self.CUstreamCaptureMode = pytypes.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL="TL")

    def _answer(self, name, *vals):
        self.log.append(name)
        return (1,) if name == self.fail else (0, *vals)

    def cuStreamBeginCapture(self, s, mode):
        assert mode == "TL"
        return self._answer(("begin", s))

    def cuStreamEndCapture(self, s):
        return self._answer(("end", s), "G")

    def cuGraphInstantiate(self, g, flags):
        return self._answer(("instantiate", g), "X")

    def cuGraphLaunch(self, ex, s):
        return self._answer(("launch", ex, s))

    def cuGraphExecDestroy(self, ex):
        return self._answer(("destroy_exec", ex))

    def cuGraphDestroy(self, g):
        return self._answer(("destroy", g))

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_FAKE"

    def CUresult(self, e):
        return e


def _graph_exec_with(monkeypatch, drv, lean=None):
    """``graphs`` with the fake driver ``drv`` and, for its launches, the fake lean driver ``lean`` (None: the
    ``CUresult``-returning calls of ``drv``)."""
    from numba_nbits import graphs as graph_exec

    monkeypatch.setattr(graph_exec, "_drv", lambda: drv)
    monkeypatch.setattr(graph_exec, "lean_driver", lambda: lean)
    monkeypatch.setattr(graph_exec, "simulated", lambda: False)
    monkeypatch.setattr(graph_exec, "_capture_stream", lambda: 0xCA)
    monkeypatch.setattr(launch_driver, "_drv", lambda: drv)  # check() names errors through it
    return graph_exec


def test_call_graph_captures_once_and_launches_into_any_stream(monkeypatch):
    drv = _GraphDriver()
    ge = _graph_exec_with(monkeypatch, drv)
    seen = []
    g = ge.CallGraph(lambda s: (seen.append(s), drv.log.append("fn")), lambda s: drv.log.append(("prepare", s)))
    assert seen == [0xCA] and drv.log == [("prepare", 0xCA), ("begin", 0xCA), "fn", ("end", 0xCA),
                                          ("instantiate", "G")]
    g(0)
    g(0x55)
    assert drv.log[-2:] == [("launch", "X", 0), ("launch", "X", 0x55)]
    g.close()
    g.close()
    assert drv.log[-2:] == [("destroy_exec", "X"), ("destroy", "G")]


def test_call_graph_ends_the_capture_when_fn_raises_and_reports_driver_errors(monkeypatch):
    drv = _GraphDriver()
    ge = _graph_exec_with(monkeypatch, drv)

    def bad(s):
        raise ValueError("plan failed")

    with pytest.raises(ValueError, match="plan failed"):
        ge.CallGraph(bad)
    assert drv.log == [("begin", 0xCA), ("end", 0xCA), ("destroy", "G")]  # not left capturing, nothing kept
    drv = _GraphDriver(fail=("instantiate", "G"))
    ge = _graph_exec_with(monkeypatch, drv)
    with pytest.raises(RuntimeError, match=r"cuGraphInstantiate failed: CUDA_ERROR_FAKE \(1\)"):
        ge.CallGraph(lambda s: None)
    assert drv.log[-1] == ("destroy", "G")
    drv = _GraphDriver(fail=("launch", "X", 7))
    ge = _graph_exec_with(monkeypatch, drv)
    g = ge.CallGraph(lambda s: None)
    with pytest.raises(RuntimeError, match=r"cuGraphLaunch failed: CUDA_ERROR_FAKE \(1\)"):
        g(7)


class _LeanDriver:
    """The integer-handle driver calls (``launch.driver.lean_driver``) the package makes, recorded; a launch
    into stream ``fail_stream`` raises its ``DriverError``."""

    class DriverError(Exception):
        pass

    def __init__(self, log, fail_stream=None, capture_status=0):
        self.log, self.fail_stream, self.capture_status = log, fail_stream, capture_status

    def graph_launch(self, ex, s):
        assert type(ex) is int and type(s) is int, (ex, s)  # plain integer handles, nothing built per call
        self.log.append(("lean launch", ex, s))
        if s == self.fail_stream:
            raise self.DriverError("CUDA_ERROR_INVALID_HANDLE: invalid resource handle")

    def stream_is_capturing(self, s):
        self.log.append(("lean capturing?", s))
        if isinstance(self.capture_status, Exception):
            raise self.capture_status
        return self.capture_status


class _IntHandleGraphDriver(_GraphDriver):
    """``_GraphDriver`` whose executable graph is the integer handle 0xE1 (what ``int()`` of a real one gives)."""

    def cuGraphInstantiate(self, g, flags):
        return self._answer(("instantiate", g), 0xE1)


def test_call_graph_launches_through_the_lean_driver_and_names_its_errors(monkeypatch):
    drv = _IntHandleGraphDriver()
    lean = _LeanDriver(drv.log, fail_stream=7)
    ge = _graph_exec_with(monkeypatch, drv, lean)
    g = ge.CallGraph(lambda s: None)
    g(0)
    g(0x55)
    assert drv.log[-2:] == [("lean launch", 0xE1, 0), ("lean launch", 0xE1, 0x55)]
    assert not any(isinstance(e, tuple) and e[0] == "launch" for e in drv.log)  # never the CUresult call
    with pytest.raises(RuntimeError, match=r"cuGraphLaunch failed: CUDA_ERROR_INVALID_HANDLE"):
        g(7)
    g.close()
    assert drv.log[-2:] == [("destroy_exec", 0xE1), ("destroy", "G")]


class _CaptureQueryDriver:
    """``cuStreamIsCapturing`` as cuda-bindings answers it: ``(CUresult, status)``, statuses as an enum."""

    def __init__(self, answers):
        import types as pytypes

        self.answers, self.calls = list(answers), []
        self.CUstreamCaptureStatus = pytypes.SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=0)

    def CUstream(self, h):
        return ("CUstream", h)

    def cuStreamIsCapturing(self, s):
        self.calls.append(s)
        return self.answers.pop(0)


def test_is_capturing_takes_the_lean_query_after_the_first_answer(monkeypatch):
    """The first query goes through ``cuStreamIsCapturing`` (with its context and error handling); from then on
    ``is_capturing`` asks the lean driver's ``stream_is_capturing`` and answers from its status; a query the
    lean call cannot answer (it raises) goes the general way again."""
    log = []
    lean = _LeanDriver(log, capture_status=0)
    drv = _CaptureQueryDriver([(0, 0), (0, 1)])
    monkeypatch.setattr(launch_driver, "_SIMULATED", False)
    monkeypatch.setattr(launch_driver, "_drv", lambda: drv)
    monkeypatch.setattr(launch_driver, "_LEAN", lean)
    monkeypatch.setattr(launch_driver, "_IS_CAPTURING", None)
    assert launch_driver.is_capturing(0x55) is False
    assert drv.calls == [("CUstream", 0x55)] and log == []
    assert launch_driver._IS_CAPTURING == lean.stream_is_capturing
    assert launch_driver.is_capturing(0x56) is False
    lean.capture_status = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE
    assert launch_driver.is_capturing(0x57) is True
    lean.capture_status = 2  # CU_STREAM_CAPTURE_STATUS_INVALIDATED: still inside a capture sequence
    assert launch_driver.is_capturing(0x58) is True
    assert log == [("lean capturing?", 0x56), ("lean capturing?", 0x57), ("lean capturing?", 0x58)]
    lean.capture_status = lean.DriverError("CUDA_ERROR_INVALID_CONTEXT")
    assert launch_driver.is_capturing(0x59) is True  # the general query's answer, (0, 1)
    assert drv.calls == [("CUstream", 0x55), ("CUstream", 0x59)] and drv.answers == []


def test_lean_driver_is_the_integer_handle_module_or_none(monkeypatch):
    """``lean_driver()`` is cuda-bindings' ``_v2`` driver module where it has the three calls the package uses
    (cuda-bindings 13.5 has), else None, looked up once."""
    monkeypatch.setattr(launch_driver, "_LEAN", None)
    d = launch_driver.lean_driver()
    try:
        from cuda.bindings._v2 import driver as v2
    except ImportError:
        assert d is None
    else:
        assert d is v2 and callable(d.graph_launch) and callable(d.stream_is_capturing)
    monkeypatch.setattr(launch_driver, "_LEAN", False)
    assert launch_driver.lean_driver() is None


def test_call_graph_refuses_the_simulator():
    from numba_nbits import graphs as graph_exec

    if not SIMULATED:
        pytest.skip("simulator behaviour")
    with pytest.raises(RuntimeError, match="simulator has no graphs"):
        graph_exec.CallGraph(lambda s: None)


def test_reserve_workspaces_gives_the_stream_a_workspace_on_every_handle(monkeypatch):
    """``dispatch.cublas.reserve_workspaces``: each handle made so far allocates the stream's own workspace
    (as an eager GEMM on it would), so a graph captured there uses a workspace of the eager size."""
    import threading

    from numba_nbits.dispatch import cublas

    class H:
        def __init__(self):
            self.lock, self.asked = threading.Lock(), []

        def workspace_for(self, s):
            assert self.lock.locked()
            self.asked.append(s)

    hs = {0: H(), 1: H()}
    monkeypatch.setattr(cublas, "_handles", hs)
    cublas.reserve_workspaces(0x77)
    assert hs[0].asked == [0x77] and hs[1].asked == [0x77]
