#!/bin/bash
# burst 4: on an H200 refit its tables (4-, 8-, 2-bit sweeps) and probe the router; on an H100 check the tables on the GPU
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv; git log --oneline -1 2>/dev/null; } > $OUT/env.txt 2>&1
G=$(python3 -c "from numba_nbits.kernels.gemv.tactics import gpu_key; from numba import cuda; print(gpu_key(cuda.get_current_device().name))")
echo "gpu key $G" | tee -a $OUT/env.txt; cat $OUT/env.txt
if [ "$G" = h200 ]; then
  timeout 60 python3 .carry/router_probe.py --quick 2>&1 | grep -v "Warning\|_warn_once" > $OUT/router_probe.txt; cat $OUT/router_probe.txt
  for b in 4 8 2; do T0=$(date +%s)
  timeout 120 python3 -m benchmarks.sweep_gemv_m1 --bits $b --budget-s 100 --gpu $G --workers 14 --out $OUT/sweep-w$b > $OUT/sweep-w$b.log 2>&1; echo "w$b rc=$? $(( $(date +%s) - T0 ))s"
  grep -A50 "^case" $OUT/sweep-w$b.log | grep "x$\|x  \|x \+-\|[0-9]x " | head -45
  done
else
  env -u OUT timeout 100 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_gemv_tuned.py tests/test_gemv_mma.py > $OUT/gpu-tests.txt 2>&1; echo "rc=$?" >> $OUT/gpu-tests.txt
  grep -v "^\.\|Warning\|warner" $OUT/gpu-tests.txt | tail -4
  timeout 60 python3 -m benchmarks.sweep_gemv_m1 --shapes 8192x28672 --ms 1,16 --blocks 32 --no-bf16 --budget-s 40 --gpu $G --workers 14 --out $OUT/sweep-check > $OUT/sweep-check.log 2>&1; echo "rc=$?"
  grep -A4 "^case" $OUT/sweep-check.log
fi
