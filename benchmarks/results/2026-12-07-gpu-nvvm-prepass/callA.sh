#!/bin/bash
# device call A (carry .whl): numba-cuda's packages (numpy 2.4.6, nvmath-python) into /tmp/site (the wheels kept
# in /tmp/whl); numba-cuda's GPU tests of the changed GEMV pieces (the pre-pass needs numba-cuda-mlir: call C)
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source benchmarks/results/2026-12-07-gpu-nvvm-prepass/common.sh
echo "gpu=$GPU $(date +%T)"
env PYTHONPATH=$PN timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_gemv_mma.py -k "unguarded or prepack" \
  tests/test_gemv_repack.py > $OUT/tests-numba.txt 2>&1; echo "tests numba rc=$? $(tail -1 $OUT/tests-numba.txt)"
