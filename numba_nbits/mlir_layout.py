"""numba-cuda-mlir's arrays inside our compiles: C-contiguous ones with a static innermost stride, kernel arguments at
offset 0.

numba-cuda-mlir 0.6.0 gives every array argument an MLIR memref whose strides are all dynamic, whatever its numba
layout (``models.ArrayModel``: ``StridedLayoutAttr(offset=?, strides=[?] * ndim)``): ``w[i]`` on a ``uint32[::1]`` is
``aligned + (offset + i * stride) * 4`` with ``stride`` a kernel parameter, where numba-cuda, for the same ``C``
array, computes ``data + i * 4``. In the generated GEMV and GEMM kernels that multiply sits in every unrolled load of
the main loop and keeps the strides' 64-bit products live in registers (``t1w4u1p1``, block 128, the M = 1 kernel of
the LM head: 59 registers and 8 CTAs per SM against numba-cuda's 56 and 9).

Inside ``active()`` (entered by ``backend`` around numba-cuda-mlir's compiles of our kernels) the memref of a ``C``
array of scalars has the static innermost stride 1 (``strides=[?] * (ndim - 1) + [1]``), as numba's ``C`` layout
promises; the offset and the outer strides stay dynamic. The kernel's parameters are the same memref descriptor
(``allocated, aligned, offset, shape..., strides...``; ``backend.array_params`` fills them as before): the innermost
stride is passed and no longer read. Arrays of records and character sequences (byte memrefs) and ``A`` / ``F``
arrays are left as numba-cuda-mlir makes them.

Offsets. A memref descriptor also carries an element offset, and numba-cuda-mlir adds it to every address it forms
(``lowering_utilities.memref_data_pointer``: ``aligned + offset * itemsize``; ``w[i]`` likewise), where numba-cuda's
array has none. Our kernels are launched only by ``launch.kernel``, whose parameters (``backend.array_params``) always
pass offset 0 with ``aligned`` the array's first element. So inside ``active()`` each kernel's (``gpu.func``
``kernel``) memref arguments are re-based before numba-cuda-mlir's pass pipeline (``mlir_optimization.optimize``):
the argument is replaced by ``memref.reinterpret_cast`` of its own base buffer (``memref.extract_strided_metadata``)
at offset 0, same sizes, strides and type, so the offset parameter is never read and every address is ``aligned +
i * itemsize``, as numba-cuda's. Views made inside a kernel (``x[3:]``) keep their own offsets, computed from the
re-based argument. In the tensor-core GEMV that offset was one more 64-bit add per activation load and two more
live 64-bit values, enough for ptxas to issue one of a stage's activation loads after the first MMA pair
(``benchmarks/results/2026-12-07-h100-mlir-offset``). Device functions keep their memref parameters as they are (a
caller may pass them a view); once inlined into a kernel they see its re-based arguments.

numba-cuda-mlir keeps one data-model cache for every compile, so ``active()`` holds its compiler lock and empties that
cache as the outermost block is entered and left: a model made inside is never handed to a compile outside (a
user's own kernels compile as shipped) and the reverse. Only the exact ``ArrayModel.__init__`` and
``mlir_optimization.optimize`` this module was written against are replaced (their source hashes); with any other
version both are left as they are. ``tests/test_mlir_layout.py`` checks the PTX: inside, the innermost stride and
offset parameters are not read and a view made in the kernel still adds its start; outside, before and after, they
are read.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from . import mlir_fix

#: sha256 of ``inspect.getsource`` of the replaced functions in numba-cuda-mlir 0.6.0
KNOWN_SOURCE_SHA256 = {"models.ArrayModel.__init__": "ee0dd7f6351441fef75aec02083ef5b980bf52cc9ea2d3d3820780e5f61a60d5",
                       "mlir_optimization.optimize": "e2857645e36a45d13c331220ebf3d484837a028d094a097c6b610c2a6675065a"}

_LOCK = threading.Lock()
_TLS = threading.local()
_state = {"done": False, "installed": False, "reason": "not tried"}
_ORIGINAL: dict = {}


def _on() -> bool:
    return getattr(_TLS, "depth", 0) > 0


def _drop_models() -> None:
    from numba_cuda_mlir.models import mlir_data_manager

    mlir_data_manager._cache.clear()


@contextmanager
def active():
    """Static innermost strides for ``C`` arrays in this thread for the block (a no-op unless ``install()`` put the
    replacement in place); numba-cuda-mlir's compiler lock is held throughout, so no other thread compiles meanwhile."""
    if not _state["installed"]:
        yield
        return
    from numba_cuda_mlir.numba_cuda.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        outer = not _on()
        if outer:
            _drop_models()
        _TLS.depth = getattr(_TLS, "depth", 0) + 1
        try:
            yield
        finally:
            _TLS.depth -= 1
            if outer:
                _drop_models()


def _array_model_init(self, dmm, fe_type):
    """``ArrayModel.__init__``, then inside ``active()``: a ``C`` array of scalars gets the static innermost stride."""
    _ORIGINAL["__init__"](self, dmm, fe_type)
    if not _on() or fe_type.layout != "C" or fe_type.ndim < 1:
        return
    from numba_cuda_mlir import types
    from numba_cuda_mlir._mlir import ir

    if isinstance(fe_type.dtype, (types.Record, types.CharSeq, types.UnicodeCharSeq)):
        return
    memref = ir.MemRefType(self.be_type)
    dyn = ir.MemRefType.get_dynamic_stride_or_offset()
    layout = ir.StridedLayoutAttr.get(offset=dyn, strides=[dyn] * (fe_type.ndim - 1) + [1])
    self.be_type = ir.MemRefType.get(list(memref.shape), memref.element_type, layout=layout)


def rebase_kernel_arguments(module) -> int:
    """Re-base the memref arguments of every kernel (``gpu.func`` with ``kernel``) of the MLIR ``module`` at offset 0
    (module docstring: offsets); returns how many. Call with numba-cuda-mlir's MLIR context entered."""
    from numba_cuda_mlir._mlir import ir
    from numba_cuda_mlir._mlir.dialects import arith, memref

    dyn = ir.ShapedType.get_dynamic_stride_or_offset()
    dyn_size = ir.ShapedType.get_dynamic_size()
    n = 0
    for gm in module.body.operations:
        if gm.operation.name != "gpu.module":
            continue
        for f in gm.regions[0].blocks[0].operations:
            if f.operation.name != "gpu.func" or "kernel" not in f.attributes:
                continue
            entry = f.regions[0].blocks[0]
            for a in entry.arguments:
                if not isinstance(a.type, ir.MemRefType):
                    continue
                t = ir.MemRefType(a.type)
                strides, _ = t.get_strides_and_offset()
                with ir.InsertionPoint.at_block_begin(entry), f.location:
                    md = memref.ExtractStridedMetadataOp(a)
                    zero = arith.constant(ir.IndexType.get(), 0)
                    sizes = [md.sizes[i] for i, d in enumerate(t.shape) if d == dyn_size]
                    dyn_strides = [md.strides[i] for i, st in enumerate(strides) if st == dyn]
                    based = memref.reinterpret_cast(t, md.base_buffer, [zero], sizes, dyn_strides, [dyn],
                                                    list(t.shape), list(strides))
                a.replace_all_uses_except(based, md.operation)
                n += 1
    return n


def _optimize(cres):
    """``mlir_optimization.optimize``, after ``rebase_kernel_arguments`` inside ``active()``."""
    if _on():
        from numba_cuda_mlir import mlir_optimization

        with mlir_optimization.context.get_context():
            rebase_kernel_arguments(cres.metadata["mlir_module"])
    return _ORIGINAL["optimize"](cres)


def _targets():
    from numba_cuda_mlir import mlir_optimization, models

    return [("models.ArrayModel.__init__", models.ArrayModel, "__init__", _array_model_init),
            ("mlir_optimization.optimize", mlir_optimization, "optimize", _optimize)]


def install() -> bool:
    """Put the replacements in place if ``ArrayModel.__init__`` and ``mlir_optimization.optimize`` are the ones this
    module was written against; True when they are. Idempotent and thread-safe; ``status()`` says why not."""
    return mlir_fix.install_replacements(_state, _LOCK, _targets, KNOWN_SOURCE_SHA256, _ORIGINAL)


def status() -> str:
    """Whether ``install`` put the replacements in place, and why (not)."""
    return _state["reason"]
