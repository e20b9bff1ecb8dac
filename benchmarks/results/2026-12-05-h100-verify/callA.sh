#!/bin/bash
# device call A: GPU tests not run since their last edits, cold start and compile time on the host
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
W=/tmp/work; mkdir -p $W
{ nvidia-smi -L; python3 -c "import numpy, numba_cuda; print(numpy.__version__, numba_cuda.__version__)"; git log --oneline -1 2>/dev/null; } > $W/env.txt 2>&1
cp $W/env.txt $OUT/
timeout 330 python3 -m pytest -q -p no:cacheprovider -n 14 --durations=15 tests/test_scale.py tests/test_bench_overlap.py tests/test_dequant_overlap.py tests/test_small_gemm.py tests/test_graphs.py tests/test_numerics.py > $W/gpu-tests.txt 2>&1; echo "rc=$?" >> $W/gpu-tests.txt
tail -60 $W/gpu-tests.txt > $OUT/gpu-tests-tail.txt
mkdir -p $W/cs; OUT=$W/cs timeout 130 python3 -m benchmarks.cold_start --workers 16 > $W/cold_start.log 2>&1; echo "rc=$?" >> $W/cold_start.log
mkdir -p $W/ct; OUT=$W/ct timeout 60 python3 -m benchmarks.compile_time --tactics t1w8u1xhvm:16 t2w8u1s3xhv:8 t1w8u1s3xhv:32 > $W/compile_time.log 2>&1; echo "rc=$?" >> $W/compile_time.log
cp $W/cold_start.log $W/compile_time.log $OUT/
tar czf $OUT/callA.tgz -C $W .
