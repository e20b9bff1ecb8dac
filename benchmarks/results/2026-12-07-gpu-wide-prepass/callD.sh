#!/bin/bash
# device call D (no carry, right after C): backend_compare of default calls (numba-cuda-mlir's wide kernels with the
# pre-pass, WIDE_PREPASS_COMPILERS), the quick perf set, numba-cuda then numba-cuda-mlir
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh
echo "gpu=$GPU $(date +%T)"
OUT=/tmp/bc timeout 280 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto \
  --path numba=/tmp/site:/tmp/site_mlir --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1
echo "bc rc=$? $(date +%T)"; cp /tmp/bc/routes.csv /tmp/bc/compile.csv /tmp/bc/launch.csv $OUT/ 2>/dev/null
tail -15 $OUT/bc.log
