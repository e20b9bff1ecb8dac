"""Tensor-core small-M GEMV for 2-, 4- and 8-bit MatMulNBits, fp16/bf16 activations, M = 1..16.

Serves the routes ``gemv_w4``, ``gemv_w8`` and ``gemv_w2`` for fp16/bf16 A (``route_plan``; the
CUDA-core engine ``core`` serves fp32 A and is the fallback for an A that is not 16-byte aligned).
The pieces: ``layout`` (the packed weights, built once per ``Weights``), ``mma_source`` /
``mma_ring`` (the generated kernel: math, decode and thread mapping are described there; ``mma_smem`` its
shared-memory pipeline),
``tactics`` (launch shapes: tuned tables, default rule, profiler variants), this module (compiling a
specialisation, the plans).

Guards (``supports``): bits 2/4/8, fp16/bf16, 1 <= M <= 16, block 16/32/64/128, zero points
none/packed, no g_idx, N % 8 == 0, K % 8 == 0, A 16-byte aligned (checked per call by ``enqueue``).
"""
from __future__ import annotations

import threading
from functools import lru_cache, partial

import numpy as np
from numba import cuda

from ...arrays import DevArray, device_empty, to_device
from ...launch import Kernel
from .. import intrinsics as _I
from .. import intrinsics_async as _A
from ..codegen import load_source
from ..dtypes import LOADS, STORES, array_type
from ..family import Plan
from .layout import MMA_LAYOUTS, TILE_N, Packed, super_chunk
from .mma_ring import gen_ring_source
from .mma_smem import fitted
from .mma_source import gen_source
from .mma_xa import applies as xa_applies
from .mma_xa import copies_ahead as xa_copies_ahead
from .mma_xa import gen_source_xa
from .mma_xa import layout as xa_layout
from .repack import prepack
from .tactics import (
    MAX_M,
    WG_MAX_M,
    Tactic,
    default_tactic,
    device_gpu,
    m_tiles,
    sm_count,
    supports,
    wgmma_ok,
    wide_tactic,
)

ROUTE = "gemv_mma"
def generate_source(act: str, MT: int, tac: Tactic, BS: int, ZP: str, bits: int = 4, l2pf: bool = False,
                    kfull: bool = False) -> str:
    """Python source of one specialisation: the ring kernel for ``tac.ring``, the shared-activation kernel for
    ``tac.xa`` (K-full only), else the plain one."""
    if MT > 8 and not tac.wg:
        raise ValueError(f"gemv_mma {tac.tag}: {MT} m-tiles need the warpgroup form (h); mma.sync kernels take <= 8")
    if tac.xa:
        if not kfull or l2pf:
            raise ValueError(f"gemv_mma {tac.tag}: shared activations need K a multiple of the super-chunk, no l2pf")
        return gen_source_xa(act, MT, tac, BS, ZP, bits)
    return (gen_ring_source if tac.ring else gen_source)(act, MT, tac, BS, ZP, bits, l2pf, kfull)


def k_full(K: int, block_size: int, bits: int) -> bool:
    """Whether K is a multiple of the super-chunk: the kernel's activation loads then need no guard
    (``kfull``; ``mma_source.emit_setup``)."""
    return K % super_chunk(block_size, bits) == 0


@lru_cache(maxsize=None)
def gemv_mma_kernel(act: str, MT: int, tac: Tactic, BS: int, ZP: str, bits: int = 4, l2pf: bool = False,
                    kfull: bool = False) -> Kernel:
    """The compiled-on-demand kernel for one specialisation (``l2pf``: the L2-prefetching variant, name
    suffix ``_l2pf``; ``kfull``: for K a multiple of the super-chunk, unguarded activation loads, suffix
    ``_kf``)."""
    from numba.cuda import types

    src = generate_source(act, MT, tac, BS, ZP, bits, l2pf, kfull)
    ns = {
        "cuda": cuda, "np": np, "ldg_v4": _I.ldg_v4, "ldg_v2": _I.ldg_v2, "ld": LOADS[act], "st": STORES[act],
        "TPW": tac.tpw,
        "mma": _I.mma_bf16 if act == "bfloat16" else _I.mma_f16,
        "fma2": _I.fma_bf16x2 if act == "bfloat16" else _I.fma_f16x2,
        "u32_as_f32": _I.u32_as_f32, "ldcg": _I.ldcg, "lop3": _I.lop3_andor,
        "f16lo_to_f32": _I.f16lo_to_f32, "f16hi_to_f32": _I.f16hi_to_f32,
        "prefetch_l2": _I.prefetch_l2, "U32T": types.uint32, "threadfence": _I.threadfence, "opaque_i64": _I.opaque_i64,
    }
    if tac.smem or tac.xa:
        ns.update({name: getattr(_A, name) for name in _A.TWINS})
        # copies in flight at a super-chunk's wait: one fewer than the ring copies ahead (``mma_xa.copies_ahead``)
        ns["cp_async_wait"] = _A.cp_async_wait_for((xa_copies_ahead(tac) if tac.xa else tac.stages) - 1)
    if tac.wg:
        from .. import intrinsics_sm90 as _W

        ns.update(wgmma=_W.wgmma(8 * MT, act == "bfloat16", sync=False), wgmma_wait=_W.wgmma_wait_for(4 * MT),
                  smem_desc=_W.smem_desc, fence_proxy_async=_W.fence_proxy_async)
    if tac.mb:
        from .. import intrinsics_bulk as _B

        ns.update({name: getattr(_B, name) for name in _B.TWINS})
    name = f"gemv_mma_w{bits}_{act}_mt{MT}_{tac.tag}_b{BS}_{ZP}" + ("_kf" if kfull else "") + ("_l2pf" if l2pf else "")
    fn = load_source(name, src, ns)["gemv_mma"]
    fn.__name__ = name
    argtypes = (array_type("uint32"), array_type("uint32"), array_type(act), array_type("uint32"), array_type("uint8"),
                array_type(act), array_type("float32"), array_type("int32"),
                types.int64, types.int64, types.int64, types.int64)
    return Kernel(fn, argtypes, name=name, fastmath=False, prepass=tac.prepass, **register_options(tac))


#: occupancy snapping of the tactics without a register cap: registers a kernel may give up to reach the next
#: resident CTA per SM (``launch.occupancy``). The tactic tables were fitted to numba-cuda's register counts;
#: numba-cuda-mlir's differ by a few for the same source, and one over a step costs a CTA per SM.
SNAP_SLACK = 2


def register_options(tac: Tactic) -> dict:
    """``Kernel`` options for ``tac``'s registers: ``minb`` > 0 is ``launch_bounds=(32 * warps, minb)``
    (``Tactic``), else occupancy snapping (``snap``, ``SNAP_SLACK``)."""
    threads = 32 * tac.warps
    if tac.minb:
        return {"launch_bounds": (threads, tac.minb)}
    return {"snap": (threads, SNAP_SLACK)}


class ThreadWorkspace:
    """A node's workspace of ``size`` elements of ``dtype`` (zero-filled with ``zero``), one per calling thread,
    made on the thread's first need: two threads running one plan on their own streams must not share a kernel's
    workspace, and one thread's plans of every M share it (a served model's distinct M values do not each add
    one). One thread's calls of a node are stream-ordered (one stream, or streams the caller orders)."""

    def __init__(self, size: int, dtype, simulated: bool, zero: bool = False):
        self.size, self.dtype, self.simulated, self.zero = int(size), np.dtype(dtype), simulated, zero
        self._tls = threading.local()

    def made(self) -> bool:
        return getattr(self._tls, "array", None) is not None

    def get(self) -> DevArray:
        a = getattr(self._tls, "array", None)
        if a is None:
            if self.zero:
                a = to_device(np.zeros(self.size, self.dtype), self.simulated)
            else:
                a = device_empty((self.size,), self.dtype, self.simulated)
            self._tls.array = a
        return a


class GemvMmaPlan(Plan):
    """Pre-built launch for one (weights, M); ``enqueue`` rewrites A/Y pointers and launches."""

    route = ROUTE

    def __init__(self, weights, M: int, tactic: Tactic, packed: Packed | None = None, l2pf: bool = False):
        self.M, self.N, self.K = M, weights.N, weights.K
        self.dtype = weights.dtype
        self.tactic = tactic
        self.l2pf = l2pf
        if tactic.wg and M * self.K // 2 >= 2 ** 32:  # its A word offsets are 32-bit (``mma_xa``)
            raise ValueError(f"gemv_mma {tactic.tag}: M * K / 2 = {M * self.K // 2} A words must be < 2**32")
        pk = packed if packed is not None else prepack(weights)  # ``packed``: another copy (benchmarks)
        self.packed = pk
        k = gemv_mma_kernel(weights.dtype, m_tiles(M), tactic, weights.block_size, weights.zp_kind, weights.bits, l2pf,
                            k_full(self.K, weights.block_size, weights.bits))
        self.kernel = k.name
        self._kernel = k
        zp = pk.zp if pk.zp is not None else weights.dummy(np.uint8)
        self._elem = np.uint16 if weights.dtype == "bfloat16" else np.float16
        dummy_a = weights.dummy(np.uint32)
        dummy_y = weights.dummy(self._elem)
        sc = pk.scales
        sw = sc.view(np.uint32, (sc.shape[0] // 2,))
        groups = -(-self.N // (TILE_N * tactic.tpw))
        grid = groups * tactic.ksplit
        shared = 0
        if tactic.xa:  # ``warps * tpw`` tiles per CTA; the ring in dynamic shared memory
            grid = -(-groups // tactic.warps) * tactic.ksplit
            shared = xa_layout(tactic, m_tiles(M), weights.block_size, weights.zp_kind, weights.bits)[2]
        if tactic.grid:  # persistent ring kernel: ``grid`` CTAs per SM, grid-stride over the tile groups
            grid = min(groups, tactic.grid * sm_count(weights.simulated))
        self.grid = grid
        # the workspaces (split-K partial sums and arrival counters, permuted A) are the node's, one per calling
        # thread, sized for the largest M of the plan's range (``_workspace``): shared by its plans of every M
        self._thread_ws = []
        m_cap = MAX_M if M <= MAX_M else WG_MAX_M
        if tactic.ksplit > 1:  # counters start at 0 and are reset by the kernel's last CTA of each group
            self._ws = self._workspace(weights, "splitk_ws", tactic.ksplit * m_cap * self.N, np.float32)
            self._cnt = self._workspace(weights, "splitk_cnt", -(-self.N // TILE_N), np.int32)
        else:
            self._ws = weights.dummy(np.float32)
            self._cnt = weights.dummy(np.int32)
        if tactic.smem or tactic.xa:  # the shared-memory ring: resident CTAs need shared memory more than L1
            k.prefer_shared(100)
        a_arg, self._perm = dummy_a, None
        if tactic.pa:  # A permuted per call into the ring slots' order (``wg_a``); the kernel reads the copy
            from . import wg_a

            mt = m_tiles(M)
            a_arg = self._workspace(weights, "pa", wg_a.words(m_tiles(m_cap), self.K), np.uint32)
            self._perm = wg_a.bind(dummy_a, a_arg, M, self.K, mt, weights.block_size, weights.bits, weights.simulated)
        self._launch = k.bind(grid, 32 * tactic.warps,
                              (a_arg, pk.bq, sc, sw, zp, dummy_y, self._ws, self._cnt, M, self.K, self.N,
                               pk.n_super), shared_mem=shared)
        for launch, i, ws in ((self._launch, 6, "splitk_ws"), (self._launch, 7, "splitk_cnt"), (self._launch, 0, "pa"),
                              (self._perm, 1, "pa")):
            tw = next((t for name, t in self._thread_ws if name == ws), None)
            if tw is not None and launch is not None:
                launch.per_thread(i, tw.get)

        # the per-call views' layouts (GPU): enqueue() only moves their pointers when A and Y have the
        # byte counts these views take (what DevArray.view would check), else it builds the views
        self._views = None
        if not weights.simulated:
            self._views = (DevArray(0, (M * self.K // 2,), (4,), np.uint32, None),
                           DevArray(0, (M * self.N,), (2,), self._elem, None))

    def _workspace(self, weights, kind: str, size: int, dtype) -> DevArray:
        """The node's per-thread workspace ``kind`` of ``size`` elements (``ThreadWorkspace``, kept in
        ``weights.derived``), remembered for ``per_thread``; this thread's array (the launch's template)."""
        tw = weights.derived(f"gemv_mma_{kind}_{size}",
                             lambda: ThreadWorkspace(size, dtype, weights.simulated, zero=kind == "splitk_cnt"))
        self._thread_ws.append((kind, tw))
        return tw.get()

    def _thread_ready(self, stream: int) -> None:
        """Before a thread's first launch of the plan: its workspaces exist, or are made here outside capture."""
        for _, tw in self._thread_ws:
            if not tw.made():
                from ...launch import CaptureError, is_capturing

                if is_capturing(stream):
                    raise CaptureError("gemv_mma: this thread has no workspace yet; run a warmup inference in this "
                                       "thread outside capture first.")
                tw.get()

    def _views_fit(self, a: DevArray, out: DevArray) -> bool:
        """Whether A and Y have the layouts of the pre-built views (GPU), so only their pointers move."""
        return (self._views is not None and a.c_contiguous and out.c_contiguous and a.nbytes == 2 * self.M * self.K
                and out.nbytes == 2 * self.M * self.N)

    def enqueue(self, a: DevArray, out: DevArray, stream: int) -> None:
        M, K, N = self.M, self.K, self.N
        if a.ptr % 16:
            raise ValueError("gemv_mma: A must be 16-byte aligned")
        if self._thread_ws:
            self._thread_ready(stream)
        L = self._launch
        v = self._views
        AL = self._perm if self._perm is not None else L  # the launch that reads A
        if self._views_fit(a, out):
            AL.set_array_ptr(0, a.ptr, v[0])
            L.set_array_ptr(5, out.ptr, v[1])
        else:
            AL.set_array(0, a.view(np.uint32, (M * K // 2,)))
            L.set_array(5, out.view(self._elem, (M * N,)))
        if self._perm is not None:
            self._perm.launch(stream)
        L.launch(stream)

    def enqueue_runner(self, a_like, o_like):
        if not self._views_fit(a_like, o_like):
            return None
        if self._thread_ws:  # the runner's buffers take this thread's workspaces (made outside capture)
            self._thread_ready(0)
        v = self._views
        if self._perm is not None:
            go_a = self._perm.pointer_launcher(((0, v[0]),))
            go_y = self._launch.pointer_launcher(((5, v[1]),))
            if go_a is None or go_y is None:
                return None

            def run_pa(pa, po, stream):
                if pa & 15:  # as below
                    return False
                go_a(pa, stream)
                go_y(po, stream)
                return True

            return run_pa
        go = self._launch.pointer_launcher(((0, v[0]), (5, v[1])))
        if go is None:
            return None

        def run(pa, po, stream):
            if pa & 15:  # enqueue would refuse it: the route's general path serves an unaligned A
                return False
            go(pa, po, stream)
            return True

        return run


def build(weights, problem, config=None, tactic: Tactic | None = None, packed: Packed | None = None,
          l2pf: bool = False) -> GemvMmaPlan:
    """Plan for ``problem`` (must satisfy ``supports``); ``tactic`` overrides ``default_tactic``;
    ``packed`` replaces ``prepack(weights)`` (a copy of it at another address: L2-cold benchmarks);
    ``l2pf`` builds the L2-prefetching kernel variant (``w8.l2_prefetch`` decides when)."""
    if not supports(problem):
        raise ValueError(f"gemv_mma does not support {problem.describe()}")
    if weights.bits not in MMA_LAYOUTS or weights.zp_kind not in ("none", "packed") or weights.g_idx is not None:
        raise ValueError(f"gemv_mma does not support these weights: {weights.describe()}")
    if problem.bits != weights.bits:
        raise ValueError(f"gemv_mma: problem bits={problem.bits} but weights bits={weights.bits}")
    tac = tactic
    if tac is None and problem.M > MAX_M:  # 12..32 m-tiles: the warpgroup kernel (``supports`` checked it has one)
        tac = wide_tactic(problem)
    if tac is None:
        tac = default_tactic(weights.N, weights.K, weights.block_size, problem.M, weights.bits,
                             wgmma_ok(weights.simulated), gpu=device_gpu(weights.simulated))
        if tac.smem:  # a tuned shared-memory ring, fitted to this specialisation's shared memory
            tac = fitted(tac, m_tiles(problem.M), weights.block_size, weights.zp_kind, weights.bits)
    if tac.xa and not xa_applies(weights.K, weights.block_size, weights.bits):
        raise ValueError(f"gemv_mma {tac.tag}: shared activations need K a multiple of the super-chunk and block "
                         f">= 32, got K={weights.K}, block_size={weights.block_size}")
    return GemvMmaPlan(weights, problem.M, tac, packed, l2pf)


class TensorCorePlan(Plan):
    """The plan a fused-GEMV route (``gemv_w4`` / ``gemv_w8`` / ``gemv_w2``) runs for fp16/bf16 A when
    ``supports`` the problem: this tensor-core GEMV, flat in M (faster than the CUDA-core engine at
    every M for 4-bit: ``benchmarks/results/2026-11-30-h200-kernels``).

    It needs A 16-byte aligned; an unaligned A (e.g. a sliced tensor) is served by the route's CUDA-core
    plan (``cuda_core()`` builds it; dequantize + cuBLAS for weights that keep only the tensor-core layout),
    built on first need (outside graph capture).
    """

    def __init__(self, weights, problem, route: str, cuda_core, tactic: Tactic | None = None, l2pf: bool = False):
        self.route = route
        self.mma = build(weights, problem, tactic=tactic, l2pf=l2pf)
        self.kernel = self.mma.kernel
        self.tactic = self.mma.tactic
        self._cuda_core = cuda_core
        self._fallback = None

    def enqueue_runner(self, a_like, o_like):
        return self.mma.enqueue_runner(a_like, o_like)  # False for an unaligned A: ``enqueue`` falls back

    def enqueue(self, a, out, stream: int) -> None:
        if a.ptr % 16 == 0:
            self.mma.enqueue(a, out, stream)
            return
        from . import core

        core.unaligned_fallback(self, stream, self._cuda_core, "the CUDA-core fallback").enqueue(a, out, stream)


def build_route(family: str, unmet, weights, problem, route: str, cuda_core, kernel: str, tactic,
                l2pf: bool = False, config=None):
    """A fused-GEMV family's ``build``: re-check the family's needs (``core.check``), then ``route_plan``."""
    from . import core

    core.check(family, unmet(problem))
    core.check(family, core.weights_unmet(weights, problem))
    return route_plan(weights, problem, route, cuda_core, kernel, tactic=tactic, l2pf=l2pf, config=config)


def route_plan(weights, problem, route: str, cuda_core, kernel: str = "auto", tactic: Tactic | None = None,
               l2pf: bool = False, config=None):
    """A fused-GEMV route's plan: ``kernel`` "auto" (this tensor-core GEMV for fp16/bf16 when ``supports``
    the problem, else the CUDA-core engine), "cuda_core" or "mma"; ``cuda_core()`` builds the CUDA-core
    plan. ``tactic`` / ``l2pf`` are passed to the tensor-core plan (profiler tactics, L2 prefetch). For weights
    that keep only the tensor-core layout (``Weights.packed_only``) the unaligned-A fallback is ``dequant_fallback``
    under the node's ``config`` instead, and "cuda_core" is refused."""
    if kernel not in ("auto", "cuda_core", "mma"):
        raise ValueError(f"kernel must be 'auto', 'cuda_core' or 'mma', got {kernel!r}")
    if weights.packed_only:  # no ORT B for the CUDA-core engine: an unaligned A takes dequantize + cuBLAS
        if kernel == "cuda_core":
            raise ValueError(f"{route}: the CUDA-core kernels read ORT's B layout, and these weights keep only the "
                             f"tensor-core layout ({weights.describe()})")
        cuda_core = partial(dequant_fallback, weights, problem, config)
    if kernel == "cuda_core" or (kernel == "auto" and not supports(problem)):
        return cuda_core()
    return TensorCorePlan(weights, problem, route, cuda_core, tactic, l2pf)


def dequant_fallback(weights, problem, config=None):
    """The plan ORT's chain would run here, dequantize + cuBLAS (chunked by its rule): what an unaligned A runs on
    the ``fused_gemm`` route, and on the GEMV routes for weights that keep only the tensor-core layout (the
    dequantize then reads that layout)."""
    from ...config import load_config
    from ...dispatch.routes import chunk_rule
    from .. import dequant

    cfg = config if config is not None else load_config({})
    route = "dequant_cublas_chunked" if chunk_rule(problem, cfg) else "dequant_cublas"
    return dequant.build(weights, problem, cfg, route)
