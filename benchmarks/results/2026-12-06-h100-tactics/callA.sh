#!/bin/bash
# burst 2, call A: wheels, ORT chunk 0; the tensor-core GEMV tactic sweep (4-bit, then 8-bit) on this GPU
mkdir -p /tmp/ortp && cp .ort3/p0 /tmp/ortp/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv; python3 -c "import numpy, numba_cuda, torch; print(numpy.__version__, numba_cuda.__version__, torch.__version__)"; } > $OUT/env.txt 2>&1
G=$(python3 -c "from numba_nbits.kernels.gemv.tactics import gpu_key; from numba import cuda; print(gpu_key(cuda.get_current_device().name))")
echo "gpu key $G" | tee -a $OUT/env.txt; cat $OUT/env.txt
T0=$(date +%s)
timeout 260 python3 -m benchmarks.sweep_gemv_m1 --budget-s 230 --gpu $G --workers 14 --out $OUT/sweep-w4 > $OUT/sweep-w4.log 2>&1; echo "w4 rc=$? $(( $(date +%s) - T0 ))s"
grep -A60 "^case" $OUT/sweep-w4.log | head -60
T0=$(date +%s)
timeout 170 python3 -m benchmarks.sweep_gemv_m1 --bits 8 --budget-s 140 --gpu $G --workers 14 --out $OUT/sweep-w8 > $OUT/sweep-w8.log 2>&1; echo "w8 rc=$? $(( $(date +%s) - T0 ))s"
grep -A40 "^case" $OUT/sweep-w8.log | head -40
