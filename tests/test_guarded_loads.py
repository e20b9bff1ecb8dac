"""Out-of-bounds accesses: the 16-byte load must stay behind its guard, and the simulator must catch
what a GPU would fault on.

The H200 run of the 8-bit mixed GEMM raised CUDA_ERROR_ILLEGAL_ADDRESS although every index the
kernel source computes is in bounds (checked on the simulator). The PTX showed why: ``ldg_v4``'s
inline asm was not marked side-effecting, so NVVM treated it as a pure function and hoisted the
loop-invariant 8-bit half-chunk load (``if stage < n_full: ... elif stage < st_end: ldg_v4(bq, <no
stage>)``) unguarded into the loop preheader; with K % 64 == 0 that address is the last tile's
chunk ``n_full``, up to 512 bytes past the end of B. ``test_ldg_v4_is_not_speculated`` compiles a
kernel with the same shape (no GPU needed, only NVVM) and fails on the old intrinsic.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import OFFLINE_PTX_PREAMBLE, offline_ptx_env
from numba import cuda

from numba_nbits.kernels import intrinsics as K
from numba_nbits.kernels import mixed_gemm as X
from numba_nbits.launch import simulated

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------ simulator twins

def test_ldg_v4_twin_checks_the_whole_16_bytes():
    ldg = K.TWINS["ldg_v4"]
    a = np.arange(8, dtype=np.uint32)
    assert tuple(int(x) for x in ldg(a, 1)) == (4, 5, 6, 7)
    with pytest.raises(IndexError):
        ldg(a, 2)  # words 8..11 of 8
    with pytest.raises(IndexError):
        ldg(np.arange(6, dtype=np.uint32), 1)  # words 4..7 of 6: partly past the end
    with pytest.raises(IndexError):
        ldg(a, -1)  # NumPy would wrap to the end
    with pytest.raises(TypeError):
        ldg(a, 1.0)


def test_ldg_v4_at_twin_reads_16_bytes_at_a_byte_offset_of_any_array():
    ldg = K.TWINS["ldg_v4_at"]
    a = np.arange(32, dtype=np.float16).reshape(2, 16)
    words = a.reshape(-1).view(np.uint32)
    assert tuple(int(x) for x in ldg(a, 16)) == tuple(int(x) for x in words[4:8])
    assert tuple(int(x) for x in ldg(a, 48)) == tuple(int(x) for x in words[12:16])  # the last group of row 1
    for bad in (64, -16):  # past the end; NumPy would wrap a negative one
        with pytest.raises(IndexError):
            ldg(a, bad)
    with pytest.raises(IndexError):
        ldg(a, 8)  # not a 16-byte group
    with pytest.raises(TypeError):
        ldg(a, 16.0)
    with pytest.raises(ValueError, match="C-contiguous"):
        ldg(a[:, ::2], 0)


def test_vector_store_twins_check_bounds():
    a = np.zeros(8, np.uint32)
    K.TWINS["st_v4"](a, 4, 1, 2, 3, 4)
    K.TWINS["st_v2"](a, 6, 5, 6)
    assert a.tolist() == [0, 0, 0, 0, 1, 2, 5, 6]
    for f, args in ((K.TWINS["st_v4"], (5, 1, 2, 3, 4)), (K.TWINS["st_v4"], (-4, 1, 2, 3, 4)),
                    (K.TWINS["st_v2"], (7, 1, 2)), (K.TWINS["st_v2"], (-1, 1, 2))):
        with pytest.raises(IndexError):
            f(a, *args)
    assert a.tolist() == [0, 0, 0, 0, 1, 2, 5, 6]


def _neg_index_kernel(a, out, i, mode):
    s = cuda.shared.array(4, np.float32)
    s[cuda.threadIdx.x] = np.float32(1)
    cuda.syncthreads()
    if mode == 0:
        out[0] = a[i]
    elif mode == 1:
        out[i] = np.float32(2)
    else:
        out[0] = s[i]


@pytest.mark.skipif(not simulated(), reason="simulator behaviour")
@pytest.mark.parametrize("mode", [0, 1, 2], ids=["global_load", "global_store", "shared_load"])
def test_simulated_kernels_reject_negative_indices(mode):
    """NumPy wraps ``a[-1]`` to the last element; on a GPU it reads before the allocation."""
    from numba.cuda import types

    from numba_nbits.arrays import to_device, to_host
    from numba_nbits.launch import Kernel

    f1 = types.Array(types.float32, 1, "C")
    kern = Kernel(_neg_index_kernel, (f1, f1, types.int64, types.int64), name="neg_index")
    a = to_device(np.arange(4, dtype=np.float32), True)
    out = to_device(np.zeros(4, np.float32), True)
    kern.bind(1, 4, (a, out, 3, mode)).launch(0)  # in bounds: fine
    with pytest.raises(IndexError, match="negative index"):
        kern.bind(1, 4, (a, out, -1, mode)).launch(0)
    assert to_host(out)[3] == (2 if mode == 1 else 0)  # the wrapped store never happened


# -------------------------------------------------------------------------- code generation

# The two probes below compile with numba-cuda and with numba-cuda-mlir (``COMPILERS``), each in a process of its
# own (the suite's process runs the simulator): ``conftest.OFFLINE_PTX_PREAMBLE`` / ``offline_ptx_env``.
_PROBE = OFFLINE_PTX_PREAMBLE + r'''
import numpy as np
from numba import cuda
from numba.cuda import types
from numba_nbits.kernels.intrinsics import ldg_v4


def k(arr, out, n_full, n_st, base):
    # the mixed GEMM's weight-load shape: full chunks indexed by the stage, then a chunk whose index
    # does not depend on the stage, loaded only past n_full (never, when n_full == n_st)
    lane = cuda.threadIdx.x & 31
    acc = np.uint32(0)
    st = 0
    while st < n_st:
        if st < n_full:
            v = ldg_v4(arr, st * 32 + lane)
        elif st < n_st:
            v = ldg_v4(arr, base + lane)
        else:
            v = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))
        acc += v[0] ^ v[3]
        st += 1
    out[cuda.threadIdx.x] = acc


sig = (types.Array(types.uint32, 1, "C"), types.Array(types.uint32, 1, "C"), types.int64, types.int64, types.int64)
try:
    ptx = backend.compile_ptx(k, sig, (9, 0))
    ir_calls = None  # numba-cuda-mlir: no LLVM IR of its own to read; the PTX below decides
    if backend.compiler() == "numba":
        from numba.cuda.compiler import compile_cuda
        llvm = compile_cuda(k, types.void, sig, cc=(9, 0)).library.get_llvm_str()
        ir_calls = [l for l in llvm.splitlines() if "ld.global.nc" in l and "call" in l]
except Exception as e:  # NVVM missing
    print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
body = [l.strip() for l in ptx[ptx.find(".entry"):].splitlines()]
labels = {l[:-1]: i for i, l in enumerate(body) if l.startswith("$L") and l.endswith(":")}
loops = []  # (header, backward branch) line ranges
for i, l in enumerate(body):
    if "bra" in l:
        tgt = l.split()[-1].rstrip(";")
        if tgt in labels and labels[tgt] < i:
            loops.append((labels[tgt], i))
loads = [i for i, l in enumerate(body) if l.startswith("ld.global.nc")]
outside = [body[i] for i in loads if not any(a <= i <= b for a, b in loops)]
print(json.dumps({"ir_calls": ir_calls, "loads": len(loads), "loops": len(loops), "outside": outside}))
'''


COMPILERS = ["numba", "mlir"]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_ldg_v4_is_not_speculated(compiler):
    """Every source ``ldg_v4`` of the probe sits inside the loop behind a stage guard, so a load in
    the PTX outside the loop was speculated past its guard (what faulted on the H200). Under numba-cuda the
    LLVM IR's calls are side-effecting asm as well (what keeps NVVM from hoisting them)."""
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=offline_ptx_env(compiler),
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(f"cannot compile for the CUDA target here: {res['skip']}")
    assert res["loops"] >= 1 and res["loads"] >= 2, res
    assert not res["outside"], f"ld.global.nc hoisted out of its guarded loop: {res['outside']}"
    if compiler == "numba":
        assert res["ir_calls"] and all("asm sideeffect" in c for c in res["ir_calls"]), res["ir_calls"]


_GEMM_PROBE = OFFLINE_PTX_PREAMBLE + r'''
from numba_nbits.kernels import mixed_gemm as X
from numba_nbits.kernels.mixed_gemm.source import gen_source
out = []
for act, tac, bs, zp, bias, arch, bits in json.loads(sys.argv[1]):
    t = X.TACTICS[tac] if isinstance(tac, str) else X.Tactic("probe", 4, 1, 2, 2, splitk=tac)
    src = gen_source(act, t, bs, zp, bias, arch, bits)
    sites = src[:src.index("while st < st_end")].count("ldg_v4(")
    k = X.mixed_gemm_kernel(act, t, bs, zp, bias, arch, bits)
    try:
        ptx = backend.compile_ptx(k.pyfunc, k.argtypes, (9, 0))
    except Exception as e:
        print(json.dumps({"skip": f"{type(e).__name__}: {e}"})); sys.exit(0)
    body = ptx[ptx.find(".entry"):]
    pro = body[:body.index("bar.sync")]
    out.append({"sites": sites, "prologue_loads": pro.count("ld.global.nc")})
print(json.dumps(out))
'''

# The kernels of the tests that faulted on the H200 (the 4-bit ones compile without a hoisted load
# here, with NVVM 13.5; they are checked all the same).
GEMM_CONFIGS = [
    ("float16", "m16", 128, "packed", True, 80, 8),
    ("float16", "m32sk", 128, "packed", True, 80, 8),
    ("bfloat16", "m16skp2", 64, "typed", False, 80, 8),
    ("float16", 7, 32, "packed", True, 80, 4),
    ("float16", "m16", 64, "packed", False, 90, 4),
]


@pytest.mark.parametrize("compiler", COMPILERS)
def test_mixed_gemm_loads_stay_behind_their_guards(compiler):
    """Before its k-stage loop (the first barrier) the kernel may issue only the loads its prologue
    source has: the 8-bit arch-80 kernels had two more, the half-chunk loads hoisted out of the loop
    unguarded (one per weight tile; past the end of B for the last tile when K % 64 == 0)."""
    r = subprocess.run([sys.executable, "-c", _GEMM_PROBE, json.dumps(GEMM_CONFIGS)], capture_output=True,
                       text=True, env=offline_ptx_env(compiler), timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if isinstance(res, dict):
        pytest.skip(f"cannot compile for the CUDA target here: {res['skip']}")
    bad = [(cfg, x) for cfg, x in zip(GEMM_CONFIGS, res) if x["prologue_loads"] > x["sites"]]
    assert not bad, f"loads speculated out of the k-stage loop: {bad}"


# ------------------------------------------------------------------- the generated source's indices

# every tactic, both bit widths and layouts: partial M block (33 rows), partial N block (48 rows: 3
# tiles, fewer than any tactic's BN), several k-stages, a half chunk for block 32
_SRC_CASES = [(tac, bits, arch, bs)
              for i, (tac, bits, arch) in enumerate((t, b, a) for t in list(X.TACTICS) + ["split3"]
                                                    for b in X.BITS for a in (80, 90))
              for bs in ((32, 64, 128)[i % 3],)]


@pytest.mark.parametrize("tac,bits,arch,bs", _SRC_CASES)
def test_mixed_gemm_source_indices_in_bounds(tac, bits, arch, bs):
    """Every global index the kernel source computes (run thread by thread with exact-size arrays)."""
    from mixed_gemm_bounds import check

    t = X.Tactic("split3", 4, 1, 2, 2, splitk=3) if tac == "split3" else X.TACTICS[tac]
    K = 352 if bs == 32 else 384
    assert check(33, 48, K, bs, bits, t, arch, zp="typed" if bits == 8 and arch == 90 else "packed") is None
