#!/bin/bash
# calls B-E: ORT chunk $1; GPU tests of the per-GPU tables (B)
cp .ort3/$1 /tmp/ortp/ || exit 1
export PYTHONPATH=/tmp/site:$PWD
if [ "$2" = tests ]; then
env -u OUT timeout 200 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_gemv_tuned.py tests/test_gemv_mma.py tests/test_knobs.py tests/test_fpa_intb.py > $OUT/gpu-tests-b.txt 2>&1; echo "rc=$?" >> $OUT/gpu-tests-b.txt
grep -v "^\.\|Warning\|warner" $OUT/gpu-tests-b.txt | tail -8
fi
ls /tmp/ortp
