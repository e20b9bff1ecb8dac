#!/bin/bash
# call F: ORT assembled; router probe beside ORT; GPU tests of the per-GPU tables; the README plan with ORT's peers
cp .ort3/p5 /tmp/ortp/ && mkdir -p /tmp/ortsite && cat /tmp/ortp/p? | xz -d -T16 | tar x -C /tmp/ortsite || exit 1
export PYTHONPATH=/tmp/site:/tmp/ortsite:$PWD
timeout 60 python3 .carry/router_probe.py --ort 2>&1 | grep -v "^USDT\|^$\|Warning\|_warn_once" > $OUT/router_probe_ort.txt; cat $OUT/router_probe_ort.txt
env -u OUT timeout 90 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_gemv_tuned.py tests/test_gemv_mma.py > $OUT/gpu-tests-f.txt 2>&1; echo "rc=$?" >> $OUT/gpu-tests-f.txt
grep -v "^\.\|Warning\|warner" $OUT/gpu-tests-f.txt | tail -6
timeout 420 python3 -m numba_nbits.perf --plan readme --routes auto --compile-workers 16 --budget-s 330 --no-plots --no-progress \
  --commit "$1" --out $OUT/perf > $OUT/perf.log 2>&1; echo "perf rc=$?" >> $OUT/perf.log
tail -30 $OUT/perf.log
