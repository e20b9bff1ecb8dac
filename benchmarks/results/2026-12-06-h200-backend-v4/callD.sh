#!/bin/bash
# backend_compare with the mlir-fitted table in place as the default GPU's mlir overlay
cp /tmp/mlir_table.json numba_nbits/kernels/gemv/tuned/h200-v2-mlir.json || exit 1
export PYTHONPATH=$PWD
timeout 560 python3 -m benchmarks.backend_compare --budget-s "${1:-110}" --routes auto --path numba=/tmp/site \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?" >> $OUT/bc.log
tail -45 $OUT/bc.log
