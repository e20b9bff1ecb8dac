#!/bin/bash
# device call F (carry .mlir/part1, right after A and B on a fresh machine): numba-cuda-mlir installed; the perf
# harness's GPU time per node (one quick case, default call, the tables as shipped) of the two 28672x8192 keys that
# stayed > 2% slower under numba-cuda-mlir (../2026-12-07-gpu-wide-prepass), numba-cuda then numba-cuda-mlir
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; install_mlir || exit 1; echo "gpu=$GPU $(date +%T)"
perf() {  # BACKEND SHAPE BLOCK M: the default route's GPU time per node (us) of the correct row, and its tactic's log line
  local pp=$PN; [ $1 = mlir ] && pp=$PM; local O=/tmp/pk_$1_$2_b$3_m$4
  env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$1 timeout 40 python3 -m numba_nbits.perf --shapes $2 --M $4 --block-sizes $3 \
    --dtypes fp16 --bits 4 --routes auto --no-peers --no-plots --no-progress --budget-s 12 --out $O > $O.log 2>&1
  python3 -c "import csv; r=[x for x in csv.DictReader(open('$O/results.csv')) if x['zp']=='none' and x['correct']=='True']; print(r[0]['us'] if r else 'no row')" 2>/dev/null || echo "no csv"
}
for key in "l3-70b-up 32 1" "l3-70b-up 128 16"; do
  for b in numba mlir; do echo "$key $b $(perf $b $key) $(date +%T)"; done
done
