#!/usr/bin/env bash
# Run the GPU test suite (or chosen test files) under NVIDIA compute-sanitizer:
# memcheck, racecheck and initcheck, each with --error-exitcode 1.
#
# Usage (from the repo root, on a machine with a GPU; the caller sets PYTHONPATH):
#
#   PYTHONPATH=$PWD tests/gpu_sanitize.sh                                   # all test files, all 3 tools
#   PYTHONPATH=$PWD tests/gpu_sanitize.sh tests/test_gemv.py tests/test_op.py
#   SANITIZER_TOOLS="memcheck" PYTHONPATH=$PWD tests/gpu_sanitize.sh tests/test_numerics.py
#   PYTEST_ADDOPTS='-m "not slow"' PYTHONPATH=$PWD tests/gpu_sanitize.sh   # skip the 2 GiB scale tests
#
# Environment:
#   SANITIZER_TOOLS     tools to run, default "memcheck racecheck initcheck"
#   PYTHON              interpreter, default: python (first on PATH)
#   SANITIZER_LOG_DIR   where <tool>.log files go, default $OUT if set, else ./sanitizer-logs
#   NUMBA_NBITS_FUZZ_EXAMPLES  hypothesis examples of tests/test_fuzz.py, default 40 here (the
#                       sanitizers slow kernels down 10-100x)
#   PYTEST_ADDOPTS      extra pytest options (pytest reads it itself), e.g. -k, -m "not slow", -x
#
# For each tool it prints the tool's "ERROR SUMMARY" line and pytest's summary line; the script exits
# 1 if any tool reported an error or any test failed, 0 otherwise. The simulator is disabled
# (NUMBA_ENABLE_CUDASIM=0): without a GPU every test would skip and nothing would be checked.
set -u -o pipefail

TOOLS=${SANITIZER_TOOLS:-"memcheck racecheck initcheck"}
PY=${PYTHON:-python}
LOG_DIR=${SANITIZER_LOG_DIR:-${OUT:-./sanitizer-logs}}
if [ "$#" -gt 0 ]; then FILES=("$@"); else FILES=(tests); fi

export NUMBA_ENABLE_CUDASIM=0
export NUMBA_NBITS_FUZZ_EXAMPLES=${NUMBA_NBITS_FUZZ_EXAMPLES:-40}
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0

if ! command -v compute-sanitizer >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer /opt/nvidia/compute-sanitizer; do
        if [ -x "$d/compute-sanitizer" ]; then PATH="$d:$PATH"; break; fi
    done
fi
if ! command -v compute-sanitizer >/dev/null 2>&1; then
    echo "gpu_sanitize.sh: compute-sanitizer not found (install the CUDA toolkit or add it to PATH)" >&2
    exit 2
fi
mkdir -p "$LOG_DIR"

status=0
for tool in $TOOLS; do
    extra=()
    case "$tool" in
        racecheck) extra=(--racecheck-report hazard) ;;
        initcheck) extra=() ;;
        memcheck)  extra=(--leak-check no) ;;
    esac
    log="$LOG_DIR/$tool.log"
    echo "=== compute-sanitizer --tool $tool: ${FILES[*]} (log: $log)"
    start=$(date +%s)
    compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit 50 "${extra[@]}" \
        "$PY" -m pytest -q -p no:cacheprovider "${FILES[@]}" >"$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY" "$log" | tail -1)
    tests=$(grep -E "(passed|failed|error|skipped|no tests ran)" "$log" | grep -E " in [0-9.]+s" | tail -1)
    echo "    ${summary:-ERROR SUMMARY line missing (sanitizer crashed? see $log)}"
    echo "    pytest: ${tests:-no summary line (see $log)}"
    echo "    exit code $rc, $(( $(date +%s) - start )) s"
    if [ "$rc" -ne 0 ] || [ -z "$summary" ] || ! echo "$summary" | grep -qE "ERROR SUMMARY: 0 errors"; then
        status=1
        grep -E "^========= (Invalid|Race|Uninitialized|Error|Program hit)" "$log" | head -10 | sed 's/^/    /'
    fi
done
if [ "$status" -eq 0 ]; then echo "gpu_sanitize.sh: all clean ($TOOLS)"; else echo "gpu_sanitize.sh: FAILED (see $LOG_DIR)"; fi
exit $status
