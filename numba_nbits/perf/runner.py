"""The sweep: for each case group build weights and operators once, then per M time every subject.

Subjects per case: our operator with the route dispatch picks (``forced=False``), each other route of
``ROUTES`` that can serve the case forced through config (``forced=True``), then the peers. The B arm
of the router A/B (variant ``router_gemv_disabled``) runs dispatch's pick only. A subject that fails
to build, run or check gives a row with ``error`` set, never a missing row. The time budget is
checked before every case; cases past it are listed in ``meta["skipped"]``.
"""
from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from . import ort_peer as _ort
from . import peers as _peers
from . import precompile
from .ceilings import environment, measure_ceilings, peak_for
from .harness import Budget, make_backend, measure
from .metrics import derived, flops, l2_cold, nbits_bytes, rotation_copies
from .shapes import DTYPE_SHORT, ROUTER_AB_VARIANT, Case, groups, shape_named
from .subjects import (Activations, OpSet, Oracle, Ours, act_bytes, check, eligible_routes, random_weights,
                       tolerance)

NAN = float("nan")
SIM_L2_BYTES = 256 << 10
SIM_TIMING = Budget(target_ms=0, min_samples=1, max_samples=1, min_batch_us=0, max_batch=1, host_ms=0,
                    host_min_calls=1, host_max_calls=1)


@dataclass
class Options:
    cases: list
    routes: tuple = ("auto", "forced")  # "auto", "forced", or route names to force
    peers: bool = True
    budget_s: float = 480.0
    l2_factor: float = 2.0
    max_copies: int = 2048
    mem_budget_gb: float = 24.0
    seed: int = 0
    graphs: bool = True
    timing: Budget = field(default_factory=Budget)
    on_rows: Optional[Callable[[list], None]] = None  # called after every group (incremental CSV)
    progress: bool = True
    compile_workers: int = 0  # > 0: compile every case's kernels in that many processes first (precompile.py)


class _Progress:
    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.enabled = enabled
        self.n, self.total = 0, total
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True)
            except Exception:  # noqa: BLE001
                self.bar = None

    def step(self, text: str) -> None:
        self.n += 1
        if self.bar is not None:
            self.bar.set_postfix_str(text[:70])
            self.bar.update(1)
        elif self.enabled:
            print(f"[{self.n}/{self.total}] {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _free() -> None:
    gc.collect()
    try:
        from numba import cuda

        cuda.current_context().deallocations.clear()
    except Exception:  # noqa: BLE001
        pass
    if "torch" in sys.modules:
        try:
            sys.modules["torch"].cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass


def run(opts: Options, backend=None) -> tuple[list[dict], dict]:
    """Run the sweep; returns (rows, meta). ``meta`` holds env, ceilings, skips and peer notes."""
    t_start = time.time()
    backend = backend or make_backend()
    if backend.simulated:  # the simulator runs every thread in Python: one call per measurement
        opts.timing = SIM_TIMING
    env = environment(backend)
    l2 = env["l2_bytes"] or SIM_L2_BYTES
    ceil = measure_ceilings(backend)
    meta = {"env": env, "ceilings": ceil, "skipped": [], "notes": [], "graph_api": backend.graph_api,
            "options": {"routes": list(opts.routes), "peers": opts.peers, "budget_s": opts.budget_s,
                        "l2_factor": opts.l2_factor, "max_copies": opts.max_copies, "seed": opts.seed,
                        "cases": len(opts.cases)}}
    precompile_step(opts, meta, backend.simulated)
    rows: list[dict] = []
    prog = _Progress(len(opts.cases), opts.progress)
    ctx = _Ctx(opts, backend, env, ceil, l2, meta, t_start, prog)
    try:
        for key, cases in groups(opts.cases):
            rows.extend(ctx.group(key, cases))
            if opts.on_rows is not None:
                opts.on_rows(rows)
            _free()
    finally:
        prog.close()
    meta["ort_cuda"] = _ort.ort_cuda_available() and _ort.cupti_available() is None  # ORT rows were measured
    meta["wall_s"] = time.time() - t_start
    return rows, meta


def precompile_step(opts: Options, meta: dict, simulated: bool) -> None:
    """``--compile-workers``: compile the cases' kernels in parallel processes before any timing
    (``precompile.py``); at most half of the budget, what the workers did not reach is compiled while
    timing. Nothing under the simulator (no kernel cache there)."""
    if opts.compile_workers <= 0 or simulated:
        return
    from ..launch.cache import _CACHE_STATE, _kernel_cache

    if _kernel_cache() is None:
        why = _CACHE_STATE.get("refused") or "NUMBA_NBITS_KERNEL_CACHE=0"
        meta["notes"].append(("precompile", f"--compile-workers ignored: the kernel cache is off ({why})"))
        return
    pc = meta["precompile"] = precompile.run_workers(opts.cases, opts.compile_workers, seed=opts.seed,
                                                     routes=opts.routes, timeout_s=max(30.0, 0.5 * opts.budget_s))
    print(f"precompile: {pc['cases']} cases, {pc['kernels_compiled']} kernels compiled by "
          f"{pc['workers']} workers in {pc['seconds']:.0f} s ({len(pc['failed'])} workers failed, "
          f"{pc.get('cache_errors', 0)} kernel-cache errors"
          + (f", last: {pc['cache_last_error']}" if pc.get("cache_last_error") else "") + ")", file=sys.stderr)


class _Ctx:
    def __init__(self, opts, backend, env, ceil, l2, meta, t_start, prog):
        self.o, self.b, self.env, self.ceil, self.l2 = opts, backend, env, ceil, l2
        self.meta, self.t0, self.prog = meta, t_start, prog
        self.mem = int(opts.mem_budget_gb * (1 << 30))

    def over_budget(self) -> bool:
        return time.time() - self.t0 > self.o.budget_s

    def copies(self, per_copy: int) -> int:
        return rotation_copies(per_copy, self.l2, factor=self.o.l2_factor, max_copies=self.o.max_copies,
                               mem_budget_bytes=self.mem)

    # ---------------------------------------------------------------------------------- groups
    def group(self, key, cases: list[Case]) -> list[dict]:
        shape, bits, block, dtype, zp, variant = key
        if self.over_budget():
            for c in cases:
                self._skip(c, "time budget exhausted")
                self.prog.step(f"{shape} M={c.M}: skipped (budget)")
            return []
        spec = shape_named(shape)
        w = random_weights(spec.N, spec.K, bits, block, dtype, zp, spec.bias, precompile.case_rng(self.o.seed, key))
        const = nbits_bytes(0, spec.N, spec.K, bits, block, dtype, zp, spec.bias).constant
        n_ops = self.copies(const)
        opsets: dict = {}
        rows: list[dict] = []
        W_cache: dict = {}

        def opset(route):
            if route not in opsets:
                opsets[route] = OpSet(w, route, variant, n_ops)
            return opsets[route]

        try:
            auto = opset(None)
        except Exception as e:  # noqa: BLE001
            for c in cases:
                rows.append(self._error_row(c, "ours", "(build)", False, e))
                self.prog.step(f"{shape} M={c.M}: build failed")
            return rows
        for c in cases:
            if self.over_budget():
                self._skip(c, "time budget exhausted")
                self.prog.step(f"{shape} M={c.M}: skipped (budget)")
                continue
            try:
                rows.extend(self.case(c, w, auto, opset, n_ops, const, W_cache))
            except Exception as e:  # noqa: BLE001 - keep going; the row says what happened
                rows.append(self._error_row(c, "ours", "(case)", False, e))
            _free()
        del opsets, W_cache
        return rows

    # ----------------------------------------------------------------------------------- cases
    def case(self, c: Case, w, auto: OpSet, opset, n_ops: int, const: int, W_cache: dict) -> list[dict]:
        M = c.M
        act = act_bytes(M, w.N, w.K, w.dtype)
        n_act = max(1, min(self.copies(act), n_ops))
        rng = precompile.case_rng(self.o.seed, c.group, M)
        acts = Activations(self.b, M, w, n_act, rng)
        self.oracle = Oracle(w, M, rng)  # one fresh A per case, shared by every subject's check
        base = self._base(c, w)
        rows = []
        auto_route = auto.route_for(M)
        subjects = []
        if "auto" in self.o.routes or c.variant == ROUTER_AB_VARIANT:
            subjects.append((auto_route, False, lambda: auto))
        if c.variant != ROUTER_AB_VARIANT:
            for r in eligible_routes(auto.ops[0], M, c.variant):
                if r != auto_route and ("forced" in self.o.routes or r in self.o.routes):
                    subjects.append((r, True, lambda r=r: opset(r)))
        summary = []
        for route, forced, get in subjects:
            row = dict(base, kind="ours", route=route, forced=forced, source="measured", auto_route=auto_route)
            try:
                ops = get()
                t = time.perf_counter()
                ops.warmup(M)
                row["warmup_s"] = time.perf_counter() - t
                subj = Ours(ops, acts, route, forced)
                self._time_and_check(row, subj, w, M, rng, len(ops.ops) * const + n_act * act,
                                     use_tf32=ops.ops[0].config.use_tf32)
                if not forced:
                    self._kernel_time(row, subj)
            except Exception as e:  # noqa: BLE001
                row.update(self._error(e))
            rows.append(row)
            summary.append(f"{route}{'*' if forced else ''} {row.get('us', NAN):.1f}us"
                           f"{'' if row.get('correct') else ' WRONG'}")
        if self.o.peers and c.variant != ROUTER_AB_VARIANT:
            rows.extend(self._peers(c, w, M, acts, base, rng, W_cache))
        self.prog.step(f"{c.shape} {c.bits}b g{c.block} {DTYPE_SHORT[c.dtype]} M={M}: " + ", ".join(summary))
        del acts
        return rows

    def _kernel_time(self, row, subj) -> None:
        """``us_kernel`` of a default call: its kernels' time by CUPTI, as ORT's node is timed (``ort_peer``)."""
        try:
            row.update(_ort.kernel_time_of_ours(self.b, subj, 2 * self.l2))
        except Exception as e:  # noqa: BLE001 - the graph time stands; say why the kernel time is missing
            row["note"] = (row.get("note", "") + f" us_kernel: {type(e).__name__}: {e}")[:300].strip()

    def _peers(self, c, w, M, acts, base, rng, W_cache) -> list[dict]:
        notes: list = []
        rows = []
        subjects = _peers.build_peers(self.b, M, w, lambda cst, a: self.copies(cst + a), W_cache=W_cache,
                                      notes=notes)
        ort = _ort.ort_subjects(self.b, M, w, acts, notes, flush_bytes=2 * self.l2)
        for subj in subjects + ort:
            row = dict(base, kind="peer", route=subj.route, forced=False, source="measured")
            try:
                if isinstance(subj, _ort.OrtCuda):
                    row.update(subj.time(self.b))
                    row.update(self._derive(row, subj.nbytes, w, M, None))
                    row.update(check(subj, self.b, self.oracle, tolerance(w.dtype)))
                else:
                    self._time_and_check(row, subj, w, M, rng, subj.copies * subj.nbytes, use_tf32=False,
                                         nbytes=subj.nbytes)
                note = getattr(subj, "pack_note", "")
                if note:
                    row["note"] = note
            except Exception as e:  # noqa: BLE001
                row.update(self._error(e))
            rows.append(row)
        for name, text in notes:
            if (name, text) not in self.meta["notes"]:
                self.meta["notes"].append((name, text))
        del subjects, ort
        return rows

    def _time_and_check(self, row, subj, w, M, rng, working_set: int, *, use_tf32, nbytes=None):
        nbytes = nbytes if nbytes is not None else nbits_bytes(M, w.N, w.K, w.bits, w.block, w.dtype, w.zp,
                                                                w.bias is not None).total
        tm = measure(self.b, subj, self.o.timing, graphs=self.o.graphs)
        row.update(tm)
        row["copies"] = max(1, int(subj.copies))
        row["working_set_mb"] = working_set / 2**20
        row["l2_cold"] = l2_cold(1, working_set, self.l2)
        row.update(self._derive(row, nbytes, w, M, use_tf32))
        row.update(check(subj, self.b, self.oracle, tolerance(w.dtype, use_tf32)))

    def _derive(self, row, nbytes, w, M, use_tf32) -> dict:
        us_graph = row.get("us_graph", NAN)
        use_graph = us_graph == us_graph and us_graph > 0
        us = us_graph if use_graph else row.get("us_p50", NAN)
        peak = peak_for(self.ceil, w.dtype, bool(use_tf32))
        d = derived(us, nbytes, flops(M, w.N, w.K), self.ceil.get("bw_tb_s", NAN), peak)
        return {"us": us, "timing": "graph" if use_graph else row.get("timing", "events"),
                "bytes": int(nbytes), "flops": int(flops(M, w.N, w.K)), **d}

    # ------------------------------------------------------------------------------------ rows
    def _base(self, c: Case, w) -> dict:
        spec = shape_named(c.shape)
        e = self.env
        return {"shape": c.shape, "N": spec.N, "K": spec.K, "M": c.M, "bits": c.bits, "block": c.block,
                "dtype": c.dtype, "zp": c.zp, "bias": spec.bias, "variant": c.variant, "tier": c.tier,
                "gpu": e["gpu"], "sm_count": e["sm_count"], "driver": e["driver"], "numba_cuda": e["numba_cuda"],
                "cuda_core": e["cuda_core"], "torch": e["torch"], "git_commit": e["git_commit"], "date": e["date"]}

    def _error(self, e: BaseException) -> dict:
        return {"error": f"{type(e).__name__}: {e}"[:400], "correct": False}

    def _error_row(self, c: Case, kind: str, route: str, forced: bool, e) -> dict:
        spec = shape_named(c.shape)
        return {**self._base(c, None), "kind": kind, "route": route, "forced": forced, "source": "measured",
                "N": spec.N, "K": spec.K, **self._error(e)}

    def _skip(self, c: Case, reason: str) -> None:
        self.meta["skipped"].append({"shape": c.shape, "M": c.M, "bits": c.bits, "block": c.block,
                                     "dtype": c.dtype, "zp": c.zp, "variant": c.variant, "tier": c.tier,
                                     "reason": reason})


def reference_rows_for(rows: list[dict]) -> list[dict]:
    """ORT reference rows (``perf.reference_rows``) for the (N, K, bits, block, dtype, zp, M) we measured."""
    from .reference_rows import reference_rows

    measured = {(r["N"], r["K"], r["bits"], r["block"], r["dtype"], r["zp"], r["M"]): r for r in rows
                if r.get("kind") == "ours" and not r.get("variant")}
    out = []
    for ref in reference_rows():
        key = (ref["N"], ref["K"], ref["bits"], ref["block"], ref["dtype"], ref["zp"], ref["M"])
        m = measured.get(key)
        if m is None:
            continue
        out.append({**{k: m[k] for k in ("shape", "tier", "variant")}, **ref})
    return out
