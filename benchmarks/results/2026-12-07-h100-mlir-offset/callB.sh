#!/bin/bash
# device call B (carry .mlir/part0, right after A): the first half of numba-cuda-mlir's wheel
mkdir -p /tmp/mlirp && cp .mlir/part0 /tmp/mlirp/ && echo ok
