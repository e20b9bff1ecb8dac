"""``kernels/intrinsics_sm90.py``: one warpgroup's ``wgmma.mma_async`` (A in registers, B from shared memory
through a no-swizzle descriptor) gives ``A @ B + C``; on the simulator through the twins, on an sm_90 GPU
through the instruction itself.

On a GPU the test also says, when it fails, whether the hardware read B as the descriptor's other
convention would lay it out (``lbo`` and ``sbo`` swapped), so one run tells the layout apart from an
arithmetic error.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SIMULATED, pythonpath_with

from numba_nbits.arrays import to_device, to_host
from numba_nbits.kernels import intrinsics_sm90 as W
from numba_nbits.launch import Kernel

SMEM_WORDS = 2048  # 8 KiB of shared memory holds B up to 16 x 256 halves (8 KiB) in either layout below


def _layouts(n):
    """``(lbo, sbo)`` pairs: the two k blocks adjacent (128 bytes apart), or the n/8 row blocks adjacent."""
    return ((128, 256), ((n // 8) * 128, 128))


def _pack_b(B, lbo, sbo, bf16):
    """B (16 x n) as K-major no-swizzle core matrices: block (rows rb of n, k block cb) at rb * sbo + cb * lbo."""
    n = B.shape[1]
    words = np.zeros(SMEM_WORDS, np.uint32)
    raw = words.view(np.uint8)
    bits = ((np.asarray(B, np.float32).view(np.uint32) >> 16).astype(np.uint16) if bf16
            else np.asarray(B, np.float16).view(np.uint16))
    for rb in range(n // 8):
        for cb in range(2):
            core = np.ascontiguousarray(bits[8 * cb:8 * cb + 8, 8 * rb:8 * rb + 8].T)  # [row of n, k]
            off = rb * sbo + cb * lbo
            raw[off:off + 128] = core.view(np.uint8).reshape(-1)
    return words


def _kernel(n, bf16):
    """A one-warpgroup kernel: B to shared memory, fence, barrier, descriptor, one wgmma, accumulators out."""
    m = n // 2
    # tuple displays of more than 30 items compile to list appends, which numba-cuda-mlir's bytecode pass rejects
    acc = " + ".join("(" + ", ".join(f"c[t, {k}]" for k in range(j, min(m, j + 16))) + ",)" for j in range(0, m, 16))
    store = "\n".join(f"    out[t, {k}] = acc[{k}]" for k in range(m))
    src = f'''
def wgmma_probe_n{n}(a, b, c, out, lbo, sbo):
    t = cuda.threadIdx.x
    sm = cuda.shared.array({SMEM_WORDS}, uint32)
    i = t
    while i < {SMEM_WORDS}:
        sm[i] = b[i]
        i += 128
    fence_proxy_async()
    cuda.syncthreads()
    desc = smem_desc(sm, 0, lbo, sbo)
    acc = {acc}
    acc = mma(acc, a[t, 0], a[t, 1], a[t, 2], a[t, 3], desc)
{store}
'''
    from numba import cuda
    from numba.cuda import types

    g = {"cuda": cuda, "uint32": np.uint32, "fence_proxy_async": W.fence_proxy_async, "smem_desc": W.smem_desc,
         "mma": W.wgmma(n, bf16)}
    exec(compile(src, f"<wgmma_probe_n{n}>", "exec"), g)
    sig = (types.uint32[:, ::1], types.uint32[::1], types.float32[:, ::1], types.float32[:, ::1], types.int64,
           types.int64)
    return Kernel(g[f"wgmma_probe_n{n}"], sig, name=f"wgmma_probe_n{n}_{'bf16' if bf16 else 'f16'}")


def _gather(out, n):
    D = np.zeros((64, n))
    for th in range(128):
        for k, (r, col) in enumerate(W.d_fragment_positions(n, th)):
            D[r, col] = out[th, k]
    return D


def _scatter(C, n):
    c = np.zeros((128, n // 2), np.float32)
    for th in range(128):
        for k, (r, col) in enumerate(W.d_fragment_positions(n, th)):
            c[th, k] = C[r, col]
    return c


def _needs_sm90():
    if SIMULATED:
        return
    from numba import cuda

    if cuda.get_current_device().compute_capability != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")


def test_fragment_maps_are_inverse_and_cover_d():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((64, 16)).astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(W.a_from_fragments(W.fragments_from_a(A, False), False), A)
    for n in W.WGMMA_N:
        cells = [p for th in range(128) for p in W.d_fragment_positions(n, th)]
        assert sorted(cells) == [(r, c) for r in range(64) for c in range(n)]


@pytest.mark.parametrize("bf16", [False, True], ids=["f16", "bf16"])
@pytest.mark.parametrize("n", [8, 64, 128] if SIMULATED else [8, 16, 24, 32, 48, 64, 96, 128, 256])
def test_wgmma_matches_a_at_b_plus_c(n, bf16):
    _needs_sm90()
    import ml_dtypes

    rng = np.random.default_rng(n + 100 * bf16)
    dt = ml_dtypes.bfloat16 if bf16 else np.float16
    A = rng.standard_normal((64, 16)).astype(dt).astype(np.float64)
    B = rng.standard_normal((16, n)).astype(dt).astype(np.float64)
    C = rng.standard_normal((64, n)).astype(np.float32)
    k = _kernel(n, bf16)
    for lbo, sbo in _layouts(n):
        a = to_device(W.fragments_from_a(A, bf16), SIMULATED)
        b = to_device(_pack_b(B, lbo, sbo, bf16), SIMULATED)
        c = to_device(_scatter(C, n), SIMULATED)
        out = to_device(np.zeros((128, n // 2), np.float32), SIMULATED)
        k.bind(1, 128, (a, b, c, out, lbo, sbo)).launch(0)
        D = _gather(to_host(out), n)
        want = A @ B + C
        if not np.allclose(D, want, rtol=1e-5, atol=1e-5):
            swapped = A @ _unpack_b(_pack_b(B, lbo, sbo, bf16), n, sbo, lbo, bf16) + C
            hint = ("; it equals A @ B read with lbo and sbo swapped" if np.allclose(D, swapped, rtol=1e-5, atol=1e-5)
                    else "")
            raise AssertionError(f"n={n} lbo={lbo} sbo={sbo}: max |D - (A @ B + C)| = "
                                 f"{np.abs(D - want).max():.3g}{hint}")


def _unpack_b(words, n, lbo, sbo, bf16):
    raw = words.view(np.uint8)
    B = np.zeros((16, n))
    for rb in range(n // 8):
        for cb in range(2):
            off = rb * sbo + cb * lbo
            core = raw[off:off + 128].view(np.uint16).reshape(8, 8)
            vals = (core.astype(np.uint32) << 16).view(np.float32) if bf16 else core.view(np.float16)
            B[8 * cb:8 * cb + 8, 8 * rb:8 * rb + 8] = vals.astype(np.float64).T
    return B


def test_descriptor_fields():
    if not SIMULATED:
        pytest.skip("the twin's pretend shared window")
    arr = np.zeros(64, np.uint32)
    d = W.smem_desc(arr, 32, 128, 256)
    start, lbo, sbo = W.desc_fields(d)
    assert (lbo, sbo) == (128, 256) and start % 16 == 0 and start >= 32
    assert int(d) >> 46 == 0  # base offset 0, layout type 0 (no swizzle)
    with pytest.raises(ValueError, match="lbo=8 must be a non-negative multiple of 16"):
        W.smem_desc(arr, 0, 8, 256)
    with pytest.raises(ValueError, match="n must be one of"):  # 8..256 in steps of 8
        W.wgmma(264, False)


_ASSEMBLE = r'''
import json, os, re, shutil, subprocess, sys, tempfile
sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
try:
    from numba import cuda
    from numba.cuda import types
    import test_wgmma as T
except Exception as e:  # no CUDA target at all
    print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
ptxas = shutil.which("ptxas")
if ptxas is None:
    print(json.dumps({"skip": "no ptxas"})); sys.exit(0)
out = {}
for n in (8, 16, 32, 64):
    for bf16 in (False, True):
        k = T._kernel(n, bf16)
        try:
            ptx, _ = cuda.compile_ptx(k.pyfunc, types.void(*k.argtypes), cc=(9, 0, "a"))
        except Exception as e:  # NVVM missing
            print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
        with tempfile.TemporaryDirectory() as d:
            fn = os.path.join(d, "k.ptx")
            for version in (None, "9.0", "8.5", "8.0"):  # an older ptxas than NVVM's PTX: wgmma needs 8.0
                src = ptx if version is None else re.sub(r"^\.version \S+", f".version {version}", ptx, flags=re.M)
                open(fn, "w").write(src)
                r = subprocess.run([ptxas, "-arch=sm_90a", fn, "-o", os.path.join(d, "k.cubin")],
                                   capture_output=True, text=True)
                if r.returncode == 0 or "Unsupported .version" not in r.stderr:
                    break
        out[f"{n}-{bf16}"] = {"rc": r.returncode, "err": r.stderr[-500:],
                              "wgmma": len(re.findall(r"wgmma\.mma_async", ptx))}
print(json.dumps(out))
'''


def test_wgmma_kernels_assemble_for_sm90a():
    """The PTX of every wgmma shape is accepted by ptxas for sm_90a (no GPU needed: NVVM and ptxas only)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", PYTHONPATH=pythonpath_with(root))
    r = subprocess.run([sys.executable, "-c", _ASSEMBLE, str(root)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(f"cannot compile and assemble for sm_90a here: {res['skip']}")
    assert len(res) == 8
    for key, v in res.items():
        assert v["rc"] == 0 and v["wgmma"] == 1, (key, v)


_MLIR = r'''
import os, re, sys
sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
import numba_cuda_mlir.tools as tools
from cuda.bindings import driver
try:
    gpu = int(driver.cuInit(0)[0]) == 0
except Exception:
    gpu = False
if not gpu:
    tools._cached_cc = (9, 0)  # numba-cuda-mlir asks the device even when chip names the target
from numba_nbits import backend
from numba_nbits.kernels import hopper_gemm as H, intrinsics_sm90 as W, sm90_asm
from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
from numba_nbits.kernels.gemv.tactics import Tactic
import test_wgmma as T
assert backend.compiler() == "mlir" and W.MLIR
ks = [T._kernel(8, False), T._kernel(16, True), T._kernel(256, False), H.hopper_gemm_kernel("float16", H.m_tile(64), 128)]
ks.append(gemv_mma_kernel("bfloat16", 32, Tactic.parse("t1w8u1s3xhv"), 128, "none", 4, False, True))
for k in ks:
    disp, _, (entry, cubin) = backend.compile_kernel(k.pyfunc, k.argtypes, {}, lambda: (9, 0))
    ptx = disp.compile(backend.types().void(*backend.argtypes(k.argtypes))).metadata["ptx"]
    mma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k16\.f32\.\w+)\.\w+ \{([^}]*)\}", ptx)
    print(k.name, cubin[:4] == b"\x7fELF", ".target sm_90a" in ptx, len(mma), sorted({m[0] for m in mma}),
          sorted({len(m[1].split(",")) for m in mma}), "wgmma.wait_group.sync.aligned 0" in ptx)
'''


def test_wgmma_under_numba_cuda_mlir():
    """Under ``NUMBA_NBITS_BACKEND=mlir`` every wgmma shape compiles to sm_90a cubins (n = 8, 16 bf16, 256, the
    prototype GEMM's 64-token tile, and the fused GEMM's warpgroup kernel at 32 m-tiles, n = 256, bf16): the
    intrinsics take the accumulator tuple (``intrinsics_sm90_mlir``), each ``mma_async`` with ``n / 2``
    accumulator registers."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("numba_cuda_mlir")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_NBITS_BACKEND="mlir", NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _MLIR, str(root)], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in r.stdout.splitlines() if ln.strip()}
    assert got == {
        "wgmma_probe_n8_f16": "True True 1 ['m64n8k16.f32.f16'] [4] True",
        "wgmma_probe_n16_bf16": "True True 1 ['m64n16k16.f32.bf16'] [8] True",
        "wgmma_probe_n256_f16": "True True 1 ['m64n256k16.f32.f16'] [128] True",
        "hopper_gemm_w4_float16_mt64_b128": "True True 8 ['m64n64k16.f32.f16'] [32] True",
    } | {k: v for k, v in got.items() if k.startswith("gemv_mma")}, r.stdout
    (name, line), = [(k, v) for k, v in got.items() if k.startswith("gemv_mma")]
    assert line.startswith("True True ") and line.endswith(" ['m64n256k16.f32.bf16'] [128] True"), (name, line)
