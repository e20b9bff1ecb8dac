"""Registers, spills and occupancy of gemv_mma specialisations, without a GPU.

    PYTHONPATH=. python perf/ptx_stats.py t2w8u1,32,1 t2w8u1p1b4,128,2,bf16 ...   (tag,block,m-tiles[,f16|bf16])
    PYTHONPATH=. python perf/ptx_stats.py --sweep       (every specialisation of perf/sweep_gemv_m1.py)

numba compiles the kernel to PTX for sm_90 through NVVM (no driver needed: the current-device
lookup of device functions is pointed at a fake cc-9.0 device), then ``ptxas -v -arch=sm_90a``
(found on PATH or under /usr/local/cuda*/bin; an older ptxas gets the PTX ``.version`` lowered)
reports registers and spill bytes. Occupancy = blocks of ``32 * warps`` threads per SM by registers
(65536 per SM, allocated per warp in units of 256) and by shared memory (228 KB), at most 32 blocks
and 64 warps; waves = blocks / (132 * that) at M=1 for 28672 rows.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def _ptxas():
    p = shutil.which("ptxas")
    if p:
        return p
    c = sorted(glob.glob("/usr/local/cuda*/bin/ptxas"))
    return c[-1] if c else None


def compile_ptx(tag: str, bs: int, MT: int, dtype: str):
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    from numba import cuda
    from numba.cuda import types
    import numba.cuda.dispatcher as _d

    class _Dev:
        compute_capability = (9, 0)

    _d.get_current_device = lambda: _Dev()
    from numba_nbits.kernels import gemv_mma as G

    tac = G.Tactic.parse(tag)
    k = G.gemv_mma_kernel(dtype, MT, tac, bs, "none")
    opts = {k2: v for k2, v in k.options.items() if k2 in ("launch_bounds", "fastmath")}
    ptx, _ = cuda.compile_ptx(k.pyfunc, types.void(*k.argtypes), cc=(9, 0), **opts)
    return tac, ptx


def stats(tag: str, bs: int, MT: int, dtype: str = "float16") -> dict:
    t = time.time()
    tac, ptx = compile_ptx(tag, bs, MT, dtype)
    out = {"tag": tag, "bs": bs, "MT": MT, "dtype": dtype, "compile_s": round(time.time() - t, 2)}
    exe = _ptxas()
    if exe is None:
        out["error"] = "no ptxas"
        return out
    with tempfile.TemporaryDirectory() as d:
        fn = os.path.join(d, "k.ptx")
        r = None
        for version in (None, "9.0", "8.5", "8.0"):
            src = ptx if version is None else re.sub(r"^\.version \S+", f".version {version}", ptx, flags=re.M)
            with open(fn, "w") as f:
                f.write(src)
            r = subprocess.run([exe, "-arch=sm_90a", "-v", fn, "-o", os.path.join(d, "k.cubin")],
                               capture_output=True, text=True)
            if r.returncode == 0:
                break
        text = r.stderr + r.stdout
    if r.returncode != 0:
        out["error"] = text.strip().splitlines()[-1][:200]
        return out
    regs = int(re.findall(r"Used (\d+) registers", text)[0])
    spill = int(re.findall(r"(\d+) bytes spill stores", text)[0])
    smem = int((re.findall(r"(\d+) bytes smem", text) or [0])[0])
    threads = 32 * tac.warps
    per_warp = -(-regs * 32 // 256) * 256
    by_regs = 65536 // (per_warp * tac.warps)
    by_smem = (228 * 1024) // max(smem + 1024, 1)
    blocks = max(0, min(by_regs, by_smem, 32, 64 // tac.warps))
    groups = -(-28672 // (16 * tac.tpw)) * tac.ksplit
    out.update(regs=regs, spill=spill, smem=smem, threads=threads, blocks_per_sm=blocks,
               warps_per_sm=blocks * tac.warps, waves_28672=round(groups / (132 * blocks), 2) if blocks else None)
    if tac.grid and blocks:  # persistent ring kernel: grid = min(groups, grid * 132); groups per CTA instead
        out["persistent_grid"] = min(groups, tac.grid * 132)
        out["groups_per_cta_28672"] = round(groups / out["persistent_grid"], 2)
        if tac.grid > blocks:
            out["warning"] = f"g{tac.grid} > {blocks} resident CTAs per SM"
    return out


def main(argv):
    specs = []
    if "--sweep" in argv:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import sweep_gemv_m1 as S

        specs = [(tag, bs, MT, dt) for (dt, MT, bs, tag) in sorted(S.plan_specs(False))]
    for a in argv:
        if a.startswith("--"):
            continue
        p = a.split(",")
        dt = {"f16": "float16", "bf16": "bfloat16"}.get(p[3] if len(p) > 3 else "f16", "float16")
        specs.append((p[0], int(p[1]), int(p[2]), dt))
    for tag, bs, MT, dt in specs:
        try:
            s = stats(tag, bs, MT, dt)
        except Exception as e:  # noqa: BLE001
            s = {"tag": tag, "bs": bs, "MT": MT, "dtype": dt, "error": f"{type(e).__name__}: {e}"[:200]}
        print(" ".join(f"{k}={v}" for k, v in s.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
