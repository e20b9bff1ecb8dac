#!/bin/bash
# device call D (right after C, same machine): backend_compare (numba-cuda vs numba-cuda-mlir, quick perf set, default
# calls) with the tables call C fitted
source benchmarks/results/2026-12-07-gpu-nvvm-prepass/common.sh
cp /tmp/tables/*.json numba_nbits/kernels/gemv/tuned/ && git diff --stat -- numba_nbits/kernels/gemv/tuned 2>/dev/null | tail -3
export PYTHONPATH=$PWD
mkdir -p /tmp/bc; OUT=/tmp/bc timeout 400 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto --path numba=/tmp/site:/tmp/site_mlir \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?"; tail -14 $OUT/bc.log; cp /tmp/bc/routes.csv /tmp/bc/compile.csv $OUT/
