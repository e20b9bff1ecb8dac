"""Mixed-input tensor-core GEMM (the fpA_intB route's kernel): fp16/bf16 A x 4-bit or 8-bit B, M = 1 .. thousands.

Math
----
``Y[m, n] = bias[n] + sum_b scale[n, b] * sum_{k in block b} (q[n, k] - zp[n, b]) * A[m, k]``

The weights are the 16-row ``A`` operand of ``mma.sync.m16n8k16`` and the activations the 8-column
``B`` operand (``D[n, m]``), as in the tensor-core GEMV. With zero points absent (default) or packed,
each code becomes the exact fp16/bf16 integer ``q - zp``; the tensor core sums one quantization
block exactly-in-fp32 and the block's partial sums are scaled in fp32. With typed (fractional) zero
points the code is fed as the exact integer ``q`` and ``zp * sum_k A[m, k]`` is subtracted per block
in fp32; the activation block sums come from one extra MMA with an all-ones weight fragment. The
bias is added in fp32 in the epilogue; Y is rounded once.

The package, in reading order:

* ``tactics``: what the kernel supports, its tile shapes (``Tactic``, ``TACTICS``,
  ``default_tactic``) and the split-K rule (``split_count``);
* ``layout``: the prepacked weight layout (``pack_weights_for_mixed_gemm`` and its inverse) and the
  per-node device layouts of B, scales and zero points (``prepack``);
* ``source``: the generated kernel source (decode, thread -> data mapping, pipeline, epilogue);
* ``plan``: the compiled kernel (``mixed_gemm_kernel``) and the plan for one M (``MixedGemmPlan``,
  ``build``).
"""
from __future__ import annotations

from .layout import Packed, pack_weights_for_mixed_gemm, prepack, unpack_weights_from_mixed_gemm
from .plan import MixedGemmPlan, build, mixed_gemm_kernel
from .tactics import BITS, BLOCK_SIZES, ROUTE, TACTICS, Tactic, default_tactic, split_count, supports

__all__ = ["BITS", "BLOCK_SIZES", "ROUTE", "TACTICS", "Tactic", "default_tactic", "split_count", "supports",
           "Packed", "pack_weights_for_mixed_gemm", "unpack_weights_from_mixed_gemm", "prepack",
           "mixed_gemm_kernel", "MixedGemmPlan", "build"]
