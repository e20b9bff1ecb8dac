"""``nvvm_prepass``: LLVM 7's ``-O1`` pipeline over a kernel's NVVM input (numba-cuda-mlir's ``libLLVM-7.so``). No GPU:
the pipeline on hand-written modules, the bitcode it hands libNVVM, and a GEMV kernel's PTX with and without it."""
from __future__ import annotations

import ctypes
import re

import pytest

from numba_nbits import nvvm_prepass as P

pytestmark = pytest.mark.skipif(not P.available(), reason="numba-cuda-mlir's libLLVM-7.so is not installed")

MODULE = """target triple = "nvptx64-nvidia-cuda"

@buf = private addrspace(3) global [4 x float] zeroinitializer, align 4

define i32 @f(i32 %x) {
entry:
  %p = alloca i32
  store i32 %x, i32* %p
  %v = load i32, i32* %p
  %a = add i32 %v, 0
  %b = mul i32 %a, 1
  ret i32 %b
}

define float @g(i32 %i) {
  %q = getelementptr [4 x float], [4 x float] addrspace(3)* @buf, i32 0, i32 %i
  %v = load float, float addrspace(3)* %q
  ret float %v
}
"""


def test_the_pipeline_optimises_a_text_module():
    out = P.optimise_text(MODULE)
    body = out.split("define i32 @f", 1)[1].split("}", 1)[0]
    assert " = alloca " not in body and " = add " not in body and " = mul " not in body
    assert "ret i32 %x" in body
    assert P.optimise_text(MODULE, level=0).count("alloca") == 1  # -O0 keeps it


def _bitcode_of(text: str) -> bytes:
    """The bitcode LLVM 7 writes for ``text`` (what numba-cuda-mlir's translator hands libNVVM is bitcode)."""
    lib = P._lib()
    data = text.encode()
    ctx = lib.LLVMContextCreate()
    buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), b"t")
    mod, err = ctypes.c_void_p(), ctypes.c_char_p()
    assert not lib.LLVMParseIRInContext(ctx, buf, ctypes.byref(mod), ctypes.byref(err))
    out = lib.LLVMWriteBitcodeToMemoryBuffer(mod)
    try:
        return ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
    finally:
        lib.LLVMDisposeMemoryBuffer(out)
        lib.LLVMContextDispose(ctx)


def _text_of(bitcode: bytes) -> str:
    lib = P._lib()
    ctx = lib.LLVMContextCreate()
    buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(bitcode, len(bitcode), b"t")
    mod = ctypes.c_void_p()
    assert not lib.LLVMParseBitcodeInContext2(ctx, buf, ctypes.byref(mod))
    s = lib.LLVMPrintModuleToString(mod)
    try:
        return ctypes.string_at(s).decode()
    finally:
        lib.LLVMDisposeMessage(s)
        lib.LLVMContextDispose(ctx)


def test_bitcode_comes_back_as_libnvvm_reads_it():
    """The pipeline over bitcode, then the module as libNVVM accepts it: its 64-bit data layout (i128 included) and
    shared-memory arrays ``internal`` with an ``undef`` initializer; the rest optimised as the text path does."""
    text = _text_of(P.optimise_bitcode(_bitcode_of(MODULE)))
    assert f'target datalayout = "{P.NVVM_DATALAYOUT.decode()}"' in text
    assert re.search(r"@buf = internal (unnamed_addr )?addrspace\(3\) (global|constant) \[4 x float\] undef", text)
    assert "ret i32 %x" in text


SCRIPT = r"""
import re
from benchmarks import ptx_stats as p
from numba_nbits import backend, nvvm_prepass
def regs(ptx):  # virtual registers libNVVM declares
    return sum(int(n) for n in re.findall(r"\.reg \.\w+ \s*%\w+<(\d+)>;", ptx))
_, plain, _ = p.compile_ptx("t2w4u1", 128, 2, "float16")
_, pre, k = p.compile_ptx("t2w4u1o", 128, 2, "float16")
_, again, _ = p.compile_ptx("t2w4u1", 128, 2, "float16")
print(backend.compiler(), backend.prepass_state(True), k.prepass, nvvm_prepass.level(), regs(pre) < regs(plain),
      regs(again) == regs(plain))
"""


@pytest.mark.parametrize("compiler", ["numba", "mlir"])
def test_gemv_kernel_with_the_prepass(compiler):
    """Either compiler (its NVVM step replaced while a compile asks for the pre-pass, ``Tactic.prepass``): the
    two-m-tile GEMV kernel ``t2w4u1`` with ``o`` gets PTX with fewer virtual registers than without (physical ones
    after ptxas: numba-cuda 125 -> 101, ``benchmarks/results/2026-12-07-cpu-mlir-layout`` section 4); a compile after it
    without the pre-pass declares the first one's registers again (nothing stays switched on)."""
    from conftest import run_compiler

    from numba_nbits import backend

    if compiler == "mlir":
        pytest.importorskip("numba_cuda_mlir")
    elif not backend.numba_can_compile():
        import numpy as np

        pytest.skip(f"numba-cuda does not compile under numpy {np.__version__}")
    r = run_compiler(compiler, "-c", SCRIPT, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [compiler, "installed", "True", "0", "True", "True"], r.stdout
