"""A first fused 4-bit GEMM on Hopper's warpgroup tensor cores (``wgmma``), M = 17 and up: the prototype of
the Hopper kernel family (issue: weight-only GEMM at hardware speed), correct on the simulator, not yet
run on a GPU, and on no route: ``run_hopper_gemm`` is called directly (tests, benchmarks).

Math: ``Yᵀ = W · Aᵀ``. The weights are the register A operand of ``wgmma.mma_async.m64nMTk16`` (64 weight
rows per warpgroup: warp ``w`` owns the 16-row tile ``4 * blockIdx.x + w``), the activations its shared-memory
B operand (``MT`` token rows per block, K-major, no swizzle), fp32 accumulators.

* Weights: the tensor-core GEMV's packed layout (``gemv/layout.py``, built on the device by
  ``gemv/repack.py``): per 16-row tile and 64-k chunk each lane holds, in 4 words, the codes of its
  ``mma.m16n8k16`` A fragments, and a warp of the warpgroup has the same A fragment layout as that
  ``mma`` (PTX ISA, wgmma register fragments). Decode of fragment register ``r`` of a word: ``(word >> 4r)
  & 0x000F000F | magic`` is ``magic + q`` in both halves exactly (fp16 ``0x6400``: 1024 + q; bf16
  ``0x4300``: 128 + q), one packed FMA subtracts ``magic + 8`` (the default zero point; exact), one packed
  FMA times the block's scale rounds once: the weight in the MMA dtype.
* Activations: per super-chunk of ``KS`` k (``layout.geometry``) the block copies its ``MT x KS`` values
  to shared memory as ``KS / 16`` step regions of ``MT x 16`` (one wgmma each), each region ``MT / 8`` x 2
  core matrices (8 rows x 16 bytes; k blocks 128 bytes apart: ``LBO``; row blocks 256: ``SBO``). The
  layout's k permutation (``layout.py``: logical fragment columns ``2t, 2t + 1, 2t + 8, 2t + 9`` of a step
  are 4 consecutive physical k) is applied here: 4 consecutive k of one token go to logical columns
  ``2t, 2t + 1`` (k block 0) and ``2t + 8, 2t + 9`` (k block 1), so A and B agree on every k.
  The copy is fenced to the async proxy (``fence.proxy.async``) and a barrier precedes the MMAs. Two
  buffers alternate: the super-chunk's ``KS / 16`` MMAs on one are issued back to back (``mma_async``),
  then the block copies the next super-chunk into the other while they run, fences, waits for the MMAs
  (``wgmma_wait``) and meets at a barrier (the buffer just read is the next copy's target). A lane's codes
  of a 64-k chunk are one 16-byte load (``ldg_v4``); ptxas reports no serialisation of the MMAs.
* Epilogue: accumulator ``(n, m)`` of the fragment map (``intrinsics_sm90.d_fragment_positions``) to
  ``Y[m0 + m, n0 + n]`` (+ bias in fp32), rounded once to the output dtype; rows past M or N are not stored.

Not yet (the next steps of the family): the multi-stage mbarrier/TMA pipeline with producer and consumer
warpgroups, cp.async / TMA copies, 128-row tiles, split-K, zero points, 2/8-bit.
Guards (``unmet``): 4-bit, fp16/bf16, no zero points, no g_idx, block 32/64/128, K % 8 == 0, N % 8 == 0.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ..arrays import device_empty
from ..launch import Kernel
from . import intrinsics as _I
from . import intrinsics_sm90 as _W
from .codegen import load_source
from .dtypes import LOADS, STORES, array_type
from .gemv.layout import geometry
from .gemv.repack import prepack

BITS = 4
BLOCK_SIZES = (32, 64, 128)
M_TILES = (8, 16, 32, 64)
THREADS = 128  # one warpgroup
LBO, SBO = 128, 256  # bytes between a step region's k blocks and between its 8-row blocks
MAGIC = {"float16": 0x6400, "bfloat16": 0x4300}  # 1024 + q / 128 + q, exact for 4-bit q
NEG_MAGIC_ZP8 = {"float16": 0xE408, "bfloat16": 0xC308}  # -(1024 + 8) in fp16, -(128 + 8) in bf16
ONE = {"float16": 0x3C00, "bfloat16": 0x3F80}


def unmet(problem):
    """What of this prototype's guards ``problem`` fails (messages; none: supported)."""
    p = problem
    if p.bits != BITS:
        yield f"bits={p.bits}, needs {BITS}"
    if p.act_dtype not in MAGIC:
        yield f"A dtype {p.act_dtype} not fp16/bf16"
    if p.zero_points != "none":
        yield "zero points are not supported yet"
    if p.has_g_idx:
        yield "g_idx is not supported by fused kernels"
    if p.block_size not in BLOCK_SIZES:
        yield f"block_size={p.block_size} not in {BLOCK_SIZES}"
    if p.K % 8 or p.N % 8:
        yield f"N={p.N}, K={p.K} must be multiples of 8"


def m_tile(M: int) -> int:
    """Token rows per block: the smallest tile of ``M_TILES`` that holds M, else the largest."""
    return next((t for t in M_TILES if t >= M), M_TILES[-1])


def generate_source(act: str, MT: int, bs: int) -> str:
    """Python source of one specialisation (act dtype, token tile ``MT``, block size ``bs``)."""
    ks = max(64, bs)
    kg = min(bs, 64)
    sg = kg // 16
    steps = ks // 16
    nvec = ks // 64
    bps = ks // bs
    region = MT * 32  # bytes of one step region (MT rows x 16 k x 2 bytes)
    quads = MT * ks // 4  # 4-k groups of the super-chunk's activation tile
    # tuple displays of more than 30 items compile to list appends, which numba's bytecode pass rejects here
    acc0 = " + ".join("(" + ", ".join(["z"] * min(16, MT // 2)) + ")" for _ in range(max(1, MT // 32)))
    buf = steps * region  # bytes of one activation buffer; two of them alternate

    def copy(ind: str, sc_expr: str, buf_expr: str) -> list:
        """The block's copy of super-chunk ``sc_expr``'s activations into the buffer at byte ``buf_expr``."""
        return [f"{ind}i = t",
                f"{ind}while i < {quads}:",
                f"{ind}    mm = i // {ks // 4}",
                f"{ind}    kq = (i - mm * {ks // 4}) * 4",
                f"{ind}    c = kq >> 6",
                f"{ind}    r = kq & 63",
                f"{ind}    gam = r // {kg}",
                f"{ind}    r2 = r - gam * {kg}",
                f"{ind}    tt = r2 // {4 * sg}",
                f"{ind}    sig = (r2 - tt * {4 * sg}) >> 2",
                f"{ind}    s = c * 4 + gam * {sg} + sig",
                f"{ind}    k = ({sc_expr}) * {ks} + kq",
                f"{ind}    m = m0 + mm",
                f"{ind}    w0 = uint32(0)",
                f"{ind}    w1 = uint32(0)",
                f"{ind}    if m < M and k < K:  # K % 8 == 0: the whole quad is inside the row",
                f"{ind}        w0 = a[m * kw + (k >> 1)]",
                f"{ind}        w1 = a[m * kw + (k >> 1) + 1]",
                f"{ind}    off = (({buf_expr}) + s * {region} + (mm >> 3) * {SBO} + (mm & 7) * 16 + tt * 4) >> 2",
                f"{ind}    sm[off] = w0",
                f"{ind}    sm[off + {LBO // 4}] = w1",
                f"{ind}    i += {THREADS}"]

    L = ["def hopper_gemm(bq, scales, a, y, bias, M, N, K, n_super, has_bias):",
         "    t = cuda.threadIdx.x",
         "    lane = t & 31",
         "    g = lane >> 2",
         "    tq = lane & 3",
         "    tile = cuda.blockIdx.x * 4 + (t >> 5)",
         f"    m0 = cuda.blockIdx.y * {MT}",
         "    n_tiles = (N + 15) // 16",
         f"    sm = cuda.shared.array({2 * buf // 4}, uint32)",
         "    z = float32(0.0)",
         f"    acc = {acc0}",
         "    kw = K // 2  # A row in uint32 words",
         "    live = tile < n_tiles"]
    L += copy("    ", "0", "0")
    L += ["    fence_proxy_async()",
          "    cuda.syncthreads()",
          "    for sc in range(n_super):",
          f"        cur = (sc & 1) * {buf}",
          "        sbase = ((tile * n_super + sc) * 8 + g) * 2"]
    for s in range(steps):
        c_local, q = divmod(s, 4)
        gam = q // sg
        bb = (64 * c_local + gam * kg) // bs
        if q == 0:  # the lane's 16 bytes of this 64-k chunk: the codes of its 4 steps
            L += ["        if live:",
                  f"            v = ldg_v4(bq, ((tile * n_super + sc) * {nvec} + {c_local}) * 32 + lane)",
                  "        else:",
                  "            v = (uint32(0), uint32(0), uint32(0), uint32(0))"]
        L += [f"        # step {s}: chunk {c_local}, block {bb} of the super-chunk",
              f"        wd = v[{q}]",
              f"        s0 = uint32(scales[(sbase + 0) * {bps} + {bb}]) if live else uint32(0)",
              f"        s8 = uint32(scales[(sbase + 1) * {bps} + {bb}]) if live else uint32(0)",
              "        s0 = s0 | (s0 << 16)",
              "        s8 = s8 | (s8 << 16)"]
        for rr in range(4):
            sc_ = "s8" if rr & 1 else "s0"
            L.append(f"        x{rr} = fma2(fma2(((wd >> {4 * rr}) & uint32(0x000F000F)) | MAGIC2, ONE2, NEG2), {sc_}, "
                     f"ZERO2)")
        L.append(f"        acc = mma(acc, x0, x1, x2, x3, smem_desc(sm, cur + {s * region}, {LBO}, {SBO}))")
    L += ["        if sc + 1 < n_super:  # the next super-chunk into the other buffer while the MMAs run"]
    L += copy("            ", "sc + 1", f"{buf} - cur")
    L += ["        fence_proxy_async()",
          "        acc = wgmma_wait(acc)  # this buffer read: the next iteration's copy may overwrite it",
          "        cuda.syncthreads()"]
    L += ["    n_lo = tile * 16 + g",
          "    if tile < n_tiles:"]
    for j in range(MT // 8):
        for e in range(4):
            dn, dm = (8 if e >= 2 else 0), (e & 1)
            L += [f"        m = m0 + {8 * j + dm} + 2 * tq",
                  f"        n = n_lo + {dn}",
                  "        if m < M and n < N:",
                  f"            v = acc[{4 * j + e}]",
                  "            if has_bias:",
                  "                v += ld(bias, n)",
                  "            st(y, m * N + n, v)"]
    return "\n".join(L) + "\n"


@lru_cache(maxsize=None)
def hopper_gemm_kernel(act: str, MT: int, bs: int) -> Kernel:
    from numba.cuda import types

    bf16 = act == "bfloat16"
    src = generate_source(act, MT, bs)
    ns = {"cuda": cuda, "uint32": np.uint32, "float32": np.float32, "ld": LOADS[act], "st": STORES[act],
          "fma2": _I.fma_bf16x2 if bf16 else _I.fma_f16x2, "mma": _W.wgmma(MT, bf16, sync=False),
          "wgmma_wait": _W.wgmma_wait_for(MT // 2), "ldg_v4": _I.ldg_v4,
          "smem_desc": _W.smem_desc, "fence_proxy_async": _W.fence_proxy_async,
          "MAGIC2": np.uint32(MAGIC[act] * 0x10001), "ONE2": np.uint32(ONE[act] * 0x10001),
          "NEG2": np.uint32(NEG_MAGIC_ZP8[act] * 0x10001), "ZERO2": np.uint32(0)}
    name = f"hopper_gemm_w4_{act}_mt{MT}_b{bs}"
    fn = load_source(name, src, ns)["hopper_gemm"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type("uint16"), array_type("uint32"), array_type(act), array_type(act),
                types.int64, types.int64, types.int64, types.int64, types.boolean)
    return Kernel(fn, argtypes, name=name, fastmath=False)


def run_hopper_gemm(weights, A, out=None, stream: int = 0):
    """``Y = A @ dequant(W).T (+ bias)`` for a ``Weights`` of this prototype's kind and a 2-D device A
    ``(M, K)``; returns Y (``out`` when given)."""
    w = weights
    M, K = A.shape
    if K != w.K:
        raise ValueError(f"hopper_gemm: A has K={K}, the weights K={w.K}")
    if w.bits != BITS or w.zp_kind != "none" or w.dtype not in MAGIC or w.block_size not in BLOCK_SIZES or K % 8:
        raise ValueError("hopper_gemm: needs 4-bit weights without zero points, fp16/bf16, block 32/64/128, "
                         "K % 8 == 0")
    pk = prepack(w)
    ks, _, n_super, _ = geometry(K, w.block_size, BITS)
    MT = m_tile(M)
    y = out if out is not None else device_empty((M, w.N), w.np_dtype, w.simulated)
    bias = w.bias if w.bias is not None else w.dummy(w.np_dtype)
    grid = (-(-pk.N_pad // 64), -(-M // MT))
    k = hopper_gemm_kernel(w.dtype, MT, w.block_size)
    k.bind(grid, THREADS, (pk.bq, pk.scales.view(np.uint16), A.flat().view(np.uint32), y.flat(), bias.flat(),
                           M, w.N, K, n_super, w.bias is not None)).launch(stream)
    return y

