"""The dispatch key: everything the route guards of the spec look at, as one frozen value."""
from __future__ import annotations

from dataclasses import dataclass

from ..formats import BlockGeometry

#: Shared memory per block that ORT's fused-kernel gates compare against (``sharedMemPerBlock``
#: of every NVIDIA GPU since Volta without opt-in).
DEFAULT_SMEM_PER_BLOCK = 48 * 1024


@dataclass(frozen=True)
class Problem(BlockGeometry):
    """One MatMulNBits call shape: GEMM ``M x N x K`` and the node's attributes and inputs."""

    M: int
    N: int
    K: int
    bits: int
    block_size: int
    dtype: str  # "float32" | "float16" | "bfloat16"
    zero_points: str = "none"  # "none" | "packed" | "typed"
    has_g_idx: bool = False
    has_bias: bool = False
    sm: int = 90  # compute capability as major*10+minor
    weight_prepacked: int = 0
    smem_per_block: int = DEFAULT_SMEM_PER_BLOCK

    @property
    def itemsize(self) -> int:
        return 4 if self.dtype == "float32" else 2

    def describe(self) -> str:
        return (f"M={self.M} N={self.N} K={self.K} bits={self.bits} block_size={self.block_size} "
                f"dtype={self.dtype} zero_points={self.zero_points} g_idx={self.has_g_idx} "
                f"bias={self.has_bias} sm={self.sm} weight_prepacked={self.weight_prepacked}")
