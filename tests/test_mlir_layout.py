"""numba_nbits.mlir_layout: inside our compiles numba-cuda-mlir reads no innermost stride of a ``C`` array (the kernel's
parameters stay the same memref descriptors), and still reads it for an ``A`` array, and reads no kernel argument's
offset (a view made in the kernel still applies its start); outside ``active()``, before and after, it compiles as
shipped (strides and offsets read); an unknown ``ArrayModel.__init__`` leaves both replacements out; the GEMV kernel
the LM head's M = 1 call runs reads none of its arrays' innermost strides or offsets.

numba-cuda-mlir runs in a process of its own (``NUMBA_NBITS_BACKEND=mlir``, ``NUMBA_ENABLE_CUDASIM=0``; without a GPU
its compute-capability query is answered with 9.0 as ``benchmarks.ptx_stats`` does); only PTX is produced.
"""
from __future__ import annotations

import pytest
from conftest import run_mlir_script

_SCRIPT = r'''
import re
from benchmarks.ptx_stats import _fake_device
_fake_device()
from numba import cuda
from numba.cuda import types
from numba_nbits import backend, mlir_layout
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic

assert backend.compiler() == "mlir", backend.compiler()


def axpy(x, y, z, a):
    i = cuda.grid(1)
    if i < x.shape[0]:
        z[i] = a * x[i] + y[i, i % y.shape[1]]


SIG = (types.float32[::1], types.float32[:, ::1], types.float32[:], types.float32)
# the parameters of each array, numba-cuda-mlir's memref descriptor: allocated, aligned, offset, shape..., strides...
INNER = {"x": 4, "y": 11, "z": 16}  # x: 0..4, y: 5..11 (strides 10, 11), z: 12..16 (stride 16)
OFFSET = {"x": 2, "y": 7, "z": 14}


def view(x, z, n):
    i = cuda.grid(1)
    b = x[n:]
    if i < z.shape[0]:
        z[i] = b[i]


VIEW_SIG = (types.float32[::1], types.float32[::1], types.int64)  # x: 0..4 (offset 2), z: 5..9 (offset 7), n: 10


def ptx(pyfunc, argtypes, inside, options=None):
    c = backend.cuda()
    sig = backend.types().void(*backend.argtypes(argtypes))
    opts = backend.jit_options(dict(options or {}), (9, 0))
    if inside:
        with backend._frontend():
            return c.jit(sig, **opts)(backend.rebind(pyfunc)).compile(sig).metadata["ptx"]
    return c.jit(sig, **opts)(backend.rebind(pyfunc)).compile(sig).metadata["ptx"]


def reads(text, index):
    return re.search(rf"_param_{index}\]", text) is not None


def report(tag, text):
    print(tag, " ".join(f"{n}={int(reads(text, i))}" for n, i in INNER.items()),
          " ".join(f"{n}_offset={int(reads(text, i))}" for n, i in OFFSET.items()), flush=True)


known = dict(mlir_layout.KNOWN_SOURCE_SHA256)
mlir_layout.KNOWN_SOURCE_SHA256["models.ArrayModel.__init__"] = "0" * 64  # as if numba-cuda-mlir had changed it
assert mlir_layout.install() is False and "not the known one" in mlir_layout.status(), mlir_layout.status()
report("unknown", ptx(axpy, SIG, True))
mlir_layout.KNOWN_SOURCE_SHA256.update(known)
mlir_layout._state["done"] = False
assert mlir_layout.install() is True, mlir_layout.status()

report("before", ptx(axpy, SIG, False))
report("inside", ptx(axpy, SIG, True))
report("after", ptx(axpy, SIG, False))
text = ptx(view, VIEW_SIG, True)
print("view_inside", int(reads(text, 2)), int(reads(text, 7)), int(reads(text, 10)), flush=True)

k = gemv_mma_kernel("float16", 1, Tactic.parse("t1w4u1p1"), 128, "none", 4, False, True)
slots, offsets, n = [], [], 0
for t in k.argtypes:
    if isinstance(t, types.Array):
        slots.append((t.layout, n + 3 + 2 * t.ndim - 1))  # its innermost stride
        offsets.append(n + 2)  # its offset
        n += 3 + 2 * t.ndim
    else:
        n += 1
for tag, inside in (("gemv_outside", False), ("gemv_inside", True)):
    text = ptx(k.pyfunc, k.argtypes, inside, k.options)
    print(tag, len(slots), sum(reads(text, i) for layout, i in slots if layout == "C"),
          sum(reads(text, i) for i in offsets), flush=True)
'''


def test_static_innermost_stride_and_zero_offsets_inside_our_compiles_only():
    pytest.importorskip("numba_cuda_mlir")
    r = run_mlir_script(_SCRIPT)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {ln.split()[0]: ln.split()[1:] for ln in r.stdout.splitlines() if ln.strip()}
    # as shipped, every innermost stride and every offset is a parameter numba-cuda-mlir reads
    shipped = ["x=1", "y=1", "z=1", "x_offset=1", "y_offset=1", "z_offset=1"]
    assert got["unknown"] == shipped, r.stdout
    assert got["before"] == shipped and got["after"] == shipped, r.stdout
    # inside: z is an ``A`` array, its stride is still read; no kernel argument's offset is
    assert got["inside"] == ["x=0", "y=0", "z=1", "x_offset=0", "y_offset=0", "z_offset=0"], r.stdout
    # a view made in the kernel: the arguments' offsets are not read, its start n (used nowhere else) is
    assert got["view_inside"] == ["0", "0", "1"], r.stdout
    n_arrays, n_read, n_offsets = map(int, got["gemv_outside"])
    assert n_arrays >= 4 and n_read > 0 and n_offsets > 0, r.stdout
    assert got["gemv_inside"] == [str(n_arrays), "0", "0"], r.stdout
