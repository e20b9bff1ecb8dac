"""numba_nbits: ONNX Runtime's ``com.microsoft::MatMulNBits`` for NVIDIA GPUs, written in Python.

``Y = A @ dequant(B).T + bias`` with B block-quantized to 2, 4 or 8 bits, run by numba-cuda kernels
(fused GEMVs, dequantize + cuBLAS) behind the operator's dispatch chain.

Importing this package does no device work, compiles nothing and reads no environment variable:
the public names below are loaded on first use. Without a CUDA GPU, building a ``MatMulNBits`` raises
``NoGPUError`` unless numba runs on its CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba is imported).
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "MatMulNBits": ".op",
    "matmul_nbits": ".op",
    "dequantize": ".op",
    "quantize": ".formats",
    "Config": ".config",
    "load_config": ".config",
    "Problem": ".dispatch.problem",
    "select": ".dispatch.select",
    "ROUTES": ".dispatch.routes",
    "matmul_nbits_ref": ".reference",
    "dequantize_ref": ".reference",
    "relative_error": ".reference",
    "TOLERANCES": ".reference",
    "explain": ".explain",
    "precompile": ".precompile",
    "PrecompileSummary": ".precompile",
    "capture": ".graphs",
    "Graph": ".graphs",
    "CaptureError": ".launch",
    "MatMulNBitsError": ".schema",
    "NoGPUError": ".probe",
    "pack_weights_for_mixed_gemm": ".kernels.mixed_gemm",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'numba_nbits' has no attribute {name!r}")
    module = importlib.import_module(mod, __name__)
    # ``precompile`` is a callable module (calling it calls its ``precompile``), so it is its own export
    value = module if mod == "." + name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
