"""Property tests: MatMulNBits vs the float64 oracle on random problems, every admissible route.

Each example draws a problem — M (0 and 1 included, rank-2 or rank-3 A), N, K (tiny K and
K % block_size != 0 included), bits 2/4/8, block_size 16..256, dtype fp32/fp16/bf16, zero points
none/packed/typed, g_idx (length K or K_padded), bias, the way A and Y are passed (NumPy, device
array, device array + ``out=``) and optionally ORT's "force chunked" environment with a small chunk
size — then a route: either "dispatch" (whatever ``select`` picks) or one of the routes of
``numba_nbits.dispatch.routes.ROUTES`` whose guards admit the problem
(``route.first_failure(problem, config) is None``), forced with ``numba_nbits.force_route``.
Weights are random codes (padded tail included, which kernels must ignore), random-sign scales and
random zero points; the result must be within ``reference.TOLERANCES`` (relative Frobenius error) of
``matmul_nbits_ref``.

Routes whose kernel module is not present (``numba_nbits.kernels.<family>`` missing) are left out
of the draw; when dispatch picks such a route the example runs ``dequant_cublas`` instead and
the count records it (``dispatch_unavailable``).

Profiles (chosen by ``SIMULATED``):

* simulator: 40 examples, N <= 32, K <= 96, M <= 20;
* GPU: 500 examples by default (over 16 parametrised shards, so parallel workers share them), shapes up to
  thousands (M*N*K capped so that the float64 oracle stays ~30 ms);
  ``NUMBA_NBITS_FUZZ_EXAMPLES=3000`` overrides the count in either profile, ``NUMBA_NBITS_FUZZ_SHARDS``
  the number of shards.

Both profiles are derandomized: a run draws the same problems as the last one, so it is reproducible
and, on a GPU, a warm kernel cache serves it instead of compiling new specialisations for new random
shapes. Hypothesis seeds a derandomized test from its function's digest, which parametrised copies
share, so ``_shard_digest`` gives each shard its own (shard 0 with the default seed keeps the plain
digest). ``NUMBA_NBITS_FUZZ_SEED=N`` draws another reproducible set; ``NUMBA_NBITS_FUZZ_SEED=random``
draws new problems every run (``tests/gpu_fuzz.sh`` gives each of its processes its own seed).

The number of examples run (total, per route, per bits/dtype) is printed at the end of the module
and written to ``$OUT/fuzz_cases.json`` when ``OUT`` is set; with ``OUT`` set the file is also
rewritten after every example (``"finished": false`` until the module ends), and every failing
example is appended to ``$OUT/fuzz_failures.log`` the moment it fails (before hypothesis shrinks it),
so a shard killed by a device-call time limit still reports what it checked and what failed.
"""
from __future__ import annotations

import collections
import importlib.util
import json
import os

import ml_dtypes
import numpy as np
import pytest
from conftest import SIMULATED, to_dev, to_host
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import numba_nbits as nb
from numba_nbits.dispatch.routes import ROUTES
from numba_nbits.kernels import FAMILY_MODULES
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _route_available(route) -> bool:
    return importlib.util.find_spec(FAMILY_MODULES[route.family], "numba_nbits.kernels") is not None


AVAILABLE = {r.name: r for r in ROUTES if _route_available(r)}
MISSING = sorted(r.name for r in ROUTES if r.name not in AVAILABLE)

_env_examples = os.environ.get("NUMBA_NBITS_FUZZ_EXAMPLES")
# The examples are split over FUZZ_SHARDS parametrised copies of the test, so parallel workers share them
# (one hypothesis run is one test: serial). On the simulator the draw is derandomized, so shards would
# repeat each other: one shard there unless NUMBA_NBITS_FUZZ_SHARDS says otherwise.
FUZZ_SHARDS = max(1, int(os.environ.get("NUMBA_NBITS_FUZZ_SHARDS") or (1 if SIMULATED else 16)))
_env_seed = (os.environ.get("NUMBA_NBITS_FUZZ_SEED") or "0").strip()
if _env_seed != "random" and not _env_seed.isdigit():
    raise ValueError(f"NUMBA_NBITS_FUZZ_SEED must be a non-negative integer or 'random', got {_env_seed!r}")
FUZZ_SEED = None if _env_seed == "random" else int(_env_seed)  # None: new random problems every run
if SIMULATED:
    MAX_EXAMPLES = int(_env_examples or 40)
    N_MAX, K_MAX, M_MAX, LEAD_MAX = 32, 96, 20, 3
    MNK_CAP = None
    PROFILE = settings(max_examples=-(-MAX_EXAMPLES // FUZZ_SHARDS), deadline=None, derandomize=FUZZ_SEED is not None,
                       database=None,
                       print_blob=True,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                              HealthCheck.filter_too_much])
else:
    MAX_EXAMPLES = int(_env_examples or 500)
    N_MAX, K_MAX, M_MAX, LEAD_MAX = 4096, 4096, 512, 4
    MNK_CAP = 1 << 25  # float64 oracle cost per example ~ M*N*K
    PROFILE = settings(max_examples=-(-MAX_EXAMPLES // FUZZ_SHARDS), deadline=None, derandomize=FUZZ_SEED is not None,
                       database=None,
                       print_blob=True,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                              HealthCheck.filter_too_much])

CASES: collections.Counter = collections.Counter()


def _summary(finished: bool) -> dict:
    return {"profile": "simulator" if SIMULATED else "gpu", "max_examples": MAX_EXAMPLES,
            "missing_route_modules": MISSING, "finished": finished, "counts": dict(sorted(CASES.items()))}


def _write_counts(out: str, summary: dict) -> None:
    os.makedirs(out, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # parallel workers each count their own examples
    path = os.path.join(out, f"fuzz_cases.{worker}.json" if worker else "fuzz_cases.json")
    with open(path + ".tmp", "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(path + ".tmp", path)  # a kill never leaves a half-written file


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    yield
    summary = _summary(finished=True)
    text = f"test_fuzz: {CASES['total']} cases run ({summary['profile']} profile); " + json.dumps(summary["counts"])
    rep = request.config.pluginmanager.get_plugin("terminalreporter")
    if rep is not None:
        rep.write_line("")
        rep.write_line(text)
    else:  # pragma: no cover
        print(text)
    out = os.environ.get("OUT")
    if out:
        _write_counts(out, summary)


# ------------------------------------------------------------------------------------ strategies

def _dims(draw, hi, special):
    """A dimension: mostly multiples of 8 (fused-route friendly), sometimes anything, sometimes special."""
    kind = draw(st.sampled_from(["mult8", "any", "special"]))
    if kind == "mult8" and hi >= 8:
        return 8 * draw(st.integers(1, hi // 8))
    if kind == "special":
        return draw(st.sampled_from([v for v in special if v <= hi]))
    return draw(st.integers(1, hi))


#: per fused route: (bits, block sizes, M range) that its guards admit
FUSED_TARGETS = {"gemv_w4": (4, [16, 32, 64, 128], 16), "gemv_w8": (8, [16, 32, 64, 128, 256], 16),
                 "gemv_w2": (2, [16, 32, 64, 128, 256], 8), "router_gemv": (4, [32, 64], 1)}


@st.composite
def problems(draw):
    # The route is drawn first ("any" = a problem from the whole space, route drawn later among those
    # admitted; a fused route = a problem its guards admit, so every route is exercised even in the
    # small simulator profile). The route is forced only if its guards really admit the problem.
    target = draw(st.sampled_from(["any", "any"] + sorted(AVAILABLE)))
    fused = target in FUSED_TARGETS
    other = target not in FUSED_TARGETS and target != "any" and not target.startswith("dequant")
    dtype = draw(st.sampled_from(list(DTYPES)))
    if other:  # a route added after this file was written (e.g. fpA_intB): tensor-core friendly shapes
        fused = True
        dtype = draw(st.sampled_from(["float16", "bfloat16"]))
        bits, block, m_hi = draw(st.sampled_from([4, 8])), draw(st.sampled_from([32, 64, 128])), 64
        N = 64 * draw(st.integers(1, max(1, N_MAX // 64)))
        K = block * draw(st.integers(1, max(1, K_MAX // block)))
        zp, g_idx = draw(st.sampled_from(["none", "packed"])), "none"
    elif fused:
        bits, blocks, m_hi = FUSED_TARGETS[target]
        block = draw(st.sampled_from(blocks))
        if target == "router_gemv":
            N, K = 32, 2880
        else:
            N = 8 * draw(st.integers(1, N_MAX // 8))
            K = max(block, 16) * draw(st.integers(1, max(1, K_MAX // block)))
            if bits == 4 and draw(st.booleans()):  # K % block != 0 is fine for gemv_w4
                K = 8 * draw(st.integers(1, K_MAX // 8))
        zp = "none" if target == "router_gemv" else draw(st.sampled_from(["none", "packed"]))
        g_idx = "none"
    else:
        m_hi = M_MAX
        bits = draw(st.sampled_from([2, 4, 8]))
        block = draw(st.sampled_from([16, 32, 64, 128, 256]))
        if not SIMULATED and draw(st.integers(0, 49)) == 0:
            N, K = 32, 2880  # the router shape
        else:
            N = _dims(draw, N_MAX, [1, 7, 8, 9, 16, 24, 33, 257, 1000, 4096])
            K = _dims(draw, K_MAX, [1, 2, 3, 8, 15, 16, 17, 40, 48, 96, 2880, 4095])
        zp = draw(st.sampled_from(["none", "packed", "typed"]))
        g_idx = "none" if bits == 2 else draw(st.sampled_from(["none", "none", "K", "K_padded"]))
    bias = draw(st.booleans())
    if draw(st.booleans()):  # rank-3 A: (lead, seq, K)
        lead = draw(st.integers(1, min(LEAD_MAX, m_hi)))
        seq_hi = max(1, m_hi // lead)
        seq = draw(st.sampled_from(([] if fused else [0]) + [1, 2, 3, draw(st.integers(1, seq_hi))]))
        a_lead = (lead, min(seq, seq_hi) if fused else seq)
    else:
        small = [1, 1, 2, 3, 4, 5, 8, 16] if fused else [0, 1, 2, 3, 4, 5, 8, 16, 17]
        M = draw(st.sampled_from(small + [draw(st.integers(0, m_hi))]))
        a_lead = (max(1, min(M, m_hi)) if fused else M,)
    if MNK_CAP is not None:  # keep the oracle cheap: shrink the last leading dim
        M = int(np.prod(a_lead))
        if M * N * K > MNK_CAP:
            a_lead = a_lead[:-1] + (max(1, MNK_CAP // (N * K * max(1, M // a_lead[-1]))),)
    io = draw(st.sampled_from(["numpy", "device", "device_out"]))
    chunk_env = draw(st.sampled_from([None, None, 1, 3, 8, 64]))
    fpa_intb = draw(st.sampled_from([False, False, True]))  # lets an fpA_intB route (if any) be admissible
    seed = draw(st.integers(0, 2**32 - 1))
    return dict(target=target, fpa_intb=fpa_intb, bits=bits, block=block, dtype=dtype, N=N, K=K, zp=zp,
                g_idx=g_idx, bias=bias, a_lead=a_lead, io=io, chunk_env=chunk_env, seed=seed)


def make_data(p):
    rng = np.random.default_rng(p["seed"])
    dt = DTYPES[p["dtype"]]
    N, K, bits, block = p["N"], p["K"], p["bits"], p["block"]
    kb = -(-K // block)
    B = rng.integers(0, 256, (N, kb, block * bits // 8), dtype=np.uint8)
    # random-sign scales, magnitude chosen so |Y| stays well inside fp16 range
    mag = 1.0 / (2 ** (bits - 1) * np.sqrt(K))
    scales = (rng.uniform(0.5, 2.0, (N, kb)) * mag * rng.choice([-1.0, 1.0], (N, kb))).astype(dt)
    zero_points = None
    if p["zp"] == "packed":
        zero_points = rng.integers(0, 256, (N, -(-kb * bits // 8)), dtype=np.uint8)
    elif p["zp"] == "typed":
        zero_points = (rng.integers(0, 2**bits, (N, kb)) + rng.choice([0.0, 0.5], (N, kb))).astype(dt)
    g_idx = None
    if p["g_idx"] != "none":
        g_idx = rng.integers(0, kb, K if p["g_idx"] == "K" else kb * block).astype(np.int32)
    bias = rng.uniform(-1, 1, N).astype(dt) if p["bias"] else None
    A = rng.standard_normal(p["a_lead"] + (K,)).astype(dt)
    return A, B, scales, zero_points, g_idx, bias


def admissible_routes(op, M):
    """Names of the available routes whose guards admit this problem (M >= 1)."""
    problem = op.problem(M)
    return [name for name, r in AVAILABLE.items() if r.first_failure(problem, op.config) is None]


def run_op(op, A, io):
    """Call op with A passed as NumPy / device array / device array + poisoned out=; return host Y."""
    if io == "numpy":
        return np.asarray(op(A))
    from numba import cuda

    dA = to_dev(A)
    if io == "device":
        return to_host(op(dA))
    out_shape = A.shape[:-1] + (op.N,)
    out = to_dev(np.full(out_shape, np.nan, A.dtype))
    ret = op(dA, out=out)
    assert ret is out
    return to_host(out)


def check_result(Y, ref, dtype, scale=None):
    """Shape, dtype, finiteness, and the relative error vs the oracle within TOLERANCES; ``scale``
    (``reference.rounding_scale``) keeps problems whose few outputs all cancel from failing on
    rounding errors that are small next to the products they come from."""
    assert Y.shape == ref.shape, (Y.shape, ref.shape)
    assert np.dtype(Y.dtype) == np.dtype(DTYPES[dtype])
    if ref.size == 0:
        return
    y = np.asarray(Y).astype(np.float32).astype(np.float64)
    assert np.isfinite(y).all(), "non-finite output for finite inputs"
    err = relative_error(y, ref, scale)
    assert err <= TOLERANCES[dtype], f"relative error {err:.3g} > {TOLERANCES[dtype]}"


def shard_digest(shard: int, seed) -> bytes:
    """What ``_shard_digest`` adds to the fuzz test's digest for ``shard`` under ``seed`` (b"" for shard 0
    under the default seed 0: the plain digest, the problems the suite drew before shards had digests)."""
    return b"" if (shard, seed) == (0, 0) else f"shard={shard};seed={seed}".encode()


@pytest.fixture(autouse=True)
def _shard_digest(request):
    """Before each shard of ``test_fuzz_vs_oracle`` runs, set its digest addition (module docstring);
    pytest runs a process's tests one at a time, so the shared function object is safe to mark."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "shard" in callspec.params and request.node.originalname == "test_fuzz_vs_oracle":
        extra = shard_digest(callspec.params["shard"], FUZZ_SEED)
        inner = test_fuzz_vs_oracle.hypothesis.inner_test
        if extra:
            inner._hypothesis_internal_add_digest = extra
        elif hasattr(inner, "_hypothesis_internal_add_digest"):
            del inner._hypothesis_internal_add_digest


@pytest.mark.parametrize("shard", range(FUZZ_SHARDS))
@PROFILE
@given(p=problems(), data=st.data())
def test_fuzz_vs_oracle(shard, p, data):
    A, B, s, zp, gi, b = make_data(p)
    N, K, bits, block = p["N"], p["K"], p["bits"], p["block"]
    M = int(np.prod(p["a_lead"]))
    environ = {}
    if p["chunk_env"] is not None:
        environ = {"ORT_MATMULNBITS_FORCE_CHUNKED": "1", "ORT_MATMULNBITS_CHUNK_SIZE": str(p["chunk_env"])}
    base = {"use_tf32": False}
    if p["fpa_intb"]:
        base["ep.cuda.fpa_intb_gemm"] = "1"
    op = nb.MatMulNBits(B, s, zp, gi, b, K=K, N=N, bits=bits, block_size=block, config=base, environ=environ)
    route = "dispatch"
    if M > 0:
        forced = admissible_routes(op, M)
        if p["target"] in forced:
            route = p["target"]
        else:
            route = data.draw(st.sampled_from(["dispatch"] + forced), label="route")
        if route == "dispatch":
            picked = op.route(M)
            if picked not in AVAILABLE:
                CASES["dispatch_unavailable"] += 1
                route = "dequant_cublas"
            else:
                CASES[f"dispatch->{picked}"] += 1
        if route != "dispatch":
            op = nb.MatMulNBits(B, s, zp, gi, b, K=K, N=N, bits=bits, block_size=block,
                                config=op.config.replace(force_route=route))
            assert op.route(M) == route
    note(f"problem {p}, M={M}, route={route}")
    ref, scale = matmul_nbits_ref(A, B, s, zp, gi, b, K=K, N=N, bits=bits, block_size=block, return_scale=True)
    out = os.environ.get("OUT")
    try:
        Y = run_op(op, A, p["io"])
        check_result(Y, ref, p["dtype"], scale)
    except Exception as exc:
        if out:  # logged now: a time limit may kill the process while hypothesis shrinks
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "fuzz_failures.log"), "a") as f:
                f.write(f"problem {p}, M={M}, route={route}: {type(exc).__name__}: {exc}\n")
        raise
    CASES["total"] += 1
    CASES[f"route:{route if M > 0 else 'M=0'}"] += 1
    CASES[f"bits{bits}/{p['dtype']}"] += 1
    if out:
        _write_counts(out, _summary(finished=False))


def test_fuzz_covers_every_available_route():
    """The admissibility helper admits each available route for some small problem (guards sanity)."""
    from numba_nbits.config import load_config
    from numba_nbits.dispatch.problem import Problem

    probes = [Problem(M=1, N=32, K=2880, bits=4, block_size=32, dtype="float16"),
              Problem(M=1, N=8, K=64, bits=4, block_size=32, dtype="float16"),
              Problem(M=1, N=8, K=64, bits=8, block_size=32, dtype="float16"),
              Problem(M=1, N=8, K=64, bits=2, block_size=32, dtype="float16"),
              Problem(M=40, N=8, K=64, bits=4, block_size=32, dtype="float16", has_g_idx=True),
              Problem(M=16, N=64, K=64, bits=4, block_size=64, dtype="float16"),
              Problem(M=4096, N=2048, K=64, bits=4, block_size=32, dtype="float16")]
    cfg = load_config({"ORT_MATMULNBITS_FORCE_CHUNKED": "1"}, {"ep.cuda.fpa_intb_gemm": "1"})
    admitted = {name for name, r in AVAILABLE.items() for p in probes if r.first_failure(p, cfg) is None}
    assert admitted == set(AVAILABLE), sorted(set(AVAILABLE) - admitted)


def test_fuzz_shards_draw_their_own_problems_reproducibly():
    """Under derandomize, each shard's digest gives it its own problems, the same ones every run; shard 0
    under the default seed draws what the plain digest draws."""
    def draws(extra: bytes) -> list:
        seen = []

        @settings(max_examples=6, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(p=problems())
        def probe(p):
            seen.append(tuple(sorted((k, repr(v)) for k, v in p.items())))

        if extra:
            probe.hypothesis.inner_test._hypothesis_internal_add_digest = extra
        probe()
        return seen

    plain, s0 = draws(b""), draws(shard_digest(0, 0))
    s1, s1_again, s2 = draws(shard_digest(1, 0)), draws(shard_digest(1, 0)), draws(shard_digest(2, 0))
    other_seed = draws(shard_digest(1, 7))
    assert s0 == plain and s1 == s1_again
    assert s1 != s2 and s1 != plain and other_seed != s1
