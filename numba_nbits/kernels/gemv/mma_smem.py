"""The shared-memory pipeline of the tensor-core GEMV (``Tactic.smem``): pieces of ``mma_source.gen_source``.

The plain kernel's register pipeline keeps ``stages - 1`` stages in flight in registers: each stage costs
its weight vectors and scale words in registers, so deeper pipelines cost occupancy. With ``smem`` a
stage's bytes go to one of ``stages`` slots of a per-CTA shared-memory ring instead, copied there by
``cp.async`` (``intrinsics_async``): the registers hold only the stage being computed, and ``stages - 1``
stages stay in flight while it is (``stages`` while the warp waits). Each lane copies and later reads
only its own bytes, so the per-thread ``cp.async.wait_group stages - 1`` is the only synchronisation a slot
needs; a slot is refilled one iteration after it was computed, when the lane's shared loads of it have
been consumed.

Slot layout (bytes, per CTA of ``NT`` threads): fields one after another, each ``NT * width`` bytes with
thread ``tid`` at ``tid * width``; per super-chunk ``u`` of the stage and tile ``i``: its ``vectors``
16-byte weight vectors, its scale words (``4 * super_blocks`` bytes: one 4-, 8- or 16-byte copy, two at
32) and with packed zero points the lane's ``2 * super_blocks`` zero-point bytes (at one block per
super-chunk a 4-byte copy of the aligned word holding them: rows ``g`` and ``g + 1`` share it, the lane
takes its half). A warp's shared loads read contiguous bytes: no bank conflicts. The kernel asks for the
largest shared-memory carveout (``GemvMmaPlan``).

Loop (per warp, ``mma_source``): the first ``stages - 1`` stages are copied before the loop (one commit
group each); each iteration copies the stage ``stages - 1`` ahead into the slot computed in the previous
iteration, commits, waits until the current stage has landed (``stages - 1`` newer groups may pend),
reads it into the registers the register pipeline would hold and computes it. Out-of-range super-chunks
copy nothing (and are never computed), but every stage commits (an empty group is allowed), so the group
count per stage stays one.
"""
from __future__ import annotations

from dataclasses import replace

from .layout import sizes

#: static shared memory a CUDA kernel may declare (bytes): the ring and the reduction buffer must fit
STATIC_SMEM_LIMIT = 48 * 1024
#: bytes the ring array has beyond its slots: its base is rounded up to 16 bytes in the kernel, since neither
#: compiler aligns a static shared array to more than its element (numba-cuda declares ``.align 4``,
#: numba-cuda-mlir ``.align 8`` and may place another shared variable first), and ``cp.async`` of 16 bytes and
#: ``ld.shared.v4`` fault on an address that is not a multiple of 16
RING_ALIGN_PAD = 16


def slot_fields(TPW: int, unroll: int, vectors: int, super_blocks: int, zp_kind: str) -> list:
    """``[(name, width bytes)]`` of one slot, per thread (module docstring)."""
    f = []
    for u in range(unroll):
        for i in range(TPW):
            f += [(f"w_{u}_{i}_{j}", 16) for j in range(vectors)]
            if super_blocks == 8:  # two 16-byte scale copies
                f += [(f"s_{u}_{i}_{v}", 16) for v in range(2)]
            else:
                f.append((f"s_{u}_{i}_0", 4 * super_blocks))
            if zp_kind == "packed":
                f.append((f"z_{u}_{i}", max(4, 2 * super_blocks)))
    return f


def smem_bytes(tac, m_tiles: int, block_size: int, zp_kind: str, bits: int) -> tuple[int, int]:
    """``(ring bytes, reduction bytes)`` of a specialisation's shared memory (the ring with its alignment pad)."""
    _, vectors, _, _, super_blocks, _, _ = sizes(block_size, bits)
    slot = 32 * tac.warps * sum(w for _, w in slot_fields(tac.tpw, tac.unroll, vectors, super_blocks, zp_kind))
    return tac.stages * slot + RING_ALIGN_PAD, tac.warps * tac.tpw * m_tiles * 4 * 32 * 4


def check_static(tac, m_tiles: int, block_size: int, zp_kind: str, bits: int) -> None:
    """Raise when the plain kernel's ring and reduction buffer exceed ``STATIC_SMEM_LIMIT``."""
    ring_b, red_b = smem_bytes(tac, m_tiles, block_size, zp_kind, bits)
    if ring_b + red_b > STATIC_SMEM_LIMIT:
        raise ValueError(f"gemv_mma {tac.tag}: shared-memory ring {ring_b} B + reduction {red_b} B > "
                         f"{STATIC_SMEM_LIMIT} B (fewer stages, warps, tiles or super-chunks per stage)")


def fitted(tac, m_tiles: int, block_size: int, zp_kind: str, bits: int):
    """``tac`` when its shared memory fits this specialisation, else the same tactic with the deepest ring
    that fits (at least 2 slots), else the register pipeline of 2 stages (a tuned tactic was measured without
    zero points and at one m-tile class; packed zero points add a slot field, two m-tiles double the
    reduction)."""
    for depth in range(tac.stages, 1, -1):
        t = replace(tac, stages=depth)
        if sum(smem_bytes(t, m_tiles, block_size, zp_kind, bits)) <= STATIC_SMEM_LIMIT:
            return t
    return replace(tac, stages=2, smem=False)


class SmemRing:
    """Emits the shared-memory ring of one specialisation into a kernel's source (``e``: the line emitter)."""

    def __init__(self, e, tac, m_tiles: int, block_size: int, zp_kind: str, bits: int):
        ring_b, _ = smem_bytes(tac, m_tiles, block_size, zp_kind, bits)
        _, self.vectors, _, _, self.super_blocks, _, _ = sizes(block_size, bits)
        self.e, self.zp_kind = e, zp_kind
        self.offs, o = {}, 0
        self.fields = slot_fields(tac.tpw, tac.unroll, self.vectors, self.super_blocks, zp_kind)
        self.width = dict(self.fields)
        for name, w in self.fields:
            self.offs[name] = o
            o += 32 * tac.warps * w
        self.slot_bytes = o
        self.ring_bytes = ring_b

    def setup(self, ind: int) -> None:
        """The ring array, its base rounded up to 16 bytes (``RING_ALIGN_PAD``) and the lane's base address per
        field width (``me{w}``)."""
        e = self.e
        e(ind, f"ring = cuda.shared.array({self.ring_bytes // 4}, np.uint32)")
        e(ind, "rbase = (smem_addr(ring) + np.uint32(15)) & np.uint32(0xFFFFFFF0)")
        e(ind, "tid = np.uint32(cuda.threadIdx.x)")
        self.bases(ind, "rbase")

    def bases(self, ind: int, base: str) -> None:
        """The thread's address per field width (``me{w}``) in slot 0 of a ring whose slots' fields start at the
        shared address ``base`` (an expression; ``tid`` defined)."""
        for w in sorted(set(self.width.values())):
            self.e(ind, f"me{w} = {base} + tid * np.uint32({w})")

    def _addr(self, name: str, off: str) -> str:
        return f"me{self.width[name]} + {off} + np.uint32({self.offs[name]})"

    def copy(self, ind: int, u: int, i: int, off: str) -> None:
        """cp.async of super-chunk ``scl`` of tile ``i`` (``u``-th of the stage) into the slot at byte offset
        ``off`` (an expression); the caller guards ``scl < n_super`` and commits."""
        e, vectors, sb = self.e, self.vectors, self.super_blocks
        e(ind, f"tsc = (tile0 + {i}) * n_super + scl")
        for j in range(vectors):
            e(ind, f"cp_async_16({self._addr(f'w_{u}_{i}_{j}', off)}, bq, (tsc * {vectors} + {j}) * 32 + lane)")
        if sb == 8:
            for v in range(2):
                e(ind, f"cp_async_16({self._addr(f's_{u}_{i}_{v}', off)}, sw, (tsc * 8 + g) * 2 + {v})")
        else:
            e(ind, f"cp_async_{4 * sb}({self._addr(f's_{u}_{i}_0', off)}, sw, tsc * 8 + g)")
        if self.zp_kind == "packed":
            zw = max(4, 2 * sb)
            idx = "tsc * 4 + (g >> 1)" if sb == 1 else "tsc * 8 + g"
            e(ind, f"cp_async_{zw}({self._addr(f'z_{u}_{i}', off)}, zpk, {idx})")

    def read(self, ind: int, p: str, u: int, i: int, off: str) -> None:
        """The slot's bytes of (``u``, ``i``) at byte offset ``off`` into the register pipeline's names:
        ``{p}_{u}_{i}_{j}`` (weight vectors), ``{p}sc_{u}_{i}_{q}`` (scale words), ``{p}zp_{u}_{i}_{h}_{bb}``."""
        e, sb = self.e, self.super_blocks
        for j in range(self.vectors):
            e(ind, f"{p}_{u}_{i}_{j} = lds_v4({self._addr(f'w_{u}_{i}_{j}', off)})")
        if sb == 8:
            for v in range(2):
                e(ind, f"sv = lds_v4({self._addr(f's_{u}_{i}_{v}', off)})")
                for q in range(4):
                    e(ind, f"{p}sc_{u}_{i}_{4 * v + q} = sv[{q}]")
        elif sb == 1:
            e(ind, f"{p}sc_{u}_{i}_0 = lds({self._addr(f's_{u}_{i}_0', off)})")
        else:
            e(ind, f"sv = {'lds_v4' if sb == 4 else 'lds_v2'}({self._addr(f's_{u}_{i}_0', off)})")
            for q in range(sb):
                e(ind, f"{p}sc_{u}_{i}_{q} = sv[{q}]")
        if self.zp_kind != "packed":
            return
        zw = max(4, 2 * sb)
        e(ind, f"zv = {({4: 'lds', 8: 'lds_v2', 16: 'lds_v4'})[zw]}({self._addr(f'z_{u}_{i}', off)})")
        for h in range(2):
            for bb in range(sb):
                k = h * sb + bb
                if sb == 1:  # the lane's half of the shared word: bytes 2 (g & 1) + h
                    e(ind, f"{p}zp_{u}_{i}_{h}_{bb} = (zv >> ((g & 1) * np.uint32(16) + np.uint32({8 * k}))) "
                           "& np.uint32(0xFF)")
                else:
                    src = "zv" if zw == 4 else f"zv[{k // 4}]"
                    e(ind, f"{p}zp_{u}_{i}_{h}_{bb} = ({src} >> np.uint32({8 * (k % 4)})) & np.uint32(0xFF)")
