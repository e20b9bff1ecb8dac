"""``kernels/dequant_fast.py``: the division by invariant integers is exact, and the kernel writes the same
bytes as the ``_vec`` kernel it replaces, for every bit width, dtype, zero-point kind and block size (negative,
zero, tiny and huge scales included)."""
import numpy as np
import pytest

from conftest import SIMULATED
from numba_nbits.arrays import device_empty, to_host
from numba_nbits.formats import pack_zero_points
from numba_nbits.kernels import dequant
from numba_nbits.kernels.dequant_fast import MAX_WORDS, division_magic, fast_decode
from numba_nbits.weights import build_weights


def test_division_magic_is_exact():
    rng = np.random.default_rng(0)
    divisors = list(range(1, 3000)) + [int(x) for x in rng.integers(3000, MAX_WORDS, 2000)]
    divisors += [1 << i for i in range(31)] + [(1 << i) + 1 for i in range(1, 31)] + [(1 << i) - 1 for i in range(2, 32)]
    for d in divisors:
        m, s = division_magic(d)
        assert 0 < m < 1 << 32
        n = np.concatenate([rng.integers(0, MAX_WORDS, 64), [0, d - 1, d, 2 * d - 1, 2 * d, MAX_WORDS - 1],
                            np.minimum(np.arange(1, 9) * d - 1, MAX_WORDS - 1)]).astype(np.uint64)
        n = n[n < MAX_WORDS]
        np.testing.assert_array_equal((n * np.uint64(m)) >> np.uint64(s), n // np.uint64(d), err_msg=f"d={d}")
    with pytest.raises(ValueError, match="divisor"):
        division_magic(0)
    with pytest.raises(ValueError, match="divisor"):
        division_magic(MAX_WORDS)


def _run(w, wide: bool):
    b, s, zpp, zpt = dequant._flat_views(w, 0, w.N)
    out = device_empty((w.N * w.K_padded,), w.np_dtype, SIMULATED)
    if wide:  # the _vec kernel, as bind_dequant launches it for B of 2**31 words or more
        k = dequant.dequant_kernel(w.bits, w.dtype, w.zp_kind, False, True)
        row_words = w.K_padded * w.bits // 32
        n_words = w.N * row_words
        grid = -(-n_words // dequant.THREADS)
        k.bind(grid, dequant.THREADS, (b, s, zpp, zpt, w.dummy(np.int32), out.view(np.uint32), n_words, row_words,
                                       w.k_blocks, w.zp_row, w.block_size)).launch(0)
    else:
        launch = dequant.bind_dequant(b, s, zpp, zpt, w.dummy(np.int32), out, bits=w.bits, act=w.dtype,
                                      zp_kind=w.zp_kind, has_gidx=False, n_rows=w.N, k_blocks=w.k_blocks,
                                      block_size=w.block_size, zp_row=w.zp_row)
        assert launch.kernel.name.endswith("_fast")
        launch.launch(0)
    return to_host(out).view(np.uint16 if w.np_dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("act", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("zp_kind", ["none", "packed", "typed"])
def test_fast_kernel_writes_the_vec_kernels_bytes(bits, act, zp_kind):
    import ml_dtypes

    rng = np.random.default_rng(bits * 100 + len(act) + len(zp_kind))
    dt = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}[act]
    for bs, N, K in ((16, 3, 48), (32, 5, 96), (128, 2, 200)):
        kb = -(-K // bs)
        B = rng.integers(0, 256, size=(N, kb, bs * bits // 8), dtype=np.uint8)
        sc = rng.standard_normal((N, kb)) * rng.choice([1e-7, 1e-3, 1.0, 300.0], size=(N, kb))
        sc[0, 0], sc[-1, -1] = 0.0, -0.0
        if act == "float16":
            sc[0, -1] = 60000.0  # times a code of up to 255: overflows to inf in both kernels
        sc = sc.astype(np.float32).astype(dt)
        zp = None
        if zp_kind == "packed":
            zp = pack_zero_points(rng.integers(0, 1 << bits, size=(N, kb)), bits)
        elif zp_kind == "typed":
            zp = (rng.integers(0, 1 << bits, size=(N, kb)) + rng.uniform(-0.4, 0.4, size=(N, kb))).astype(dt)
        w = build_weights(B, sc, zp, K=K, N=N, bits=bits, block_size=bs, simulated=SIMULATED)
        got, want = _run(w, False), _run(w, True)
        np.testing.assert_array_equal(got, want, err_msg=f"block {bs}")


def test_fast_decode_covers_exact_cases_only():
    assert fast_decode(8, "float16", "packed") and fast_decode(4, "bfloat16", "none")
    assert not fast_decode(8, "bfloat16", "none")  # 128 + q is not exact in bf16 for q >= 128
    assert not fast_decode(4, "float16", "typed") and not fast_decode(4, "float32", "none")
