#!/bin/bash
# device call D (after C, same machine): the refitted tables in place; the whole GPU suite under numba-cuda-mlir with
# the image's numpy (2.5), serially
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; cp /tmp/tables/*.json numba_nbits/kernels/gemv/tuned/ || exit 1
env PYTHONPATH=$PM NUMBA_NBITS_BACKEND=mlir python3 -c "import numpy, numba_cuda_mlir; from numba_nbits import backend; \
print('numpy', numpy.__version__, 'numba-cuda-mlir', numba_cuda_mlir.__version__, 'compiler', backend.compiler())" > $OUT/env-mlir.txt 2>&1
cat $OUT/env-mlir.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/env-mlir.txt
T0=$(date +%s)
env -u OUT PYTHONPATH=$PM NUMBA_NBITS_BACKEND=mlir timeout 560 python3 -m pytest -q -p no:cacheprovider -ra \
  > /tmp/suite-mlir.txt 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))s" >> /tmp/suite-mlir.txt
tail -40 /tmp/suite-mlir.txt > $OUT/suite-mlir-tail.txt; gzip -c /tmp/suite-mlir.txt > $OUT/suite-mlir.txt.gz
tail -3 /tmp/suite-mlir.txt
