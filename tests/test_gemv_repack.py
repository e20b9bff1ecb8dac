"""The tensor-core GEMV's device repack (``kernels/gemv/repack.py``) builds the same words as the host
packer ``layout.pack_weights``, for every bit width, block size, ragged N and K, and B's padding bytes."""
import numpy as np
import pytest

from conftest import SIMULATED
from numba_nbits.arrays import to_host
from numba_nbits.formats import unpack_codes
from numba_nbits.kernels.gemv import layout, repack
from numba_nbits.weights import build_weights


def _weights(N, K, bits, bs, seed, dtype=np.float16):
    rng = np.random.default_rng(seed)
    kb = -(-K // bs)
    B = rng.integers(0, 256, size=(N, kb, bs * bits // 8), dtype=np.uint8)  # padding columns random too
    sc = rng.standard_normal((N, kb)).astype(dtype)
    return build_weights(B, sc, K=K, N=N, bits=bits, block_size=bs, simulated=SIMULATED)


@pytest.mark.parametrize("bits,bs,N,K", [
    (4, 16, 17, 80), (4, 32, 40, 100), (4, 64, 1, 64), (4, 128, 33, 300),
    (8, 16, 5, 48), (8, 32, 31, 96), (8, 128, 9, 256),
    (2, 16, 3, 130), (2, 64, 35, 200), (2, 256, 2, 256),
])
def test_repack_matches_host_packer(bits, bs, N, K):
    w = _weights(N, K, bits, bs, seed=bits * 1000 + bs + N)
    _, _, _, K_pad = layout.geometry(K, bs, bits)
    codes = unpack_codes(np.asarray(w.host["B"]).reshape(N, w.k_blocks, -1), None, bits, bs)
    want = layout.with_tail(layout.pack_weights(codes, K_pad, bs, bits), "bq", bs, bits)  # then the zero tail
    got = to_host(repack.repack(w, K_pad))
    assert got.dtype == np.uint32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("bs", [16, 32, 64, 128])
def test_source_map_is_a_permutation(bits, bs):
    smap, fields, fb = repack.source_map(bits, bs)
    kb = repack.block_k(bits)
    pos, shift = smap & 0xFFFF, smap >> 16
    planes = layout.MMA_LAYOUTS[bits].planes
    assert fields * fb == 32 and smap.size == 16 * kb * planes
    assert set(np.unique(shift)) <= {0, 4}
    # every (position, plane) of the block is taken by exactly one field
    np.testing.assert_array_equal(np.sort(pos.astype(np.int64) * planes + shift // 4),
                                  np.arange(16 * kb * planes))


def test_repack_refuses_a_bad_bit_width():
    with pytest.raises(ValueError, match="repacks bits in"):
        repack.source_map(3, 32)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_prepack_uses_the_device_repack(bits):
    """``repack.prepack`` (called inside ``Weights.derived``'s lock) gives the host packer's words."""
    N, K, bs = 20, 256, 64
    w = _weights(N, K, bits, bs, seed=bits)
    pk = repack.prepack(w)
    codes = unpack_codes(np.asarray(w.host["B"]).reshape(N, w.k_blocks, -1), None, bits, bs)
    np.testing.assert_array_equal(to_host(pk.bq), layout.with_tail(layout.pack_weights(codes, pk.K_pad, bs, bits), "bq",
                                                                   bs, bits))
    assert repack.prepack(w) is pk  # built once


@pytest.mark.parametrize("bits,bs,dtype", [(4, 32, "float16"), (8, 128, "float16"), (2, 64, "float16"),
                                            (4, 64, "bfloat16"), (4, 128, "bfloat16")])
def test_host_prepack_equals_device_prepack(bits, bs, dtype):
    """``prepack_on_host`` (NumPy only: the M = 1 sweep's host processes) builds the layout ``prepack`` builds
    (codes by the repack kernel, scales by the scale-layout kernel: same dtype, same bits, zero padding)."""
    import ml_dtypes

    w = _weights(24, 200, bits, bs, seed=bits + bs, dtype=ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16)
    dev, host = repack.prepack(w), repack.prepack_on_host(w)
    assert (dev.N_pad, dev.K_pad, dev.n_super) == (host.N_pad, host.K_pad, host.n_super)
    np.testing.assert_array_equal(to_host(host.bq), to_host(dev.bq))
    hs, ds = to_host(host.scales), to_host(dev.scales)
    assert hs.dtype == ds.dtype and hs.shape == ds.shape
    np.testing.assert_array_equal(hs.view(np.uint16), ds.view(np.uint16))
    assert (hs.view(np.uint16) != 0).any()
