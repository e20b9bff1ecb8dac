#!/bin/bash
# device call E (after D, same machine): both refitted tables in place; backend_compare of the quick perf set's default
# calls, both orders of the two compilers' worker processes
source benchmarks/results/2026-12-07-gpu-wide-prepass/common.sh; cp /tmp/tables/*.json numba_nbits/kernels/gemv/tuned/ || exit 1
compare_both 270
