"""The NVVM IR numba-cuda-mlir hands libNVVM for one GEMV kernel, as LLVM 7 text, and libNVVM + ptxas on an edited copy.

    NUMBA_NBITS_BACKEND=mlir python benchmarks/results/2026-12-07-cpu-mlir-layout/nvvm_ir.py dump t2w4u1p1,128,2 k.ll
    python benchmarks/results/2026-12-07-cpu-mlir-layout/nvvm_ir.py compile k.ll     # edit k.ll in between

``dump``: compiles the kernel with ``NUMBA_CUDA_MLIR_DUMP_NVVM`` set (the bitcode numba-cuda-mlir gives libNVVM),
reads the bitcode back with the ``libLLVM-7.so`` numba-cuda-mlir ships and writes its text, made acceptable to
libNVVM's text reader (the shared-memory global ``undef``, the 64-bit data layout NVVM asks for).
``compile``: libNVVM (compute_90a) -> PTX (``k.ll.ptx``) -> ``benchmarks.ptx_stats.ptxas_stats`` with the SASS main
loop, and the loop's self-incremented 64-bit registers (pointer induction variables, ``add.s64 %rdN, %rdN, C``).
Needs numba-cuda-mlir, ptxas and nvdisasm (the ``nvidia-cuda-nvdisasm`` wheel on PATH); no GPU.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
LAYOUT = ("e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-"
          "v32:32:32-v64:64:64-v128:128:128-n16:32:64")


def bitcode_to_text(data: bytes) -> str:
    import numba_cuda_mlir

    lib = ctypes.CDLL(os.path.join(os.path.dirname(numba_cuda_mlir.__file__), "lib", "libLLVM-7.so"))
    vp = ctypes.c_void_p
    lib.LLVMContextCreate.restype = vp
    lib.LLVMCreateMemoryBufferWithMemoryRangeCopy.restype = vp
    lib.LLVMCreateMemoryBufferWithMemoryRangeCopy.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
    lib.LLVMParseBitcodeInContext2.argtypes = [vp, vp, ctypes.POINTER(vp)]
    lib.LLVMPrintModuleToString.restype = vp
    lib.LLVMPrintModuleToString.argtypes = [vp]
    buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), b"m")
    mod = vp()
    if lib.LLVMParseBitcodeInContext2(lib.LLVMContextCreate(), buf, ctypes.byref(mod)):
        raise RuntimeError("libLLVM-7 could not read the bitcode")
    text = ctypes.string_at(lib.LLVMPrintModuleToString(mod)).decode()
    text = re.sub(r"private addrspace\(3\) global (\[[^\]]+\]) zeroinitializer",
                  r"internal addrspace(3) global \1 undef", text)
    return re.sub(r"^target datalayout = .*$", f'target datalayout = "{LAYOUT}"', text, flags=re.M)


def dump(spec: str, out: str) -> None:
    tag, bs, mt = spec.split(",")
    d = tempfile.mkdtemp()
    os.environ["NUMBA_CUDA_MLIR_DUMP_NVVM"] = d
    from benchmarks import ptx_stats

    ptx_stats.compile_ptx(tag, int(bs), int(mt), "float16", 4, True)
    (bc,) = glob.glob(os.path.join(d, "*.bc"))
    with open(bc, "rb") as f, open(out, "w") as g:
        g.write(bitcode_to_text(f.read()))
    print("wrote", out)


def compile_text(path: str) -> None:
    from numba_cuda_mlir.numba_cuda.cudadrv.nvvm import CompilationUnit, LibDevice

    from benchmarks import ptx_stats

    cu = CompilationUnit({"arch": "compute_90a"})
    with open(path, "rb") as f:
        cu.add_module(f.read())
    cu.verify()
    cu.lazy_add_module(LibDevice().get())
    ptx = cu.compile().decode().rstrip("\x00")
    with open(path + ".ptx", "w") as f:
        f.write(ptx)
    st = ptx_stats.ptxas_stats(ptx, True, None, path)
    inc = sorted({int(c) for a, b, c in re.findall(r"add\.s64\s+(%rd\d+), (%rd\d+), (\d+);", ptx) if a == b})
    print(path, {k: v for k, v in st.items() if k != "loop_ops"}, "self-increments", inc)


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2], sys.argv[3])
    else:
        compile_text(sys.argv[2])
