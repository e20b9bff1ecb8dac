"""LLVM-7 -O<LEVEL> (libLLVM-7 of numba-cuda-mlir) over an LLVM 7 text module: python llvm7_opt.py in.ll out.ll [LEVEL] (default 3)"""
import ctypes, os, sys, re
import numba_cuda_mlir
lib = ctypes.CDLL(os.path.join(os.path.dirname(numba_cuda_mlir.__file__), "lib", "libLLVM-7.so"))
vp = ctypes.c_void_p
lib.LLVMContextCreate.restype = vp
lib.LLVMCreateMemoryBufferWithMemoryRangeCopy.restype = vp
lib.LLVMCreateMemoryBufferWithMemoryRangeCopy.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
lib.LLVMParseIRInContext.argtypes = [vp, vp, ctypes.POINTER(vp), ctypes.POINTER(ctypes.c_char_p)]
lib.LLVMPrintModuleToString.restype = vp
lib.LLVMPrintModuleToString.argtypes = [vp]
lib.LLVMPassManagerBuilderCreate.restype = vp
lib.LLVMPassManagerBuilderSetOptLevel.argtypes = [vp, ctypes.c_uint]
lib.LLVMCreatePassManager.restype = vp
lib.LLVMPassManagerBuilderPopulateModulePassManager.argtypes = [vp, vp]
lib.LLVMRunPassManager.argtypes = [vp, vp]
lib.LLVMPassManagerBuilderUseInlinerWithThreshold.argtypes = [vp, ctypes.c_uint]
text = open(sys.argv[1]).read().encode()
ctx = lib.LLVMContextCreate()
buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(text, len(text), b"m")
mod = vp(); err = ctypes.c_char_p()
if lib.LLVMParseIRInContext(ctx, buf, ctypes.byref(mod), ctypes.byref(err)):
    raise SystemExit(err.value.decode()[:2000])
level = int(sys.argv[3]) if len(sys.argv) > 3 else 3
pmb = lib.LLVMPassManagerBuilderCreate()
lib.LLVMPassManagerBuilderSetOptLevel(pmb, level)
lib.LLVMPassManagerBuilderUseInlinerWithThreshold(pmb, 275)
pm = lib.LLVMCreatePassManager()
lib.LLVMPassManagerBuilderPopulateModulePassManager(pmb, pm)
lib.LLVMRunPassManager(pm, mod)
out = ctypes.string_at(lib.LLVMPrintModuleToString(mod)).decode()
open(sys.argv[2], "w").write(out)
print("ok", len(out.splitlines()))
