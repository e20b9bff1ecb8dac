# sourced by the call scripts (copied from ../2026-12-07-gpu-wide-prepass): the GPU's name, the two compilers' paths
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr A-Z a-z)
# numba-cuda needs numpy 2.4 (/tmp/site); libLLVM-7 for its pre-pass comes from numba-cuda-mlir's wheel, last on the path
PN=/tmp/site:$PWD:/tmp/site_mlir; PM=/tmp/site_mlir:$PWD
install_mlir() {  # in the calls that carry .mlir/part1 (after B copied part0): numba-cuda-mlir's wheel into /tmp/site_mlir
  cp .mlir/part1 /tmp/mlirp/ && cat /tmp/mlirp/part0 /tmp/mlirp/part1 \
    > /tmp/mlirp/numba_cuda_mlir-0.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_mlir \
    /tmp/mlirp/numba_cuda_mlir-0.6.0-*.whl /tmp/whl/nvmath*.whl
}
