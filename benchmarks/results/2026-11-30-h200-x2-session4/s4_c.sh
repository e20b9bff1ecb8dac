#!/usr/bin/env bash
# Session 4 call C (nvidia-h200-x2): bf16 rows of the 8/2-bit grid (blocks of the full report) + router shape fp16/bf16
# on GPU0; on GPU1 the remaining dispatch-level suites: test_graphs, test_host_path, test_bad_inputs, test_torch, test_scale.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s4_c.log
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
( export CUDA_VISIBLE_DEVICES=0
  timeout 250 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --bits 8 --block-sizes 128 --dtypes bf16 \
    --shapes l3-8b-attn,l3-8b-up,l3-8b-down,l3-70b-up,l3-70b-down,lmhead-l3,router-gptoss --compile-workers 12 --budget-s 220 --commit $C \
    --out /tmp/g/bf16-w8 --no-progress > /tmp/g8.log 2>&1; echo "EXIT $?" >> /tmp/g8.log
  timeout 230 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --bits 2 --block-sizes 64 --dtypes bf16,fp16 \
    --shapes l3-8b-attn,l3-8b-up,l3-8b-down,l3-70b-up,l3-70b-down,lmhead-l3,router-gptoss --compile-workers 12 --budget-s 200 --commit $C \
    --out /tmp/g/bf16-w2 --no-progress > /tmp/g2.log 2>&1; echo "EXIT $?" >> /tmp/g2.log
  timeout 80 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --bits 8 --block-sizes 128 --dtypes fp16 \
    --shapes router-gptoss --compile-workers 4 --budget-s 60 --commit $C --out /tmp/g/router-w8-fp16 --no-progress > /tmp/gr.log 2>&1; echo "EXIT $?" >> /tmp/gr.log
  cp /tmp/g8.log /tmp/g2.log /tmp/gr.log /tmp/g/; tar czf $OUT/grid_c.tgz -C /tmp g ) &
( export CUDA_VISIBLE_DEVICES=1; mkdir -p /tmp/t
  LOGDIR=/tmp/t/logs OUT=/tmp/t TEST_TIMEOUT=470 SHARDS=3 BIG="tests/test_torch.py" \
    FILES="tests/test_graphs.py tests/test_host_path.py tests/test_bad_inputs.py tests/test_torch.py tests/test_scale.py tests/test_perf_harness.py" \
    bash tests/gpu_parallel.sh > /tmp/t.txt 2>&1
  tar czf $OUT/tests.tgz -C /tmp/t logs ) &
wait
{ echo "### grid 8 bf16"; tail -n 6 /tmp/g8.log; echo "### grid 2"; tail -n 6 /tmp/g2.log; echo "### tests"; cat /tmp/t.txt; } >> $R
