#!/bin/bash
# device call C (after E, same machine; or carry .mlir/part1 right after callA.sh and callB.sh): numba-cuda-mlir
# installed; the tensor-core GEMV tactic sweep of the quick perf set's cases under each compiler, each fit merged key by
# key into that compiler's table of this GPU; the sweeps written into this folder (the tables' sources), tables kept in
# /tmp/tables for call D
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; [ -d /tmp/site_mlir/numba_cuda_mlir ] || install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"
R=benchmarks/results/2026-12-07-gpu-thread-x; sweep_both $R; tar czf $OUT/sweeps.tgz -C $R sweep-mlir sweep-numba
