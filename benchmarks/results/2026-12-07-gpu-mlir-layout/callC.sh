#!/bin/bash
# device call C (after A and B on the same warm machine): numba-cuda-mlir 0.6.0 with the image's numpy; the whole GPU suite
cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl || exit 1
export PYTHONPATH=/tmp/site_mlir:$PWD NUMBA_NBITS_BACKEND=mlir
W=/tmp/workC; mkdir -p $W
{ date -u; python3 -c "import numpy, numba_cuda_mlir; from numba_nbits import backend; print(numpy.__version__, numba_cuda_mlir.__version__, backend.compiler())"; } > $W/env-mlir.txt 2>&1
cp $W/env-mlir.txt $OUT/
T0=$(date +%s)
timeout 555 python3 -m pytest -q -p no:cacheprovider -ra --durations=15 > $W/suite-mlir.txt 2>&1; echo "rc=$? wall=$(( $(date +%s) - T0 ))s" >> $W/suite-mlir.txt
tail -120 $W/suite-mlir.txt > $OUT/suite-mlir-tail.txt; tar czf $OUT/callC.tgz -C $W .
tail -4 $W/suite-mlir.txt
