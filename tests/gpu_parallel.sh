#!/usr/bin/env bash
# Run the GPU test suite in parallel, one pytest per file (the big files sharded 4 ways): the suite is
# compile-bound on the CPU, so its wall time falls with the number of cores used. Usage, from the repo
# root with PYTHONPATH set: OUT=dir [TEST_TIMEOUT=300] [SHARDS=4] [FILES="tests/test_a.py ..."] bash tests/gpu_parallel.sh
# Prints one summary line per log and concatenates every log into $OUT/all_tests.log.
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0 PYTHONUNBUFFERED=1
export NUMBA_NBITS_TEST_WORKERS=${NUMBA_NBITS_TEST_WORKERS:-0}  # this script runs its own processes: none inside each pytest
L=${LOGDIR:-$(mktemp -d /tmp/tlogs.XXXXXX)}; mkdir -p $L  # a fresh directory per run: no stale logs from an earlier call
T=${TEST_TIMEOUT:-300}
SHARDS=${SHARDS:-4}
BIG=${BIG:-"tests/test_gemv.py tests/test_gemv_mma.py tests/test_mixed_gemm.py tests/test_numerics.py tests/test_torch.py tests/test_fpa_intb.py"}
for f in ${FILES:-tests/test_*.py}; do
  n=$(basename $f .py)
  if [[ " $BIG " == *" $f "* ]]; then
    python3 -m pytest --co -q -p no:cacheprovider $f 2>/dev/null | grep "::" > $L/$n.ids
    for s in $(seq 0 $((SHARDS-1))); do
      awk -v s=$s -v S=$SHARDS 'NR%S==s' $L/$n.ids > $L/$n.$s.ids
      [ -s $L/$n.$s.ids ] || continue  # fewer tests than shards: an empty list would make pytest run everything
      # one test id per line; ids may contain spaces (parametrised messages), so no word splitting
      ( mapfile -t ids < $L/$n.$s.ids
        timeout $T python3 -m pytest -q -p no:cacheprovider -rfE "${ids[@]}" > $L/$n.$s.log 2>&1; echo "EXIT $?" >> $L/$n.$s.log ) &
    done
  else
    ( timeout $T python3 -m pytest -q -p no:cacheprovider -rfE $f > $L/$n.log 2>&1; echo "EXIT $?" >> $L/$n.log ) &
  fi
done
wait
for f in $L/*.log; do echo "== $(basename $f): $(grep -E '(passed|failed|error)' $f | tail -1) $(tail -1 $f)"; grep -E '^(FAILED|ERROR)' $f | head -6; done
cat $L/*.log > $OUT/all_tests.log
