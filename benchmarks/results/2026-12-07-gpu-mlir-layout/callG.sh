#!/bin/bash
# device call G (after E and B): numba-cuda-mlir into /tmp/site_mlir; the mended tests under it; the GEMV tactic sweep
# under numba-cuda-mlir with mlir_layout (its fit becomes tuned/h100-v2-mlir.json); backend_compare with that table
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
T0=$(date +%s)
PYTHONPATH=/tmp/site_mlir:$PWD NUMBA_NBITS_BACKEND=mlir timeout 200 python3 -m pytest -q -p no:cacheprovider -ra tests/test_gemv_tuned.py \
  tests/test_scale.py -k "tuned or past_fused or within_256mib" > $OUT/tests-mended-mlir.txt 2>&1
echo "rc=$? wall=$(( $(date +%s) - T0 ))s" >> $OUT/tests-mended-mlir.txt; tail -3 $OUT/tests-mended-mlir.txt
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]*' | tr A-Z a-z)
PYTHONPATH=/tmp/site_mlir:$PWD NUMBA_NBITS_BACKEND=mlir timeout 200 python3 -m benchmarks.sweep_gemv_m1 \
  --shapes 4096x4096,28672x8192,128256x4096 --ms 1,16 --no-bf16 --budget-s 130 --gpu "$gpu" --workers 14 \
  --out $OUT/sweep-mlir > $OUT/sweep-mlir.log 2>&1; echo "sweep rc=$?" >> $OUT/sweep-mlir.log
cp $OUT/sweep-mlir/tuned_table.json numba_nbits/kernels/gemv/tuned/$gpu-v2-mlir.json || exit 1
echo "gpu=$gpu"; grep -A16 "^case" $OUT/sweep-mlir.log | head -16
export PYTHONPATH=$PWD
timeout 250 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto --path numba=/tmp/site \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?" >> $OUT/bc.log
tail -4 $OUT/bc.log
