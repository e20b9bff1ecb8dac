"""The compiled mixed GEMM kernel and its plan for one M (``build``).

``mixed_gemm_kernel`` compiles one specialisation of ``source.gen_source`` (cached per argument
tuple). ``MixedGemmPlan`` binds it once for a node and an M: the grid (``ceil(N / BN) x ceil(M / BM) x
splits``), the node's device layouts (``layout.prepack``), the split-K workspace and counters; each
call only rewrites the A / Y pointers. The kernel fuses the bias when the node has one.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np
from numba import cuda

from ...arrays import DevArray, to_device
from ...launch import Kernel
from .. import intrinsics as _I
from ..codegen import load_source
from ..dtypes import LOADS, STORES, array_type
from ..family import Plan
from .layout import _chunks, prepack
from .source import gen_source
from .tactics import BITS, ROUTE, TACTICS, Tactic, default_tactic, split_count, supports


@lru_cache(maxsize=None)
def mixed_gemm_kernel(act: str, tac: Tactic, BS: int, ZP: str, HAS_BIAS: bool, arch: int, bits: int = 4) -> Kernel:
    from numba.cuda import types

    if bits not in BITS:
        raise ValueError(f"mixed_gemm_kernel: bits must be one of {BITS}, got {bits}")
    src = gen_source(act, tac, BS, ZP, HAS_BIAS, arch, bits)
    ns = {
        "cuda": cuda, "np": np, "ldg_v4": _I.ldg_v4, "ld": LOADS[act], "st_": STORES[act],
        "mma": _I.mma_bf16 if act == "bfloat16" else _I.mma_f16,
        "fma2": _I.fma_bf16x2 if act == "bfloat16" else _I.fma_f16x2,
        "pack2": _I.pack_bf16x2, "u32_as_f32": _I.u32_as_f32, "ldcg": _I.ldcg, "threadfence": _I.threadfence,
    }
    name = f"mixed_gemm_w{bits}_{act}_{tac.name}_b{BS}_{ZP}{'_bias' if HAS_BIAS else ''}_sm{arch}"
    fn = load_source(name, src, ns)["mixed_gemm"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type("uint32"), array_type(act), array_type("uint8"), array_type(act),
                array_type(act), array_type(act)) + (types.int64,) * 6 + (
                array_type("float32"), array_type("int32"), types.int64)
    return Kernel(fn, argtypes, name=name, fastmath=False)


# -------------------------------------------------------------------------------------- plan

class MixedGemmPlan(Plan):
    """The mixed GEMM bound for one node and M (``tactic`` is the ``Tactic``; bias fused when present)."""

    route = ROUTE

    def __init__(self, weights, M: int, tactic: Tactic, arch: int):
        self.M, self.N, self.K = M, weights.N, weights.K
        self.tactic = tactic
        pk = prepack(weights, arch)
        self.packed = pk
        has_bias = weights.bias is not None
        n_full, half = _chunks(self.K)
        gx, gy = -(-self.N // tactic.bn), -(-M // tactic.bm)
        self.splits, sps = split_count(tactic, gx * gy, n_full + int(half), weights.block_size)
        ktac = tactic
        if tactic.splitk != 1 and self.splits == 1:  # nothing to split: the plain kernel, no workspace
            ktac = replace(tactic, name=tactic.name + "1", splitk=1)
        k = mixed_gemm_kernel(weights.dtype, ktac, weights.block_size, weights.zp_kind, has_bias, arch,
                              weights.bits)
        self.kernel = k.name
        self._kernel = k
        self._elem = np.uint16 if weights.dtype == "bfloat16" else np.float16
        du8 = weights.dummy(np.uint8)
        dact = weights.dummy(self._elem)
        zpk = pk.zp if weights.zp_kind == "packed" else du8
        zpt = pk.zp if weights.zp_kind == "typed" else dact
        bias = weights.bias.view(self._elem) if has_bias else dact
        if ktac.splitk != 1:  # one fp32 slice per split (overwritten every launch); counters zeroed once
            # here, the last block of each tile resets its counter after every launch
            ws = to_device(np.zeros(self.splits * M * self.N, np.float32), weights.simulated)
            cnt = to_device(np.zeros(gx * gy, np.int32), weights.simulated)
        else:
            ws, cnt = weights.dummy(np.float32), weights.dummy(np.int32)
        self.workspace, self.counters = ws, cnt
        self._launch = k.bind((gx, gy, self.splits), tactic.threads,
                              (weights.dummy(np.uint32), pk.bq, pk.scales, zpk, zpt, bias, dact, M, self.K, self.N,
                               weights.k_blocks, n_full, int(half), ws, cnt, sps))

    def debug_fields(self) -> dict:
        return {**super().debug_fields(), "packing_sm": self.packed.arch, "tactic": self.tactic.name}

    def enqueue(self, a: DevArray, out: DevArray, stream: int) -> None:
        M, K, N = self.M, self.K, self.N
        if a.ptr % 16:
            raise ValueError("mixed_gemm: A must be 16-byte aligned")
        self._launch.set_array(0, a.view(np.uint32, (M * K // 2,)))
        self._launch.set_array(6, out.view(self._elem, (M * N,)))
        self._launch.launch(stream)


def build(weights, problem, config=None, tactic=None, arch: int | None = None) -> MixedGemmPlan:
    """Plan for ``problem``; ``tactic`` is a ``TACTICS`` name or ``Tactic`` (default by M);
    ``arch`` 80/90 picks the prepacked layout (default: 90 when ``problem.weight_prepacked == 2``)."""
    if not supports(problem):
        raise ValueError(f"mixed_gemm does not support {problem.describe()}")
    if weights.bits != problem.bits or weights.bits not in BITS or weights.g_idx is not None:
        raise ValueError(f"mixed_gemm does not support these weights: {weights.describe()}")
    if isinstance(tactic, str):
        tactic = TACTICS[tactic]
    tac = tactic or default_tactic(problem.M)
    if arch is None:
        arch = 90 if problem.weight_prepacked == 2 else 80
    return MixedGemmPlan(weights, problem.M, tac, arch)
