#!/usr/bin/env bash
# Session 3 call D: the whole GPU suite at this tree (kernel cache on), split over the two GPUs.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1 PYTHON=python3
C=$(cat .carry/COMMIT); R=$OUT/s3_d.log
{ nvidia-smi --query-gpu=index,name,driver_version --format=csv; echo "tree: $C"; date; } > $R
H="tests/test_mixed_gemm.py tests/test_fpa_intb.py tests/test_numerics.py tests/test_fuzz.py tests/test_torch.py"
REST=$(ls tests/test_*.py | grep -vE "$(echo $H | sed 's/ /|/g')" | tr '\n' ' ')
( export CUDA_VISIBLE_DEVICES=0 NUMBA_NBITS_FUZZ_EXAMPLES=60; S0=$SECONDS; mkdir -p /tmp/d0
  LOGDIR=/tmp/d0/logs OUT=/tmp/d0 TEST_TIMEOUT=500 SHARDS=8 BIG="$H" FILES="$H" bash tests/gpu_parallel.sh > /tmp/d0.txt 2>&1
  echo "wall $((SECONDS - S0)) s" >> /tmp/d0.txt ) &
( export CUDA_VISIBLE_DEVICES=1 NUMBA_NBITS_KERNEL_CACHE_DIR=/tmp/kcache_fresh; S0=$SECONDS; mkdir -p /tmp/d1
  LOGDIR=/tmp/d1/logs OUT=/tmp/d1 TEST_TIMEOUT=500 SHARDS=6 BIG="tests/test_gemv.py tests/test_gemv_mma.py tests/test_op.py" \
    FILES="$REST" bash tests/gpu_parallel.sh > /tmp/d1.txt 2>&1
  echo "wall $((SECONDS - S0)) s" >> /tmp/d1.txt ) &
wait
{ echo "### GPU0: $H"; cat /tmp/d0.txt; echo "### GPU1: $REST"; cat /tmp/d1.txt; } >> $R
mkdir -p /tmp/dl && cp -r /tmp/d0/logs /tmp/dl/gpu0 && cp -r /tmp/d1/logs /tmp/dl/gpu1; tar czf $OUT/suite_logs.tgz -C /tmp dl
