#!/bin/bash
# device call H (fresh machine): numba-cuda; 4096x4096 g32 M = 1 under ncu with each of the two compilers' picks,
# and the tactic sweep of that key (same machine as call J's numba-cuda-mlir runs)
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
D=benchmarks/results/2026-12-07-gpu-mlir-layout; TB=numba_nbits/kernels/gemv/tuned/h100-v2.json; cp $TB /tmp/tb.json
for T in t1w8u2p1 t1w8u1p1 t1w8u2p1b4; do
  python3 $D/force_tactic.py $TB 4096 4096 32 1 $T
  timeout 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum,launch__registers_per_thread --launch-skip 20 --launch-count 8 \
    python3 -m benchmarks.kernel_time --shape 4096x4096 --block 32 > $OUT/ncu_numba_$T.csv 2>/tmp/e.txt || tail -3 /tmp/e.txt
  python3 -m benchmarks.kernel_time --parse $OUT/ncu_numba_$T.csv | tail -3
  OUTP=$OUT/perf_numba_$T; timeout 90 python3 -m numba_nbits.perf --shapes l3-8b-attn --M 1 --block-sizes 32 --dtypes fp16 --bits 4 \
    --routes auto --no-peers --no-plots --no-progress --out $OUTP > /tmp/p.log 2>&1; grep -h "gemv_w4" $OUTP/summary.md | head -2
done
cp /tmp/tb.json $TB
timeout 120 python3 -m benchmarks.sweep_gemv_m1 --shapes 4096x4096 --ms 1 --blocks 32 --no-bf16 --budget-s 60 --gpu h100 --workers 14 \
  --out $OUT/sweep-numba-4096 > $OUT/sweep-numba-4096.log 2>&1; grep -A3 "^case" $OUT/sweep-numba-4096.log
