"""Attribute and input validation of MatMulNBits (spec §1, §7.3), with errors that say what was expected.

Every check raises before anything is written or copied to the device. Messages follow ORT's
texts where the spec records them (``block_size must be a power of 2, and >= 16. Got X``,
``bits should be 2, 4 or 8, got X``, the ``weight_prepacked`` messages, the ``group_index`` range
message) and otherwise name the input, the expectation and what was given.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .formats import BlockGeometry, float_dtype_name

WEIGHT_PREPACKED_VALUES = (0, 1, 2)


class MatMulNBitsError(ValueError):
    """Invalid attribute or input of a MatMulNBits node."""


@dataclass(frozen=True)
class Attributes(BlockGeometry):
    K: int
    N: int
    bits: int
    block_size: int
    accuracy_level: int
    weight_prepacked: int


def _int_attr(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise MatMulNBitsError(f"attribute {name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def check_attributes(K, N, bits, block_size, accuracy_level=0, weight_prepacked=0) -> Attributes:
    K = _int_attr(K, "K")
    N = _int_attr(N, "N")
    bits = _int_attr(bits, "bits")
    block_size = _int_attr(block_size, "block_size")
    accuracy_level = _int_attr(accuracy_level, "accuracy_level")
    weight_prepacked = _int_attr(weight_prepacked, "weight_prepacked")
    if K <= 0:
        raise MatMulNBitsError(f"attribute K must be > 0, got {K}")
    if N <= 0:
        raise MatMulNBitsError(f"attribute N must be > 0, got {N}")
    if bits not in (2, 4, 8):
        raise MatMulNBitsError(f"bits should be 2, 4 or 8, got {bits}")
    if block_size <= 0:
        raise MatMulNBitsError("block_size must be greater than zero")
    if block_size < 16 or block_size & (block_size - 1):
        raise MatMulNBitsError(f"block_size must be a power of 2, and >= 16. Got {block_size}")
    if not 0 <= accuracy_level <= 4:
        raise MatMulNBitsError(f"attribute accuracy_level must be in 0..4 (0 unset, 1 fp32, 2 fp16, 3 bf16, "
                               f"4 int8), got {accuracy_level}")
    if weight_prepacked not in WEIGHT_PREPACKED_VALUES:
        raise MatMulNBitsError("weight_prepacked must be 0 (not prepacked), 1 (SM80 layout), or 2 (SM90 layout), "
                               f"but got {weight_prepacked}")
    return Attributes(K, N, bits, block_size, accuracy_level, weight_prepacked)


def _host(x, name: str) -> np.ndarray:
    """Constant inputs are host arrays (NumPy) or device arrays copied to host once at construction."""
    if x is None:
        return None
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "copy_to_host"):  # numba device array (real or simulated)
        return x.copy_to_host()
    if type(x).__module__.startswith("torch"):
        t = x.detach()
        if str(t.dtype) == "torch.bfloat16":
            import ml_dtypes

            return t.view(__import__("torch").int16).cpu().numpy().view(ml_dtypes.bfloat16)
        return t.cpu().numpy()
    if type(x).__module__.startswith("cupy"):
        return x.get()
    if isinstance(x, (list, tuple)):
        return np.asarray(x)
    raise MatMulNBitsError(f"input {name}: expected a NumPy array or a CUDA array (numba, torch, CuPy), "
                           f"got {type(x).__name__}")


def check_constant_inputs(attrs: Attributes, B, scales, zero_points=None, g_idx=None, bias=None):
    """Validate B, scales, zero_points, g_idx, bias; return them as host NumPy arrays (normalised shapes)."""
    a = attrs
    for name, v in (("B", B), ("scales", scales)):
        if v is None:
            raise MatMulNBitsError(f"input {name} is required (got None)")
    B = _host(B, "B")
    scales = _host(scales, "scales")
    zero_points = _host(zero_points, "zero_points")
    g_idx = _host(g_idx, "g_idx")
    bias = _host(bias, "bias")
    if B.dtype != np.uint8:
        raise MatMulNBitsError(f"input B must be uint8, got {B.dtype}")
    expect_b = (a.N, a.k_blocks, a.blob_size)
    if a.weight_prepacked:
        want = a.N * a.K_padded * a.bits // 8
        if B.size != want:
            raise MatMulNBitsError(f"Prepacked MatMulNBits weight size mismatch. Expected {want} bytes, got {B.size}")
    elif B.shape != expect_b:
        raise MatMulNBitsError(f"input B must have shape (N, k_blocks, blob_size) = {expect_b} for K={a.K}, "
                               f"N={a.N}, bits={a.bits}, block_size={a.block_size}; got {B.shape}")
    try:
        dt = float_dtype_name(scales.dtype)
    except TypeError:
        raise MatMulNBitsError(f"input scales must be float32, float16 or bfloat16, got {scales.dtype}") from None
    if scales.shape not in ((a.N, a.k_blocks), (a.N * a.k_blocks,)):
        raise MatMulNBitsError(f"input scales must have shape (N, k_blocks) = ({a.N}, {a.k_blocks}) or "
                               f"({a.N * a.k_blocks},), got {scales.shape}")
    if zero_points is not None:
        if zero_points.dtype == np.uint8:
            if zero_points.shape not in ((a.N, a.zp_row), (a.N * a.zp_row,)):
                raise MatMulNBitsError(
                    f"input zero_points (uint8, packed {8 // a.bits} per byte) must have shape (N, "
                    f"ceil(k_blocks*bits/8)) = ({a.N}, {a.zp_row}) or ({a.N * a.zp_row},), got {zero_points.shape}")
        else:
            if zero_points.dtype != scales.dtype:
                raise MatMulNBitsError("Input 'zero_points' and 'scales' should have the same data type when "
                                       f"zero_points is not uint8 (got {zero_points.dtype} and {scales.dtype})")
            if zero_points.shape not in ((a.N, a.k_blocks), (a.N * a.k_blocks,)):
                raise MatMulNBitsError(f"input zero_points (typed) must have shape ({a.N}, {a.k_blocks}) or "
                                       f"({a.N * a.k_blocks},), got {zero_points.shape}")
    if g_idx is not None:
        if g_idx.dtype != np.int32:
            raise MatMulNBitsError(f"input g_idx must be int32, got {g_idx.dtype}")
        if g_idx.ndim != 1 or g_idx.shape[0] not in (a.K, a.K_padded):
            raise MatMulNBitsError(f"input g_idx must have shape (K,) = ({a.K},) or (k_blocks*block_size,) = "
                                   f"({a.K_padded},), got {g_idx.shape}")
        bad = np.nonzero((g_idx < 0) | (g_idx >= a.k_blocks))[0]
        if bad.size:
            i = int(bad[0])
            raise MatMulNBitsError(f"group_index value at index {i} is {int(g_idx[i])}, which is out of valid "
                                   f"range [0, {a.k_blocks})")
        if a.bits == 2:
            raise MatMulNBitsError("CUDA 2-bit dequantization does not support g_idx (reorder_idx).")
    if bias is not None:
        if bias.dtype != scales.dtype:
            raise MatMulNBitsError(f"input bias must have the dtype of A and scales ({scales.dtype}), got {bias.dtype}")
        if bias.shape != (a.N,):
            raise MatMulNBitsError(f"input bias must have shape (N,) = ({a.N},), got {bias.shape}")
    if a.weight_prepacked and dt == "float32":
        raise MatMulNBitsError("weight_prepacked requires fp16 or bf16 input A so the CUDA fpA_intB path can "
                               "consume input B")
    return B, scales, zero_points, g_idx, bias, dt


def check_activation(shape, dtype_name: str, attrs: Attributes, expected_dtype: str) -> int:
    """Check A's shape and dtype; return M (the product of its leading dims)."""
    if len(shape) < 2:
        raise MatMulNBitsError(f"input A must have rank >= 2 ([..., K]), got shape {tuple(shape)}")
    if shape[-1] != attrs.K:
        raise MatMulNBitsError(f"input A's last dimension must equal attribute K={attrs.K}, got shape {tuple(shape)}")
    if dtype_name != expected_dtype:
        raise MatMulNBitsError(f"input A must have the dtype of scales ({expected_dtype}), got {dtype_name}")
    m = 1
    for s in shape[:-1]:
        m *= int(s)
    return m


def check_output(out_shape, out_dtype: str, expect_shape, expect_dtype: str) -> None:
    if tuple(out_shape) != tuple(expect_shape):
        raise MatMulNBitsError(f"out must have shape A.shape[:-1] + (N,) = {tuple(expect_shape)}, got {tuple(out_shape)}")
    if out_dtype != expect_dtype:
        raise MatMulNBitsError(f"out must have dtype {expect_dtype}, got {out_dtype}")
