#!/bin/bash
# backend_compare (numba-cuda vs numba-cuda-mlir, quick perf set's default calls) with the mlir-fitted table as this GPU's overlay
G=$1; cp /tmp/mlir_table.json numba_nbits/kernels/gemv/tuned/$G-v2-mlir.json || exit 1
export PYTHONPATH=$PWD
timeout "${3:-400}" python3 -m benchmarks.backend_compare --budget-s "${2:-110}" --routes auto --path numba=/tmp/site \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?" >> $OUT/bc.log
tail -45 $OUT/bc.log
