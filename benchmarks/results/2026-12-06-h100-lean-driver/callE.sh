#!/bin/bash
# device call E: the lean driver calls (integer-handle cuda-bindings API) on the steady-state path
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
W=/tmp/workE; mkdir -p $W
{ date -u; nvidia-smi -L; python3 -c "import numpy, numba_cuda, cuda.bindings; print(numpy.__version__, numba_cuda.__version__, cuda.bindings.__version__)"; git log --oneline -1 2>/dev/null; git status --short; } > $W/env.txt 2>&1
python3 .whl/lean_micro.py > $W/lean_micro.txt 2>&1; echo "rc=$?" >> $W/lean_micro.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider -n 14 -ra tests/test_host_path.py tests/test_bind.py tests/test_graphs.py tests/test_packed_only.py tests/test_bad_inputs.py tests/test_config.py > $W/gpu-tests.txt 2>&1; echo "rc=$?" >> $W/gpu-tests.txt
python3 .whl/lean_micro.py > $W/lean_micro2.txt 2>&1; echo "rc=$?" >> $W/lean_micro2.txt
mkdir -p $W/bh; OUT=$W/bh timeout 200 python3 -m benchmarks.bench_host > $W/bench_host.log 2>&1; echo "rc=$?" >> $W/bench_host.log
cp $W/env.txt $W/lean_micro*.txt $W/bench_host.log $OUT/; cp $W/bh/bench_host.csv $OUT/; tail -40 $W/gpu-tests.txt > $OUT/gpu-tests-tail.txt
tar czf $OUT/callE.tgz -C $W .
