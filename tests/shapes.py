"""Shared shape lists for kernel tests and benchmarks.

``SIM_*`` are tiny shapes for numba's CUDA simulator (a few thousand simulated threads per case);
``GPU_*`` are the spec §10 / model shapes used when a real GPU is present.
"""

# (M, N, K, block_size) per family.  K values include K % block_size != 0 for 4-bit (the last
# block is partial) and the 8-byte-chunk case (block 16 with an odd number of blocks).
SIM_W4 = {16: (16, 72), 32: (16, 40), 64: (8, 72), 128: (8, 136)}  # block -> (N, K)
GPU_W4 = [(1, 4096, 4096), (1, 11008, 4096), (16, 4096, 11008), (5, 256, 1024), (3, 24, 1024),
          (2, 288, 1000), (16, 288, 744)]

SIM_W8 = {16: (8, 48), 32: (8, 64), 64: (8, 64), 128: (8, 128), 256: (8, 256)}
GPU_W8 = [(1, 4096, 4096), (2, 288, 1024), (5, 5120, 3072), (1, 40, 640), (3, 4096, 14336)]

SIM_W2 = {16: (8, 48), 32: (8, 96), 64: (8, 128), 128: (8, 128), 256: (8, 256), 512: (8, 512)}
GPU_W2 = [(1, 4096, 4096), (2, 256, 1024), (8, 4096, 4096), (1, 32, 48 * 16)]

ROUTER = [(1, 32, 2880)]

#: Benchmark shapes (N, K) of the GEMV grid (``numba_nbits.perf.shapes.GEMV_GRID_PLAN``).
BENCH_NK = [(4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (128256, 4096),
            (32, 2880)]
