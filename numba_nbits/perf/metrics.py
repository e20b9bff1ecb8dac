"""Byte and FLOP counting, L2 rotation sizing and the derived columns (pure Python, no device work).

Bytes are the fewest a kernel must move through device memory: every input read once, Y written
once. For MatMulNBits that is packed weights + scales + zero points + A + Y + bias; peers count
their own operands (fp16 dense weights for cuBLAS, tinygemm's packed int4 + scales-and-zeros).
FLOPs are ``2 * M * N * K`` for every subject.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class Bytes:
    """The byte count of one call, by operand."""

    weights: int
    scales: int
    zero_points: int
    A: int
    Y: int
    bias: int

    @property
    def constant(self) -> int:
        """Bytes that belong to the operator (rotated by building several operators)."""
        return self.weights + self.scales + self.zero_points + self.bias

    @property
    def total(self) -> int:
        return self.weights + self.scales + self.zero_points + self.A + self.Y + self.bias


def k_blocks(K: int, block: int) -> int:
    return -(-K // block)


def nbits_bytes(M: int, N: int, K: int, bits: int, block: int, dtype: str, zp: str = "none",
                bias: bool = False) -> Bytes:
    """Bytes of one MatMulNBits call (ORT layouts, spec §2).

    ``zp``: ``"none"`` | ``"packed"`` (uint8, ``ceil(k_blocks*bits/8)`` bytes per row) | ``"typed"``
    (one A-dtype value per block).
    """
    it = ITEMSIZE[dtype]
    kb = k_blocks(K, block)
    weights = N * kb * (block * bits // 8)
    scales = N * kb * it
    if zp == "none":
        zpb = 0
    elif zp == "packed":
        zpb = N * (-(-kb * bits // 8))
    elif zp == "typed":
        zpb = N * kb * it
    else:
        raise ValueError(f"zero points must be 'none', 'packed' or 'typed', got {zp!r}")
    return Bytes(weights, scales, zpb, M * K * it, M * N * it, N * it if bias else 0)


def dense_bytes(M: int, N: int, K: int, dtype: str, bias: bool = False) -> Bytes:
    """Bytes of a dense ``F.linear`` with weights in ``dtype``."""
    it = ITEMSIZE[dtype]
    return Bytes(N * K * it, 0, 0, M * K * it, M * N * it, N * it if bias else 0)


def tinygemm_bytes(M: int, N: int, K: int, group: int, bias: bool = False) -> Bytes:
    """Bytes of ``torch._weight_int4pack_mm`` (bf16): int4 weights + bf16 (scale, zero) per group."""
    return Bytes(N * K // 2, k_blocks(K, group) * N * 2 * 2, 0, M * K * 2, M * N * 2, N * 2 if bias else 0)


def flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def rotation_copies(per_copy_bytes: int, l2_bytes: int, *, factor: float = 2.0, max_copies: int = 2048,
                    mem_budget_bytes: int | None = None) -> int:
    """How many copies of a call's operands make the rotated working set exceed ``factor * L2``.

    At least 1; at most ``max_copies`` and at most what ``mem_budget_bytes`` holds (a copy that
    alone exceeds the budget still gets 1). ``l2_cold(...)`` tells whether the result is enough.
    """
    if per_copy_bytes <= 0:
        return 1
    need = math.ceil(factor * l2_bytes / per_copy_bytes) if l2_bytes > 0 else 1
    n = max(1, min(need, int(max_copies)))
    if mem_budget_bytes is not None:
        n = max(1, min(n, int(mem_budget_bytes // per_copy_bytes)))
    return n


def l2_cold(copies: int, per_copy_bytes: int, l2_bytes: int) -> bool:
    """True when ``copies`` rotated copies together exceed the L2 (each call then reads from HBM)."""
    return copies * per_copy_bytes > l2_bytes


def derived(us: float, nbytes: int, nflops: int, bw_tb_s: float, peak_tflops: float) -> dict:
    """``tb_s``, ``tflops``, ``pct_bw``, ``pct_flops`` and ``pct_roofline`` for one timing.

    ``pct_roofline`` = the roofline time ``max(bytes / bw, flops / peak)`` over the measured time:
    100% means the call runs at whichever ceiling binds. NaN where a value is unknown.
    """
    nan = float("nan")
    if not (us and us > 0 and math.isfinite(us)):
        return {"tb_s": nan, "tflops": nan, "pct_bw": nan, "pct_flops": nan, "pct_roofline": nan}
    s = us * 1e-6
    tb_s = nbytes / s / 1e12
    tf = nflops / s / 1e12
    pct_bw = 100.0 * tb_s / bw_tb_s if bw_tb_s and math.isfinite(bw_tb_s) and bw_tb_s > 0 else nan
    pct_fl = 100.0 * tf / peak_tflops if peak_tflops and math.isfinite(peak_tflops) and peak_tflops > 0 else nan
    terms = [x for x in (pct_bw, pct_fl) if math.isfinite(x)]
    return {"tb_s": tb_s, "tflops": tf, "pct_bw": pct_bw, "pct_flops": pct_fl,
            "pct_roofline": max(terms) if terms else nan}


def quantiles(samples_us, qs=(0.2, 0.5, 0.8)) -> tuple:
    """Quantiles (linear interpolation, like numpy's default) of a list of microsecond samples."""
    xs = sorted(float(x) for x in samples_us if x is not None and math.isfinite(float(x)))
    if not xs:
        return tuple(float("nan") for _ in qs)
    out = []
    for q in qs:
        pos = q * (len(xs) - 1)
        lo = int(math.floor(pos))
        hi = min(lo + 1, len(xs) - 1)
        out.append(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))
    return tuple(out)
