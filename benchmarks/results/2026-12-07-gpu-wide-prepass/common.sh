# sourced by the call scripts: the GPU's name, the two compilers' paths
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr A-Z a-z)
# numba-cuda needs numpy 2.4 (/tmp/site); libLLVM-7 for its pre-pass comes from numba-cuda-mlir's wheel, last on the path
PN=/tmp/site:$PWD:/tmp/site_mlir; PM=/tmp/site_mlir:$PWD
install_mlir() {  # in the calls that carry .mlir/part1 (after B copied part0): numba-cuda-mlir's wheel into /tmp/site_mlir
  cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 \
    > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir \
    /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl
}
sweep_both() {  # DIR: the tensor-core GEMV tactic sweep of the quick perf set's cases (4-bit fp16, blocks 32 / 128,
  # M 1 / 16) with --variants under each compiler into DIR/sweep-<compiler>, each fit merged key by key into that
  # compiler's table of this GPU; both tables kept in /tmp/tables
  mkdir -p /tmp/tables; local b pp TB
  for b in mlir numba; do
    pp=$PN; TB=numba_nbits/kernels/gemv/tuned/$GPU-v2.json
    [ $b = mlir ] && { pp=$PM; TB=numba_nbits/kernels/gemv/tuned/$GPU-v2-mlir.json; }
    env PYTHONPATH=$pp NUMBA_NBITS_BACKEND=$b timeout 225 python3 -m benchmarks.sweep_gemv_m1 \
      --shapes 4096x4096,28672x8192,128256x4096 --ms 1,16 --no-bf16 --variants --budget-s 165 --gpu $GPU --workers 14 \
      --out $1/sweep-$b --into-keys $TB > $OUT/sweep-$b.log 2>&1
    echo "sweep $b rc=$? $(date +%T)"; cp $TB /tmp/tables/; tail -3 $OUT/sweep-$b.log
  done
  cp /tmp/tables/*.json $OUT/
}
compare_both() {  # TIMEOUT: backend_compare of the quick perf set's default calls, both orders of the two compilers'
  # worker processes, each stopped after TIMEOUT s; logs, routes and compile times into $OUT
  local i=0 order
  for order in numba,mlir mlir,numba; do
    i=$((i+1))
    OUT=/tmp/bc$i timeout $1 python3 -m benchmarks.backend_compare --budget-s 100 --routes auto --backends $order \
      --path numba=/tmp/site:/tmp/site_mlir --path mlir=/tmp/site_mlir > $OUT/bc$i.log 2>&1
    echo "bc $order rc=$? $(date +%T)"; cp /tmp/bc$i/routes.csv $OUT/routes$i.csv; cp /tmp/bc$i/compile.csv $OUT/compile$i.csv
    tail -6 $OUT/bc$i.log
  done
}
