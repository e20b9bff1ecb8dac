#!/bin/bash
mkdir -p /tmp/mlirp && cp .mlir/part0 /tmp/mlirp/ && ls -la /tmp/mlirp
