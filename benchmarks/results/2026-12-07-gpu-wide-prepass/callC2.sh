#!/bin/bash
# device call C2 (carry .mlir/part1, right after A and B on a fresh machine): numba-cuda-mlir installed; with the wide
# tactic t1w8u1xhvmo under both compilers: the changed GPU tests under each, then backend_compare of default calls in
# both orders of the two workers
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh
install_mlir || exit 1
echo "gpu=$GPU $(date +%T)"
for b in numba mlir; do
  pp=$PN; [ $b = mlir ] && pp=$PM
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_small_gemm.py \
    tests/test_dispatch.py -k "warpgroup_mmas_on_hopper or past_64" > $OUT/tests-$b.txt 2>&1
  echo "tests $b rc=$? $(tail -1 $OUT/tests-$b.txt) $(date +%T)"
done
i=0
for order in numba,mlir mlir,numba; do
  i=$((i+1))
  OUT=/tmp/bc$i timeout 230 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto --backends $order \
    --path numba=/tmp/site:/tmp/site_mlir --path mlir=/tmp/site_mlir > $OUT/bc$i.log 2>&1
  echo "bc $order rc=$? $(date +%T)"; cp /tmp/bc$i/routes.csv $OUT/routes$i.csv; tail -8 $OUT/bc$i.log
done
cp /tmp/bc1/compile.csv $OUT/compile1.csv
