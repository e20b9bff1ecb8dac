#!/usr/bin/env bash
# The large fuzz profile of tests/test_fuzz.py split over parallel processes: the fuzz is CPU-bound (each
# new specialisation compiles), so thousands of examples take a fraction of the time they take in one process.
# Each shard is one pytest process with its own fuzz seed (NUMBA_NBITS_FUZZ_SEED: its own reproducible
# problems); their case counts are merged into $OUT/fuzz_cases.json (total, per route / bits / dtype,
# seeds, per-shard exit codes). A shard killed by FUZZ_TIMEOUT still contributes the examples it checked
# (test_fuzz.py rewrites its counts after every example) and any failure it met (appended to its
# fuzz_failures.log as it happens).
#
# Usage (repo root, PYTHONPATH set):
#   OUT=dir [NUMBA_NBITS_FUZZ_EXAMPLES=3000] [SHARDS=8] [SEED=100] [FUZZ_TIMEOUT=540] bash tests/gpu_fuzz.sh
# Exits 1 if any example failed or a shard exited with an error, 2 if none failed but some shard was
# stopped by FUZZ_TIMEOUT before its examples were done, 0 when every shard finished cleanly.
set -u
# each shard is one process: no pytest-xdist workers inside it (tests/conftest.py), one hypothesis run per shard
export NUMBA_NBITS_TEST_WORKERS=0 NUMBA_NBITS_FUZZ_SHARDS=1
PY=${PYTHON:-python3}
OUT=${OUT:-./fuzz-out}
TOTAL=${NUMBA_NBITS_FUZZ_EXAMPLES:-3000}
SHARDS=${SHARDS:-8}
SEED=${SEED:-100}
T=${FUZZ_TIMEOUT:-540}
PER=$(( (TOTAL + SHARDS - 1) / SHARDS ))
mkdir -p "$OUT"
for i in $(seq 1 "$SHARDS"); do
  ( mkdir -p "$OUT/shard$i"
    OUT="$OUT/shard$i" NUMBA_NBITS_FUZZ_EXAMPLES=$PER NUMBA_NBITS_FUZZ_SEED=$((SEED + i)) timeout "$T" "$PY" -m \
      pytest -q -p no:cacheprovider -rfE tests/test_fuzz.py > "$OUT/shard$i/fuzz.log" 2>&1
    echo "EXIT $?" >> "$OUT/shard$i/fuzz.log" ) &
done
wait
"$PY" - "$OUT" "$SHARDS" "$SEED" "$PER" <<'PYEOF'
import collections, json, os, re, sys
out, shards, seed, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
counts, exits, failures = collections.Counter(), {}, []
for i in range(1, shards + 1):
    d = os.path.join(out, f"shard{i}")
    log = open(os.path.join(d, "fuzz.log")).read() if os.path.exists(os.path.join(d, "fuzz.log")) else ""
    m = re.findall(r"^EXIT (\d+)", log, re.M)
    exits[i] = int(m[-1]) if m else None
    p = os.path.join(d, "fuzz_cases.json")
    if os.path.exists(p):
        counts.update(json.load(open(p))["counts"])
    f = os.path.join(d, "fuzz_failures.log")
    if os.path.exists(f):
        failures += [f"shard {i}: {line}" for line in open(f).read().splitlines()]
timed_out = [i for i, e in exits.items() if e == 124]
errored = [i for i, e in exits.items() if e not in (0, 124)]
summary = {"shards": shards, "examples_per_shard": per, "seeds": [seed + i for i in range(1, shards + 1)],
           "exit_codes": exits, "timed_out_shards": timed_out, "failing_examples": len(failures),
           "counts": dict(sorted(counts.items()))}
json.dump(summary, open(os.path.join(out, "fuzz_cases.json"), "w"), indent=1)
print(f"gpu_fuzz.sh: {counts['total']} cases checked against the oracle in {shards} shards; "
      f"{len(failures)} failing examples; exit codes {exits}"
      + (f"; shards {timed_out} stopped by FUZZ_TIMEOUT (their checked cases are counted)" if timed_out else ""))
for line in failures[:20]:
    print("FAIL", line)
for i in errored:
    print(f"--- shard {i} (exit {exits[i]}):")
    print("\n".join(open(os.path.join(out, f'shard{i}', 'fuzz.log')).read().splitlines()[-25:]))
sys.exit(1 if failures or errored else 2 if timed_out else 0)
PYEOF
