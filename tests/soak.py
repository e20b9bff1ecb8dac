"""Soak test: many threads, each with its own numba stream, calling a mix of MatMulNBits routes for a
few minutes; every result is checked against a precomputed reference.

Setup (single-threaded): one operator per available route (``numba_nbits.dispatch.routes.ROUTES``
with a kernel module) on a problem its guards admit, plus operators left to dispatch, over fp16,
bf16 and fp32 and several M values. For each (operator, A) the result is checked once against the
float64 oracle (relative Frobenius error within ``reference.TOLERANCES``) and its bytes are kept as
the reference. The soak threads then use *fresh* operators built from the same weights (so plan
building and kernel loading also race), pick random cases, call ``op(dA, out=out, stream=s)`` on
their own stream (one thread uses the legacy default stream, ``stream=None``), copy the result back
on that stream and compare it byte for byte with the reference (results are deterministic; see
tests/test_numerics.py::test_bitwise_reproducible). A mismatch is re-checked against the oracle
tolerance and reported either way.

Usage (repo root, GPU)::

    PYTHONPATH=$PWD python tests/soak.py --duration 180 --threads 6
    PYTHONPATH=$PWD python tests/soak.py --small --duration 20 --threads 2   # tiny shapes (simulator too)

Prints the number of calls and mismatches (total and per route) and exits 1 on any mismatch or
thread error, 0 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import random
import sys
import threading
import time
import traceback

import numpy as np


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=180.0, help="seconds to run (default 180)")
    ap.add_argument("--threads", type=int, default=6, help="worker threads, each with its own stream (default 6)")
    ap.add_argument("--small", action="store_true", help="tiny shapes (for the CUDA simulator / a quick smoke run)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sync-every", type=int, default=1,
                    help="calls per thread between stream syncs + checks (>1 queues several launches per stream)")
    return ap.parse_args(argv)


def _device_buffers(cuda, c):
    """(A, out, out's bits) on the device. bf16 goes through uint16 bits: numba cannot copy ml_dtypes
    bfloat16 host arrays on a real GPU (its host_pointer rejects the dtype), so A is uploaded and out is
    read back as uint16 views of the same memory."""
    if np.dtype(c["np_dtype"]).name != "bfloat16":
        out = cuda.device_array(c["shape"], c["np_dtype"])
        return cuda.to_device(c["A"]), out, out
    bits = cuda.device_array(c["shape"], np.uint16)
    a = cuda.to_device(np.ascontiguousarray(c["A"]).view(np.uint16)).view(c["np_dtype"])
    return a, bits.view(c["np_dtype"]), bits


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.small:
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1" if not _gpu() else "0")
    import ml_dtypes
    from numba import cuda

    import numba_nbits as nb
    from numba_nbits.config import load_config
    from numba_nbits.dispatch.problem import Problem
    from numba_nbits.dispatch.routes import ROUTES
    from numba_nbits.kernels import FAMILY_MODULES
    from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

    dtypes = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
    available = [r for r in ROUTES if importlib.util.find_spec(FAMILY_MODULES[r.family], "numba_nbits.kernels") is not None]
    rng = np.random.default_rng(args.seed)
    if args.small:
        base_nk, m_values = [(16, 64), (8, 48)], (1, 3)
    else:
        base_nk, m_values = [(4096, 4096), (1024, 2048), (11008, 4096)], (1, 2, 5, 16, 64)

    def env_for(route):
        if route and route.endswith("chunked"):
            return {"ORT_MATMULNBITS_FORCE_CHUNKED": "1", "ORT_MATMULNBITS_CHUNK_SIZE": "5" if args.small else "1000"}
        return {}

    def cfg_for(route):
        c = {"use_tf32": False}
        if route:
            c["numba_nbits.force_route"] = route
        return c

    # ---- pick (route, problem) pairs
    specs = []  # (label, route or None, bits, block, N, K, dtype, zp, bias, Ms)
    for r in available:
        config = load_config(env_for(r.name), {"use_tf32": False})
        found = None
        for n, k in base_nk + [(32, 2880)]:
            for bits in (4, 8, 2):
                for block in (32, 64, 16, 128):
                    for zp in ("packed", "none"):
                        ms = [m for m in m_values
                              if r.first_failure(Problem(M=m, N=n, K=k, bits=bits, block_size=block, dtype="float16",
                                                         zero_points=zp, has_bias=True), config) is None]
                        if ms and found is None:
                            found = (bits, block, n, k, zp, ms)
        if found is None:
            print(f"soak: no problem for route {r.name}; skipped")
            continue
        bits, block, n, k, zp, ms = found
        for dtype in dtypes:
            specs.append((r.name, r.name, bits, block, n, k, dtype, zp, True, ms))
    for bits in (2, 4, 8):  # dispatch's own choices, typed zero points and g_idx included
        n, k = base_nk[0]
        specs.append((f"dispatch-w{bits}", None, bits, 32, n, k, "float16", "typed" if bits == 8 else "packed", bits != 2,
                      list(m_values)))
    if not args.small:
        specs.append(("dispatch-gidx", None, 4, 128, 1024, 2048 + 40, "bfloat16", "packed", True, [1, 7, 33]))

    # ---- build ops and references (single-threaded)
    cases = []  # dict(label, route, op_args, A, ref_bytes, ref64, dtype)
    t0 = time.time()
    for label, route, bits, block, N, K, dtype, zp, bias, ms in specs:
        dt = dtypes[dtype]
        kb = -(-K // block)
        B = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
        s = (rng.uniform(0.5, 2, (N, kb)) / (2 ** bits * np.sqrt(K)) * rng.choice([-1, 1], (N, kb))).astype(dt)
        zpv = None
        if zp == "packed":
            zpv = rng.integers(0, 256, (N, -(-kb * bits // 8)), dtype=np.uint8)
        elif zp == "typed":
            zpv = rng.integers(0, 2 ** bits, (N, kb)).astype(dt)
        gidx = rng.integers(0, kb, kb * block).astype(np.int32) if label == "dispatch-gidx" else None
        b = rng.uniform(-1, 1, N).astype(dt) if bias else None
        op_args = dict(args=(B, s, zpv, gidx, b), kw=dict(K=K, N=N, bits=bits, block_size=block, config=cfg_for(route),
                                                          environ=env_for(route)))
        op = nb.MatMulNBits(*op_args["args"], **op_args["kw"])
        for M in ms:
            A = rng.standard_normal((M, K)).astype(dt)
            ref64 = matmul_nbits_ref(A, B, s, zpv, gidx, b, K=K, N=N, bits=bits, block_size=block)
            Y = np.asarray(op(A))
            err = relative_error(Y.astype(np.float32).astype(np.float64), ref64)
            name = f"{label}/{dtype}/M{M}:{op.route(M)}"
            if not err <= TOLERANCES[dtype]:
                print(f"soak: SETUP MISMATCH {name}: relative error {err:.3g} > {TOLERANCES[dtype]}")
                return 1
            cases.append(dict(name=name, key=label + dtype, op_args=op_args, A=A, ref=Y.tobytes(), ref64=ref64,
                              dtype=dtype, shape=Y.shape, np_dtype=Y.dtype))
    print(f"soak: {len(cases)} cases over {len(specs)} operators, references in {time.time() - t0:.1f} s; "
          f"routes {sorted({c['name'].split(':')[1] for c in cases})}")

    # ---- fresh operators for the threads (built lazily, concurrently)
    fresh = {}
    fresh_lock = threading.Lock()

    def op_for(case):
        with fresh_lock:
            op = fresh.get(case["key"])
            if op is None:
                a = case["op_args"]
                op = fresh[case["key"]] = nb.MatMulNBits(*a["args"], **a["kw"])
        return op

    calls = collections.Counter()
    bad = collections.Counter()
    beyond = collections.Counter()  # mismatches whose error vs the oracle exceeds the tolerance
    printed = collections.Counter()  # mismatch lines printed per route (all BEYOND ones, 3 others)
    errors = []
    lock = threading.Lock()
    deadline = time.time() + args.duration
    stop = threading.Event()

    def worker(tid):
        try:
            r = random.Random(args.seed * 1000 + tid)
            stream = None if tid == 0 else cuda.stream()
            dev = {}
            while not stop.is_set() and time.time() < deadline:
                batch = [cases[r.randrange(len(cases))] for _ in range(max(1, args.sync_every))]
                pending = []
                for c in batch:
                    buf = dev.get(c["name"])
                    if buf is None:
                        buf = dev[c["name"]] = _device_buffers(cuda, c)
                    dA, out, out_bits = buf
                    op_for(c)(dA, out=out, stream=stream)
                    host = out_bits.copy_to_host(stream=stream) if stream is not None else out_bits.copy_to_host()
                    pending.append((c, host))
                if stream is not None:
                    stream.synchronize()
                for c, host in pending:
                    route = c["name"].split(":")[1]
                    ok = host.tobytes() == c["ref"]
                    err = None
                    if not ok:
                        vals = host.view(c["np_dtype"]) if host.dtype != c["np_dtype"] else host
                        err = relative_error(vals.astype(np.float32).astype(np.float64), c["ref64"])
                    wrong = err is not None and not err <= TOLERANCES[c["dtype"]]
                    with lock:
                        calls[route] += 1
                        if not ok:
                            bad[route] += 1
                        if wrong:
                            beyond[route] += 1
                    if not ok and (wrong or printed[route] < 3):
                        printed[route] += 1
                        print(f"soak: MISMATCH thread {tid} {c['name']}: bytes differ from the reference, relative "
                              f"error vs oracle {err:.3g} ({'BEYOND' if wrong else 'within'} tolerance "
                              f"{TOLERANCES[c['dtype']]})", flush=True)
        except Exception:  # noqa: BLE001
            with lock:
                errors.append(f"thread {tid}:\n{traceback.format_exc()}")
            stop.set()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.threads)]
    t1 = time.time()
    for t in threads:
        t.start()
    last = t1
    while any(t.is_alive() for t in threads):
        time.sleep(0.5)
        if time.time() - last > 30:
            last = time.time()
            with lock:
                print(f"soak: {time.time() - t1:.0f} s, {sum(calls.values())} calls, {sum(bad.values())} mismatches",
                      flush=True)
    cuda.synchronize()
    elapsed = time.time() - t1
    total, mism, wrong = sum(calls.values()), sum(bad.values()), sum(beyond.values())
    print(f"soak: {args.threads} threads, {elapsed:.1f} s, calls {total}, mismatches {mism} (bytes differ from the "
          f"reference; {wrong} of them beyond the oracle tolerance), thread errors {len(errors)}")
    for route in sorted(calls):
        print(f"  {route:<28} calls {calls[route]:>9}  mismatches {bad[route]}  beyond tolerance {beyond[route]}")
    for e in errors:
        print(e, file=sys.stderr)
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "soak.json"), "w") as f:
            json.dump({"threads": args.threads, "seconds": elapsed, "calls": dict(calls), "mismatches": dict(bad),
                       "beyond_tolerance": dict(beyond), "errors": errors}, f, indent=1)
    return 1 if (mism or errors or total == 0) else 0


def _gpu() -> bool:
    try:
        from numba_nbits.probe import gpu_present

        return gpu_present()
    except Exception:  # noqa: BLE001
        return False


if __name__ == "__main__":
    sys.exit(main())
