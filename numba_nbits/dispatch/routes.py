"""The spec's CUDA dispatch chain as data: ordered routes, each a list of named guards.

Order (spec §4): fpA_intB mixed GEMM (``fpa_intb``: when enabled and eligible, spec §7.2 "full
build"; its plan picks a tactic per M bucket with ``dispatch/profiler.py``) → the fused GEMV family
(``TryMatMulNBits``: router, 4-bit, 8-bit, 2-bit; skipped with g_idx or typed zero points) → the same
GEMVs again without bias plus the bias-add kernel (ORT's "retry without bias") → dequantize +
cuBLAS, chunked along N or whole.

One route is ours, not the spec's: ``fused_gemm`` (``kernels/gemv/small_gemm.py``), between the GEMVs and
dequantize + cuBLAS, serves M = 17..64 (and 2-bit M = 9..16; on sm_90, wide 4-bit weights of blocks 32/64/128 to
M = 256, 8-bit block 128 to M = 128: ``fused_gemm_m``) with the fused tensor-core kernels, 1.2-4.3x faster than the
dequantize + cuBLAS it replaces there on the H200. ``numba_nbits.fused_gemm`` /
``NUMBA_NBITS_FUSED_GEMM=0`` removes it: the chain is then ORT's exactly. The router GEMV's gate is ORT's (32 x 2880)
widened to small-N gates (``router_shape``: N <= 256, K <= 8192; ``numba_nbits.router_small_n``), which the same switch
(or ``NUMBA_NBITS_ROUTER_SMALL_N=0``) narrows back. Each guard is a pure predicate over ``(Problem, Config)`` with the
text that explains it; ``select.py`` walks this table, the README's route table and
``python -m numba_nbits.explain`` print it, and the CPU-only tests assert it.

A route's ``bias`` says how a bias input is served: ``"fused"`` (the kernel adds it), ``"add"``
(the route runs bias-less and the fp32 bias-add kernel follows, as ORT's retry does).

Decided quirks (spec §4.1 step 6, §2.4):
* 4-bit M=1 with a block size outside {16, 32, 64, 128} (e.g. 256): ORT throws "block size X is not
  supported"; we fall back to dequantize + cuBLAS instead, because the operator schema allows
  block 256 and a correct answer is better than an error.
* typed zero points with g_idx: ORT's CUDA dequantize ignores g_idx; we honour g_idx (the
  operator's definition and the oracle's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import Config
from ..formats import FORMATS, quant_format
from .problem import Problem


@dataclass(frozen=True)
class Guard:
    name: str
    text: str  # reads like the spec: "N % 8 == 0"
    pred: Callable[[Problem, Config], bool]

    def __call__(self, p: Problem, c: Config) -> bool:
        return bool(self.pred(p, c))


@dataclass(frozen=True)
class Route:
    name: str
    family: str  # module under numba_nbits.kernels that builds the plan
    guards: tuple
    bias: str  # "fused" | "add"
    summary: str

    def first_failure(self, p: Problem, c: Config):
        for g in self.guards:
            if not g(p, c):
                return g
        return None


def G(name, text, pred) -> Guard:
    return Guard(name, text, pred)


# ------------------------------------------------------------------------------------- guards
no_g_idx = G("no_g_idx", "no g_idx (g_idx disables every fused path)", lambda p, c: not p.has_g_idx)
zp_not_typed = G("zp_not_typed", "zero_points absent or uint8 (typed zero points skip fused paths)",
                 lambda p, c: p.zero_points != "typed")
n_mult_8 = G("n_mult_8", "N % 8 == 0", lambda p, c: p.N % 8 == 0)
k_mult_8 = G("k_mult_8", "K % 8 == 0", lambda p, c: p.K % 8 == 0)
k_mult_16 = G("k_mult_16", "K % 16 == 0", lambda p, c: p.K % 16 == 0)
k_mult_block = G("k_mult_block", "K % block_size == 0", lambda p, c: p.K % p.block_size == 0)
m_positive = G("m_positive", "M >= 1", lambda p, c: p.M >= 1)


def bits_is(b):
    return G(f"bits_{b}", f"bits == {b}", lambda p, c: p.bits == b)


def m_at_most(m):
    return G(f"m_le_{m}", f"M <= {m}", lambda p, c: p.M <= m)


def block_in(sizes):
    s = tuple(sorted(sizes))
    return G("block_in_" + "_".join(map(str, s)), f"block_size in {{{', '.join(map(str, s))}}}",
             lambda p, c: p.block_size in s)


#: (N, K) shapes served by the router GEMV (spec §5: gpt-oss-20b's router). Add a shape here.
ROUTER_SHAPES = frozenset({(32, 2880)})
#: the small-N gates the router GEMV also serves (ours, not ORT's gate: ``numba_nbits.router_small_n``, on by default,
#: and ``numba_nbits.fused_gemm``): N <= 256 rows of K <= 8192 (DeepSeek-V3's 256 x 7168 router, small MoE gates)
ROUTER_SMALL_N_MAX_N = 256
ROUTER_SMALL_N_MAX_K = 8192


def _router_shape(p: Problem, c: Config) -> bool:
    if (p.N, p.K) in ROUTER_SHAPES:
        return True
    return c.router_small_n and c.fused_gemm and p.N <= ROUTER_SMALL_N_MAX_N and p.K <= ROUTER_SMALL_N_MAX_K


router_shape = G("router_shape", f"(N, K) in ROUTER_SHAPES {{(32, 2880)}}, or N <= {ROUTER_SMALL_N_MAX_N} and "
                 f"K <= {ROUTER_SMALL_N_MAX_K} with numba_nbits.router_small_n / NUMBA_NBITS_ROUTER_SMALL_N and "
                 "numba_nbits.fused_gemm on (default)", _router_shape)
router_enabled = G("router_enabled", "ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION unset/0",
                   lambda p, c: not c.disable_router_gemv)
no_zero_points = G("no_zero_points", "no zero_points input", lambda p, c: p.zero_points == "none")
m_is_one = G("m_is_1", "M == 1", lambda p, c: p.M == 1)


def _smem_gate_w4(p: Problem, c: Config) -> bool:
    # TryMatMul4Bits' shared-memory gate: scales (and packed zp) of 8 columns must fit in a block.
    kb = p.K // p.block_size if p.K % p.block_size == 0 else p.k_blocks
    need = p.itemsize * kb * 8 + ((kb + 1) // 2 * 8 * 2 if p.zero_points == "packed" else 0)
    return need <= p.smem_per_block


smem_gate_w4 = G("smem_gate_w4", "sizeof(T)*k_blocks*8 (+ packed zp bytes) <= sharedMemPerBlock", _smem_gate_w4)


def _smem_gate_w8(p: Problem, c: Config) -> bool:
    kb = p.k_blocks
    need = (p.itemsize + (1 if p.zero_points == "packed" else 0)) * kb * 8 + 8 * 4
    return need <= p.smem_per_block


smem_gate_w8 = G("smem_gate_w8", "(sizeof(T) + zp) * k_blocks * 8 + reduce storage <= sharedMemPerBlock",
                 _smem_gate_w8)
def _m_w8(p: Problem, c: Config) -> bool:
    return p.M <= 5 or (p.M <= 16 and p.dtype in ("float16", "bfloat16") and p.block_size in (16, 32, 64, 128))


#: spec §4.2 allows M <= 5; the tensor-core GEMV (fp16/bf16, block <= 128) is flat to M = 16
#: (benchmarks/results/2026-11-30-h200-gemv-lowbit-sweep) and beats the dequantize + cuBLAS route there, so it
#: takes M 6..16
m_w8 = G("m_w8", "M <= 5, or M <= 16 with fp16/bf16 A and block_size <= 128 (tensor-core GEMV)", _m_w8)
block_divides_256 = G("block_divides_256", "256 % block_size == 0", lambda p, c: 256 % p.block_size == 0)
block_divides_512 = G("block_divides_512", "512 % block_size == 0", lambda p, c: 512 % p.block_size == 0)
fp16_sm53 = G("fp16_sm53", "fp16 needs sm >= 53", lambda p, c: p.dtype != "float16" or p.sm >= 53)


def _chunked(p: Problem, c: Config) -> bool:
    big = p.N * p.K_padded * p.itemsize > c.scratch_limit_bytes and p.N > 2 * c.chunk_size
    return c.force_chunked or big


chunk_rule = G("chunk_rule", "ORT_MATMULNBITS_FORCE_CHUNKED != 0 or (N*K_padded*sizeof(T) > 256 MiB and "
               "N > 2*ORT_MATMULNBITS_CHUNK_SIZE)", _chunked)
always = G("always", "always (the universal route)", lambda p, c: True)

FUSED = (no_g_idx, zp_not_typed, n_mult_8, k_mult_8)

# ------------------------------------------------------------- fused small GEMM (ours, not ORT's chain)
fused_gemm_enabled = G("fused_gemm_enabled", "numba_nbits.fused_gemm / NUMBA_NBITS_FUSED_GEMM on (default)",
                       lambda p, c: c.fused_gemm)
tensor_core_dtype = G("fp16_or_bf16", "dtype is float16 or bfloat16 (tensor cores)",
                      lambda p, c: p.dtype in ("float16", "bfloat16"))
bits_2_4_8 = G("bits_in_2_4_8", "bits in {2, 4, 8}", lambda p, c: p.bits in (2, 4, 8))
#: the largest M the fused small GEMM serves (``kernels.gemv.tactics.MAX_M``; a guard test checks they agree),
#: and to ``FUSED_GEMM_WIDE_MAX_M`` (``tactics.WG_MAX_M``) where its warpgroup kernel has a measured tactic
FUSED_GEMM_MAX_M = 64
FUSED_GEMM_WIDE_MAX_M = 256


def _fused_gemm_m(p: Problem, c: Config) -> bool:
    if p.M <= FUSED_GEMM_MAX_M:
        return True
    # the kernel package (imported on first use: importing routes compiles nothing)
    from ..kernels.gemv.tactics import wide_serves

    return p.M <= FUSED_GEMM_WIDE_MAX_M and wide_serves(p)


fused_gemm_m = G("fused_gemm_m", f"M <= {FUSED_GEMM_MAX_M}, or M <= {FUSED_GEMM_WIDE_MAX_M} where the warpgroup "
                 "kernels serve it (kernels.gemv.tactics.wide_serves: sm_90, 4-bit blocks 32/64/128, "
                 "N >= 12288; M <= 128 on 8192..12287 rows, M <= 96 on 4096..8191 rows with K >= 12288; "
                 "8-bit block 128: M <= 128 on N >= 24576)", _fused_gemm_m)

# ------------------------------------------- overlapped dequantize + cuBLAS (ours, not ORT's chain)
dequant_overlap_enabled = G("dequant_overlap_enabled",
                            "numba_nbits.dequant_overlap / NUMBA_NBITS_DEQUANT_OVERLAP on (default)",
                            lambda p, c: c.dequant_overlap)
#: the overlapped route's size rule (``kernels.dequant_overlap``): M past the fused kernels, N of two chunks or more,
#: and an output of at least ``OVERLAP_MIN_MN`` elements, so each of the four chunk GEMMs still has ~128 or more
#: 128x128 tiles. Fitted to ``benchmarks/results/2026-12-05-h100-callB`` (H100, 5 shapes, M = 256 / 1024 / 4096):
#: where M * N was 2**23 or more the route beat ORT's chain by x1.10-1.16 (28672x8192, 8192x28672, 14336x4096 at
#: M = 1024) or tied it within the run's noise (x0.96-1.08); below, it lost (x0.88-0.95: 8192x28672 and 4096x14336 at
#: M = 256, 4096x14336 at M = 1024)
OVERLAP_MIN_M = 65
OVERLAP_MIN_N = 2048
OVERLAP_MIN_MN = 1 << 23


def _overlap_size(p: Problem, c: Config) -> bool:
    return p.M >= OVERLAP_MIN_M and p.N >= OVERLAP_MIN_N and p.M * p.N >= OVERLAP_MIN_MN


overlap_size = G("overlap_size", f"M >= {OVERLAP_MIN_M}, N >= {OVERLAP_MIN_N} and M * N >= 2**23 (each of the "
                 "chunk GEMMs fills the GPU)", _overlap_size)

# ------------------------------------------------------------------- fpA_intB (spec §7.2, full build)
fpa_dtype = G("fpa_dtype", "dtype is float16 or bfloat16 (fp32 never)", lambda p, c: p.dtype in ("float16", "bfloat16"))
fpa_enabled = G("fpa_enabled", "weight_prepacked != 0 or ORT_FPA_INTB_GEMM / ep.cuda.fpa_intb_gemm on",
                lambda p, c: p.weight_prepacked != 0 or c.fpa_intb_gemm)
bits_4_or_8 = G("bits_in_4_8", "bits in {4, 8}", lambda p, c: p.bits in (4, 8))
#: the fpA_intB route's N alignment per format (spec §7.2): N % FPA_N_ALIGN[format] == 0
FPA_N_ALIGN = {FORMATS[4]: 64, FORMATS[8]: 32}


def _fpa_n_align(p: Problem, c: Config) -> bool:
    align = FPA_N_ALIGN.get(quant_format(p.bits))  # None: a bit width the route does not serve
    return align is not None and p.N % align == 0


fpa_n_align = G("fpa_n_align", "N % (bits == 8 ? 32 : 64) == 0", _fpa_n_align)
sm_75 = G("sm_75", "device sm >= 75", lambda p, c: p.sm >= 75)
fpa_sm90_layout = G("fpa_sm90_layout", "weight_prepacked == 2 needs sm == 90 and block_size in {64, 128}",
                    lambda p, c: p.weight_prepacked != 2 or (p.sm == 90 and p.block_size in (64, 128)))


def _fpa_kernel_supports(p: Problem, c: Config) -> bool:
    # the family's kernel check (fpa_intb.FAMILY.supports is this function); imported on first use, so
    # importing routes compiles nothing, and from the kernel package, which does not import dispatch
    from ..kernels.mixed_gemm import supports

    return supports(p)


fpa_kernel = G("fpa_kernel_available", "kernel available: kernels.mixed_gemm.supports(problem)", _fpa_kernel_supports)

FPA_INTB_GUARDS = (fpa_dtype, fpa_enabled, block_in({32, 64, 128}), bits_4_or_8, no_g_idx, fpa_n_align, k_mult_block,
                   sm_75, fpa_sm90_layout, fpa_kernel)
#: guards a forced route skips: forcing fpa_intb is its enable switch; forcing chunked or overlapped needs no size rule
FORCE_SKIPS = frozenset({"fpa_enabled", "chunk_rule", "overlap_size"})

# -------------------------------------------------------------------------------------- table
ROUTES: tuple = (
    Route("fpa_intb", "fpa_intb", FPA_INTB_GUARDS,
          "fused", "fpA_intB mixed GEMM (tensor cores), tactic profiled per M bucket (spec §7)"),
    Route("router_gemv", "router", FUSED + (bits_is(4), no_zero_points, m_is_one, block_in({32, 64}), k_mult_block,
                                            router_shape, router_enabled),
          "fused", "4-bit MoE-router GEMV, bias fused (spec §5; small-N gates N <= 256, K <= 8192 are ours, not "
                   "ORT's gate: NUMBA_NBITS_ROUTER_SMALL_N=0 or NUMBA_NBITS_FUSED_GEMM=0 turns them off)"),
    Route("gemv_w4", "gemv_w4", FUSED + (bits_is(4), m_positive, m_at_most(16), block_in({16, 32, 64, 128}),
                                         smem_gate_w4),
          "add", "4-bit fused GEMV, M = 1..16 (spec §4.1); tensor cores for fp16/bf16"),
    Route("gemv_w8", "gemv_w8", FUSED + (bits_is(8), m_positive, m_w8, block_divides_256, k_mult_block,
                                         smem_gate_w8),
          "add", "8-bit fused GEMV, M = 1..5 (spec §4.2); tensor cores for fp16/bf16, block <= 128, M <= 16"),
    Route("gemv_w2", "gemv_w2", FUSED + (bits_is(2), m_positive, m_at_most(8), k_mult_16, block_divides_512,
                                         k_mult_block, fp16_sm53),
          "add", "2-bit fused GEMV, M = 1..8 (spec §4.3); tensor cores for fp16/bf16, block <= 128"),
    Route("fused_gemm", "fused_gemm", FUSED + (fused_gemm_enabled, tensor_core_dtype, bits_2_4_8, m_positive,
                                               fused_gemm_m, block_in({16, 32, 64, 128})),
          "add", "fused tensor-core small GEMM, M <= 64 past the GEMVs, M <= 256 on wide 4-bit weights "
                 "(blocks 32/64/128; 8-bit block 128: M <= 128) on sm_90 (ours, not ORT's chain; "
                 "NUMBA_NBITS_FUSED_GEMM=0 turns it off)"),
    Route("dequant_overlap", "dequant_overlap", (fused_gemm_enabled, dequant_overlap_enabled, overlap_size),
          "add", "dequantize N-chunks on a side stream while cuBLAS multiplies the previous chunk (ours, not ORT's "
                 "chain; NUMBA_NBITS_DEQUANT_OVERLAP=0 or NUMBA_NBITS_FUSED_GEMM=0 turns it off)"),
    Route("dequant_cublas_chunked", "dequant", (no_g_idx, chunk_rule),
          "add", "dequantize N-chunks into scratch + cuBLAS GEMM per chunk (spec §6)"),
    Route("dequant_cublas", "dequant", (always,),
          "add", "dequantize into an N x K_padded scratch + cuBLAS GEMM (spec §6)"),
)

ROUTE_NAMES = tuple(r.name for r in ROUTES)


def route_named(name: str) -> Route:
    for r in ROUTES:
        if r.name == name:
            return r
    raise ValueError(f"unknown route {name!r}; routes are {', '.join(ROUTE_NAMES)}")
