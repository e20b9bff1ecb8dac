# sourced by the call scripts: the GPU's name, the two compilers' paths, the variant sweep
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr A-Z a-z)
# numba-cuda needs numpy 2.4 (/tmp/site); libLLVM-7 for its pre-pass comes from numba-cuda-mlir's wheel, last on the path
PN=/tmp/site:$PWD:/tmp/site_mlir; PM=/tmp/site_mlir:$PWD
v() { for t in "$@"; do printf "%s,%sn,%so,%sno," $t $t $t $t; done; }
T1="$(v t1w8u2p1 t1w8u1p1 t1w4u2p1 t1w4u1p1 t1w8u1 t1w8u2p1b4)t1w8u1p2,t1w8u1p2o"
T16="$(v t1w8u1p1 t1w4u1p1 t2w4u1p1 t2w4u1 t2w8u1 t1w8u1)"; T16=${T16%,}
sw() {  # BACKEND M TAGS SHAPES BLOCKS: the tactic sweep's harness (plain, n, o, no of each tactic)
  local b=$1 m=$2 pp=$PN; [ $b = mlir ] && pp=$PM
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b NUMBA_NBITS_KERNEL_CACHE_DIR=$(mktemp -d) timeout 85 python3 -m benchmarks.sweep_gemv_m1 \
    --shapes $4 --blocks $5 --ms $m --no-bf16 --tags $3 --budget-s 65 --gpu $GPU --workers 14 \
    --out /tmp/sw-$b-m$m > $OUT/sw-$b-m$m.log 2>&1
  echo "sweep $b M=$m rc=$? $(date +%T)"; mkdir -p $OUT/sw-$b-m$m
  cp /tmp/sw-$b-m$m/sweep_gemv_m1.csv /tmp/sw-$b-m$m/tuned_table.json $OUT/sw-$b-m$m/ 2>/dev/null
}
# the keys where numba-cuda-mlir was > 2% slower on the H100 (2026-12-07-gpu-mlir-layout run3): M = 1 block 32 on
# 4096x4096 and 28672x8192, M = 16 block 128 on 28672x8192
sweeps() { sw $1 1 $T1 4096x4096,28672x8192 32; sw $1 16 $T16 28672x8192 128; }
