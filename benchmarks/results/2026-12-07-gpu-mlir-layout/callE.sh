#!/bin/bash
# device call E (fresh machine): numba-cuda path into /tmp/site; the GPU tests whose stale expectations were mended
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
T0=$(date +%s)
timeout 400 python3 -m pytest -q -p no:cacheprovider -ra tests/test_gemv_tuned.py tests/test_scale.py -k "tuned or past_fused or within_256mib" \
  > $OUT/tests-mended-numba.txt 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))s" >> $OUT/tests-mended-numba.txt
tail -5 $OUT/tests-mended-numba.txt
