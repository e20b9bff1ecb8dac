#!/bin/bash
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && echo ok
