#!/bin/bash
# numba-cuda-mlir (image numpy 2.5.2) into /tmp/site_mlir, then the tensor-core GEMV tactic sweep under it
cp .mlir/part1 /tmp/mlirp/ && W=/tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl \
  && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > $W \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir $W /tmp/whl/nvmath*.whl || exit 1
export NUMBA_NBITS_BACKEND=mlir PYTHONPATH=/tmp/site_mlir:$PWD
python3 -c "import numpy, numba_nbits.backend as b; print('numpy', numpy.__version__, 'compiler', b.compiler(), b.version())" | tee $OUT/env-mlir.txt
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]*' | tr A-Z a-z)
timeout 420 python3 -m benchmarks.sweep_gemv_m1 --shapes 4096x4096,28672x8192,128256x4096 --ms 1,16 --no-bf16 \
  --budget-s "${1:-240}" --gpu "$gpu" --workers 14 --out $OUT/sweep-mlir > $OUT/sweep-mlir.log 2>&1
echo "sweep rc=$?" >> $OUT/sweep-mlir.log
cp $OUT/sweep-mlir/tuned_table.json /tmp/mlir_table.json; echo "gpu=$gpu"
grep -A40 "^case" $OUT/sweep-mlir.log | head -30
