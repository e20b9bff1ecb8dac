"""``kernels/intrinsics_bulk.py``: shared-memory barriers and bulk copies (the warpgroup kernel's barrier pipeline,
``Tactic.mb``), on an sm_90 GPU or through their simulator twins; their PTX through ptxas and numba-cuda-mlir."""
from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from test_backend import as_backend, mlir_offline  # noqa: F401  (fixtures)

from numba_nbits.arrays import to_device, to_host
from numba_nbits.kernels import intrinsics_async as A
from numba_nbits.kernels import intrinsics_bulk as B
from numba_nbits.launch import Kernel, simulated

SIM = simulated()
ROUNDS = 5  # over 2 slots: each slot's barriers complete phases of both parities


def _ring_kernel(src, out):
    """128 threads stream ``ROUNDS`` chunks of 512 bytes through 2 shared slots: thread 64 (the producer, not
    thread 0, as in the GEMV) refills a slot with one bulk copy once every thread released it (empty barrier,
    128 arrivals); every thread waits for the chunk (full barrier: one arrival plus 512 bytes), reads its word
    and releases the slot."""
    sm = cuda.shared.array(1056, np.uint8)
    t = cuda.threadIdx.x
    base = (A.smem_addr(sm) + np.uint32(15)) & np.uint32(0xFFFFFFF0)
    bars = base + np.uint32(1024)  # full[0], full[1], empty[0], empty[1]
    if t == 0:
        B.mbar_init(bars, 1)
        B.mbar_init(bars + np.uint32(8), 1)
        B.mbar_init(bars + np.uint32(16), 128)
        B.mbar_init(bars + np.uint32(24), 128)
        B.mbar_fence_init()
    cuda.syncthreads()
    if t == 64:
        B.mbar_arrive_tx(bars, 512)
        B.bulk_g2s(base, src, 0, 512, bars)
    for r in range(ROUNDS):
        k = np.uint32(r % 2)
        ph = np.uint32((r // 2) % 2)
        if t == 64 and r + 1 < ROUNDS:  # the next chunk into the other slot, released by round r - 1
            if r >= 1:
                while B.mbar_try_wait(bars + np.uint32(16) + np.uint32(8) * (np.uint32(1) - k),
                                      np.uint32(((r - 1) // 2) % 2)) == 0:
                    pass
            B.mbar_arrive_tx(bars + np.uint32(8) * (np.uint32(1) - k), 512)
            B.bulk_g2s(base + np.uint32(512) * (np.uint32(1) - k), src, (r + 1) * 32, 512,
                       bars + np.uint32(8) * (np.uint32(1) - k))
        cuda.syncwarp()
        while B.mbar_try_wait(bars + np.uint32(8) * k, ph) == 0:
            pass
        out[r * 128 + t] = A.lds(base + np.uint32(512) * k + np.uint32(4) * np.uint32(t))
        B.mbar_arrive(bars + np.uint32(16) + np.uint32(8) * k)


def _needs_sm90():
    if SIM:
        return
    from numba_nbits.launch.driver import _current_cc

    if _current_cc() != (9, 0):
        pytest.skip("cp.async.bulk and mbarrier transactions need an sm_90 GPU")


def test_bulk_copies_through_a_two_slot_ring(rng):
    from numba.cuda import types

    _needs_sm90()
    src = rng.integers(0, 2**32, 128 * ROUNDS, dtype=np.uint64).astype(np.uint32)
    k = Kernel(_ring_kernel, (types.uint32[::1], types.uint32[::1]), name="bulk_ring")
    out = to_device(np.zeros(128 * ROUNDS, np.uint32), SIM)
    k.bind(1, 128, (to_device(src, SIM), out)).launch(0)
    np.testing.assert_array_equal(to_host(out), src)


@pytest.mark.skipif(not SIM, reason="twins: simulator only")
def test_barrier_twins_phases_and_errors():
    T = B.TWINS
    sm = np.zeros(64, np.uint8)
    base = int(A.TWINS["smem_addr"](sm))
    bar = base + 32
    T["mbar_init"](bar, 2)
    assert T["mbar_try_wait"](bar, 0) == 0  # phase 0 open
    T["mbar_arrive_tx"](bar, 16)
    T["mbar_arrive"](bar)
    assert T["mbar_try_wait"](bar, 0) == 0  # both arrivals in, 16 bytes still expected
    src = np.arange(8, dtype=np.uint32)
    T["bulk_g2s"](base, src, 1, 16, bar)  # bytes 16..32 of src: its words 4..7
    np.testing.assert_array_equal(sm[:16].view(np.uint32), src[4:])
    assert T["mbar_try_wait"](bar, 0) == 1 and T["mbar_try_wait"](bar, 1) == 0  # phase 0 done, phase 1 open
    T["mbar_arrive"](bar)
    T["mbar_arrive"](bar)
    assert T["mbar_try_wait"](bar, 1) == 1 and T["mbar_try_wait"](bar, 0) == 0  # phase 1 done, phase 2 open
    T["mbar_arrive"](bar)
    T["mbar_arrive"](bar)
    with pytest.raises(RuntimeError, match="more arrivals"):
        T["mbar_init"](bar, 1)
        T["mbar_arrive_tx"](bar, 16)
        T["mbar_arrive"](bar)
    with pytest.raises(ValueError, match="multiple of 16"):
        T["bulk_g2s"](base, src, 0, 8, bar)
    with pytest.raises(ValueError, match="16-byte aligned"):
        T["bulk_g2s"](base + 8, src, 0, 16, bar)
    with pytest.raises(IndexError, match=r"bytes \[16, 48\)"):
        T["bulk_g2s"](base, src, 1, 32, bar)
    with pytest.raises(ValueError, match="count must be"):
        T["mbar_init"](bar, 0)


_ASSEMBLE = r'''
import json, os, re, shutil, subprocess, sys, tempfile
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic
from numba import cuda
from numba.cuda import types
import numba.cuda.dispatcher as _d
class _Dev:
    compute_capability = (9, 0)
_d.get_current_device = lambda: _Dev()  # device functions compiled for 9.0 without a GPU (as ptx_stats does)
ptxas = shutil.which("ptxas")
if ptxas is None:
    print(json.dumps({"skip": "no ptxas"})); sys.exit(0)
k = gemv_mma_kernel("float16", 4, Tactic.parse("t1w8u1s3xhvm"), 128, "none", 4, False, True)
try:
    ptx, _ = cuda.compile_ptx(k.pyfunc, types.void(*k.argtypes), cc=(9, 0, "a"))
except Exception as e:  # NVVM missing
    print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
with tempfile.TemporaryDirectory() as d:
    fn = os.path.join(d, "k.ptx")
    for version in (None, "9.0", "8.5", "8.0"):  # an older ptxas than NVVM's PTX
        src = ptx if version is None else re.sub(r"^\.version \S+", f".version {version}", ptx, flags=re.M)
        open(fn, "w").write(src)
        r = subprocess.run([ptxas, "-arch=sm_90a", fn, "-o", os.path.join(d, "k.cubin")], capture_output=True, text=True)
        if r.returncode == 0 or "Unsupported .version" not in r.stderr:
            break
print(json.dumps({"rc": r.returncode, "err": r.stderr[-500:], "ops": {op: ptx.count(op) for op in (
    "mbarrier.init.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.arrive.shared::cta.b64",
    "mbarrier.arrive.expect_tx.shared::cta.b64", "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
    "fence.mbarrier_init.release.cluster", "bar.sync", "wgmma.mma_async")}}))
'''


def test_barrier_pipeline_kernel_assembles_for_sm90a():
    """The barrier-pipeline GEMV kernel's PTX (numba-cuda) is accepted by ptxas for sm_90a, with one CTA-wide
    barrier (after the barriers' initialisation) and the loop's barrier waits, arrivals and bulk copies."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import pythonpath_with

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=pythonpath_with(root))
    r = subprocess.run([sys.executable, "-c", _ASSEMBLE], capture_output=True, text=True, env=env, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(f"cannot compile and assemble for sm_90a here: {res['skip']}")
    assert res["rc"] == 0, res["err"]
    ops = res["ops"]
    assert ops["mbarrier.init.shared::cta.b64"] == 6 and ops["fence.mbarrier_init.release.cluster"] == 1
    assert ops["bar.sync"] == 1 and ops["wgmma.mma_async"] == 8, ops
    # the two waits of the loop (full; the producer's empty), each possibly duplicated by loop rotation
    assert ops["mbarrier.try_wait.parity.shared::cta.b64"] >= 2 and ops["mbarrier.arrive.shared::cta.b64"] >= 1
    # the two prologue slots and the loop's refill
    assert ops["mbarrier.arrive.expect_tx.shared::cta.b64"] >= 3, ops
    assert ops["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"] >= 3, ops


def test_bulk_intrinsics_compile_under_numba_cuda_mlir(mlir_offline, as_backend):  # noqa: F811
    """The numba-cuda-mlir forms emit the PTX of the llvmlite ones (sm_90a through ``chip``)."""
    from numba.cuda import types

    from numba_nbits import backend
    from numba_nbits.kernels import intrinsics_async_mlir as MA
    from numba_nbits.kernels import intrinsics_bulk_mlir as M

    def k(src, out):
        sm = cuda.shared.array(256, np.uint32)
        base = MA.smem_addr(sm)
        t = cuda.threadIdx.x
        if t == 0:
            M.mbar_init(base + np.uint32(512), 1)
            M.mbar_fence_init()
        cuda.syncthreads()
        if t == 0:
            M.mbar_arrive_tx(base + np.uint32(512), 256)
            M.bulk_g2s(base, src, 0, 256, base + np.uint32(512))
        while M.mbar_try_wait(base + np.uint32(512), 0) == 0:
            pass
        out[t] = MA.lds(base + np.uint32(4) * np.uint32(t))
        M.mbar_arrive(base + np.uint32(512))

    as_backend("mlir")
    ptx = backend.compile_ptx(k, (types.uint32[::1], types.uint32[::1]), (9, 0))
    for instr in ("mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster",
                  "mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64",
                  "mbarrier.arrive.shared::cta.b64",
                  "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"):
        assert instr in ptx, instr
