#!/bin/bash
# device call C (carry .mlir/part1, right after B): numba-cuda-mlir installed (its libLLVM-7 serves both compilers'
# pre-pass); each compiler's variant sweeps; the four fitted into the compilers' tables of this GPU (kept in
# /tmp/tables for call D); the pre-pass tests under numba-cuda, the GEMV tests under numba-cuda-mlir
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
source benchmarks/results/2026-12-07-gpu-nvvm-prepass/common.sh
sweeps numba; sweeps mlir
TD=numba_nbits/kernels/gemv/tuned; mkdir -p /tmp/tables
for b in numba mlir; do
  suf=; pp=$PN; [ $b = mlir ] && { suf=-mlir; pp=$PM; }
  cp $TD/$GPU-v2$suf.json /tmp/tables/
  for m in 1 16; do
    [ -f /tmp/sw-$b-m$m/sweep_gemv_m1.json ] || continue
    env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b python3 -m benchmarks.sweep_gemv_m1 --fit /tmp/sw-$b-m$m/sweep_gemv_m1.json \
      --into /tmp/tables/$GPU-v2$suf.json --gpu $GPU > $OUT/fit-$b-m$m.txt 2>&1; echo "fit $b M=$m rc=$?"
  done
  cp /tmp/tables/$GPU-v2$suf.json $OUT/
done
env PYTHONPATH=$PN timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_nvvm_prepass.py > $OUT/tests-numba-prepass.txt 2>&1
echo "tests numba prepass rc=$? $(tail -1 $OUT/tests-numba-prepass.txt)"
env PYTHONPATH=$PM NUMBA_NBITS_BACKEND=mlir timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemv_mma.py \
  -k "unguarded or prepack" tests/test_gemv_repack.py tests/test_nvvm_prepass.py > $OUT/tests-mlir.txt 2>&1
echo "tests mlir rc=$? $(tail -1 $OUT/tests-mlir.txt)"
