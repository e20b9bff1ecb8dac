"""numba_nbits.shard: exact tensor-parallel slices of ORT-layout weights (NumPy only, no torch).

The shards' float64 oracles concatenate (column-parallel) or sum (row-parallel) to the full oracle;
their dequantized weights are exact slices of the full one; uneven splits are refused by name.
"""
from __future__ import annotations

import numpy as np
import pytest

from numba_nbits import TOLERANCES, matmul_nbits, matmul_nbits_ref, quantize, relative_error
from numba_nbits.reference import dequantize_ref
from numba_nbits.shard import shard_columns, shard_rows_k


def _problem(rng, N, K, bits, block_size, zp_kind, bias=True, dtype=np.float32):
    W = rng.standard_normal((N, K)).astype(dtype)
    B, s, zp = quantize(W, bits, block_size, symmetric=zp_kind == "none")
    if zp_kind == "typed":  # fractional float zero points, the scales' dtype
        zp = (rng.random(s.shape) * ((1 << bits) - 1)).astype(s.dtype)
    b = rng.standard_normal(N).astype(dtype) if bias else None
    A = rng.standard_normal((3, K)).astype(dtype)
    return A, B, s, zp, b


def _oracle(A, sh):
    return matmul_nbits_ref(A, sh.B, sh.scales, sh.zero_points, sh.g_idx, sh.bias, K=sh.K, N=sh.N, bits=sh.bits,
                            block_size=sh.block_size)


CASES = [  # bits, block_size, N, K, zp_kind
    (4, 16, 8, 96, "packed"),   # 6 blocks: rank 1 of 2 starts at block 3, mid-byte of the packed zero points
    (4, 32, 12, 128, "none"),
    (2, 16, 8, 96, "packed"),   # 2-bit: 4 zero points a byte, world 2 -> rank 1 starts at slot 3 of byte 0
    (8, 16, 8, 64, "packed"),
    (4, 16, 8, 64, "typed"),
    (2, 32, 4, 384, "packed"),  # world 3 below: 4 blocks per rank, byte-aligned
]


@pytest.mark.parametrize("bits,block_size,N,K,zp_kind", CASES)
@pytest.mark.parametrize("world", [1, 2, 4])
def test_column_shards_concatenate_to_full(rng, bits, block_size, N, K, zp_kind, world):
    A, B, s, zp, b = _problem(rng, N, K, bits, block_size, zp_kind)
    full = matmul_nbits_ref(A, B, s, zp, None, b, K=K, N=N, bits=bits, block_size=block_size)
    w_full = dequantize_ref(B, s, zp, K=K, N=N, bits=bits, block_size=block_size)
    shards = [shard_columns(B, s, zp, b, N=N, K=K, bits=bits, block_size=block_size, rank=r, world=world)
              for r in range(world)]
    n = N // world
    for r, sh in enumerate(shards):
        assert (sh.N, sh.K, sh.rank, sh.world) == (n, K, r, world)
        assert np.array_equal(dequantize_ref(sh.B, sh.scales, sh.zero_points, K=K, N=n, bits=bits,
                                             block_size=block_size), w_full[r * n:(r + 1) * n])
        assert np.array_equal(sh.bias, b[r * n:(r + 1) * n])
    np.testing.assert_allclose(np.concatenate([_oracle(A, sh) for sh in shards], axis=-1), full, rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("bits,block_size,N,K,zp_kind,world",
                         [c + (w,) for c in CASES for w in (1, 2, 3) if c[3] % (w * c[1]) == 0])
def test_row_shards_sum_to_full(rng, bits, block_size, N, K, zp_kind, world):
    A, B, s, zp, b = _problem(rng, N, K, bits, block_size, zp_kind)
    full = matmul_nbits_ref(A, B, s, zp, None, b, K=K, N=N, bits=bits, block_size=block_size)
    w_full = dequantize_ref(B, s, zp, K=K, N=N, bits=bits, block_size=block_size)
    k = K // world
    parts = []
    for r in range(world):
        sh = shard_rows_k(B, s, zp, b, N=N, K=K, bits=bits, block_size=block_size, rank=r, world=world)
        assert (sh.N, sh.K) == (N, k) and sh.B.shape == (N, k // block_size, block_size * bits // 8)
        assert (sh.bias is not None) == (r == 0)
        assert np.array_equal(dequantize_ref(sh.B, sh.scales, sh.zero_points, K=k, N=N, bits=bits,
                                             block_size=block_size), w_full[:, r * k:(r + 1) * k])
        parts.append(_oracle(A[:, r * k:(r + 1) * k], sh))
    np.testing.assert_allclose(np.sum(parts, axis=0), full, rtol=1e-12, atol=1e-12)


def test_row_shard_repacks_unaligned_zero_points_exactly():
    # 4-bit, 6 blocks -> 3 per rank: rank 1's first zero point is the high nibble of byte 1
    packed = np.array([[0x21, 0x43, 0x65]], np.uint8)  # zero points 1..6, low nibble first
    B = np.zeros((1, 6, 8), np.uint8)
    s = np.ones((1, 6), np.float32)
    r0 = shard_rows_k(B, s, packed, N=1, K=96, bits=4, block_size=16, rank=0, world=2)
    r1 = shard_rows_k(B, s, packed, N=1, K=96, bits=4, block_size=16, rank=1, world=2)
    assert r0.zero_points.tolist() == [[0x21, 0x83]]  # codes 1, 2, 3 and the default 8 in the unused slot
    assert r1.zero_points.tolist() == [[0x54, 0x86]]  # codes 4, 5, 6 shifted down a nibble


def test_flat_scales_and_zero_points_accepted(rng):
    _, B, s, zp, b = _problem(rng, 8, 64, 4, 16, "packed")
    a = shard_rows_k(B, s, zp, b, N=8, K=64, bits=4, block_size=16, rank=1, world=2)
    f = shard_rows_k(B, s.reshape(-1), zp.reshape(-1), b, N=8, K=64, bits=4, block_size=16, rank=1, world=2)
    assert np.array_equal(a.scales, f.scales) and np.array_equal(a.zero_points, f.zero_points)


@pytest.mark.parametrize("N,world", [(10, 4), (7, 2), (12, 5)])
def test_uneven_column_split_refused(N, world):
    B = np.zeros((N, 2, 8), np.uint8)
    s = np.zeros((N, 2), np.float32)
    msg = rf"cannot split N \(out_features\) = {N} over world size {world}: N must be a multiple of the world size"
    with pytest.raises(ValueError, match=msg):
        shard_columns(B, s, N=N, K=32, bits=4, block_size=16, rank=0, world=world)


@pytest.mark.parametrize("K,block_size,world", [(64, 16, 3), (48, 16, 2), (40, 16, 2), (96, 32, 2)])
def test_uneven_row_split_refused(K, block_size, world):
    kb = -(-K // block_size)
    B = np.zeros((4, kb, block_size // 2), np.uint8)
    s = np.zeros((4, kb), np.float32)
    msg = (rf"cannot split K \(in_features\) = {K} over world size {world} with block_size {block_size}: "
           rf"K must be a multiple of world \* block_size = {world * block_size}")
    with pytest.raises(ValueError, match=msg):
        shard_rows_k(B, s, N=4, K=K, bits=4, block_size=block_size, rank=0, world=world)


def test_g_idx_row_parallel_refused_unless_trivial(rng):
    A, B, s, zp, b = _problem(rng, 4, 64, 4, 16, "packed")
    trivial = (np.arange(64) // 16).astype(np.int32)
    sh = shard_rows_k(B, s, zp, b, N=4, K=64, bits=4, block_size=16, rank=1, world=2, g_idx=trivial)
    assert sh.g_idx is None
    with pytest.raises(ValueError, match=r"row-parallel: g_idx \(act-order group index\) cannot be sharded"):
        shard_rows_k(B, s, zp, b, N=4, K=64, bits=4, block_size=16, rank=0, world=2, g_idx=trivial[::-1].copy())
    # column-parallel keeps any g_idx whole: it indexes K, which is not split
    g = rng.permutation(trivial).astype(np.int32)
    cols = [shard_columns(B, s, zp, b, N=4, K=64, bits=4, block_size=16, rank=r, world=2, g_idx=g) for r in (0, 1)]
    full = matmul_nbits_ref(A, B, s, zp, g, b, K=64, N=4, bits=4, block_size=16)
    np.testing.assert_allclose(np.concatenate([_oracle(A, c) for c in cols], -1), full, rtol=1e-12, atol=1e-12)


def test_bad_rank_and_shapes_refused():
    B = np.zeros((4, 2, 8), np.uint8)
    s = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world=2\), got 2"):
        shard_columns(B, s, N=4, K=32, bits=4, block_size=16, rank=2, world=2)
    with pytest.raises(ValueError, match="B must be uint8 of shape"):
        shard_columns(B, s, N=4, K=64, bits=4, block_size=16, rank=0, world=2)


def test_operator_on_shards_matches_full_oracle(rng):
    """The operator itself (GPU or simulator) on each shard: concatenated / summed = the full layer."""
    A, B, s, zp, b = _problem(rng, 8, 96, 4, 16, "packed")
    A = A[:2]
    full = matmul_nbits_ref(A, B, s, zp, None, b, K=96, N=8, bits=4, block_size=16)
    cols = [shard_columns(B, s, zp, b, N=8, K=96, bits=4, block_size=16, rank=r, world=2) for r in (0, 1)]
    rows = [shard_rows_k(B, s, zp, b, N=8, K=96, bits=4, block_size=16, rank=r, world=2) for r in (0, 1)]

    def run(a, sh):
        return matmul_nbits(a, sh.B, sh.scales, sh.zero_points, sh.g_idx, sh.bias, K=sh.K, N=sh.N, bits=sh.bits,
                            block_size=sh.block_size, config={"use_tf32": False})

    y_col = np.concatenate([run(A, sh) for sh in cols], axis=-1)
    y_row = run(A[:, :48], rows[0]) + run(A[:, 48:], rows[1])
    assert relative_error(y_col, full) <= TOLERANCES["float32"]
    assert relative_error(y_row, full) <= TOLERANCES["float32"]
