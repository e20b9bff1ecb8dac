#!/bin/bash
# device call A: numba-cuda path (numpy 2.4.6 + nvmath into /tmp/site): GPU tests the branch touches; ncu of the
# 4-bit M = 1 GEMV at blocks 32 and 128 (issue 17: where block 32's time goes)
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
W=/tmp/workA; mkdir -p $W
{ date -u; nvidia-smi -L; python3 -c "import numpy, numba_cuda; print(numpy.__version__, numba_cuda.__version__)"; } > $W/env.txt 2>&1; cp $W/env.txt $OUT/
T0=$(date +%s)
timeout 330 python3 -m pytest -q -p no:cacheprovider -ra tests/test_gemv_mma.py tests/test_small_gemm.py tests/test_mlir_layout.py \
  tests/test_backend.py tests/test_dispatch.py tests/test_kernel_cache.py > $W/tests-numba.txt 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))s" >> $W/tests-numba.txt
tail -40 $W/tests-numba.txt > $OUT/tests-numba-tail.txt
S="--section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats --section SpeedOfLight --section InstructionStats"
for c in "8192x28672 32" "8192x28672 128" "28672x8192 32" "28672x8192 128"; do set -- $c
  timeout 60 ncu --clock-control none --csv --page details $S --launch-skip 20 --launch-count 3 \
    python3 -m benchmarks.kernel_time --shape $1 --block $2 > $W/ncu_$1_b$2.csv 2> $W/ncu_err.txt || tail -3 $W/ncu_err.txt
done
cp $W/ncu_*.csv $OUT/; tar czf $OUT/callA.tgz -C $W .
tail -5 $W/tests-numba.txt
