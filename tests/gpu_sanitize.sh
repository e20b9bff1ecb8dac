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
#   SHARDS=6 SANITIZER_TIMEOUT=500 SANITIZER_TOOLS=racecheck PYTHONPATH=$PWD tests/gpu_sanitize.sh tests/test_gemv.py
#
# Environment:
#   SANITIZER_TOOLS     tools to run, default "memcheck racecheck initcheck"
#   PYTHON              interpreter, default: python (first on PATH)
#   SANITIZER_LOG_DIR   where <tool>.log files go, default $OUT if set, else ./sanitizer-logs
#   NUMBA_NBITS_FUZZ_EXAMPLES  hypothesis examples of tests/test_fuzz.py, default 40 here (the
#                       sanitizers slow kernels down 10-100x)
#   PYTEST_ADDOPTS      extra pytest options (pytest reads it itself), e.g. -k, -m "not slow", -x
#   SANITIZER_PRINT_LIMIT  reports printed per process (default 50); with SANITIZER_BACKTRACE=no (no host
#                       backtraces) a large limit keeps logs small enough to tally every report by kernel
#   SANITIZER_OPTS      extra compute-sanitizer options for every tool (word-split), e.g. "--check-bulk-copy yes"
#   INITCHECK_SKIP_CUBLAS  1 (default): under initcheck a test that reaches a cuBLAS GEMM is skipped at that
#                       call (tests/conftest.py, NUMBA_NBITS_TEST_SKIP_CUBLAS): initcheck does not see cuBLAS's
#                       stores on the H200, so each read of a cuBLAS-written output would be reported
#                       (docs/reliability.md); 0 runs them too. memcheck and racecheck always run them.
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
export NUMBA_NBITS_TEST_WORKERS=0  # one pytest process under each sanitizer (tests/conftest.py would start workers on a GPU)

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

# SHARDS=n (default 1): the chosen tests' ids are split n ways and each tool runs n sanitizer processes in
# parallel (the suite is compile-bound and the sanitizers slow every launch 10-100x, so one process per
# tool takes many times as long). SANITIZER_TIMEOUT=s kills a process after s seconds (reported).
SHARDS=${SHARDS:-1}
SAN_T=${SANITIZER_TIMEOUT:-0}
if [ "$SHARDS" -gt 1 ]; then
    "$PY" -m pytest --co -q -p no:cacheprovider "${FILES[@]}" 2>/dev/null | grep "::" > "$LOG_DIR/ids.txt"
    for s in $(seq 0 $((SHARDS - 1))); do awk -v s="$s" -v S="$SHARDS" 'NR%S==s' "$LOG_DIR/ids.txt" > "$LOG_DIR/ids.$s"; done
fi

run_one() {  # log tool pytest-args...: one sanitizer process, its output (and "EXIT rc") in log
    local log=$1; shift
    local tool=$1; shift
    local args=("$@")
    local to=()
    if [ "$SAN_T" -gt 0 ]; then to=(timeout "$SAN_T"); fi
    local skip=0
    if [ "$tool" = initcheck ]; then skip=${INITCHECK_SKIP_CUBLAS:-1}; fi
    NUMBA_NBITS_TEST_SKIP_CUBLAS=$skip "${to[@]}" compute-sanitizer --tool "$tool" --error-exitcode 1 --print-limit "${SANITIZER_PRINT_LIMIT:-50}" \
        --show-backtrace "${SANITIZER_BACKTRACE:-yes}" "${EXTRA[@]}" ${SANITIZER_OPTS:-} \
        "$PY" -m pytest -q -p no:cacheprovider "${args[@]}" >"$log" 2>&1
    echo "EXIT $?" >> "$log"
}

REPORT_RE="^========= (Invalid|Race|Uninitialized|Error|Program hit)"  # the first line of each report

report() {  # log -> prints, returns 1 on any problem
    local log=$1
    local rc summary tests
    rc=$(grep -E "^EXIT [0-9]+" "$log" | tail -1 | cut -d' ' -f2)
    # memcheck / initcheck end with "ERROR SUMMARY: n errors", racecheck with
    # "RACECHECK SUMMARY: n hazards displayed (e errors, w warnings)"
    summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | grep -v "were not printed" | tail -1)
    tests=$(grep -E "(passed|failed|error|skipped|no tests ran)" "$log" | grep -E " in [0-9.]+s" | tail -1)
    echo "    $(basename "$log"): ${summary:-ERROR SUMMARY line missing (sanitizer crashed or timed out? see $log)}"
    echo "    pytest: ${tests:-no summary line (see $log)}; exit code ${rc:-?}"
    if [ "${rc:-}" = "124" ]; then  # killed by SANITIZER_TIMEOUT: what ran before the kill (pytest -q progress)
        local prog passed failed found
        prog=$(grep -E '^[.sxXFE]+ *(\[ *[0-9]+%\])?$' "$log" | tr -d ' []%0-9\n')
        passed=$(printf '%s' "$prog" | tr -cd '.' | wc -c)
        failed=$(printf '%s' "$prog" | tr -cd 'FE' | wc -c)
        found=$(grep -cE "$REPORT_RE" "$log")
        echo "    killed by SANITIZER_TIMEOUT=${SAN_T}s after $passed passed and $failed failed tests;" \
             "sanitizer error reports before the kill: $found"
    fi
    if [ "${rc:-1}" != "0" ] || [ -z "$summary" ] || \
       ! echo "$summary" | grep -qE "ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards displayed \(0 errors, 0 warnings\)"; then
        grep -E "$REPORT_RE" "$log" | sort | uniq -c | sort -rn | head -5 \
            | sed 's/^/    /'
        echo "    printed reports by kernel:"  # where the printed reports happened (abi suffix and arguments cut)
        grep -E "^=========     at " "$log" | sed -E 's/^=========     at //; s/\[abi[^]]*\]//; s/\(.*//' \
            | sort | uniq -c | sort -rn | head -8 | sed 's/^/      /'
        return 1
    fi
    return 0
}

status=0
for tool in $TOOLS; do
    EXTRA=()
    case "$tool" in
        racecheck) EXTRA=(--racecheck-report hazard) ;;
        initcheck) EXTRA=() ;;  # the cuBLAS skip is set for this tool only, below
        memcheck)  EXTRA=(--leak-check no) ;;
    esac
    echo "=== compute-sanitizer --tool $tool: ${FILES[*]} ($SHARDS process(es), logs: $LOG_DIR/$tool*.log)"
    start=$(date +%s)
    if [ "$SHARDS" -gt 1 ]; then
        for s in $(seq 0 $((SHARDS - 1))); do
            mapfile -t ids < "$LOG_DIR/ids.$s"
            [ "${#ids[@]}" -gt 0 ] && run_one "$LOG_DIR/$tool.$s.log" "$tool" "${ids[@]}" &
        done
        wait
        for s in $(seq 0 $((SHARDS - 1))); do
            [ -f "$LOG_DIR/$tool.$s.log" ] && { report "$LOG_DIR/$tool.$s.log" || status=1; }
        done
    else
        run_one "$LOG_DIR/$tool.log" "$tool" "${FILES[@]}"
        report "$LOG_DIR/$tool.log" || status=1
    fi
    echo "    $(( $(date +%s) - start )) s"
done
if [ "$status" -eq 0 ]; then echo "gpu_sanitize.sh: all clean ($TOOLS)"; else echo "gpu_sanitize.sh: FAILED (see $LOG_DIR)"; fi
exit $status
