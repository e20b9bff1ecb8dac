"""``kernels/intrinsics_async.py``: cp.async copies into shared memory and shared vector loads (the GEMV's
shared-memory pipeline), on the GPU or through their simulator twins, and their numba-cuda-mlir forms."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from test_backend import as_backend, mlir_offline  # noqa: F401  (fixtures)

from numba_nbits.arrays import to_device, to_host
from numba_nbits.kernels import intrinsics_async as A
from numba_nbits.launch import Kernel, simulated

SIM = simulated()
_WAIT2 = A.cp_async_wait_for(2)
_WAIT0 = A.cp_async_wait_for(0)


def _copy_kernel(src, bytes8, out):
    """Each of 32 threads copies its 16, 8 and 4 bytes (three groups: one per commit) into its own slots of a
    shared ring, waits for all but the last two groups, reads the first back, waits for all, reads the rest;
    ``bytes8`` (uint8) is copied by 4-byte groups."""
    ring = cuda.shared.array(32 * 7, np.uint32)
    t = cuda.threadIdx.x
    base = A.smem_addr(ring)
    A.cp_async_16(base + np.uint32(16 * t), src, t)
    A.cp_async_commit()
    A.cp_async_8(base + np.uint32(512 + 8 * t), src, 64 + t)
    A.cp_async_commit()
    A.cp_async_4(base + np.uint32(768 + 4 * t), bytes8, t)
    A.cp_async_commit()
    _WAIT2()
    a, b, c, d = A.lds_v4(base + np.uint32(16 * t))
    _WAIT0()
    e, f = A.lds_v2(base + np.uint32(512 + 8 * t))
    g = A.lds(base + np.uint32(768 + 4 * t))
    out[7 * t], out[7 * t + 1], out[7 * t + 2], out[7 * t + 3] = a, b, c, d
    out[7 * t + 4], out[7 * t + 5], out[7 * t + 6] = e, f, g


def test_cp_async_round_trip(rng):
    from numba.cuda import types

    src = rng.integers(0, 2**32, 256, dtype=np.uint64).astype(np.uint32)
    b8 = rng.integers(0, 256, 128, dtype=np.uint8)
    k = Kernel(_copy_kernel, (types.uint32[::1], types.uint8[::1], types.uint32[::1]), name="cp_async_round_trip")
    out = to_device(np.zeros(32 * 7, np.uint32), SIM)
    k.bind(1, 32, (to_device(src, SIM), to_device(b8, SIM), out)).launch(0)
    got = to_host(out).reshape(32, 7)
    t = np.arange(32)
    np.testing.assert_array_equal(got[:, :4], src[:128].reshape(32, 4))
    np.testing.assert_array_equal(got[:, 4:6], src[128:192].reshape(32, 2))
    np.testing.assert_array_equal(got[:, 6], b8.view(np.uint32)[t])


@pytest.mark.skipif(not SIM, reason="twins: simulator only")
def test_twins_check_alignment_and_range():
    T = A.TWINS
    ring = np.zeros(16, np.uint32)
    base = int(T["smem_addr"](ring))
    src = np.arange(8, dtype=np.uint32)
    T["cp_async_16"](base + 16, src, 1)
    np.testing.assert_array_equal(ring[4:8], src[4:8])
    assert T["lds_v4"](base + 16) == tuple(np.uint32(x) for x in src[4:8])
    with pytest.raises(ValueError, match="16-byte aligned"):
        T["cp_async_16"](base + 8, src, 0)
    with pytest.raises(IndexError, match="group 2"):
        T["cp_async_16"](base, src, 2)  # bytes 32..48 of a 32-byte array
    with pytest.raises(IndexError, match="no shared array"):
        T["lds_v2"](base + 64)  # past the 64-byte ring
    with pytest.raises(ValueError, match="0..15"):
        A.cp_async_wait_for(16)


def test_async_intrinsics_compile_under_numba_cuda_mlir(mlir_offline, as_backend):  # noqa: F811
    """The numba-cuda-mlir forms emit the PTX of the llvmlite ones (``cp.async`` needs sm_80+)."""
    from numba.cuda import types

    from numba_nbits import backend
    from numba_nbits.kernels import intrinsics_async_mlir as M

    wait3 = M.cp_async_wait_for(3)

    def k(src, out):
        ring = cuda.shared.array(256, np.uint32)
        base = M.smem_addr(ring)
        t = cuda.threadIdx.x
        M.cp_async_16(base + np.uint32(16 * t), src, t)
        M.cp_async_8(base + np.uint32(512), src, t)
        M.cp_async_4(base + np.uint32(768), src, t)
        M.cp_async_commit()
        wait3()
        a, b, c, d = M.lds_v4(base + np.uint32(16 * t))
        e, f = M.lds_v2(base + np.uint32(512))
        out[t] = a + b + c + d + e + f + M.lds(base + np.uint32(768))

    as_backend("mlir")
    ptx = backend.compile_ptx(k, (types.uint32[::1], types.uint32[::1]), (9, 0))
    for instr in ("cvta.to.shared.u64", "cp.async.cg.shared.global", "cp.async.ca.shared.global",
                  "cp.async.commit_group", "cp.async.wait_group 3", "ld.shared.v4.u32", "ld.shared.v2.u32",
                  "ld.shared.u32"):
        assert instr in ptx, instr
