"""Device probe: the router shape's kernel time by CUPTI (as ORT's node is timed), default and variants.

Variants of router_gemv (warps per block; rows per warp 1), the route switched off (ORT's env switch:
tensor-core GEMV + bias add), and the small-N router family's shapes through their default routes."""
import os
import sys

import numpy as np
import torch  # noqa: F401

import numba_nbits as nb
from numba_nbits.kernels.gemv import router
from numba_nbits.perf import ort_peer
from numba_nbits.perf.harness import make_backend
from numba_nbits.perf.subjects import Activations, random_activation, random_weights

b = make_backend()
flush = ort_peer.flush_buffer(2 * b.l2_bytes)


def probe(N, K, block, M, bias, label, env=None, patch=None):
    rng = np.random.default_rng(0)
    w = random_weights(N, K, 4, block, "float16", "none", bias, rng)
    acts = Activations(b, M, w, 1, rng)
    old = {}
    for k, v in (patch or {}).items():
        old[k] = getattr(router, k)
        setattr(router, k, v)
    try:
        e = dict(os.environ)
        e.update(env or {})
        op = nb.MatMulNBits(w.B, w.scales, None, None, w.bias, K=K, N=N, bits=4, block_size=block, environ=e)
        A, Y = acts.A[0].obj, acts.Y[0].obj
        A_h = random_activation(M, K, "float16", rng)
        b.upload(acts.A[0], A_h)
        op(A, out=Y, stream=b.stream)
        b.sync()
        got = b.rows(acts.Y[0], np.arange(M)).astype(np.float64)
        ref = nb.matmul_nbits_ref(A_h, w.B, w.scales, None, None, w.bias, K=K, N=N, bits=4, block_size=block)
        err = nb.relative_error(got, ref)
        t = ort_peer.kernel_time(lambda: op(A, out=Y, stream=b.stream), b.d.cuCtxSynchronize, flush)
        d = op.explain(M=M)
        print(f"{N}x{K} g{block} M={M} bias={bias} {label:28s} route {d.name:16s} {t['us_p50']:6.2f} us "
              f"(p20 {t['us_p20']:.2f} p80 {t['us_p80']:.2f}) err {err:.1e}", flush=True)
    finally:
        for k, v in old.items():
            setattr(router, k, v)


def ort(N, K, block, M, bias):
    rng = np.random.default_rng(0)
    w = random_weights(N, K, 4, block, "float16", "none", bias, rng)
    acts = Activations(b, M, w, 1, rng)
    notes = []
    for s in ort_peer.ort_subjects(b, M, w, acts, notes, flush_bytes=2 * b.l2_bytes):
        A_h = random_activation(M, K, "float16", rng)
        got = s.run_check(b, A_h, np.arange(M)).astype(np.float64)
        ref = nb.matmul_nbits_ref(A_h, w.B, w.scales, None, None, w.bias, K=K, N=N, bits=4, block_size=block)
        t = s.time(b)
        print(f"{N}x{K} g{block} M={M} bias={bias} {s.route:28s} {t['us_p50']:6.2f} us "
              f"(p20 {t['us_p20']:.2f} p80 {t['us_p80']:.2f}) err {nb.relative_error(got, ref):.1e}", flush=True)
    if notes:
        print("#", notes)


CASES = ((32, 2880, 32, 1, True), (32, 2880, 64, 1, True), (32, 2880, 32, 16, True), (256, 7168, 32, 1, False),
         (256, 7168, 128, 1, False))
if "--ort" in sys.argv:  # ours (default calls) and ORT's node on the same shapes, one process
    for args in CASES:
        probe(*args, "default")
        ort(*args)
    sys.exit(0)
if "--quick" in sys.argv:  # this session: the final kernel, default calls only, and the route switched off
    for args in CASES + ((128, 4096, 32, 1, False), (64, 2048, 32, 1, False), (256, 7168, 32, 1, True)):
        probe(*args, "default")
    probe(32, 2880, 32, 1, True, "router switched off", env={"ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION": "1"})
    probe(32, 2880, 32, 1, True, "small-N off (same shape)", env={"NUMBA_NBITS_ROUTER_SMALL_N": "0"})
    sys.exit(0)
_vec_plan = router._plan
scalar = {"_plan": lambda w, p, r, a_vec: _vec_plan(w, p, r, False)}
probe(32, 2880, 32, 1, True, "default")
probe(32, 2880, 32, 1, True, "scalar A loads (before)", patch=scalar)
for wp in (2, 4):
    probe(32, 2880, 32, 1, True, f"router warps={wp}", patch={"WARPS": wp})
    probe(32, 2880, 32, 1, True, f"router warps={wp} scalar A", patch={"WARPS": wp, **scalar})
probe(32, 2880, 32, 1, True, "router switched off", env={"ORT_DISABLE_QMOE_ROUTER_GEMV_SPECIALIZATION": "1"})
probe(32, 2880, 64, 1, True, "default")
probe(32, 2880, 32, 16, True, "default")
from numba_nbits.dispatch import routes  # noqa: E402
from numba_nbits.dispatch.select import _select  # noqa: E402

for N, K in ((256, 7168), (128, 4096), (64, 2048), (32, 2880)):
    for bs in (32, 128):
        probe(N, K, bs, 1, False, "default")
    probe(N, K, 32, 1, True, "default, bias")
    old_shapes = routes.ROUTER_SHAPES
    routes.ROUTER_SHAPES = frozenset({(N, K)})
    _select.cache_clear()
    try:
        probe(N, K, 32, 1, False, "router gate widened")
        probe(N, K, 32, 1, True, "router gate widened, bias")
        probe(N, K, 32, 1, True, "router widened, w4", patch={"WARPS": 4})
    finally:
        routes.ROUTER_SHAPES = old_shapes
        _select.cache_clear()
