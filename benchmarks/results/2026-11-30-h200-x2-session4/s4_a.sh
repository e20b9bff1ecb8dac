#!/usr/bin/env bash
# Session 4 call A (nvidia-h200-x2), branch mma-lowbit: gemv_mma for 8-bit and 2-bit weights.
# GPU0: tactic sweeps --bits 8 and --bits 2 (perf/sweep_gemv_m1.py). GPU1: test_gemv_mma + test_gemv + test_op.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s4_a.log
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
( export CUDA_VISIBLE_DEVICES=0
  timeout 300 python3 perf/sweep_gemv_m1.py --bits 8 --workers 10 --budget-s 250 --out /tmp/sw/w8 > /tmp/sw8.log 2>&1; echo "EXIT $?" >> /tmp/sw8.log
  timeout 230 python3 perf/sweep_gemv_m1.py --bits 2 --workers 10 --budget-s 190 --out /tmp/sw/w2 > /tmp/sw2.log 2>&1; echo "EXIT $?" >> /tmp/sw2.log
  cp /tmp/sw8.log /tmp/sw2.log /tmp/sw/; tar czf $OUT/sweeps.tgz -C /tmp sw ) &
( export CUDA_VISIBLE_DEVICES=1; mkdir -p /tmp/t
  LOGDIR=/tmp/t/logs OUT=/tmp/t TEST_TIMEOUT=520 SHARDS=5 BIG="tests/test_gemv.py tests/test_op.py tests/test_gemv_mma.py" \
    FILES="tests/test_gemv_mma.py tests/test_gemv.py tests/test_op.py" bash tests/gpu_parallel.sh > /tmp/t.txt 2>&1
  tar czf $OUT/tests.tgz -C /tmp/t logs ) &
wait
{ echo "### sweep 8"; tail -n 45 /tmp/sw8.log; echo "### sweep 2"; tail -n 35 /tmp/sw2.log; echo "### tests"; cat /tmp/t.txt; } >> $R
