#!/bin/bash
# $1 tag, $2 blocks, $3 Ms (wide), $4 Ms (<=64, with old-default tactics), $5 tactics for $4, $6 timeout per bench
set -u
cd "$(dirname "$0")/.."
[ -e /tmp/site/numpy ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
TAG=$1; BLOCKS=$2; MW=$3; MS=$4; TACT=$5; TMO=$6
SHAPES=${SHAPES:-"28672x8192 8192x28672 14336x4096 4096x14336 128256x4096"}
BITS=${BITS:-4}
{ date; nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv; python3 -c "import numpy,numba_cuda;print(numpy.__version__, numba_cuda.__version__)"; git log --oneline -1; git diff; } > $OUT/env-$TAG.txt 2>&1
specs=""; for s in $SHAPES; do for b in $BLOCKS; do specs="$specs $s:$BITS:$b:${DTYPE:-float16}"; done; done
Mcsv=$(echo $MW $MS | tr ' ' ',')
t0=$(date +%s)
timeout 240 python3 -m numba_nbits.precompile --shapes $specs --M $Mcsv --workers 16 --no-progress > $OUT/precompile-$TAG.txt 2>&1
echo "precompile rc=$? $(( $(date +%s) - t0 )) s"; tail -5 $OUT/precompile-$TAG.txt
if [ -n "$MW" ]; then
timeout $TMO python3 -m benchmarks.bench_small_gemm --shapes $SHAPES --blocks $BLOCKS --M $MW --bits $BITS --dtype ${DTYPE:-float16} --tactics 2>&1 | grep -v "^kernel " | tee $OUT/bench-$TAG-wide.txt
cp $OUT/bench_small_gemm.csv $OUT/bench-$TAG-wide.csv
fi
[ -n "${TESTS:-}" ] && env -u OUT timeout 150 python3 -m pytest -q -p no:cacheprovider -n 16 $TESTS 2>&1 | tail -15 | tee $OUT/tests-$TAG.txt
if [ -n "$MS" ]; then
timeout $TMO python3 -m benchmarks.bench_small_gemm --shapes $SHAPES --blocks $BLOCKS --M $MS --bits $BITS --dtype ${DTYPE:-float16} --tactics $TACT 2>&1 | grep -v "^kernel " | tee $OUT/bench-$TAG-small.txt
cp $OUT/bench_small_gemm.csv $OUT/bench-$TAG-small.csv
fi
echo "total $(( $(date +%s) - t0 )) s"
