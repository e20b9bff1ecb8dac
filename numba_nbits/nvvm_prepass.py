"""An LLVM 7 ``-O1`` pass pipeline over a kernel's NVVM input before libNVVM (``Tactic.prepass``, tag suffix ``o``).

libNVVM reads LLVM 7 IR and runs its own optimiser, which keeps the loop's pointer induction variables only for some
forms of the same loop: numba-cuda's ``[4 x i32]`` ring-slot tuples, not numba-cuda-mlir's scalar ones; and the
register-ring GEMV kernels leave it 4-30% more registers than it needs
(``benchmarks/results/2026-12-07-cpu-mlir-layout`` sections 3-4). LLVM 7's own ``PassManagerBuilder`` pipeline at
``-O1`` run first puts the module in a form libNVVM optimises further: ``t1w4u1p1`` block 128 58 -> 40 registers under
numba-cuda; with unguarded prefetch loads (``Tactic.unguarded``) numba-cuda-mlir's two-m-tile kernel ``t2w4u1`` goes
from 304 to 252 main-loop SASS instructions with induction variables.

The pipeline is LLVM 7's C API in the ``libLLVM-7.so`` numba-cuda-mlir ships (the same LLVM version libNVVM reads;
found with ``importlib.util.find_spec``, the package is not imported). Where it is not installed, ``available()`` is
False and kernels compile without the pre-pass (the same results, the compiler's code).

``active(on)`` (entered by ``backend`` around one compile of a kernel whose tactic asks for it) makes the compilers'
NVVM step run the pipeline first, in this thread only:

* numba-cuda: ``nvvm.compile_ir``'s first module (the kernel's; the others are numba-cuda's helpers, libdevice is
  added by libNVVM) as text, printed back by LLVM 7;
* numba-cuda-mlir below sm_100 (its LLVM 7 path): the bitcode its C translator hands libNVVM, captured through its NVVM
  dump hook, run through the pipeline and compiled by libNVVM here with the options numba-cuda-mlir gives it. LLVM 7
  writes the module back with the 64-bit data layout libNVVM asks for and its shared-memory arrays ``internal`` with an
  ``undef`` initializer (libNVVM refuses LLVM 7's ``private`` ``zeroinitializer`` form).

Each replacement is installed once (``install()``), over the compiler function it was written against (its source
hash, ``KNOWN_SOURCE_SHA256``); another compiler version compiles without the pre-pass. Outside ``active()`` the
replacements call the originals unchanged, so a user's own kernels are not touched.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from contextlib import contextmanager
from functools import lru_cache

from .lowering_fix import source_sha256

#: sha256 of ``inspect.getsource`` of the functions replaced (numba-cuda 0.30.4, numba-cuda-mlir 0.6.0)
KNOWN_SOURCE_SHA256 = {
    "numba.cuda.cudadrv.nvvm.compile_ir": "62ccb831e472dd96eaebe1ffc16c0ce54e6bbaae342cc29645aeaa50740a2c95",
    "numba_cuda_mlir.mlir_optimization._call_llvm70_capi":
        "ebcc9d8a25c41fed35c765b529fcebcbbdbed312a6207dc5ec60a044f8847472",
}
#: the data layout libNVVM asks for (64-bit pointers, i128 included)
NVVM_DATALAYOUT = (b"e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-"
                   b"v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")
LEVEL = 1
_ADDRSPACE_SHARED = 3
_LLVM_INTERNAL_LINKAGE = 8

_TLS = threading.local()
_LOCK = threading.Lock()
_installed: dict[str, str] = {}  # compiler -> "installed" or why not


def library_path() -> str | None:
    """Path of numba-cuda-mlir's ``libLLVM-7.so`` (None when numba-cuda-mlir is not installed)."""
    spec = importlib.util.find_spec("numba_cuda_mlir")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "lib", "libLLVM-7.so")
    return path if os.path.exists(path) else None


def available() -> bool:
    """Whether the pre-pass can run (numba-cuda-mlir's ``libLLVM-7.so`` is installed)."""
    return library_path() is not None


@lru_cache(maxsize=1)
def _lib():
    path = library_path()
    if path is None:
        raise RuntimeError("the NVVM pre-pass needs numba-cuda-mlir's libLLVM-7.so (pip install numba-cuda-mlir)")
    lib = ctypes.CDLL(path)
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    for name, res, args in (
            ("LLVMContextCreate", vp, []), ("LLVMContextDispose", None, [vp]),
            ("LLVMCreateMemoryBufferWithMemoryRangeCopy", vp, [cp, ctypes.c_size_t, cp]),
            ("LLVMParseIRInContext", ctypes.c_int, [vp, vp, ctypes.POINTER(vp), ctypes.POINTER(cp)]),
            ("LLVMParseBitcodeInContext2", ctypes.c_int, [vp, vp, ctypes.POINTER(vp)]),
            ("LLVMPrintModuleToString", vp, [vp]), ("LLVMDisposeMessage", None, [vp]),
            ("LLVMWriteBitcodeToMemoryBuffer", vp, [vp]), ("LLVMGetBufferStart", vp, [vp]),
            ("LLVMGetBufferSize", ctypes.c_size_t, [vp]), ("LLVMDisposeMemoryBuffer", None, [vp]),
            ("LLVMPassManagerBuilderCreate", vp, []), ("LLVMPassManagerBuilderSetOptLevel", None, [vp, ctypes.c_uint]),
            ("LLVMPassManagerBuilderPopulateModulePassManager", None, [vp, vp]),
            ("LLVMPassManagerBuilderDispose", None, [vp]), ("LLVMCreatePassManager", vp, []),
            ("LLVMRunPassManager", ctypes.c_int, [vp, vp]), ("LLVMDisposePassManager", None, [vp]),
            ("LLVMGetFirstGlobal", vp, [vp]), ("LLVMGetNextGlobal", vp, [vp]), ("LLVMTypeOf", vp, [vp]),
            ("LLVMGetPointerAddressSpace", ctypes.c_uint, [vp]), ("LLVMGetElementType", vp, [vp]),
            ("LLVMGetUndef", vp, [vp]), ("LLVMGetInitializer", vp, [vp]), ("LLVMSetInitializer", None, [vp, vp]),
            ("LLVMSetLinkage", None, [vp, ctypes.c_int]), ("LLVMSetDataLayout", None, [vp, cp])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def _optimise(lib, mod, level: int) -> None:
    pmb = lib.LLVMPassManagerBuilderCreate()
    pm = lib.LLVMCreatePassManager()
    try:
        lib.LLVMPassManagerBuilderSetOptLevel(pmb, level)
        lib.LLVMPassManagerBuilderPopulateModulePassManager(pmb, pm)
        lib.LLVMRunPassManager(pm, mod)
    finally:
        lib.LLVMDisposePassManager(pm)
        lib.LLVMPassManagerBuilderDispose(pmb)


def _for_libnvvm(lib, mod) -> None:
    """The module as libNVVM reads it back: its data layout, shared-memory arrays ``internal`` and ``undef``."""
    g = lib.LLVMGetFirstGlobal(mod)
    while g:
        t = lib.LLVMTypeOf(g)
        if lib.LLVMGetPointerAddressSpace(t) == _ADDRSPACE_SHARED and lib.LLVMGetInitializer(g):
            lib.LLVMSetInitializer(g, lib.LLVMGetUndef(lib.LLVMGetElementType(t)))
            lib.LLVMSetLinkage(g, _LLVM_INTERNAL_LINKAGE)
        g = lib.LLVMGetNextGlobal(g)
    lib.LLVMSetDataLayout(mod, NVVM_DATALAYOUT)


def optimise_text(text: str, level: int = LEVEL) -> str:
    """LLVM 7 ``-O<level>`` over one LLVM 7 text module, as text."""
    lib = _lib()
    data = text.encode()
    ctx = lib.LLVMContextCreate()
    try:
        buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), b"nvvm")
        mod, err = ctypes.c_void_p(), ctypes.c_char_p()
        if lib.LLVMParseIRInContext(ctx, buf, ctypes.byref(mod), ctypes.byref(err)):
            raise RuntimeError(f"NVVM pre-pass: LLVM 7 cannot read the module: {(err.value or b'').decode()[:500]}")
        _optimise(lib, mod, level)
        s = lib.LLVMPrintModuleToString(mod)
        try:
            return ctypes.string_at(s).decode()
        finally:
            lib.LLVMDisposeMessage(s)
    finally:
        lib.LLVMContextDispose(ctx)


def optimise_bitcode(data: bytes, level: int = LEVEL) -> bytes:
    """LLVM 7 ``-O<level>`` over one LLVM 7 bitcode module, as bitcode libNVVM reads (``_for_libnvvm``)."""
    lib = _lib()
    ctx = lib.LLVMContextCreate()
    try:
        buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), b"nvvm")
        mod = ctypes.c_void_p()
        if lib.LLVMParseBitcodeInContext2(ctx, buf, ctypes.byref(mod)):
            raise RuntimeError("NVVM pre-pass: LLVM 7 cannot read the bitcode")
        _optimise(lib, mod, level)
        _for_libnvvm(lib, mod)
        out = lib.LLVMWriteBitcodeToMemoryBuffer(mod)
        try:
            return ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
        finally:
            lib.LLVMDisposeMemoryBuffer(out)
    finally:
        lib.LLVMContextDispose(ctx)


def level() -> int:
    """The pre-pass level of this thread's compile (0: none)."""
    return getattr(_TLS, "level", 0)


@contextmanager
def active(on: bool = True):
    """Compiles in this thread within the block run the pre-pass (when ``on``, it is installed for the compiler and
    ``available()``); nested blocks restore the outer setting."""
    prev = level()
    _TLS.level = LEVEL if on else 0
    try:
        yield
    finally:
        _TLS.level = prev


def _source_ok(key: str, fn) -> bool:
    return source_sha256(fn) == KNOWN_SOURCE_SHA256[key]


def install(compiler: str) -> str:
    """Install the replacement for ``compiler`` (``"numba"`` or ``"mlir"``) once; returns ``"installed"`` or why
    not (pre-pass unavailable, an unknown compiler version)."""
    with _LOCK:
        if compiler not in _installed:
            _installed[compiler] = _install(compiler)
        return _installed[compiler]


def _install(compiler: str) -> str:
    if not available():
        return "numba-cuda-mlir's libLLVM-7.so is not installed"
    if compiler == "numba":
        from numba.cuda.cudadrv import nvvm

        inner = nvvm.compile_ir
        if not _source_ok("numba.cuda.cudadrv.nvvm.compile_ir", inner):
            return "numba-cuda's nvvm.compile_ir is not the version this was written against"

        def compile_ir(llvmir, **opts):
            if not level():
                return inner(llvmir, **opts)
            mods = [llvmir] if isinstance(llvmir, str) else list(llvmir)
            if mods:
                first = mods[0] if isinstance(mods[0], str) else mods[0].decode()
                mods[0] = optimise_text(nvvm.llvm_replace(first), level())
            return inner(mods, **opts)

        nvvm.compile_ir = compile_ir
        return "installed"
    from numba_cuda_mlir import mlir_optimization as mo

    inner = mo._call_llvm70_capi
    if not _source_ok("numba_cuda_mlir.mlir_optimization._call_llvm70_capi", inner):
        return "numba-cuda-mlir's _call_llvm70_capi is not the version this was written against"

    def call_llvm70_capi(module, target_options, gen_lto=False, gen_llvmir=False):
        if not level() or gen_lto or gen_llvmir:
            return inner(module, target_options, gen_lto=gen_lto, gen_llvmir=gen_llvmir)
        return _mlir_compile(mo, inner, module, target_options)

    mo._call_llvm70_capi = call_llvm70_capi
    return "installed"


def _mlir_compile(mo, inner, module, target_options) -> bytes:
    """PTX of numba-cuda-mlir's module with the pre-pass: its NVVM bitcode captured from ``inner`` (which also
    compiles it; its PTX is dropped), the pipeline, then libNVVM as numba-cuda-mlir calls it."""
    from numba_cuda_mlir.numba_cuda import config
    from numba_cuda_mlir.numba_cuda.cudadrv.nvvm import CompilationUnit, LibDevice

    got = []
    dump, old = mo._maybe_dump_nvvm, config.CUDA_DUMP_NVVM
    mo._maybe_dump_nvvm, config.CUDA_DUMP_NVVM = got.append, "capture"
    try:
        inner(module, target_options)
    finally:
        mo._maybe_dump_nvvm, config.CUDA_DUMP_NVVM = dump, old
    if len(got) != 1:
        raise RuntimeError(f"NVVM pre-pass: expected numba-cuda-mlir's one NVVM module, captured {len(got)}")
    chip = target_options.get("chip")
    if not chip:
        from numba_cuda_mlir.tools import get_gpu_compute_capability

        chip = get_gpu_compute_capability()
    cu = CompilationUnit(mo._nvvm_options(chip.replace("sm_", ""), target_options))
    cu.add_module(optimise_bitcode(bytes(got[0]), level()))
    cu.verify()
    cu.lazy_add_module(LibDevice().get())
    return bytes(cu.compile()).rstrip(b"\x00")  # libNVVM ends its PTX with a NUL
