#!/bin/bash
# device call E (carry .mlir/part1; after A and B on a fresh machine): numba-cuda-mlir installed; backend_compare
# (numba-cuda vs numba-cuda-mlir, quick perf set, default calls) with the tables as committed: the three keys call C's
# sweeps moved (4096x4096 g32 M = 1 -> t1w8u2p1b4no under both compilers, 28672x8192 g128 M = 16 -> t2w4u1p1n under
# numba-cuda-mlir), every other key as before (call D's run merged whole tables by mistake and is not a result)
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
export PYTHONPATH=$PWD
mkdir -p /tmp/bc; OUT=/tmp/bc timeout 330 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto \
  --path numba=/tmp/site:/tmp/site_mlir --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?"; tail -4 $OUT/bc.log
cp /tmp/bc/routes.csv /tmp/bc/compile.csv /tmp/bc/launch.csv $OUT/
