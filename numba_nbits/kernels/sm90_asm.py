"""The inline-asm text of the warpgroup MMA intrinsics, shared by both compilers' forms (``intrinsics_sm90``
through llvmlite on numba-cuda, ``intrinsics_sm90_mlir`` through ``llvm.inline_asm`` on numba-cuda-mlir), so
both emit the same PTX. Pure text: importing this imports no compiler."""
from __future__ import annotations

WGMMA_N = tuple(range(8, 264, 8))  # n = 8, 16, ..., 256 (the fused GEMM's 8 * m_tiles tokens)


def wgmma_asm(n: int, bf16: bool, sync: bool = True) -> tuple[str, str]:
    """(PTX, LLVM constraints) of the inline asm of ``wgmma_m64n{n}k16`` (both compilers emit this text):
    operands ``$0 .. $m-1`` the accumulators (``m = n / 2``; outputs, each tied to the input of the same
    number), ``$m .. $m+3`` the A words, ``$m+4`` the descriptor, ``$m+5`` scale-d (1, as a predicate)."""
    kind = "bf16" if bf16 else "f16"
    m = n // 2
    dregs = ",".join(f"${k}" for k in range(m))
    ptx = (f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${m + 5}, 0;\nwgmma.fence.sync.aligned;\n"
           f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} "
           f"{{{dregs}}}, {{${m},${m + 1},${m + 2},${m + 3}}}, ${m + 4}, p, 1, 1, 0;\n"
           + ("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" if sync else "") + "}")
    return ptx, ",".join(["=f"] * m + ["r"] * 4 + ["l", "r"] + [str(k) for k in range(m)])


def wait_asm(m: int) -> tuple[str, str]:
    """(PTX, LLVM constraints) of ``wgmma_wait`` for ``m`` accumulators (outputs tied to the inputs)."""
    return ("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;",
            ",".join(["=f"] * m + [str(k) for k in range(m)]))
