#!/bin/bash
cp .ort2/p4 /tmp/ortp/ && mkdir -p /tmp/ortsite && cat /tmp/ortp/p? | xz -d -T16 | tar x -C /tmp/ortsite || exit 1
export PYTHONPATH=/tmp/site:/tmp/ortsite:$PWD
timeout 60 python3 .carry/ort_check.py 2>&1 | grep -v "^USDT\|^$" | tail -20 | tee $OUT/ort_check.txt
timeout 500 python3 -m numba_nbits.perf --plan readme --routes auto --compile-workers 16 --budget-s "${2:-360}" --no-plots --no-progress \
  --commit "$1" --out $OUT/perf > $OUT/perf.log 2>&1; echo "perf rc=$?" >> $OUT/perf.log
tail -40 $OUT/perf.log
