#!/bin/bash
# device call G: bench_host + cold_start with cuda-bindings 13.5 (lean driver calls on), then the whole GPU suite on numba-cuda
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_cb .whl/cb/*.whl || exit 1
export PYTHONPATH=/tmp/site_cb:/tmp/site:$PWD
W=/tmp/workG; mkdir -p $W
{ date -u; nvidia-smi -L; lscpu | grep "Model name"; python3 -c "import numpy, numba_cuda, cuda.bindings; from numba_nbits import backend, launch; print(numpy.__version__, numba_cuda.__version__, cuda.bindings.__version__, backend.compiler(), launch.lean_driver() is not None)"; git log --oneline -1 2>/dev/null; } > $W/env.txt 2>&1
cp $W/env.txt $OUT/
[ -z "$SKIPBH" ] && mkdir -p $W/bh && OUT=$W/bh timeout 120 python3 -m benchmarks.bench_host > $W/bench_host.log 2>&1; echo "rc=$?" >> $W/bench_host.log
[ -z "$SKIPBH" ] && mkdir -p $W/cs && OUT=$W/cs timeout 110 python3 -m benchmarks.cold_start --workers 16 > $W/cold_start.log 2>&1; echo "rc=$?" >> $W/cold_start.log
cp $W/bench_host.log $W/cold_start.log $W/bh/bench_host.csv $W/cs/cold_start.csv $OUT/ 2>/dev/null
T0=$(date +%s); TL=$(( ${TOTAL:-505} - T0 + START ))
timeout $TL env -u OUT python3 -m pytest -q -p no:cacheprovider -ra --durations=25 > $W/suite-numba.txt 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))s limit=${TL}s" >> $W/suite-numba.txt
grep -v "^SKIPPED" $W/suite-numba.txt | tail -60 > $OUT/suite-numba-tail.txt; grep "^SKIPPED" $W/suite-numba.txt > $OUT/suite-numba-skips.txt
tar czf $OUT/callG.tgz -C $W .
