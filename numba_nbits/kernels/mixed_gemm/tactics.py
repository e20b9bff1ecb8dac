"""What the mixed GEMM serves and how it tiles the output: ``supports``, ``Tactic`` / ``TACTICS``, split-K.

A block has ``WN x WM`` warps; warp ``(wn, wm)`` computes ``16*TPW`` weight rows by ``8*MTW``
activation rows, so the block tile is ``BN = 16*TPW*WN`` by ``BM = 8*MTW*WM``; the grid is
``ceil(N / BN) x ceil(M / BM) x splits``. ``default_tactic(M)`` picks the tile by M; the fpA_intB
profiler times every ``TACTICS`` entry per M bucket on a GPU.

Split-K tactics (``splitk != 1``; grid z = splits, see ``split_count``): block ``z`` runs its own
range of 64-k stages (whole quantization blocks), stores its fp32 tile into its own slice of an fp32
``splits x M x N`` workspace, fences, and bumps the tile's arrival counter; the last block to arrive
sums the slices in split order (0, 1, ...; ``ld.global.cg`` reads, through L2), resets the counter for
the next launch, adds the bias and stores Y. The contract is unchanged (fp32 block sums scaled in
fp32, Y rounded once), and the result is bitwise the same whichever split finishes last. Workspace
and counters belong to the plan: one plan must not run on two streams at once. A plan whose problem
leaves nothing to split (``split_count`` -> 1) uses the plain kernel.

The kernel's needs (``supports``): 4- or 8-bit codes, fp16/bf16 A, block size 32/64/128, no g_idx,
``N % 16 == 0`` and ``K % block_size == 0``. The spec's route guards are stricter (N % 64 for 4-bit,
N % 32 for 8-bit); ``supports`` accepts every problem they accept.
"""
from __future__ import annotations

from dataclasses import dataclass

from .layout import BITS, BLOCK_SIZES

ROUTE = "mixed_gemm"


@dataclass(frozen=True)
class Tactic:
    name: str
    wn: int  # warps along N
    wm: int  # warps along M
    tpw: int  # 16-row weight tiles per warp
    mtw: int  # 8-row activation tiles per warp
    splitk: int = 1  # K splits (grid z): 1 = none, 0 = chosen per problem by ``split_count``
    wpre: int = 1  # 64-k stages of weights loaded ahead of the MMAs (1 or 2; 2: twice the weight registers)

    def __post_init__(self):
        if self.wpre not in (1, 2) or self.splitk < 0:
            raise ValueError(f"Tactic {self.name}: wpre must be 1 or 2 and splitk >= 0, got {self.wpre}, {self.splitk}")

    @property
    def bm(self) -> int:
        return 8 * self.mtw * self.wm

    @property
    def bn(self) -> int:
        return 16 * self.tpw * self.wn

    @property
    def threads(self) -> int:
        return 32 * self.wn * self.wm



TACTICS = {
    t.name: t for t in (
        Tactic("m16", wn=4, wm=1, tpw=2, mtw=2),  # BM 16, BN 128
        Tactic("m32", wn=4, wm=2, tpw=2, mtw=2),  # BM 32, BN 128
        Tactic("m64", wn=2, wm=2, tpw=2, mtw=4),  # BM 64, BN 64
        Tactic("m128", wn=2, wm=4, tpw=2, mtw=4),  # BM 128, BN 64
        # Candidates for the profiler (not in default_tactic). Small M starves the GPU of blocks
        # (4096x4096 M=16 is 32 blocks of m16 for 132 SMs, each streaming all of K; measured in
        # benchmarks/results/2026-11-30-h200-kernels): split-K multiplies the blocks (``split_count``);
        # "m64w" doubles BN of m64 (8 warps, half the activation re-reads per weight byte, twice the
        # warps to hide latency).
        Tactic("m16sk", wn=4, wm=1, tpw=2, mtw=2, splitk=0),
        Tactic("m32sk", wn=4, wm=2, tpw=2, mtw=2, splitk=0),
        Tactic("m64sk", wn=2, wm=2, tpw=2, mtw=4, splitk=0),
        Tactic("m64w", wn=4, wm=2, tpw=2, mtw=4),  # BM 64, BN 128
        # two weight stages in flight (the kernel is latency-bound: one 16-byte load per lane per
        # tile per stage, consumed right after one stage of MMAs)
        Tactic("m16skp2", wn=4, wm=1, tpw=2, mtw=2, splitk=0, wpre=2),
        Tactic("m64p2", wn=2, wm=2, tpw=2, mtw=4, wpre=2),
    )
}

SMS = 132  # SMs of the target GPU (H200): split-K aims at SPLIT_WAVES blocks per SM
SPLIT_WAVES = 4
MIN_SPLIT_STAGES = 4  # each split streams at least 4 64-k stages (256 k)


def split_count(tac: Tactic, blocks: int, n_st: int, block_size: int) -> tuple[int, int]:
    """(number of K splits, 64-k stages per split) for ``blocks`` output tiles and ``n_st`` stages.

    ``tac.splitk`` 1: no split; > 1: that many (at most one per stage); 0 (auto): enough for
    ``SPLIT_WAVES * SMS`` blocks, with at least ``MIN_SPLIT_STAGES`` stages per split. Splits hold a
    whole number of quantization blocks (block 128 spans two stages), so no block's partial sum
    straddles two splits.
    """
    if tac.splitk == 1:
        return 1, max(n_st, 1)
    if tac.splitk > 1:
        want = min(tac.splitk, n_st)
    else:
        want = min(-(-SPLIT_WAVES * SMS // max(blocks, 1)), n_st // MIN_SPLIT_STAGES)
    want = max(1, want)
    align = max(1, block_size // 64)
    sps = -(-n_st // want)
    sps = -(-sps // align) * align
    return -(-n_st // sps), sps


def default_tactic(M: int) -> Tactic:
    for name, lim in (("m16", 16), ("m32", 32), ("m64", 64)):
        if M <= lim:
            return TACTICS[name]
    return TACTICS["m128"]


def supports(problem) -> bool:
    p = problem
    return (p.bits in BITS and p.dtype in ("float16", "bfloat16") and p.M >= 1 and p.block_size in BLOCK_SIZES
            and not p.has_g_idx and p.N % 16 == 0 and p.K % p.block_size == 0 and p.K > 0 and p.N > 0)
