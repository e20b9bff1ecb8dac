#!/bin/bash
# call 1: wheels (numpy 2.4.6 + nvmath), ORT chunk 0; router probe (ours, CUPTI); GPU tests of what changed; ncu of the M=1 GEMV
mkdir -p /tmp/ortp && cp .ort2/p0 /tmp/ortp/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv; git log --oneline -1 2>/dev/null; python3 -c "import numpy, numba_cuda, torch; print(numpy.__version__, numba_cuda.__version__, torch.__version__)"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
timeout 100 python3 .carry/router_probe.py --quick 2>&1 | grep -v "Warning\|_warn_once" > $OUT/router_probe.txt; echo "rc=$?" >> $OUT/router_probe.txt
cat $OUT/router_probe.txt
T0=$(date +%s)
env -u OUT timeout 260 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_gemv.py tests/test_gemv_mma.py tests/test_graphs.py tests/test_packed_only.py tests/test_small_gemm.py tests/test_dispatch.py tests/test_guarded_loads.py > $OUT/gpu-tests.txt 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))s" >> $OUT/gpu-tests.txt
grep -v "^\.\|Warning\|warner" $OUT/gpu-tests.txt | tail -15
