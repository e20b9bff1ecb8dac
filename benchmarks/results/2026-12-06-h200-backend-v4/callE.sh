#!/bin/bash
cp /tmp/mlir_table.json numba_nbits/kernels/gemv/tuned/h200-v2-mlir.json
for be in numba mlir; do
  if [ $be = numba ]; then P=/tmp/site:$PWD; else P=/tmp/site_mlir:$PWD; fi
  for case in "4096x4096 32" "128256x4096 128" "4096x4096 128"; do
    set -- $case
    PYTHONPATH=$P NUMBA_NBITS_BACKEND=$be timeout 100 ncu --clock-control none --csv --metrics gpu__time_duration.sum \
      --launch-skip 20 --launch-count 6 python3 -m benchmarks.kernel_time --shape $1 --block $2 > $OUT/ncu_${be}_$1_$2.csv 2> /tmp/err_$be.txt
    grep '^#' /tmp/err_$be.txt; tail -2 /tmp/err_$be.txt
  done
done
