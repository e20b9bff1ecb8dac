"""The intrinsics of ``kernels/intrinsics_sm90.py`` for numba-cuda-mlir (``NUMBA_NBITS_BACKEND=mlir``).

Device functions around ``cuda.experimental.inline_ptx``, as ``intrinsics_mlir.py`` (its docstring has the
operand conventions), with the same PTX as the llvmlite versions. numba-cuda-mlir has no tied operands, so
a ``wgmma`` takes the accumulators as inputs and copies them into its outputs (``mov.f32``) inside the
asm, before the MMA accumulates onto them; ``wgmma_wait`` copies after the wait. The ``wgmma`` forms are
generated per shape (``N / 2`` accumulators each) and loaded through ``codegen.load_source``. Kernels that
use them must be compiled for ``sm_90a`` (``backend.jit_options`` passes ``chip`` on a 9.0 device).
"""
from __future__ import annotations

import importlib

import numpy as np
from numba_cuda_mlir import cuda
from numba_cuda_mlir import types as mt

from .codegen import load_source

importlib.import_module("numba_cuda_mlir.cuda.experimental")  # loads cuda.experimental (inline_ptx)

_F0 = np.float32(0.0)
_L0 = np.int64(0)
WGMMA_N = (8, 16, 32, 64)

_device = cuda.jit(device=True, inline="always")


@_device
def smem_desc(arr, byte_offset, lbo, sbo):
    addr = np.uint64(cuda.experimental.inline_ptx("cvta.to.shared.u64 %0, %1;", "=l", _L0, "C",
                                                  mt.ptr(arr) + byte_offset))
    return (((addr >> np.uint64(4)) & np.uint64(0x3FFF))
            | (((np.uint64(lbo) >> np.uint64(4)) & np.uint64(0x3FFF)) << np.uint64(16))
            | (((np.uint64(sbo) >> np.uint64(4)) & np.uint64(0x3FFF)) << np.uint64(32)))


@_device
def fence_proxy_async():
    cuda.experimental.inline_ptx("fence.proxy.async.shared::cta;")


def _source(n: int, bf16: bool, sync: bool) -> str:
    kind = "bf16" if bf16 else "f16"
    m = n // 2
    moves = "".join(f"mov.f32 %{k}, %{m + 6 + k};\\n" for k in range(m))
    ptx = ("{\\n.reg .pred p;\\n" f"setp.ne.b32 p, %{m + 5}, 0;\\n" + moves + "wgmma.fence.sync.aligned;\\n"
           f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} "
           "{" + ", ".join(f"%{k}" for k in range(m)) + "}, "
           f"{{%{m}, %{m + 1}, %{m + 2}, %{m + 3}}}, %{m + 4}, p, 1, 1, 0;\\n"
           + ("wgmma.commit_group.sync.aligned;\\nwgmma.wait_group.sync.aligned 0;\\n" if sync else "") + "}")
    outs = ", ".join(['"=f", F0'] * m)
    ins = ('"r", np.uint32(a0), "r", np.uint32(a1), "r", np.uint32(a2), "r", np.uint32(a3), '
           '"l", np.uint64(desc), "r", np.uint32(1), ' + ", ".join(f'"f", np.float32(acc[{k}])' for k in range(m)))
    name = f"wgmma_m64n{n}k16_{kind}" + ("" if sync else "_async")
    return (f"def {name}(acc, a0, a1, a2, a3, desc):\n"
            f"    return cuda.experimental.inline_ptx(\"{ptx}\", {outs}, {ins})\n")


def _wait_source(m: int) -> str:
    moves = "".join(f"mov.f32 %{k}, %{m + k};\\n" for k in range(m))
    ptx = "wgmma.commit_group.sync.aligned;\\nwgmma.wait_group.sync.aligned 0;\\n" + moves
    outs = ", ".join(['"=f", F0'] * m)
    ins = ", ".join(f'"f", np.float32(acc[{k}])' for k in range(m))
    return f"def wgmma_wait_{m}(acc):\n    return cuda.experimental.inline_ptx(\"{ptx}\", {outs}, {ins})\n"


def _load(name: str, src: str):
    fn = load_source(f"sm90_mlir_{name}", src, {"cuda": cuda, "np": np, "F0": _F0})[name]
    return _device(fn)


_WGMMA = {}
_WGMMA_ASYNC = {}
for _n in WGMMA_N:  # generated for every shape; only n = 8 types (intrinsics_sm90.MLIR_WGMMA_N says why)
    for _bf in (False, True):
        _k = "bf16" if _bf else "f16"
        _WGMMA[(_n, _bf)] = _load(f"wgmma_m64n{_n}k16_{_k}", _source(_n, _bf, True))
        _WGMMA_ASYNC[(_n, _bf)] = _load(f"wgmma_m64n{_n}k16_{_k}_async", _source(_n, _bf, False))
_WAITS = {n // 2: _load(f"wgmma_wait_{n // 2}", _wait_source(n // 2)) for n in WGMMA_N}


def wgmma_wait_for(m: int):
    """``wgmma_wait`` for ``m`` accumulators (numba-cuda-mlir has no generic tuple intrinsic)."""
    return _WAITS[m]
