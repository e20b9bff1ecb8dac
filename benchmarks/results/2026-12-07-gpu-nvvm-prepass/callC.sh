#!/bin/bash
# device call C (after A and B, one warm machine): numba-cuda-mlir installed; GPU tests of the unguarded-prefetch
# kernels and the tail of the packed layout; then the tactic sweep's harness on the register-pipeline tactics of the
# tables, each plain, with unguarded prefetch (n), with the LLVM 7 pre-pass (o) and with both (no), under each compiler
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr A-Z a-z)
echo "gpu=$GPU $(date +%T)"
# numba-cuda needs numpy 2.4 (/tmp/site); libLLVM-7 for its pre-pass comes from numba-cuda-mlir's wheel, last on the path
PN=/tmp/site:$PWD:/tmp/site_mlir; PM=/tmp/site_mlir:$PWD
env PYTHONPATH=$PN timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemv_mma.py -k "unguarded" \
  tests/test_gemv_repack.py > $OUT/tests-numba.txt 2>&1; echo "tests numba rc=$? $(tail -1 $OUT/tests-numba.txt)"
v() { for t in "$@"; do printf "%s,%sn,%so,%sno," $t $t $t $t; done; }
T1="$(v t1w8u2p1 t1w8u1p1 t1w4u2p1 t1w4u1p1 t1w8u1 t1w8u2p1b4)t1w8u1p2,t1w8u1p2o"
T16="$(v t1w8u1p1 t1w4u1p1 t2w4u1p1 t2w4u1 t2w8u1 t1w8u1)"; T16=${T16%,}
sw() {  # BACKEND M TAGS SHAPES BLOCKS
  local b=$1 m=$2 pp=$PN; [ $b = mlir ] && pp=$PM
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b NUMBA_NBITS_KERNEL_CACHE_DIR=$(mktemp -d) timeout 85 python3 -m benchmarks.sweep_gemv_m1 \
    --shapes $4 --blocks $5 --ms $m --no-bf16 --tags $3 --budget-s 65 --gpu $GPU --workers 14 \
    --out /tmp/sw-$b-m$m > $OUT/sw-$b-m$m.log 2>&1
  echo "sweep $b M=$m rc=$? $(date +%T)"; mkdir -p $OUT/sw-$b-m$m; cp /tmp/sw-$b-m$m/sweep_gemv_m1.csv /tmp/sw-$b-m$m/tuned_table.json $OUT/sw-$b-m$m/ 2>/dev/null
}
# the keys where numba-cuda-mlir was > 2% slower on the H100 (2026-12-07-gpu-mlir-layout run3): M = 1 block 32 on
# 4096x4096 and 28672x8192, M = 16 block 128 on 28672x8192
for b in numba mlir; do sw $b 1 $T1 4096x4096,28672x8192 32; sw $b 16 $T16 28672x8192 128; done
