"""Device-resident constant inputs of one MatMulNBits node.

``Weights`` is built once by ``MatMulNBits`` at construction: B, scales, zero points, g_idx and
bias copied to the device in the kernels' layouts (flat 1-D views, bf16 as its bits), plus the
attributes every kernel needs. Routes may derive further layouts (for example a prepacked layout
for the tensor-core kernel) through ``Weights.derived(key, build)``, which builds each one once,
outside any graph capture; a family keeps per-node state there too (the fpA_intB tactic profiler).
A node whose every route reads the tensor-core layout keeps only that layout (``keep_packed_only``): ORT's B
is freed once the layout is built, so the weights occupy their packed size once on the device, not twice.
The plans the families build from these weights are ``kernels.family.Plan``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Optional

import numpy as np

from .arrays import DevArray, to_device
from .formats import BlockGeometry


#: how a node's zero points are given: absent, packed uint8, or typed (the scales' float dtype)
ZP_KINDS = ("none", "packed", "typed")


@lru_cache(maxsize=None)
def _dummy(simulated: bool, device_id: int, dtype: str) -> DevArray:
    """The 1-element placeholder (zero) of absent optional kernel inputs, one per (simulated, device, dtype) for
    the whole process (no kernel writes it); each node making its own cost a device allocation and copy per dtype
    (five per node on a fresh process's first results of a served model: ``benchmarks/cold_start.py``)."""
    return to_device(np.zeros(1, np.dtype(dtype)), simulated)


@dataclass
class Weights(BlockGeometry):
    """Constant inputs on the device (see module docstring). All arrays are C-contiguous."""

    N: int
    K: int
    bits: int
    block_size: int
    dtype: str  # "float32" | "float16" | "bfloat16": the dtype of A, scales, typed zp, bias, Y
    b: Optional[DevArray]  # uint8 (N, k_blocks, blob_size); None once ``keep_packed_only`` freed it
    scales: DevArray  # (N * k_blocks,) in dtype
    zp_kind: str  # one of ZP_KINDS
    zp_packed: Optional[DevArray]  # uint8 (N * zp_row,)
    zp_typed: Optional[DevArray]  # (N * k_blocks,) in dtype
    g_idx: Optional[DevArray]  # int32 (K_padded,)
    bias: Optional[DevArray]  # (N,) in dtype
    simulated: bool
    device_id: int
    host: dict = field(default_factory=dict)  # host copies kept for derived layouts / chunking
    _derived: dict = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.Lock)

    @property
    def b_words(self) -> DevArray:
        """B as a flat uint32 array (each row is a multiple of 4 bytes)."""
        return self.derived("b_words", lambda: self.onnx_b().view(np.uint32))

    @property
    def packed_only(self) -> bool:
        """Whether ORT's B was freed (``keep_packed_only``): the tensor-core layout is the node's only copy."""
        return self.b is None

    def onnx_b(self) -> DevArray:
        """B in ORT's layout; an error naming the node when only the tensor-core layout is kept."""
        if self.b is None:
            raise RuntimeError(f"MatMulNBits weights ({self.describe()}) keep only the tensor-core layout "
                               "(Weights.keep_packed_only); a kernel that reads ORT's B layout cannot run on them")
        return self.b

    def keep_packed_only(self, prepack: Callable[["Weights"], Any]) -> None:
        """Build the tensor-core layout (``prepack(self)``, cached in ``derived``), then free ORT's B: every
        route the node takes must read that layout (``dispatch.select.packed_layout_serves``)."""
        prepack(self)
        with self._lock:
            self._derived.pop("b_words", None)
            self.b = None

    def dummy(self, dtype) -> DevArray:
        """A 1-element placeholder (zero) for an absent optional input of a kernel, shared by every node on this
        device (``_dummy``): kernels never write it."""
        return _dummy(self.simulated, self.device_id, np.dtype(dtype).str)

    def derived(self, key: str, build: Callable[[], Any]):
        """Build (once) and cache a derived layout or constant under ``key``."""
        v = self._derived.get(key)
        if v is None:
            with self._lock:
                v = self._derived.get(key)
                if v is None:
                    v = self._derived[key] = build()
        return v

    @property
    def np_dtype(self) -> np.dtype:
        from .arrays import np_dtype

        return np_dtype(self.dtype)

    def describe(self) -> str:
        return (f"N={self.N} K={self.K} bits={self.bits} block_size={self.block_size} dtype={self.dtype} "
                f"zero_points={self.zp_kind} g_idx={self.g_idx is not None} bias={self.bias is not None}"
                + (" layout=tensor-core only" if self.b is None else ""))


def build_weights(B: np.ndarray, scales: np.ndarray, zero_points=None, g_idx=None, bias=None, *, K: int, N: int,
                  bits: int, block_size: int, simulated: bool, device_id: int = 0) -> Weights:
    """Copy validated host inputs to the device in the kernels' layouts (see ``Weights``).

    Inputs must already be validated by ``schema.py``: B uint8 (N, k_blocks, blob); scales (N, k_blocks)
    or flat; zero_points packed uint8 or typed like scales; g_idx int32 of K or K_padded entries.
    """
    from .formats import float_dtype_name

    dtype = float_dtype_name(scales.dtype)
    kb = -(-K // block_size)
    k_pad = kb * block_size
    host = {"B": B, "scales": scales, "zero_points": zero_points, "g_idx": g_idx, "bias": bias}
    b = to_device(np.ascontiguousarray(B, dtype=np.uint8).reshape(N, kb, block_size * bits // 8), simulated)
    sc = to_device(np.ascontiguousarray(scales).reshape(N * kb), simulated)
    zp_kind, zp_packed, zp_typed = "none", None, None
    if zero_points is not None:
        if zero_points.dtype == np.uint8:
            zp_kind = "packed"
            zp_packed = to_device(np.ascontiguousarray(zero_points).reshape(-1), simulated)
        else:
            zp_kind = "typed"
            zp_typed = to_device(np.ascontiguousarray(zero_points).reshape(N * kb), simulated)
    gi = None
    if g_idx is not None:
        g = np.asarray(g_idx, dtype=np.int32).reshape(-1)
        if g.size < k_pad:  # K entries: pad with the natural block of the padded columns
            g = np.concatenate([g, (np.arange(g.size, k_pad) // block_size).astype(np.int32)])
        gi = to_device(g, simulated)
    bi = to_device(np.ascontiguousarray(bias).reshape(N), simulated) if bias is not None else None
    return Weights(N=N, K=K, bits=bits, block_size=block_size, dtype=dtype, b=b, scales=sc, zp_kind=zp_kind,
                   zp_packed=zp_packed, zp_typed=zp_typed, g_idx=gi, bias=bi, simulated=simulated,
                   device_id=device_id, host=host)
