#!/bin/bash
# backend_compare: numba-cuda (numpy 2.4.6) against numba-cuda-mlir (image numpy) on the quick set, default calls
export PYTHONPATH=$PWD
timeout 560 python3 -m benchmarks.backend_compare --budget-s "${1:-110}" --routes auto --path numba=/tmp/site \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?" >> $OUT/bc.log
tail -45 $OUT/bc.log
