#!/bin/bash
# device call C (carry .mlir/part1, right after A and B): numba-cuda-mlir installed; the tensor-core GEMV tactic sweep of
# the quick perf set's cases (4-bit fp16, blocks 32 / 128, M 1 / 16) with --variants (n / o forms) under each compiler,
# each fit merged key by key into that compiler's table of this GPU; both tables kept in /tmp/tables for calls D and E
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"
sweep_both /tmp; tar czf $OUT/sweeps.tgz -C /tmp sweep-mlir sweep-numba
