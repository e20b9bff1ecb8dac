"""numba-cuda-mlir's C-contiguous arrays with a static innermost stride inside our compiles.

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

numba-cuda-mlir keeps one data-model cache for every compile, so ``active()`` holds its compiler lock and empties that
cache as the outermost block is entered and left: a model made inside is never handed to a compile outside (a
user's own kernels compile as shipped) and the reverse. Only the exact ``ArrayModel.__init__`` this module was
written against is replaced (its source hash); any other version is left as it is. ``tests/test_mlir_layout.py``
checks the PTX: the innermost stride parameters are not read inside, and are read outside and after.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from . import mlir_fix

#: sha256 of ``inspect.getsource(models.ArrayModel.__init__)`` in numba-cuda-mlir 0.6.0
KNOWN_SOURCE_SHA256 = {"models.ArrayModel.__init__": "ee0dd7f6351441fef75aec02083ef5b980bf52cc9ea2d3d3820780e5f61a60d5"}

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


def _targets():
    from numba_cuda_mlir import models

    return [("models.ArrayModel.__init__", models.ArrayModel, "__init__", _array_model_init)]


def install() -> bool:
    """Put the replacement in place if ``ArrayModel.__init__`` is the one this module was written against; True when
    it is. Idempotent and thread-safe; ``status()`` says why not."""
    return mlir_fix.install_replacements(_state, _LOCK, _targets, KNOWN_SOURCE_SHA256, _ORIGINAL)


def status() -> str:
    """Whether ``install`` put the replacement in place, and why (not)."""
    return _state["reason"]
