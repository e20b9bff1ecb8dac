#!/usr/bin/env bash
# Session 4 call B (nvidia-h200-x2), branch mma-lowbit with tuned 8/2-bit tactics and the 8-bit M<=16 guard.
# GPU0: issue 4's GEMV grid for 8-bit g128 and 2-bit g64, fp16, six shapes, through dispatch (route auto) + peers.
# GPU1: test_gemv_mma + test_gemv + test_dispatch + test_op + test_graphs + test_numerics + test_fuzz.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s4_b.log
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
( export CUDA_VISIBLE_DEVICES=0
  timeout 560 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --bits 2,8 --dtypes fp16 \
    --shapes l3-8b-attn,l3-8b-up,l3-8b-down,l3-70b-up,l3-70b-down,lmhead-l3 --compile-workers 12 --budget-s 500 --commit $C \
    --out /tmp/lb --no-progress > /tmp/lb.log 2>&1; echo "EXIT $?" >> /tmp/lb.log
  cp /tmp/lb.log /tmp/lb/run.log; tar czf $OUT/lowbit.tgz -C /tmp lb ) &
( export CUDA_VISIBLE_DEVICES=1; mkdir -p /tmp/t
  LOGDIR=/tmp/t/logs OUT=/tmp/t TEST_TIMEOUT=540 SHARDS=4 BIG="tests/test_gemv.py tests/test_gemv_mma.py tests/test_numerics.py" \
    FILES="tests/test_gemv_mma.py tests/test_gemv.py tests/test_dispatch.py tests/test_op.py tests/test_graphs.py tests/test_numerics.py tests/test_fuzz.py" \
    bash tests/gpu_parallel.sh > /tmp/t.txt 2>&1
  tar czf $OUT/tests.tgz -C /tmp/t logs ) &
wait
{ echo "### low-bit grid"; tail -n 30 /tmp/lb.log; echo "### tests"; cat /tmp/t.txt; } >> $R
