"""Source generator of the ring variant of the tensor-core GEMV (``Tactic.ring = D``, optional ``grid``).

The plain kernel (``mma_source``) starts every work unit (one CTA: its tile group's K split over the
warps) with an empty pipeline, drains it at the end and finishes with a barrier, a reduction and a
store before the SM starts the next CTA. The ring kernel removes that per-unit fill and drain: each
warp walks a flat list of items (tile group, super-chunk) over all the tile groups its CTA owns,
items live in ``D`` static register slots (the loop body is unrolled ``D`` times, no rotation
copies), and the loads of the next ``D - 1`` items (weights and scale words) are issued before an
item is computed, also across tile-group boundaries: the cross-warp reduction of a group (double-
buffered shared memory, one barrier) happens while the next group's loads are in flight. With
``grid = g`` the launch has ``min(groups, g * SMs)`` CTAs that stride over the tile groups: one wave,
no tail. At block 32 a lane's two scale words are one 8-byte ``ldg_v2``. The wave tactic
(``tactics.wave_tactic``) and the tuned tables select it; the measurements that led to it are in
``benchmarks/results/2026-11-30-h200-gemv-m1``.
"""
from __future__ import annotations

from .mma_source import (_CONST, L2PF_AHEAD, emit_block_mma, emit_head, emit_l2_prefetch, emit_load_act,
                         emit_position, emit_setup, emit_weight_loads, scale_bits_expr, sizes)


def gen_ring_source(act: str, m_tiles: int, tac, block_size: int, zp_kind: str, bits: int = 4,
                    l2pf: bool = False, kfull: bool = False) -> str:
    """The ring kernel (``tac.ring = depth`` >= 2; see "Ring kernel" in the module docstring).

    Each warp walks a flat list of work items (tile group, super-chunk): the CTA's tile groups
    ``blockIdx.x + q * gridDim.x`` (a persistent grid when ``tac.grid`` > 0), and within one group the
    super-chunks ``warp, warp + warps, ...`` (``per = ceil(n_super / warps)`` items per warp per group). Item
    ``j`` lives in register slot ``j % depth``; the loop body is unrolled ``depth`` times so the slots are static
    registers (no ring rotation copies): sub-step ``s`` first refills the slot computed by the previous
    sub-step with item ``j + depth - 1`` and then computes item ``j``, so ``depth - 1`` items (weights and scale
    words) are in flight per warp at all times, across tile-group boundaries too. When a warp finishes its
    last item of a group it writes its partial sums to one of two shared-memory buffers (parity of the
    group), one ``syncthreads``, and the CTA sums the warps' partials and stores Y: the loads already
    issued for the next group stay in flight through the barrier (no pipeline drain/refill per group, and
    no wave-quantised tail with a persistent grid)."""
    TPW, warps, depth = tac.tpw, tac.warps, tac.ring
    super_k, vectors, group_k, group_steps, super_blocks, block_steps, super_groups = \
        sizes(block_size, bits)
    c = _CONST[act]
    red_entries = TPW * m_tiles * 4 * 32  # partial sums per warp (shared-memory reduction)
    L, e = emit_head()
    e(1, "Z4 = (np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(0))")
    e(1, f"ngroups = (N + {16 * TPW - 1}) // {16 * TPW}")
    e(1, "G0 = np.int64(cuda.blockIdx.x)")
    e(1, "GS = np.int64(cuda.gridDim.x)")
    e(1, f"per = (n_super + {warps - 1}) // {warps}")
    e(1, "my_groups = (ngroups - G0 + GS - 1) // GS")
    e(1, f"red = cuda.shared.array({2 * warps * red_entries}, np.float32)")
    emit_setup(e, bits, c, zp_kind, TPW, m_tiles, group_steps, kfull)

    def locate(ind, cur):
        """Item of cursor ``cur`` (``l``: next to load, ``c``: next to compute): group ``{cur}gi`` of this
        CTA, item ``{cur}jj`` of this warp in it (no divisions: cursors advance by one item)."""
        e(ind, f"gi = {cur}gi")
        e(ind, f"jj = {cur}jj")
        e(ind, "tile0 = (G0 + gi * GS) * TPW")
        e(ind, f"scl = warp + jj * {warps}")

    def advance(ind, cur):
        e(ind, f"{cur}jj += 1")
        e(ind, f"if {cur}jj == per:")
        e(ind + 1, f"{cur}jj = np.int64(0)")
        e(ind + 1, f"{cur}gi += 1")

    def load_item(ind, slot):
        p = f"q{slot}"
        locate(ind, "l")
        e(ind, "if gi < my_groups and scl < n_super:")
        zeros = emit_weight_loads(e, ind + 1, p, "", TPW, vectors, super_blocks, zp_kind, True)
        if l2pf:
            emit_l2_prefetch(e, ind + 1, TPW, vectors, f"scl + {L2PF_AHEAD * warps}")
        e(ind, "else:")
        for suf, z in zeros:
            e(ind + 1, f"{p}{suf} = {z}")
        advance(ind, "l")

    def compute_item(ind, slot):
        p = f"q{slot}"
        locate(ind, "c")
        e(ind, "if gi < my_groups:")
        ind += 1
        e(ind, "if scl < n_super:")
        ind2 = ind + 1
        emit_load_act(e, ind2, "b", "scl", super_k, m_tiles, super_groups, group_k, group_steps, kfull)
        for i in range(TPW):
            for bb in range(super_blocks):
                emit_block_mma(e, ind2, i=i, bb=bb, m_tiles=m_tiles, block_steps=block_steps, group_steps=group_steps, c=c,
                                s_lo=scale_bits_expr(act, f"{p}sc_{i}_{bb >> 1}", bb & 1),
                                s_hi=scale_bits_expr(act, f"{p}sc_{i}_{(super_blocks + bb) >> 1}", (super_blocks + bb) & 1),
                                zp=(f"{p}zp_{i}_0_{bb}", f"{p}zp_{i}_1_{bb}") if zp_kind == "packed" else None,
                                word=lambda j, i=i: f"{p}_{i}_{j}", bits=bits)
        # end of this warp's items of the group: partials -> shared buffer (group parity), barrier, store
        e(ind, "if jj == per - 1:")
        ind2 = ind + 1
        e(ind2, f"rb = (gi & 1) * {warps * red_entries}")
        for i in range(TPW):
            for mt in range(m_tiles):
                for r in range(4):
                    e(ind2, f"red[rb + warp * {red_entries} + {((i * m_tiles + mt) * 4 + r) * 32} + lane] = acc_{i}_{mt}_{r}")
                    e(ind2, f"acc_{i}_{mt}_{r} = np.float32(0)")
        e(ind2, "cuda.syncthreads()")
        e(ind2, f"for ent in range(cuda.threadIdx.x, {red_entries}, {warps * 32}):")
        e(ind2 + 1, "tot = np.float32(0)")
        e(ind2 + 1, f"for ww in range({warps}):")
        e(ind2 + 2, f"tot += red[rb + ww * {red_entries} + ent]")
        emit_position(e, ind2 + 1, m_tiles)
        e(ind2 + 1, "if m < M and n < N:")
        e(ind2 + 2, "st(out, np.int64(m) * N + n, tot)")
        advance(ind - 1, "c")

    e(1, "lgi = np.int64(0)")
    e(1, "ljj = np.int64(0)")
    e(1, "cgi = np.int64(0)")
    e(1, "cjj = np.int64(0)")
    for s in range(depth - 1):
        load_item(1, s)
    e(1, "while cgi < my_groups:")
    for s in range(depth):
        load_item(2, (s + depth - 1) % depth)
        compute_item(2, s)
    return "\n".join(L) + "\n"
