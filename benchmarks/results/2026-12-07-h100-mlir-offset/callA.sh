#!/bin/bash
# device call A (carry .whl): numba-cuda's packages (numpy 2.4.6, nvmath-python) into /tmp/site, the wheels kept in /tmp/whl
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date +%T
