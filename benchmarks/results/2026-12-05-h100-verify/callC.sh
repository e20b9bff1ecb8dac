#!/bin/bash
# device call C (after A and B on the same warm machine): numba-cuda-mlir 0.6.0 with the image's numpy
set -x
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
export PYTHONPATH=/tmp/site_mlir:$PWD NUMBA_NBITS_BACKEND=mlir
W=/tmp/workC; mkdir -p $W
python3 -c "import numpy, numba_cuda_mlir; from numba_nbits import backend; print(numpy.__version__, numba_cuda_mlir.__version__, backend.compiler())" > $W/env.txt 2>&1
cp $W/env.txt $OUT/
timeout 290 python3 -m pytest -q -p no:cacheprovider -n 14 --durations=10 tests/test_gemv_mma.py tests/test_small_gemm.py tests/test_backend.py tests/test_kernel_cache.py > $W/gpu-tests-mlir.txt 2>&1; echo "rc=$?" >> $W/gpu-tests-mlir.txt
tail -60 $W/gpu-tests-mlir.txt > $OUT/gpu-tests-mlir-tail.txt
for v in stock fixed; do mkdir -p $W/ct-$v; a=""; [ $v = stock ] && a="--stock-mlir --no-typing-memo"; OUT=$W/ct-$v timeout 80 python3 -m benchmarks.compile_time $a --tactics t1w8u1xhvm:16 t2w8u1s3xhv:8 t1w8u1s3xhv:32 > $W/compile_time_mlir_$v.log 2>&1; echo "rc=$?" >> $W/compile_time_mlir_$v.log; done
cp $W/compile_time_mlir_*.log $OUT/
tar czf $OUT/callC.tgz -C $W .
