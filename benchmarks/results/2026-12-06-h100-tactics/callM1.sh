#!/bin/bash
# numba-cuda-mlir (image numpy) into /tmp/site_mlir, then the tensor-core GEMV tactic sweep under it (quick-set shapes)
cp .mlir/part1 /tmp/mlirp/ && W=/tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl \
  && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > $W \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir $W /tmp/whl/nvmath*.whl || exit 1
export NUMBA_NBITS_BACKEND=mlir PYTHONPATH=/tmp/site_mlir:$PWD
python3 -c "import numpy, numba_nbits.backend as b; print('numpy', numpy.__version__, 'compiler', b.compiler(), b.version())" | tee $OUT/env-mlir.txt
G=$(python3 -c "from numba_nbits.kernels.gemv.tactics import gpu_key; from numba import cuda; print(gpu_key(cuda.get_current_device().name))")
timeout 200 python3 -m benchmarks.sweep_gemv_m1 --shapes 4096x4096,28672x8192,128256x4096 --ms 1,16 --no-bf16 \
  --budget-s 150 --gpu "$G" --workers 14 --out $OUT/sweep-mlir > $OUT/sweep-mlir.log 2>&1
echo "sweep rc=$? gpu=$G" >> $OUT/sweep-mlir.log
cp $OUT/sweep-mlir/tuned_table.json /tmp/mlir_table.json
grep -A14 "^case" $OUT/sweep-mlir.log; tail -1 $OUT/sweep-mlir.log
