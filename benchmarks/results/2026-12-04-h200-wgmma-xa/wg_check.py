"""The warpgroup-MMA shared-activation kernels on small shapes against the oracle (for compute-sanitizer)."""
import numpy as np
import numba_nbits as nb
from numba_nbits.arrays import to_device, to_host
from numba_nbits.kernels.gemv import tactics
from numba_nbits.kernels.gemv.mma import GemvMmaPlan
from numba_nbits.reference import matmul_nbits_ref, relative_error
rng = np.random.default_rng(1)
for bits, block, N, K, M, tag, zp in [(4, 128, 1040, 2048, 60, "t2w8u1s3xh", False), (4, 128, 1040, 2048, 64, "t2w8u1k4s3xh", True),
                                       (4, 128, 600, 1024, 50, "t2w8u1s3b2xh", False), (8, 64, 520, 1024, 40, "t1w4u1k2s3xh", True)]:
    kb = K // block
    B = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
    s = (rng.uniform(0.5, 1.5, (N, kb)) / (2 ** (bits - 1) * np.sqrt(K))).astype(np.float16)
    z = rng.integers(0, 256, (N, -(-kb * bits // 8)), dtype=np.uint8) if zp else None
    A = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    op = nb.MatMulNBits(B, s, z, K=K, N=N, bits=bits, block_size=block)
    plan = GemvMmaPlan(op.weights, M, tactics.Tactic.parse(tag))
    out = to_device(np.zeros((M, N), np.float16), False)
    for _ in range(2):
        plan.enqueue(to_device(A, False), out, 0)
    err = relative_error(to_host(out).astype(np.float64), matmul_nbits_ref(A, B, s, z, K=K, N=N, bits=bits, block_size=block))
    print(tag, bits, block, N, K, M, "rel_err", err, "OK" if err <= 2e-3 else "FAIL")
