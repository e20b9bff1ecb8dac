#!/bin/bash
# device call E (carry .mlir/part1, right after ../2026-12-07-gpu-wide-prepass's callA.sh and callB.sh): numba-cuda-mlir
# installed; backend_compare of the quick perf set's default calls with the tables as shipped, both orders of the two
# compilers' worker processes
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; [ -d /tmp/site_mlir/numba_cuda_mlir ] || install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"
i=0
for order in numba,mlir mlir,numba; do
  i=$((i+1))
  OUT=/tmp/bc$i timeout 265 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto --backends $order \
    --path numba=/tmp/site:/tmp/site_mlir --path mlir=/tmp/site_mlir > $OUT/bc$i.log 2>&1
  echo "bc $order rc=$? $(date +%T)"; cp /tmp/bc$i/routes.csv $OUT/routes$i.csv; cp /tmp/bc$i/compile.csv $OUT/compile$i.csv
  tail -6 $OUT/bc$i.log
done
