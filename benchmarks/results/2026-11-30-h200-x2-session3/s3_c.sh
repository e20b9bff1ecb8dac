#!/usr/bin/env bash
# Session 3 call C. GPU0: gemv-grid shard 4/4, then racecheck of test_gemv (10 processes).
# GPU1: kernel cache cold then warm: test_gemv + test_gemv_mma (6 shards each) with a fresh cache dir, twice.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s3_c.log; F=perf/results/2026-11-30-h200-x2-full; T0=$SECONDS
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
( export CUDA_VISIBLE_DEVICES=0; S=4
  timeout 275 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --missing-from $F --shard $S/4 \
    --compile-workers 12 --budget-s 235 --commit $C --out /tmp/g$S --no-progress > /tmp/g$S.log 2>&1
  echo "EXIT $?" >> /tmp/g$S.log; cp /tmp/g$S.log /tmp/g$S/run.log; tar czf $OUT/grid${S}of4.tgz -C /tmp g$S
  mkdir -p /tmp/rc
  SANITIZER_LOG_DIR=/tmp/rc SHARDS=10 SANITIZER_TIMEOUT=$((545 - SECONDS)) SANITIZER_TOOLS=racecheck \
    PYTEST_ADDOPTS='-m "not slow"' bash tests/gpu_sanitize.sh tests/test_gemv.py > /tmp/rc.txt 2>&1
  echo "EXIT $?" >> /tmp/rc.txt; tar czf $OUT/racecheck_logs.tgz -C /tmp rc ) &
( export CUDA_VISIBLE_DEVICES=1 NUMBA_NBITS_KERNEL_CACHE_DIR=/tmp/kcache_fresh
  for phase in cold warm; do
    mkdir -p /tmp/t$phase; S0=$SECONDS
    LOGDIR=/tmp/t$phase/logs OUT=/tmp/t$phase TEST_TIMEOUT=250 SHARDS=6 BIG="tests/test_gemv_mma.py tests/test_gemv.py" \
      FILES="tests/test_gemv_mma.py tests/test_gemv.py" bash tests/gpu_parallel.sh > /tmp/t$phase.txt 2>&1
    echo "$phase: $((SECONDS - S0)) s; cache files: $(find /tmp/kcache_fresh -name '*.cubin' | wc -l)" >> /tmp/t$phase.txt
  done ) &
wait
{ echo "### grid 4"; head -5 /tmp/g4/run.log; tail -n 4 /tmp/g4.log; echo "### racecheck test_gemv"; cat /tmp/rc.txt
  echo "### cold"; cat /tmp/tcold.txt; echo "### warm"; cat /tmp/twarm.txt; } >> $R
tar czf $OUT/cache_runs.tgz -C /tmp tcold.txt twarm.txt
