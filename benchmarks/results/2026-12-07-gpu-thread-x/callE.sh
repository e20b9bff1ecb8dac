#!/bin/bash
# device call E (carry .mlir/part1, right after ../2026-12-07-gpu-wide-prepass's callA.sh and callB.sh): numba-cuda-mlir
# installed; backend_compare of the quick perf set's default calls with the tables as shipped, both orders of the two
# compilers' worker processes
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; [ -d /tmp/site_mlir/numba_cuda_mlir ] || install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"
compare_both 265
