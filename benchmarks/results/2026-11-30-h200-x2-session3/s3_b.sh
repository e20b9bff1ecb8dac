#!/usr/bin/env bash
# Session 3 call B. GPU0: gemv-grid shards 2 and 3 of 4 (--compile-workers, kernel cache fixed).
# GPU1: kernel-cache GPU test; initcheck (cuBLAS calls skipped) of test_op + test_gemv, 8 processes.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s3_b.log; F=perf/results/2026-11-30-h200-x2-full
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
( export CUDA_VISIBLE_DEVICES=0
  for S in 2 3; do
    timeout 275 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --missing-from $F --shard $S/4 \
      --compile-workers 12 --budget-s 235 --commit $C --out /tmp/g$S --no-progress > /tmp/g$S.log 2>&1
    echo "EXIT $?" >> /tmp/g$S.log; cp /tmp/g$S.log /tmp/g$S/run.log; tar czf $OUT/grid${S}of4.tgz -C /tmp g$S
  done ) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernel_cache.py > $OUT/kc.log 2>&1; echo "EXIT $?" >> $OUT/kc.log
  mkdir -p $OUT/initcheck
  SANITIZER_LOG_DIR=$OUT/initcheck SHARDS=8 SANITIZER_TIMEOUT=$((540 - SECONDS)) SANITIZER_TOOLS=initcheck \
    PYTEST_ADDOPTS='-m "not slow" -rs' bash tests/gpu_sanitize.sh tests/test_op.py tests/test_gemv.py > /tmp/ic.txt 2>&1
  echo "EXIT $?" >> /tmp/ic.txt ) &
wait
{ for S in 2 3; do echo "### grid $S"; head -5 /tmp/g$S/run.log; tail -n 4 /tmp/g$S.log; done
  echo "### test_kernel_cache"; tail -4 $OUT/kc.log; echo "### initcheck"; cat /tmp/ic.txt
  echo "### skips by reason"; cat $OUT/initcheck/initcheck.*.log | grep -E "^SKIPPED" | sed -E 's/^SKIPPED \[[0-9]+\] [^ ]+ //' | sort | uniq -c | sort -rn | head
  du -sh ~/.cache/numba_nbits 2>/dev/null; } >> $R
