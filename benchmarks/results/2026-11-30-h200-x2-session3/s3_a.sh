#!/usr/bin/env bash
# Session 3 call A (nvidia-h200-x2). GPU0: gemv-grid shard ${S}/4 with --compile-workers (kernel cache).
# GPU1: initcheck probe (does --check-bulk-copy yes make initcheck see cuBLAS's stores?), kernel-cache GPU test,
#       GPU suite part cold then warm.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s3_a.log; F=perf/results/2026-11-30-h200-x2-full; S=${S:-1}
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; nproc; } > $R
( export CUDA_VISIBLE_DEVICES=0
  timeout 545 python3 -m numba_nbits.perf --plan gemv-grid --routes auto --missing-from $F --shard $S/4 \
    --compile-workers ${CW:-14} --budget-s 500 --commit $C --out /tmp/g$S --no-progress > /tmp/g.log 2>&1
  echo "EXIT $?" >> /tmp/g.log; cp /tmp/g.log /tmp/g$S/run.log; tar czf $OUT/grid${S}of4.tgz -C /tmp g$S ) &
( export CUDA_VISIBLE_DEVICES=1
  compute-sanitizer --help > $OUT/sanitizer_help.txt 2>&1; compute-sanitizer --version >> $OUT/sanitizer_help.txt 2>&1
  for v in "cublas" "cublas --check-bulk-copy yes" "gemv --check-bulk-copy yes"; do
    set -- $v; m=$1; shift
    echo "### initcheck probe $m $*" >> /tmp/probe.txt
    timeout 100 compute-sanitizer --tool initcheck --print-limit 3 --show-backtrace no "$@" python3 .carry/initcheck_probe.py $m >> /tmp/probe.txt 2>&1
    echo "EXIT $?" >> /tmp/probe.txt
  done
  timeout 200 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_kernel_cache.py > /tmp/kc.log 2>&1; echo "EXIT $?" >> /tmp/kc.log
  mkdir -p /tmp/tc; S0=$SECONDS
  OUT=/tmp/tc TEST_TIMEOUT=$((330 - SECONDS)) SHARDS=6 BIG="tests/test_gemv_mma.py tests/test_gemv.py" \
    FILES="tests/test_gemv_mma.py tests/test_gemv.py tests/test_graphs.py tests/test_host_path.py" \
    bash tests/gpu_parallel.sh > /tmp/tc.txt 2>&1; echo "cold: $((SECONDS - S0)) s" >> /tmp/tc.txt
  mkdir -p /tmp/tw; S0=$SECONDS
  OUT=/tmp/tw TEST_TIMEOUT=$((535 - SECONDS)) SHARDS=6 BIG="tests/test_gemv_mma.py tests/test_gemv.py" \
    FILES="tests/test_gemv_mma.py tests/test_gemv.py" \
    bash tests/gpu_parallel.sh > /tmp/tw.txt 2>&1; echo "warm: $((SECONDS - S0)) s" >> /tmp/tw.txt ) &
wait
{ echo "### grid"; tail -n 30 /tmp/g.log; echo "### probe"; cat /tmp/probe.txt; echo "### test_kernel_cache"; tail -5 /tmp/kc.log
  echo "### cold"; cat /tmp/tc.txt; echo "### warm"; cat /tmp/tw.txt; du -sh ~/.cache/numba_nbits 2>/dev/null; } >> $R
grep -iE "bulk|unused|initcheck" $OUT/sanitizer_help.txt >> $R
