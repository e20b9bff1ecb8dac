#!/bin/bash
# device call A: install numpy 2.4.6 + nvmath (numba-cuda path); issue 20 bench_host and cold_start
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
W=/tmp/work; mkdir -p $W
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv; lscpu | grep -E "Model name|MHz"; python3 -c "import numpy, numba_cuda, torch, cupy; print(numpy.__version__, numba_cuda.__version__, torch.__version__, cupy.__version__)"; git log --oneline -1 2>/dev/null; } > $W/env.txt 2>&1
cp $W/env.txt $OUT/
mkdir -p $W/bh; OUT=$W/bh timeout 200 python3 -m benchmarks.bench_host > $W/bench_host.log 2>&1; echo "rc=$?" >> $W/bench_host.log
mkdir -p $W/cs; OUT=$W/cs timeout 140 python3 -m benchmarks.cold_start --workers 16 > $W/cold_start.log 2>&1; echo "rc=$?" >> $W/cold_start.log
cp $W/bench_host.log $W/cold_start.log $OUT/; cp $W/bh/*.csv $W/cs/*.csv $OUT/ 2>/dev/null
tar czf $OUT/callA.tgz -C $W .
