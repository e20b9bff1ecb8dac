#!/bin/bash
# call 5: ORT assembled; router probe beside ORT; the README plan with ORT's peers and us_kernel
cp .ort2/p4 /tmp/ortp/ && mkdir -p /tmp/ortsite && cat /tmp/ortp/p? | xz -d -T16 | tar x -C /tmp/ortsite || exit 1
export PYTHONPATH=/tmp/site:/tmp/ortsite:$PWD
timeout 90 python3 .carry/router_probe.py --ort 2>&1 | grep -v "^USDT\|^$\|Warning\|_warn_once" > $OUT/router_probe_ort.txt; cat $OUT/router_probe_ort.txt
timeout 460 python3 -m numba_nbits.perf --plan readme --routes auto --compile-workers 16 --budget-s "${2:-380}" --no-plots --no-progress \
  --commit "$1" --out $OUT/perf > $OUT/perf.log 2>&1; echo "perf rc=$?" >> $OUT/perf.log
tail -30 $OUT/perf.log
