"""Registers, spills and occupancy of GEMV specialisations and mixed-GEMM tactics, without a GPU.

    python -m benchmarks.ptx_stats t2w8u1,32,1 t2w8u1p1b4,128,2,bf16 t1w8u1,128,1,f16,8 ...
                                                        (tag,block,m-tiles[,f16|bf16[,bits]])
    python -m benchmarks.ptx_stats --sweep [--bits 8]  (every specialisation of benchmarks/sweep_gemv_m1.py)
    python -m benchmarks.ptx_stats --mixed       (every mixed_gemm tactic, 4- and 8-bit, fp16, block 128)
    python -m benchmarks.ptx_stats --cuda-core   (every M tile of the CUDA-core engine of gemv_w2 (block 64)
                                                  and gemv_w8 (block 128) at K = 4096, fp16: regs, staged A)
    python -m benchmarks.ptx_stats --sass t1w8u2p1,32,1 ...   (also the SASS of the GEMV's main loop: its
                                                  instruction count and opcode histogram, via nvdisasm)
    python -m benchmarks.ptx_stats --k-tail ...  (the GEMV kernels for a K with a tail, guarded activation
                                                  loads; default: the ``_kf`` kernels of K a multiple of the
                                                  super-chunk, which every shape of the benchmark sets has)
    python -m benchmarks.ptx_stats --sass --dump DIR t2w4u1p1,128,2 ...  (also write each kernel's PTX, SASS
                                                  and main-loop SASS to DIR/<tag>_b<block>_mt<m-tiles>_<dtype>_w<bits>_
                                                  <backend>.{ptx,sass,loop.sass}, to compare the two compilers'
                                                  code line by line)

The compiler ``NUMBA_NBITS_BACKEND`` selects (numba-cuda, or numba-cuda-mlir with ``=mlir``: the two can be
compared kernel by kernel, ``backend=`` in each line) compiles the kernel to PTX for sm_90 (no driver needed:
numba-cuda's current-device lookup of device functions is pointed at a fake cc-9.0 device, numba-cuda-mlir's
compute-capability cache is primed with 9.0), then ``ptxas -v -arch=sm_90a``
(found on PATH or under /usr/local/cuda*/bin; an older ptxas gets the PTX ``.version`` lowered)
reports registers and spill bytes (a kernel's ``max_registers`` passed as ``-maxrregcount``, its occupancy
snapping modelled: ``snapped_ptxas_stats``). Occupancy = blocks of ``32 * warps`` threads per SM by registers
(65536 per SM, allocated per warp in units of 256) and by shared memory (228 KB), at most 32 blocks
and 64 warps; waves = blocks / (132 * that) at M=1 for 28672 rows. With ``--sass`` the cubin is
disassembled (``nvdisasm``: on PATH, under /usr/local/cuda*/bin, or from the ``nvidia-cuda-nvdisasm`` wheel)
and the main loop (``main_loop``: the loop with the most tensor-core instructions, then the longest) is
counted, with its opcodes (``loop_ops``, most frequent first): the GEMV is bound by instruction issue when
its loads are not, so instructions per weight code is the figure to cut (see
``benchmarks/results/2026-12-02-h200-gemv-v2``).
``late_loads`` counts the main loop's global loads issued after an HMMA of their basic block and consumed by
a later one: each is one more memory latency per iteration (``benchmarks/results/2026-12-03-h200-gemv-kfull``:
such a load cost 16-22% on latency-bound shapes).
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


def _nvdisasm():
    p = shutil.which("nvdisasm")
    if p:
        return p
    c = sorted(glob.glob("/usr/local/cuda*/bin/nvdisasm"))
    if c:
        return c[-1]
    try:
        import nvidia

        for root in nvidia.__path__:
            c = sorted(glob.glob(os.path.join(root, "*", "bin", "nvdisasm")))
            if c:
                return c[-1]
    except ImportError:
        pass
    return None


_SASS_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")
_SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_SASS_BRANCH = re.compile(r"\bBRA\s+`\((\.L_x_\d+)\)")
_TENSOR_OPS = ("HMMA", "HGMMA", "IMMA")
_SASS_DEST = re.compile(r"\*/\s+(?:@!?U?P[T0-9]+\s+)?[A-Z][A-Z0-9_.]*\s+R(\d+),")
_SASS_LDG = re.compile(r"\bLDG\.\S+\s+R(\d+),")
_SASS_HMMA = re.compile(r"\bHMMA\.(\d+)\S*\s+R\d+,\s*R(\d+),\s*R(\d+),\s*R(\d+|Z)")
#: registers of an HMMA's A, B and C operands by shape (m16n8k16: 4, 2, 4; m16n8k8: 2, 1, 4)
_HMMA_REGS = {"16816": (4, 2, 4), "1688": (2, 1, 4)}


def _load_regs(line: str) -> set:
    """Registers an LDG writes (``.128``: 4, ``.64``: 2, else 1), or empty for another instruction."""
    m = _SASS_LDG.search(line)
    if not m:
        return set()
    n = 4 if ".128" in line else 2 if ".64" in line else 1
    return set(range(int(m.group(1)), int(m.group(1)) + n))


def _hmma_sources(line: str) -> set | None:
    """Registers an HMMA reads (A, B, C), or None for another instruction."""
    m = _SASS_HMMA.search(line)
    if not m:
        return None
    sizes = _HMMA_REGS.get(m.group(1), (1, 1, 1))
    regs = set()
    for first, n in zip(m.group(2, 3, 4), sizes):
        if first != "Z":
            regs |= set(range(int(first), int(first) + n))
    return regs


def late_loads(body: list) -> int:
    """Global loads in a loop body that an HMMA of the same basic block consumes although an earlier HMMA of
    that block was issued before them: each one is a memory latency the block waits for after its tensor work
    has begun (the pattern of ptxas issuing a stage's second activation load after the first HMMA pair:
    ``benchmarks/results/2026-12-03-h200-gemv-kfull``). Loads consumed in a later iteration (prefetch) or
    never by an HMMA do not count."""
    count = 0
    blocks, cur = [], []
    for line in body:
        if _SASS_LABEL.match(line) and cur:
            blocks.append(cur)
            cur = []
        cur.append(line)
    blocks.append(cur)
    for blk in blocks:
        seen_mma = False
        pending = []  # registers of loads issued after an HMMA of this block, not yet consumed
        for line in blk:
            src = _hmma_sources(line)
            if src is not None:
                count += sum(1 for regs in pending if regs & src)
                pending = [regs for regs in pending if not regs & src]
                seen_mma = True
                continue
            regs = _load_regs(line)
            if regs:
                if seen_mma:
                    pending.append(regs)
                continue
            d = _SASS_DEST.search(line)
            if d:  # another instruction overwrites a loaded register: that value is no longer the load's
                pending = [r - {int(d.group(1))} for r in pending]
    return count


def _best_loop(sass: str):
    """``(body, span)`` of ``main_loop``'s loop: its instruction lines, and its lines from the label to the branch
    back (labels included); None without a backward branch."""
    lines = sass.splitlines()
    labels = {}
    best = None
    for i, line in enumerate(lines):
        m = _SASS_LABEL.match(line)
        if m:
            labels[m.group(1)] = i
        b = _SASS_BRANCH.search(line)
        if b and b.group(1) in labels:
            span = lines[labels[b.group(1)]:i + 1]
            body = [x for x in span if _SASS_INSTR.search(x)]
            if any(_SASS_INSTR.search(x).group(2) == "EXIT" for x in body):
                continue  # a branch from out-of-line code after the kernel's end back into a loop (a wait's retry)
            key = (sum(_SASS_INSTR.search(x).group(2) in _TENSOR_OPS for x in body), len(body))
            if best is None or key > best[0]:
                best = (key, body, span)
    return None if best is None else best[1:]


def main_loop_listing(sass: str) -> str:
    """The lines of ``main_loop``'s loop (label to the branch back), empty without a backward branch."""
    best = _best_loop(sass)
    return "" if best is None else "\n".join(best[1]) + "\n"


def main_loop(sass: str) -> dict:
    """The main loop of a kernel's SASS (``nvdisasm -c`` text): of the loops (a label to a branch back to it),
    the one with the most tensor-core instructions (HMMA / HGMMA / IMMA), then the longest (a GEMV's cross-warp
    reduction loop can be longer than its K loop), leaving out spans with an ``EXIT`` (ptxas places the retry of
    an ``mbarrier`` wait after the kernel's end, and its branch back would take in the epilogue); ``{"main_loop": instructions, "late_loads": late_loads(...),
    "loop_ops": {opcode: count}}`` (opcodes without modifiers, most frequent first); empty without a backward
    branch."""
    best = _best_loop(sass)
    if best is None:
        return {}
    body, span = best
    ops = {}
    for x in body:
        op = _SASS_INSTR.search(x).group(2)
        ops[op] = ops.get(op, 0) + 1
    return {"main_loop": len(body), "late_loads": late_loads(span),
            "loop_ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))}


def _fake_device():
    """Let the compilers build for a compute-capability 9.0 device without one: numba-cuda's lookup of the
    current device for device functions is pointed at a fake device and, when ``NUMBA_NBITS_BACKEND`` selects
    numba-cuda-mlir, its private compute-capability cache is primed with 9.0 (it asks the device even for PTX)."""
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
    import numba.cuda.dispatcher as _d

    class _Dev:
        compute_capability = (9, 0)

    _d.get_current_device = lambda: _Dev()
    from numba_nbits import backend

    if backend.compiler() == "mlir":
        from numba_cuda_mlir import tools

        if tools._cached_cc is None:
            tools._cached_cc = (9, 0)


def _kernel_ptx(k) -> str:
    """PTX for sm_90 of a ``launch.Kernel`` (its jit options that change code generation kept), from the
    compiler ``NUMBA_NBITS_BACKEND`` selects (``backend.py``)."""
    from numba_nbits import backend

    opts = {k2: v for k2, v in k.options.items() if k2 in ("launch_bounds", "fastmath")}  # max_registers: ptxas
    if backend.compiler() == "mlir":
        return backend.compile_ptx(k.pyfunc, k.argtypes, (9, 0), prepass=k.prepass, **opts)
    from numba import cuda
    from numba.cuda import types

    from numba_nbits import nvvm_prepass

    with nvvm_prepass.active(backend.prepass_state(k.prepass) == "installed"):
        ptx, _ = cuda.compile_ptx(k.pyfunc, types.void(*k.argtypes), cc=(9, 0), **opts)
    return ptx


def compile_ptx(tag: str, bs: int, MT: int, dtype: str, bits: int = 4, kfull: bool = True):
    """(tactic, PTX, ``launch.Kernel``) of one GEMV specialisation (zero points none; ``kfull``: the kernel of a K
    that is a multiple of the super-chunk, as every shape of the benchmark sets has, else the guarded one)."""
    _fake_device()
    from numba_nbits.kernels.gemv.mma import gemv_mma_kernel
    from numba_nbits.kernels.gemv.tactics import Tactic

    tac = Tactic.parse(tag)
    k = gemv_mma_kernel(dtype, MT, tac, bs, "none", bits, False, kfull)
    return tac, _kernel_ptx(k), k


def snapped_ptxas_stats(k, ptx: str, sass: bool = False, dump: str | None = None) -> dict:
    """``ptxas_stats`` of ``launch.Kernel`` ``k``'s PTX under its register options as a GPU build gets them:
    ``max_registers`` as ``-maxrregcount``; occupancy snapping (``k.snap``) modelled with the registers alone
    (the driver also weighs shared memory there): one step down within the slack and no more spill bytes,
    then the capped build's figures with ``snapped=<registers before>``. ``dump``: the files of the build whose
    figures are returned (``ptxas_stats``)."""
    from numba_nbits.launch.occupancy import blocks_by_registers, snap_target

    ps, texts = _assemble(ptx, sass, k.options.get("max_registers"))
    chosen = ps, texts
    if k.snap is not None and "error" not in ps:
        threads, slack = k.snap
        target = snap_target(ps["regs"], threads, slack)
        if target is not None:
            capped, capped_texts = _assemble(ptx, sass, target)
            if ("error" not in capped and capped["spill"] <= ps["spill"]
                    and blocks_by_registers(capped["regs"], threads) > blocks_by_registers(ps["regs"], threads)):
                chosen = {**capped, "snapped": ps["regs"]}, capped_texts
    if dump is not None:
        _write_dump(chosen[1], dump)
    return chosen[0]


def _write_dump(texts: dict, dump: str) -> None:
    """``<dump>.ptx`` (the PTX as assembled) and, where the build was disassembled, ``<dump>.sass`` and its main
    loop ``<dump>.loop.sass``."""
    with open(dump + ".ptx", "w") as f:
        f.write(texts["ptx"])
    if texts.get("sass") is not None:
        with open(dump + ".sass", "w") as f:
            f.write(texts["sass"])
        with open(dump + ".loop.sass", "w") as f:
            f.write(main_loop_listing(texts["sass"]))


def ptxas_stats(ptx: str, sass: bool = False, max_registers: int | None = None, dump: str | None = None) -> dict:
    """``ptxas -v -arch=sm_90a`` of ``ptx`` (``-maxrregcount`` with ``max_registers``): regs, spill (store
    bytes), smem (static bytes), or error; with ``sass`` also ``main_loop`` / ``loop_ops`` of the cubin
    (``main_loop``; needs ``nvdisasm``). ``dump``: a path prefix; the PTX as assembled is written to
    ``<dump>.ptx`` and, with ``sass``, the cubin's SASS and its main loop to ``<dump>.sass`` / ``<dump>.loop.sass``."""
    stats_, texts = _assemble(ptx, sass, max_registers)
    if dump is not None and texts:
        _write_dump(texts, dump)
    return stats_


def _assemble(ptx: str, sass: bool, max_registers: int | None) -> tuple[dict, dict]:
    """(``ptxas_stats``' figures, the build's texts: ``ptx`` as assembled and, when disassembled, ``sass``; no
    texts without ptxas)."""
    exe = _ptxas()
    if exe is None:
        return {"error": "no ptxas"}, {}
    cap = ["-maxrregcount", str(max_registers)] if max_registers else []
    # numba-cuda's PTX for a cc-9.0 device on a GPU targets sm_90a (wgmma needs it); compile_ptx here says sm_90
    ptx = re.sub(r"^\.target sm_90\s*$", ".target sm_90a", ptx, flags=re.M)
    with tempfile.TemporaryDirectory() as d:
        fn = os.path.join(d, "k.ptx")
        r = None
        for version in (None, "9.0", "8.5", "8.0"):
            src = ptx if version is None else re.sub(r"^\.version \S+", f".version {version}", ptx, flags=re.M)
            with open(fn, "w") as f:
                f.write(src)
            r = subprocess.run([exe, "-arch=sm_90a", "-v", *cap, fn, "-o", os.path.join(d, "k.cubin")],
                               capture_output=True, text=True)
            if r.returncode == 0:
                break
        texts = {"ptx": src, "sass": None}
        text = r.stderr + r.stdout
        loop = {}
        if sass and r.returncode == 0:
            dis = _nvdisasm()
            if dis is None:
                loop = {"sass_error": "no nvdisasm (pip install nvidia-cuda-nvdisasm)"}
            else:
                d2 = subprocess.run([dis, "-c", os.path.join(d, "k.cubin")], capture_output=True, text=True, check=False)
                loop = main_loop(d2.stdout) if d2.returncode == 0 else {"sass_error": d2.stderr.strip()[:200]}
                if d2.returncode == 0:
                    texts["sass"] = d2.stdout
    if r.returncode != 0:
        return {"error": text.strip().splitlines()[-1][:200]}, texts
    return {"regs": int(re.findall(r"Used (\d+) registers", text)[0]),
            "spill": int(re.findall(r"(\d+) bytes spill stores", text)[0]),
            "smem": int((re.findall(r"(\d+) bytes smem", text) or [0])[0]), **loop}, texts


def occupancy(regs: int, smem: int, warps: int) -> int:
    """Resident blocks per SM of ``warps``-warp blocks (H100/H200: 64K registers allocated per warp in
    units of 256, 228 KB shared memory with 1 KB reserved per block, at most 32 blocks and 64 warps)."""
    from numba_nbits.launch.occupancy import blocks_by_registers

    by_regs = blocks_by_registers(regs, 32 * warps)
    by_smem = (228 * 1024) // max(smem + 1024, 1)
    return max(0, min(by_regs, by_smem, 32, 64 // warps))


def stats(tag: str, bs: int, MT: int, dtype: str = "float16", bits: int = 4, sass: bool = False,
          kfull: bool = True, dump_dir: str | None = None) -> dict:
    """One GEMV specialisation's compile time, ptxas figures (``snapped_ptxas_stats``), occupancy and waves at
    28672 rows; ``dump_dir``: also its PTX / SASS files there (``ptxas_stats``'s ``dump``)."""
    t = time.time()
    tac, ptx, k = compile_ptx(tag, bs, MT, dtype, bits, kfull)
    from numba_nbits import backend

    out = {"tag": tag, "bits": bits, "bs": bs, "MT": MT, "dtype": dtype, "kfull": kfull, "backend": backend.compiler(),
           "compile_s": round(time.time() - t, 2)}
    dump = None
    if dump_dir is not None:
        os.makedirs(dump_dir, exist_ok=True)
        dump = os.path.join(dump_dir, f"{tag}_b{bs}_mt{MT}_{dtype}_w{bits}_{out['backend']}" + ("" if kfull else "_kt"))
    ps = snapped_ptxas_stats(k, ptx, sass, dump)
    out.update(ps)
    if "error" in ps:
        return out
    regs, smem = ps["regs"], ps["smem"]
    threads = 32 * tac.warps
    blocks = occupancy(regs, smem, tac.warps)
    groups = -(-28672 // (16 * tac.tpw)) * tac.ksplit
    out.update(threads=threads, blocks_per_sm=blocks,
               warps_per_sm=blocks * tac.warps, waves_28672=round(groups / (132 * blocks), 2) if blocks else None)
    if tac.grid and blocks:  # persistent ring kernel: grid = min(groups, grid * 132); groups per CTA instead
        out["persistent_grid"] = min(groups, tac.grid * 132)
        out["groups_per_cta_28672"] = round(groups / out["persistent_grid"], 2)
        if tac.grid > blocks:
            out["warning"] = f"g{tac.grid} > {blocks} resident CTAs per SM"
    return out


def mixed_stats(tactic: str, bits: int = 4, dtype: str = "float16", bs: int = 128) -> dict:
    """The mixed GEMM's tactic ``tactic`` (zero points none, no bias, SM80 layout)."""
    _fake_device()
    from numba_nbits.kernels import mixed_gemm as MG

    tac = MG.TACTICS[tactic]
    t = time.time()
    ptx = _kernel_ptx(MG.mixed_gemm_kernel(dtype, tac, bs, "none", False, 80, bits))
    out = {"tactic": tactic, "bits": bits, "dtype": dtype, "bs": bs, "bm": tac.bm, "bn": tac.bn,
           "compile_s": round(time.time() - t, 2)}
    ps = ptxas_stats(ptx)
    out.update(ps)
    if "error" not in ps:
        warps = tac.threads // 32
        blocks = occupancy(ps["regs"], ps["smem"], warps)
        out.update(threads=tac.threads, blocks_per_sm=blocks, warps_per_sm=blocks * warps,
                   mma_per_warp_stage=4 * tac.tpw * tac.mtw)
    return out


def cuda_core_stats(K: int = 4096):
    """One line per M tile of the CUDA-core 2-bit (block 64) and 8-bit (block 128) GEMVs at ``K``: the
    ptxas figures, the row's 16-byte chunks, the A tile (chunks staged per pass), its shared memory
    and the resident blocks per SM."""
    _fake_device()
    from numba_nbits.kernels.gemv import core, w2, w8
    from numba_nbits.kernels.gemv.core_source import Spec, kernel_for

    for mod, bits, bs in ((w2, 2, 64), (w8, 8, 128)):
        for mt, (r, u, warps) in mod.SHAPES.items():
            row_bytes = K * bits // 8
            cb = core.chunk_bytes_for(row_bytes)
            spec = Spec(act="float16", bits=bits, block_size=bs, zp_kind="none", chunk_bytes=cb, mt=mt, r=r,
                           u=max(1, min(u, -(-(row_bytes // cb) // 32))), warps=warps)
            t = time.time()
            st = ptxas_stats(_kernel_ptx(kernel_for(spec)))
            tile = core.tile_chunks_for(row_bytes // cb, mt, spec.pad)
            smem = mt * tile * spec.pad * 4
            print(spec.name, st, f"row_chunks={row_bytes // cb} tile={tile} smem={smem}",
                  f"blocks/SM={occupancy(st.get('regs', 0), smem, warps)}", f"{time.time() - t:.1f}s", flush=True)


def main(argv):
    if "--help" in argv or "-h" in argv:
        print(__doc__)
        return
    if "--cuda-core" in argv:
        cuda_core_stats()
        return
    if "--mixed" in argv:
        from numba_nbits.kernels import mixed_gemm as MG

        for bits in (4, 8):
            for name in MG.TACTICS:
                try:
                    s = mixed_stats(name, bits)
                except Exception as e:  # noqa: BLE001
                    s = {"tactic": name, "bits": bits, "error": f"{type(e).__name__}: {e}"[:200]}
                print(" ".join(f"{k}={v}" for k, v in s.items()), flush=True)
        return
    specs = []
    if "--sweep" in argv:
        from benchmarks import sweep_gemv_m1 as S

        S.BITS = int(argv[argv.index("--bits") + 1]) if "--bits" in argv else 4
        specs = [(tag, bs, MT, dt, S.BITS) for (dt, MT, bs, tag) in sorted(S.plan_specs(False))]
    dump_dir = argv[argv.index("--dump") + 1] if "--dump" in argv else None
    for i, a in enumerate(argv):
        if a.startswith("--") or (i and argv[i - 1] in ("--bits", "--dump")):
            continue
        p = a.split(",")
        dt = {"f16": "float16", "bf16": "bfloat16"}.get(p[3] if len(p) > 3 else "f16", "float16")
        specs.append((p[0], int(p[1]), int(p[2]), dt, int(p[4]) if len(p) > 4 else 4))
    for tag, bs, MT, dt, bits in specs:
        try:
            s = stats(tag, bs, MT, dt, bits, "--sass" in argv, "--k-tail" not in argv, dump_dir)
        except Exception as e:  # noqa: BLE001
            s = {"tag": tag, "bits": bits, "bs": bs, "MT": MT, "dtype": dt, "error": f"{type(e).__name__}: {e}"[:200]}
        print(" ".join(f"{k}={v}" for k, v in s.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
