#!/bin/bash
# device call D2 (carry .mlir/part1, right after A and B): numba-cuda-mlir installed; the perf harness's GPU time per
# node (one quick case each) on the three keys where numba-cuda-mlir stayed > 2% slower (backend_compare of call C2):
# numba-cuda's table pick first, then numba-cuda-mlir's candidates (its pick first, then n / o forms and numba-cuda's
# pick) forced one at a time into its table of this GPU (../2026-12-07-gpu-mlir-layout/force_tactic.py); the table
# with each key's fastest is copied out
D=benchmarks/results/2026-12-07-gpu-wide-prepass; F=benchmarks/results/2026-12-07-gpu-mlir-layout/force_tactic.py
source $D/common.sh; install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"; TB=numba_nbits/kernels/gemv/tuned/$GPU-v2-mlir.json
perf() {  # BACKEND SHAPE BLOCK M TAG: one quick case, the default route's GPU time per node (us) of the correct row
  local pp=$PN; [ $1 = mlir ] && pp=$PM; local O=/tmp/pk_$1_$2_b$3_m$4_$5
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$1 timeout 45 python3 -m numba_nbits.perf --shapes $2 --M $4 --block-sizes $3 \
    --dtypes fp16 --bits 4 --routes auto --no-peers --no-plots --no-progress --budget-s 15 --out $O > $O.log 2>&1
  python3 -c "import csv; r=[x for x in csv.DictReader(open('$O/results.csv')) if x['zp']=='none' and x['correct']=='True']; print(r[0]['us'] if r else 1e9)" 2>/dev/null || echo 1e9
}
pick() {  # N K B M SHAPE CANDIDATES...
  local N=$1 K=$2 B=$3 M=$4 S=$5; shift 5; local best= bu=1e9
  echo "$N x $K g$B M=$M numba (its table) $(perf numba $S $B $M table) $(date +%T)"
  for T in "$@"; do
    python3 $F $TB $N $K $B $M $T > /dev/null
    us=$(perf mlir $S $B $M $T); echo "$N x $K g$B M=$M mlir $T $us"
    if python3 -c "import sys; sys.exit(0 if float('$us') < float('$bu') else 1)"; then best=$T; bu=$us; fi
  done
  python3 $F $TB $N $K $B $M $best
}
pick 4096 4096 32 1 l3-8b-attn t1w8u2p1b4no t1w8u2p1 t1w8u2p1n t1w8u2p1b4
pick 28672 8192 32 1 l3-70b-up t1w8u1p2 t1w4u2p1n
pick 28672 8192 128 16 l3-70b-up t2w4u1p1n t2w4u1p1o
cp $TB $OUT/; date +%T
