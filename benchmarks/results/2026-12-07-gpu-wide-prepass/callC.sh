#!/bin/bash
# device call C (carry .mlir/part1, right after B): numba-cuda-mlir installed; the warpgroup GEMM's barrier pipeline
# plain (t1w8u1xhvm) and with the LLVM 7 pre-pass (t1w8u1xhvmo) at M = 256 under each compiler, same process per
# compiler (bench_small_gemm: default call, ORT's chain, each tactic); the changed GPU tests under numba-cuda-mlir
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh
install_mlir || exit 1
echo "gpu=$GPU $(date +%T)"
for b in numba mlir; do
  pp=$PN; [ $b = mlir ] && pp=$PM
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b NUMBA_NBITS_KERNEL_CACHE_DIR=$(mktemp -d) OUT=/tmp/bsg-$b timeout 170 \
    python3 -m benchmarks.bench_small_gemm --shapes 128256x4096 28672x8192 --M 256 --blocks 32 128 \
    --tactics t1w8u1xhvm t1w8u1xhvmo --workers 14 > $OUT/bsg-$b.log 2>&1
  echo "bench $b rc=$? $(date +%T)"; cp /tmp/bsg-$b/bench_small_gemm.csv $OUT/bsg-$b.csv
done
env PYTHONPATH=$PM NUMBA_NBITS_BACKEND=mlir timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_small_gemm.py \
  tests/test_dispatch.py -k "warpgroup_mmas_on_hopper or past_64" > $OUT/tests-mlir.txt 2>&1
echo "tests mlir rc=$? $(tail -1 $OUT/tests-mlir.txt) $(date +%T)"
