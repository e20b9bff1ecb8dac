"""Reference rows: ONNX Runtime's own CUDA MatMulNBits timed on an H200 (the table below).

Used only when the ORT CUDA EP is not importable in the run and the run's GPU is the table's (``serves``: an
H200; on any other GPU ORT's H200 times say nothing about ours, so such a run gets none and a note), never mixed
with measured rows: their ``kind`` is ``"reference"`` and their ``source`` names the table. onnxruntime-gpu 1.31.1,
2026-11-30: fp16 A, 4-bit symmetric B, weights rotated beyond the L2, GPU time of all of ORT's kernels
per node (CUPTI), one run. "ort_default" is ORT's normal dispatch; "ort_fpA_intB" sets
``ORT_FPA_INTB_GEMM=1``. The router row (32x2880) has bias.
"""
from __future__ import annotations

SOURCE = "ORT 1.31.1 reference table (H200, 2026-11-30)"
#: the GPU the table was measured on, as ``kernels.gemv.tuned_tables.gpu_key`` names it
GPU = "h200"

# N K block M ort_default_us ort_fpA_intB_us
_TABLE = """
4096 4096 32 1 6.45 11.77
4096 4096 32 4 9.29 7.47
4096 4096 32 16 30.73 17.2
4096 4096 32 64 20.97 22.41
4096 4096 32 256 26.68 35.46
4096 4096 32 1024 57.63 97.73
4096 4096 32 4096 215.97 394.23
4096 4096 128 1 6.31 6.3
4096 4096 128 4 9.05 9.05
4096 4096 128 16 30.94 30.98
4096 4096 128 64 20.87 20.79
4096 4096 128 256 26.54 26.44
4096 4096 128 1024 57.44 57.54
4096 4096 128 4096 212.11 215.88
14336 4096 32 1 13.5 14.86
14336 4096 32 4 24.96 17.55
14336 4096 32 16 82.98 24.84
14336 4096 32 64 75.16 35.91
14336 4096 32 256 87.53 98.48
14336 4096 32 1024 215.27 326.99
14336 4096 32 4096 780.03 1379.76
14336 4096 128 1 13.24 13.2
14336 4096 128 4 24.41 24.39
14336 4096 128 16 81.22 81.05
14336 4096 128 64 74.87 74.88
14336 4096 128 256 87.77 87.19
14336 4096 128 1024 211.24 207.4
14336 4096 128 4096 757.07 767.36
28672 8192 32 1 44.04 38.01
28672 8192 32 4 76.89 59.82
28672 8192 32 16 293.14 64.95
28672 8192 32 64 282.82 107.37
28672 8192 32 256 339.9 342.26
28672 8192 32 1024 797.15 1347.41
28672 8192 32 4096 3026.68 5390.67
28672 8192 128 1 43.53 43.45
28672 8192 128 4 74.98 75.01
28672 8192 128 16 295.98 295.38
28672 8192 128 64 281.61 280.96
28672 8192 128 256 339.09 343.07
28672 8192 128 1024 824.25 801.83
28672 8192 128 4096 3030.51 3071.3
128256 4096 32 1 98.37 83.42
128256 4096 32 4 175.77 123.51
128256 4096 32 16 579.63 124.84
128256 4096 32 64 650.49 226.37
128256 4096 32 256 748.27 733.26
128256 4096 32 1024 1864.85 2965.94
128256 4096 32 4096 6844.72 12109.58
128256 4096 128 1 95.71 96.53
128256 4096 128 4 173.07 173.71
128256 4096 128 16 578.72 578.86
128256 4096 128 64 643.83 645.08
128256 4096 128 256 753.26 752.08
128256 4096 128 1024 1803.11 1912.13
128256 4096 128 4096 6804.18 6915.84
32 2880 32 1 2.96 2.81
32 2880 32 4 5.17 5.13
32 2880 32 16 19.42 19.28
32 2880 32 64 7.33 7.31
32 2880 32 256 7.74 7.69
32 2880 32 1024 8.18 8.16
32 2880 32 4096 10.65 10.41
"""


def reference_rows() -> list[dict]:
    """One dict per (shape, block, M, ORT path): the identifying columns plus ``us_p50``."""
    out = []
    for line in _TABLE.strip().splitlines():
        N, K, block, M, default, fpa = line.split()
        for route, us in (("ort_default", default), ("ort_fpA_intB", fpa)):
            out.append({"kind": "reference", "route": route, "forced": False, "N": int(N), "K": int(K),
                        "bits": 4, "block": int(block), "dtype": "float16", "zp": "none", "M": int(M),
                        "bias": (int(N), int(K)) == (32, 2880), "us_p50": float(us), "source": SOURCE})
    return out


def serves(gpu_name: str) -> bool:
    """Whether a run on the GPU named ``gpu_name`` (``meta["env"]["gpu"]``) may take the reference rows: the GPU
    the table was measured on (not the simulator, not another GPU)."""
    from ..kernels.gemv.tuned_tables import gpu_key

    return bool(gpu_name) and gpu_key(gpu_name) == GPU
