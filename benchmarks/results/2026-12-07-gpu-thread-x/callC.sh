#!/bin/bash
# device call C (after E, same machine; or carry .mlir/part1 right after callA.sh and callB.sh): numba-cuda-mlir
# installed; the tensor-core GEMV tactic sweep of the quick perf set's cases (4-bit fp16, blocks 32 / 128, M 1 / 16)
# with --variants under each compiler, each fit merged key by key into that compiler's table of this GPU; the sweeps
# written into this folder (the tables' sources), tables kept in /tmp/tables for calls D and E
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; [ -d /tmp/site_mlir/numba_cuda_mlir ] || install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"
R=benchmarks/results/2026-12-07-gpu-thread-x; mkdir -p /tmp/tables
for b in mlir numba; do
  pp=$PN; TB=numba_nbits/kernels/gemv/tuned/$GPU-v2.json
  [ $b = mlir ] && { pp=$PM; TB=numba_nbits/kernels/gemv/tuned/$GPU-v2-mlir.json; }
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b timeout 225 python3 -m benchmarks.sweep_gemv_m1 \
    --shapes 4096x4096,28672x8192,128256x4096 --ms 1,16 --no-bf16 --variants --budget-s 165 --gpu $GPU --workers 14 \
    --out $R/sweep-$b --into-keys $TB > $OUT/sweep-$b.log 2>&1
  echo "sweep $b rc=$? $(date +%T)"; cp $TB /tmp/tables/; tail -3 $OUT/sweep-$b.log
done
cp /tmp/tables/*.json $OUT/; tar czf $OUT/sweeps.tgz -C $R sweep-mlir sweep-numba
