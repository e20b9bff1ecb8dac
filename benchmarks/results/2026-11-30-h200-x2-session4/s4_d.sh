#!/usr/bin/env bash
# Session 4 call D (nvidia-h200-x2), main after the tensor-core 8/2-bit GEMV: GPU0 the fuzz (large profile, 10 shards,
# every route incl. gemv_w8 M<=16 and gemv_w2 on tensor cores); GPU1 memcheck + racecheck of the low-bit gemv_mma tests.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s4_d.log
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
( export CUDA_VISIBLE_DEVICES=0
  OUT=/tmp/fz NUMBA_NBITS_FUZZ_EXAMPLES=1500 SHARDS=12 SEED=400 FUZZ_TIMEOUT=270 bash tests/gpu_fuzz.sh > /tmp/fz.txt 2>&1; echo "EXIT $?" >> /tmp/fz.txt
  cp /tmp/fz.txt /tmp/fz/; tar czf $OUT/fuzz.tgz -C /tmp fz ) &
( export CUDA_VISIBLE_DEVICES=1; mkdir -p /tmp/san
  SANITIZER_LOG_DIR=/tmp/san SANITIZER_TOOLS="memcheck racecheck" SHARDS=4 SANITIZER_TIMEOUT=140 \
    PYTEST_ADDOPTS='-k low_bits' bash tests/gpu_sanitize.sh tests/test_gemv_mma.py > /tmp/san.txt 2>&1; echo "EXIT $?" >> /tmp/san.txt
  cp /tmp/san.txt /tmp/san/; tar czf $OUT/san.tgz -C /tmp san ) &
wait
{ echo "### fuzz"; tail -n 25 /tmp/fz.txt; echo "### sanitizers"; tail -n 25 /tmp/san.txt; } >> $R
