# sourced by the call scripts: the GPU's name, the two compilers' paths
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr A-Z a-z)
# numba-cuda needs numpy 2.4 (/tmp/site); libLLVM-7 for its pre-pass comes from numba-cuda-mlir's wheel, last on the path
PN=/tmp/site:$PWD:/tmp/site_mlir; PM=/tmp/site_mlir:$PWD
