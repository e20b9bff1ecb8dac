#!/bin/bash
# merge.sh DEVDIR RESULTS_NAME GPU: copy the sweeps into benchmarks/results/RESULTS_NAME and fit them into tuned/GPU-v2.json
D=$1; R=benchmarks/results/$2; G=$3; mkdir -p $R
for b in 4 8 2; do if [ -d $D/sweep-w$b ]; then cp -r $D/sweep-w$b $D/sweep-w$b.log $R/; j=$(ls $R/sweep-w$b/sweep_gemv_m1*.json | head -1)
/work/venv/bin/python -m benchmarks.sweep_gemv_m1 --bits $b --fit $j --gpu $G --into numba_nbits/kernels/gemv/tuned/$G-v2.json > $R/fit-w$b.txt 2>&1 || echo "fit w$b failed"; fi; done
git diff --stat numba_nbits/kernels/gemv/tuned/
