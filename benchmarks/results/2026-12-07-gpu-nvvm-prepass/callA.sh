#!/bin/bash
# device call A: numba-cuda's packages (numpy 2.4.6, nvmath-python) into /tmp/site, the wheels kept in /tmp/whl
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && echo ok
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
