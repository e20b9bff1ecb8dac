"""Our subjects: MatMulNBits operators over rotated weight copies, shared activation buffers, checks.

``HostWeights`` draws one random problem per case group (random packed codes, scales, zero points,
bias: no quantizer, so even the largest LM head is ready in a fraction of a second). ``Activations``
holds the rotated A and Y buffers of one M. ``Ours`` is one route (dispatch's pick, or a route forced
through ``config={"numba_nbits.force_route": name}``) over ``copies`` operators built from the same
weights at different addresses. ``check`` runs call 0 on fresh random A with a poisoned Y and compares
sampled rows and columns with the float64 oracle (``reference.matmul_nbits_ref``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..arrays import np_dtype
from ..reference import TOLERANCES, matmul_nbits_ref, relative_error
from .metrics import ITEMSIZE, k_blocks
from .shapes import ROUTER_AB_ENV, ROUTER_AB_VARIANT

#: fp32 routes may use TF32 tensor cores when ``use_tf32`` is on (ORT's default): rel. error ~3e-4.
TF32_TOLERANCE = 2e-3
CHECK_MAX_ROWS = 16
CHECK_MAX_COLS = 1024


@dataclass
class HostWeights:
    """The constant inputs of one case group (host NumPy, ORT layouts)."""

    N: int
    K: int
    bits: int
    block: int
    dtype: str
    B: np.ndarray
    scales: np.ndarray
    zero_points: Optional[np.ndarray]
    bias: Optional[np.ndarray]

    @property
    def zp(self) -> str:
        return "none" if self.zero_points is None else "packed"

    def sliced(self, cols: np.ndarray) -> dict:
        """The inputs restricted to output columns ``cols`` (for a sampled oracle)."""
        return {"B": self.B[cols], "scales": self.scales[cols],
                "zero_points": None if self.zero_points is None else self.zero_points[cols],
                "bias": None if self.bias is None else self.bias[cols]}


def random_weights(N: int, K: int, bits: int, block: int, dtype: str, zp: str, bias: bool,
                   rng: np.random.Generator) -> HostWeights:
    """Random but well-scaled inputs: codes uniform, scales ~ 1/(sqrt(K) * 2^(bits-1))."""
    kb = k_blocks(K, block)
    blob = block * bits // 8
    B = np.frombuffer(rng.bytes(N * kb * blob), np.uint8).reshape(N, kb, blob).copy()
    dt = np_dtype(dtype)
    base = 1.0 / (np.sqrt(K) * (1 << (bits - 1)))
    scales = (rng.uniform(0.5, 1.5, size=(N, kb)).astype(np.float32) * base).astype(dt)
    zpa = None
    if zp == "packed":
        zpa = np.frombuffer(rng.bytes(N * (-(-kb * bits // 8))), np.uint8).reshape(N, -1).copy()
    elif zp != "none":
        raise ValueError(f"unsupported zero points {zp!r} (perf suite: 'none' or 'packed')")
    b = rng.uniform(-1, 1, size=N).astype(np.float32).astype(dt) if bias else None
    return HostWeights(N, K, bits, block, dtype, B, scales, zpa, b)


def random_activation(M: int, K: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [-1, 1), rounded to ``dtype`` (float32 generation: ~4x faster than float64)."""
    a = rng.random((M, K), dtype=np.float32)
    a *= 2
    a -= 1
    return a.astype(np_dtype(dtype))


class Activations:
    """``copies`` A buffers (random data, never zeros) and Y buffers for one M."""

    def __init__(self, backend, M: int, w: HostWeights, copies: int, rng: np.random.Generator):
        self.M, self.copies = M, max(1, int(copies))
        self.A = [backend.alloc((M, w.K), np_dtype(w.dtype)) for _ in range(self.copies)]
        self.Y = [backend.alloc((M, w.N), np_dtype(w.dtype)) for _ in range(self.copies)]
        host = random_activation(M, w.K, w.dtype, rng)
        for a in self.A:
            backend.upload(a, host)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.A + self.Y)


def router_environ(variant: str) -> dict:
    """The environment an operator of this variant reads (the router A/B toggles one variable)."""
    env = {k: v for k, v in os.environ.items() if k != ROUTER_AB_ENV}
    if variant == ROUTER_AB_VARIANT:
        env[ROUTER_AB_ENV] = "1"
    return env


def route_config(route: Optional[str]) -> dict:
    return {} if route is None else {"numba_nbits.force_route": route}


class OpSet:
    """``copies`` MatMulNBits operators over the same weights (one route, one variant)."""

    def __init__(self, w: HostWeights, route: Optional[str], variant: str, copies: int):
        from ..op import MatMulNBits

        self.route = route
        self.variant = variant
        env = router_environ(variant)
        cfg = route_config(route)
        self.ops = [MatMulNBits(w.B, w.scales, w.zero_points, None, w.bias, K=w.K, N=w.N, bits=w.bits,
                                block_size=w.block, config=cfg, environ=env) for _ in range(max(1, copies))]

    def route_for(self, M: int) -> str:
        return self.ops[0].explain(M).name

    def warmup(self, M: int) -> None:
        for op in self.ops:
            op.warmup(M)


def eligible_routes(op, M: int, variant: str) -> list[str]:
    """Every route of ``ROUTES`` that can serve this problem when forced (read at run time)."""
    from ..config import load_config
    from ..dispatch.routes import ROUTES
    from ..dispatch.select import select

    problem = op.problem(M)
    env = router_environ(variant)
    names = []
    for r in ROUTES:
        try:
            select(problem, load_config(env, route_config(r.name)))
        except ValueError:
            continue
        names.append(r.name)
    return names


class Ours:
    """One route at one M: ``launch(i, stream)`` runs operator ``i % n_ops`` on buffers ``i % n_act``."""

    kind = "ours"

    def __init__(self, opset: OpSet, acts: Activations, route: str, forced: bool):
        self.opset, self.acts = opset, acts
        self.route, self.forced = route, forced
        self.copies = max(len(opset.ops), acts.copies)
        self._ops = opset.ops
        self._A = [a.obj for a in acts.A]
        self._Y = [y.obj for y in acts.Y]

    def launch(self, i: int, stream) -> None:
        self._ops[i % len(self._ops)](self._A[i % len(self._A)], out=self._Y[i % len(self._Y)], stream=stream)

    def run_check(self, backend, A_host: np.ndarray, rows) -> np.ndarray:
        backend.upload(self.acts.A[0], A_host)
        backend.poison(self.acts.Y[0])
        self.launch(0, backend.stream)
        backend.sync()
        return backend.rows(self.acts.Y[0], rows)


def tolerance(dtype: str, use_tf32: bool = True) -> float:
    tol = TOLERANCES[dtype]
    if dtype == "float32" and use_tf32:
        tol = max(tol, TF32_TOLERANCE)
    return tol


def sample_indices(n: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    """All of ``range(n)`` when small, else ``limit`` sorted random indices including the first and last."""
    if n <= limit:
        return np.arange(n)
    mid = rng.choice(np.arange(1, n - 1), size=limit - 2, replace=False)
    return np.sort(np.concatenate([[0, n - 1], mid]))


class Oracle:
    """Fresh random A for one case (not the timed data) and the float64 oracle on sampled rows x columns."""

    def __init__(self, w: HostWeights, M: int, rng: np.random.Generator):
        self.A = random_activation(M, w.K, w.dtype, rng)
        self.rows = sample_indices(M, CHECK_MAX_ROWS, rng)
        self.cols = sample_indices(w.N, CHECK_MAX_COLS, rng)
        self.ref = matmul_nbits_ref(self.A[self.rows], **w.sliced(self.cols), K=w.K, N=len(self.cols), bits=w.bits,
                                    block_size=w.block)


def check(subject, backend, oracle: Oracle, tol: float) -> dict:
    """Run ``subject`` once on the oracle's A; compare sampled rows x columns with the float64 oracle.

    Every column of the sampled rows is checked for NaN (Y is poisoned with NaN first where the
    subject writes into a buffer we own).
    """
    rows, cols = oracle.rows, oracle.cols
    try:
        got = subject.run_check(backend, oracle.A, rows)
    except Exception as e:  # noqa: BLE001 - a crash is a wrong result, reported
        return {"rel_err": float("nan"), "correct": False, "tol": tol,
                "check_note": f"check failed: {type(e).__name__}: {e}"[:300]}
    got = np.asarray(got)
    got64 = got.astype(np.float32).astype(np.float64) if got.dtype.name == "bfloat16" else got.astype(np.float64)
    unwritten = int(np.isnan(got64).sum())
    err = relative_error(got64[:, cols], oracle.ref)
    ok = bool(unwritten == 0 and np.isfinite(err) and err <= tol)
    note = f"{unwritten} NaN/unwritten outputs in the sampled rows" if unwritten else ""
    return {"rel_err": err, "correct": ok, "tol": tol, "check_note": note}


def act_bytes(M: int, N: int, K: int, dtype: str) -> int:
    return M * (N + K) * ITEMSIZE[dtype]
