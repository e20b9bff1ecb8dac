#!/bin/bash
# device call D (right after C, same machine): the sweeps of call C fitted into each compiler's table of this GPU
# (the device's copy of the tree), then backend_compare with those tables (numba-cuda vs numba-cuda-mlir, quick perf
# set, default calls), then the unguarded / pre-pass GEMV tests under numba-cuda-mlir
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr A-Z a-z)
PN=/tmp/site:$PWD:/tmp/site_mlir; PM=/tmp/site_mlir:$PWD; TD=numba_nbits/kernels/gemv/tuned
for b in numba mlir; do
  suf=; pp=$PN; [ $b = mlir ] && { suf=-mlir; pp=$PM; }
  for m in 1 16; do
    [ -f /tmp/sw-$b-m$m/sweep_gemv_m1.json ] || continue
    env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b python3 -m benchmarks.sweep_gemv_m1 --fit /tmp/sw-$b-m$m/sweep_gemv_m1.json \
      --into $TD/$GPU-v2$suf.json --gpu $GPU > $OUT/fit-$b-m$m.txt 2>&1; echo "fit $b M=$m rc=$?"
  done
  cp $TD/$GPU-v2$suf.json $OUT/
done
git diff --stat -- $TD 2>/dev/null | tail -3
export PYTHONPATH=$PWD
timeout 330 python3 -m benchmarks.backend_compare --budget-s 85 --routes auto --path numba=/tmp/site:/tmp/site_mlir \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?"; tail -12 $OUT/bc.log
env PYTHONPATH=$PM NUMBA_NBITS_BACKEND=mlir timeout 120 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemv_mma.py \
  -k "unguarded" tests/test_nvvm_prepass.py > $OUT/tests-mlir.txt 2>&1; echo "tests mlir rc=$? $(tail -1 $OUT/tests-mlir.txt)"
