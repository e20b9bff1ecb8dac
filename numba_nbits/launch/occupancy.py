"""Registers and resident blocks per SM: the arithmetic behind register caps and occupancy snapping.

Every CUDA GPU this package runs on (compute capability 7.0 and newer) has 65,536 32-bit registers per SM
and allocates them per warp in units of 256 (8 per thread); a kernel may use at most 255 per thread.
``blocks_by_registers(regs, threads)`` is how many blocks of ``threads`` threads the register file holds at
``regs`` registers per thread (other limits, shared memory, threads and blocks per SM, are the driver's to
add: ``cuOccupancyMaxActiveBlocksPerMultiprocessor``).

* ``register_cap(threads, blocks)``: the most registers per thread with which ``blocks`` blocks fit, the
  ``max_registers`` a kernel gets to guarantee that occupancy (``-maxrregcount``: it binds ptxas's register
  allocator only, where ``launch_bounds``' ``.minnctapersm`` reshapes the whole schedule).
* ``snap_target(regs, threads, slack)``: the register count one occupancy step down, when ``regs`` is at
  most ``slack`` registers above it, else None. Two compilers (or two versions of one) give the same
  kernel source register counts a few apart; a kernel a register or two over a step loses a whole resident
  block per SM. ``launch.Kernel`` built with ``snap=(threads, slack)`` compiles once more at the target and
  keeps that build only when the driver reports more resident blocks and it spills nothing more.
"""
from __future__ import annotations

REGISTERS_PER_SM = 65536
#: registers are allocated per warp in units of this many
REGISTER_UNIT = 256
MAX_REGISTERS_PER_THREAD = 255


def _per_warp(regs: int) -> int:
    return -(-regs * 32 // REGISTER_UNIT) * REGISTER_UNIT


def blocks_by_registers(regs: int, threads: int) -> int:
    """Blocks of ``threads`` threads whose registers fit an SM at ``regs`` registers per thread."""
    if regs < 1 or threads < 1:
        raise ValueError(f"registers per thread and threads per block must be >= 1, got {regs} and {threads}")
    warps = -(-threads // 32)
    return REGISTERS_PER_SM // (_per_warp(regs) * warps)


def register_cap(threads: int, blocks: int) -> int:
    """The most registers per thread (a multiple of 8, at most 255) with which ``blocks`` blocks of
    ``threads`` threads fit one SM's register file."""
    if threads < 1 or blocks < 1:
        raise ValueError(f"threads per block and blocks must be >= 1, got {threads} and {blocks}")
    warps = -(-threads // 32)
    per_warp = REGISTERS_PER_SM // (warps * blocks) // REGISTER_UNIT * REGISTER_UNIT
    cap = min(per_warp // 32, MAX_REGISTERS_PER_THREAD)
    if cap < 8:
        raise ValueError(f"{blocks} blocks of {threads} threads cannot fit one SM's {REGISTERS_PER_SM} registers")
    return cap


def snap_target(regs: int, threads: int, slack: int) -> int | None:
    """``register_cap`` of one more block than ``regs`` allows, when that is at most ``slack`` registers
    below ``regs``; else None (already on a step, or too far above the next)."""
    have = blocks_by_registers(regs, threads)
    if (-(-threads // 32)) * (have + 1) > REGISTERS_PER_SM // (8 * 32):  # not even 8 registers per thread
        return None
    target = register_cap(threads, have + 1)
    return target if regs - target <= slack else None
