#!/bin/bash
# device call K3 (after K1 and B): numba-cuda-mlir; the perf harness's GPU time per node of numba-cuda-mlir's candidate
# tactics on two keys the sweep's fit left within 1% of each other, the fastest of each written to numba-cuda-mlir's H100
# table (with 4096x4096 g32 M = 1 -> t1w8u2p1b4, measured in call J), then backend_compare with that table
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
D=benchmarks/results/2026-12-07-gpu-mlir-layout; TB=numba_nbits/kernels/gemv/tuned/h100-v2-mlir.json
pick() {  # KEY(N K B M) SHAPE BLOCK M CANDIDATES...
  local N=$1 K=$2 B=$3 M=$4 S=$5; shift 5; local best= bu=1e9
  for T in "$@"; do
    python3 $D/force_tactic.py $TB $N $K $B $M $T > /dev/null
    O=$OUT/pick_${N}x${K}_b${B}_m${M}_$T
    PYTHONPATH=/tmp/site_mlir:$PWD NUMBA_NBITS_BACKEND=mlir timeout 60 python3 -m numba_nbits.perf --shapes $S --M $M \
      --block-sizes $B --dtypes fp16 --bits 4 --routes auto --no-peers --no-plots --no-progress --budget-s 30 --out $O > $O.log 2>&1
    us=$(python3 -c "import csv,sys; r=[x for x in csv.DictReader(open('$O/results.csv')) if x['zp']=='none' and x['correct']=='True']; print(r[0]['us'] if r else 1e9)")
    echo "$N x $K g$B M=$M $T $us"
    if python3 -c "import sys; sys.exit(0 if float('$us') < float('$bu') else 1)"; then best=$T; bu=$us; fi
  done
  python3 $D/force_tactic.py $TB $N $K $B $M $best
}
python3 $D/force_tactic.py $TB 4096 4096 32 1 t1w8u2p1b4
pick 28672 8192 32 1 l3-70b-up t1w8u1p2 t1w4u2p1 t1w8u2p1b4
pick 28672 8192 128 16 l3-70b-up t2w4u1 t2w4u1p1
cp $TB $OUT/h100-v2-mlir.json
export PYTHONPATH=$PWD
timeout 220 python3 -m benchmarks.backend_compare --budget-s 80 --routes auto --path numba=/tmp/site \
  --path mlir=/tmp/site_mlir > $OUT/bc.log 2>&1; echo "bc rc=$?" >> $OUT/bc.log
tail -4 $OUT/bc.log
