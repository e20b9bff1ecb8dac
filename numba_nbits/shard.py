"""Exact tensor-parallel slicing of ``MatMulNBits`` weights (ONNX Runtime layout), pure NumPy.

A shard is a valid ``MatMulNBits`` problem of its own, cut from the full tensors without
re-quantization: the integer codes, scales and zero points of every element are the same bytes /
values as in the full weight, so the float64 oracle of the shards concatenates (column-parallel)
or sums (row-parallel) to the oracle of the full weight up to float64 rounding.

``shard_columns`` -- column-parallel (``Y[:, n]`` split across ranks, N sharded)
    Rank ``r`` of ``world`` gets output rows ``n`` in ``[r*N/world, (r+1)*N/world)`` of B, scales,
    zero points and bias; ``g_idx`` (a function of k only) is kept whole.
    Rule: ``N % world == 0``. The operator accepts any N, so there is no other requirement.

``shard_rows_k`` -- row-parallel (the reduction dimension K split across ranks)
    Rank ``r`` gets inputs ``k`` in ``[r*K/world, (r+1)*K/world)``: a whole number of quantization
    blocks of B (``B[:, blocks]``), the matching columns of scales, and the matching zero points --
    for packed uint8 zero points unpacked and re-packed (a rank whose first block does not start a
    byte of the packed row needs its codes shifted; the values are copied, never recomputed; unused
    slots of a row's last byte hold ``2^(bits-1)``, as ORT's quantizer writes them). The rank outputs
    are partial sums; their sum is ``Y``. The bias is kept on rank 0 only (``None`` elsewhere), so
    it is added exactly once by the sum (the all-reduce).
    Rule: ``K % (world * block_size) == 0``: every rank gets the same K/world inputs (what a
    column-parallel layer with ``N = K`` hands it) in whole blocks, and no block is padded (a padded
    last block cannot be split evenly).
    ``g_idx`` (act-order) is refused, unless it is the trivial ``k // block_size`` (then dropped):
    a general ``g_idx`` lets a rank's inputs use any block, so its blocks are not a K slice.

Uneven splits raise ``ValueError`` naming the dimension, its size, the world size and the rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .formats import (_check_bits, _check_block_size, _check_dim, default_zero_point, pack_zero_points,
                      unpack_zero_points, zp_blob_size)

__all__ = ["Shard", "check_column_split", "check_row_split", "shard_columns", "shard_rows_k"]


@dataclass(frozen=True)
class Shard:
    """One rank's MatMulNBits tensors and attributes (``K``/``N`` are the shard's)."""

    B: np.ndarray
    scales: np.ndarray
    zero_points: Optional[np.ndarray]
    g_idx: Optional[np.ndarray]
    bias: Optional[np.ndarray]
    K: int
    N: int
    bits: int
    block_size: int
    rank: int
    world: int


def _check_rank(rank, world) -> tuple[int, int]:
    world = _check_dim(world, "world", allow_zero=False)
    rank = _check_dim(rank, "rank")
    if rank >= world:
        raise ValueError(f"rank must be in [0, world={world}), got {rank}")
    return rank, world


def check_column_split(N: int, world: int, what: str = "column-parallel") -> int:
    """``N // world``; ``ValueError`` unless ``N % world == 0``."""
    N = _check_dim(N, "N", allow_zero=False)
    world = _check_dim(world, "world", allow_zero=False)
    if N % world:
        raise ValueError(f"{what}: cannot split N (out_features) = {N} over world size {world}: "
                         f"N must be a multiple of the world size (N % world == 0)")
    return N // world


def check_row_split(K: int, block_size: int, world: int, what: str = "row-parallel") -> int:
    """``K // world``; ``ValueError`` unless ``K % (world * block_size) == 0``."""
    K = _check_dim(K, "K", allow_zero=False)
    block_size = _check_block_size(block_size)
    world = _check_dim(world, "world", allow_zero=False)
    if K % (world * block_size):
        raise ValueError(f"{what}: cannot split K (in_features) = {K} over world size {world} with block_size "
                         f"{block_size}: K must be a multiple of world * block_size = {world * block_size} "
                         f"(every rank gets K/world inputs in whole, unpadded quantization blocks)")
    return K // world


def _common(B, scales, zero_points, bias, N, K, bits, block_size):
    bits = _check_bits(bits)
    block_size = _check_block_size(block_size)
    N = _check_dim(N, "N", allow_zero=False)
    K = _check_dim(K, "K", allow_zero=False)
    kb = -(-K // block_size)
    blob = block_size * bits // 8
    B = np.asarray(B)
    if B.dtype != np.uint8 or B.shape != (N, kb, blob):
        raise ValueError(f"B must be uint8 of shape (N, k_blocks, blob_size) = {(N, kb, blob)}, "
                         f"got {B.dtype} {B.shape}")
    s = np.asarray(scales)
    if s.shape not in ((N, kb), (N * kb,)):
        raise ValueError(f"scales must have shape ({N}, {kb}) or ({N * kb},), got {s.shape}")
    s = s.reshape(N, kb)
    zp = None
    if zero_points is not None:
        zp = np.asarray(zero_points)
        if zp.dtype == np.uint8:
            zb = zp_blob_size(kb, bits)
            if zp.shape not in ((N, zb), (N * zb,)):
                raise ValueError(f"packed zero_points must have shape ({N}, {zb}) or ({N * zb},), got {zp.shape}")
            zp = zp.reshape(N, zb)
        else:
            if zp.shape not in ((N, kb), (N * kb,)):
                raise ValueError(f"typed zero_points must have shape ({N}, {kb}) or ({N * kb},), got {zp.shape}")
            zp = zp.reshape(N, kb)
    b = None
    if bias is not None:
        b = np.asarray(bias)
        if b.shape != (N,):
            raise ValueError(f"bias must have shape ({N},), got {b.shape}")
    return B, s, zp, b, N, K, kb, bits, block_size


def shard_columns(B, scales, zero_points=None, bias=None, *, N: int, K: int, bits: int, block_size: int,
                  rank: int, world: int, g_idx=None) -> Shard:
    """Rank ``rank``'s column-parallel shard (output features ``[r*N/world, (r+1)*N/world)``)."""
    B, s, zp, b, N, K, _, bits, block_size = _common(B, scales, zero_points, bias, N, K, bits, block_size)
    rank, world = _check_rank(rank, world)
    n = check_column_split(N, world)
    rows = slice(rank * n, (rank + 1) * n)
    cp = np.ascontiguousarray
    return Shard(B=cp(B[rows]), scales=cp(s[rows]), zero_points=None if zp is None else cp(zp[rows]),
                 g_idx=None if g_idx is None else cp(np.asarray(g_idx)), bias=None if b is None else cp(b[rows]),
                 K=K, N=n, bits=bits, block_size=block_size, rank=rank, world=world)


def shard_rows_k(B, scales, zero_points=None, bias=None, *, N: int, K: int, bits: int, block_size: int,
                 rank: int, world: int, g_idx=None) -> Shard:
    """Rank ``rank``'s row-parallel shard (inputs ``[r*K/world, (r+1)*K/world)``; bias on rank 0 only)."""
    B, s, zp, b, N, K, kb, bits, block_size = _common(B, scales, zero_points, bias, N, K, bits, block_size)
    rank, world = _check_rank(rank, world)
    k = check_row_split(K, block_size, world)
    if g_idx is not None:
        g = np.asarray(g_idx)
        natural = np.arange(K) // block_size
        if g.ndim != 1 or g.shape[0] != K or not np.array_equal(g.astype(np.int64), natural):
            raise ValueError("row-parallel: g_idx (act-order group index) cannot be sharded along K: a rank's "
                             "inputs may use any quantization block; reorder the weight (drop g_idx) first, or "
                             "shard this layer column-parallel")
    kbr = k // block_size
    blocks = slice(rank * kbr, (rank + 1) * kbr)
    cp = np.ascontiguousarray
    zps = None
    if zp is not None:
        if zp.dtype == np.uint8:
            codes = unpack_zero_points(zp, kb, bits, N=N)[:, blocks]
            zps = pack_zero_points(codes, bits, pad_code=default_zero_point(bits))
        else:
            zps = cp(zp[:, blocks])
    return Shard(B=cp(B[:, blocks]), scales=cp(s[:, blocks]), zero_points=zps, g_idx=None,
                 bias=None if (b is None or rank != 0) else cp(b), K=k, N=N, bits=bits, block_size=block_size,
                 rank=rank, world=world)
