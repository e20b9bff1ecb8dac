#!/bin/bash
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/whl /tmp/ortp && cp .whl/*.whl /tmp/whl/ && cp .ort2/p0 /tmp/ortp/ || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv | tee $OUT/env.txt
python3 -c "import numpy, torch; from torch.profiler import supported_activities; print('numpy', numpy.__version__, 'torch', torch.__version__, supported_activities())" 2>&1 | tee -a $OUT/env.txt
for v in route off; do
  if [ $v = off ]; then export ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION=1; fi
  timeout 150 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-skip 20 --launch-count 20 \
    python3 -m benchmarks.kernel_time --shape 32x2880 --block 32 --bias > /tmp/ncu_$v.csv 2> /tmp/ncu_$v.err
  echo "== router 32x2880 g32 bias M=1, router route $v" | tee -a $OUT/router_kt.txt
  grep '^#' /tmp/ncu_$v.err | tee -a $OUT/router_kt.txt
  python3 -m benchmarks.kernel_time --parse /tmp/ncu_$v.csv 2>&1 | tee -a $OUT/router_kt.txt
  tail -3 /tmp/ncu_$v.err >> $OUT/router_kt.txt
done
unset ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION
ls -la /tmp/ortp
