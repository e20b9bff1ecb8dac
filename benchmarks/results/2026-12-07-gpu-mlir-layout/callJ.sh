#!/bin/bash
# device call J (after H and B): numba-cuda-mlir; the same ncu / perf / sweep of 4096x4096 g32 M = 1
# (the whole GPU suite was left out: not enough device time left)
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
export PYTHONPATH=/tmp/site_mlir:$PWD NUMBA_NBITS_BACKEND=mlir
D=benchmarks/results/2026-12-07-gpu-mlir-layout; TB=numba_nbits/kernels/gemv/tuned/h100-v2-mlir.json; cp $TB /tmp/tbm.json
for T in t1w8u1p1 t1w8u2p1 t1w8u2p1b4; do
  python3 $D/force_tactic.py $TB 4096 4096 32 1 $T
  timeout 60 ncu --clock-control none --csv --metrics gpu__time_duration.sum,launch__registers_per_thread --launch-skip 20 --launch-count 8 \
    python3 -m benchmarks.kernel_time --shape 4096x4096 --block 32 > $OUT/ncu_mlir_$T.csv 2>/tmp/e.txt || tail -3 /tmp/e.txt
  python3 -m benchmarks.kernel_time --parse $OUT/ncu_mlir_$T.csv | tail -3
  OUTP=$OUT/perf_mlir_$T; timeout 90 python3 -m numba_nbits.perf --shapes l3-8b-attn --M 1 --block-sizes 32 --dtypes fp16 --bits 4 \
    --routes auto --no-peers --no-plots --no-progress --out $OUTP > /tmp/p.log 2>&1; grep -h "gemv_w4" $OUTP/summary.md | head -2
done
cp /tmp/tbm.json $TB
timeout 120 python3 -m benchmarks.sweep_gemv_m1 --shapes 4096x4096 --ms 1 --blocks 32 --no-bf16 --budget-s 60 --gpu h100 --workers 14 \
  --out $OUT/sweep-mlir-4096 > $OUT/sweep-mlir-4096.log 2>&1; grep -A3 "^case" $OUT/sweep-mlir-4096.log
