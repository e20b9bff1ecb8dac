#!/bin/bash
# device call F: the lean driver calls with cuda-bindings 13.5 (integer-handle _v2 API) against the image's 13.3.1
mkdir -p /tmp/whl && cp .whl/*.whl /tmp/whl/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_cb .whl/cb/*.whl || exit 1
W=/tmp/workF; mkdir -p $W
B=/tmp/site:$PWD; L=/tmp/site_cb:/tmp/site:$PWD
{ date -u; nvidia-smi -L; nvidia-smi | head -4 | tail -1; for P in $B $L; do PYTHONPATH=$P python3 -c "import numpy, numba_cuda, cuda.bindings; print(numpy.__version__, numba_cuda.__version__, cuda.bindings.__version__)"; done; git log --oneline -1 2>/dev/null; git status --short; } > $W/env.txt 2>&1
PYTHONPATH=$L python3 .whl/lean_micro.py > $W/lean_micro_cb135.txt 2>&1; echo "rc=$?" >> $W/lean_micro_cb135.txt
PYTHONPATH=$L timeout 200 python3 -m pytest -q -p no:cacheprovider -n 14 -ra tests/test_host_path.py tests/test_bind.py tests/test_graphs.py tests/test_packed_only.py tests/test_bad_inputs.py tests/test_config.py > $W/gpu-tests-cb135.txt 2>&1; echo "rc=$?" >> $W/gpu-tests-cb135.txt
PYTHONPATH=$L python3 .whl/lean_micro.py > $W/lean_micro_cb135b.txt 2>&1; echo "rc=$?" >> $W/lean_micro_cb135b.txt
for v in cb133 cb135; do P=$B; [ $v = cb135 ] && P=$L; mkdir -p $W/bh-$v; PYTHONPATH=$P OUT=$W/bh-$v timeout 150 python3 -m benchmarks.bench_host > $W/bench_host_$v.log 2>&1; echo "rc=$?" >> $W/bench_host_$v.log; cp $W/bh-$v/bench_host.csv $W/bench_host_$v.csv; done
cp $W/env.txt $W/lean_micro_cb135*.txt $W/bench_host_cb13?.csv $OUT/; tail -30 $W/gpu-tests-cb135.txt > $OUT/gpu-tests-cb135-tail.txt
tar czf $OUT/callF.tgz -C $W .
