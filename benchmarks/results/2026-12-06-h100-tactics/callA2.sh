#!/bin/bash
# burst 3, call 1: wheels, ORT chunk 0; sweeps on this GPU: an H200 refits 4-, 8- and 2-bit; an H100 adds 2-bit
mkdir -p /tmp/ortp /tmp/whl && cp .whl/*.whl /tmp/whl/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv; python3 -c "import numpy, numba_cuda, torch; print(numpy.__version__, numba_cuda.__version__, torch.__version__)"; } > $OUT/env.txt 2>&1
G=$(python3 -c "from numba_nbits.kernels.gemv.tactics import gpu_key; from numba import cuda; print(gpu_key(cuda.get_current_device().name))")
echo "gpu key $G" | tee -a $OUT/env.txt; cat $OUT/env.txt
if [ "$G" = h200 ]; then BW="4 8 2"; else BW="2"; fi
for b in $BW; do T0=$(date +%s)
timeout 200 python3 -m benchmarks.sweep_gemv_m1 --bits $b --budget-s 170 --gpu $G --workers 14 --out $OUT/sweep-w$b > $OUT/sweep-w$b.log 2>&1; echo "w$b rc=$? $(( $(date +%s) - T0 ))s"
grep -A50 "^case" $OUT/sweep-w$b.log | grep -v "^ \|^{\|^}" | awk '{ if ($0 ~ /x$/ || 1) print }' | head -50
done
if [ "$G" = h200 ]; then timeout 100 python3 .carry/router_probe.py --quick 2>&1 | grep -v "Warning\|_warn_once" > $OUT/router_probe.txt; cat $OUT/router_probe.txt; fi
