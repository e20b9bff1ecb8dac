"""The operator: ``MatMulNBits`` (construct once, call many times) and the one-shot ``matmul_nbits``.

``MatMulNBits(B, scales, zero_points, g_idx, bias, *, K, N, bits, block_size, ...)`` validates the
attributes and constant inputs (``schema.py``), parses the configuration once (``config.py``:
explicit ``config=`` keys beat environment variables, which beat defaults) and copies the weights to
the device once (``weights.py``): where every route can read the tensor-core GEMV's layout
(``dispatch.select.packed_layout_serves``: fp16/bf16 weights on an sm >= 80 device, fpA_intB off, ...) the node
builds that layout here and frees ORT's B, so the weights take their packed size once on the device, not twice.
``op(A, out=None, stream=None)`` then:

1. adapts A (NumPy, numba device array, torch, CuPy, any CUDA-array-interface object) and checks it;
2. looks up the plan cached for this M — the first call for an M runs ``dispatch.select`` and builds
   the route's launches (compiling kernels if needed), which must happen outside CUDA-graph capture;
3. runs it on the caller's stream (explicit ``stream``, else torch's/CuPy's current stream for their
   tensors, else the legacy default stream), plus the bias-add kernel when the route does not fuse
   bias, and returns Y of shape ``A.shape[:-1] + (N,)`` in A's kind.

After the first successful ``op(A, out=Y)`` for a given (type and shape of A, type and shape of Y),
later such calls take the steady-state path of ``bound.py``: one dict lookup, the two data pointers
and the stream read through the fastest accessor of each array kind, and the plan's launches; any
change of dtype, device, layout or overlap falls back to the steps above, with their errors.
``op.bind(A, out, stream=None)`` checks once and returns a no-argument callable for fixed buffers.

``weight_prepacked`` 1 / 2 (spec §7.3) means B is ``pack_weights_for_mixed_gemm(B, N, K, bits, arch=80 / 90,
block_size)`` output: it is checked (ORT's error texts), used as given and served by the ``fpa_intb`` route
only. With ``weight_prepacked=0`` and the fpA_intB route enabled (``ORT_FPA_INTB_GEMM`` /
``ep.cuda.fpa_intb_gemm``) and eligible, B is packed for it here, at construction.

A steady-state call on a device array allocates nothing when ``out`` is given (dequantize + cuBLAS borrows its
scratch from a stream-ordered pool in the call's stream: ``scratch.py``; no ``cuMemAlloc``), synchronises nothing
and compiles nothing, so it can be captured into a CUDA graph.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Mapping, Optional

import numpy as np

from . import schema
from .arrays import DevArray, _mk, adapt_input, alloc_output, dtype_name, result_of, stream_handle, to_device, to_host
from .bound import Bound, CallRecord, reader_for
from .config import Config, load_config
from .dispatch.problem import DEFAULT_SMEM_PER_BLOCK, Problem
from .dispatch.select import PREPACKED_NOT_ELIGIBLE, Decision, packed_layout_serves, select
from .kernels import get_family
from .launch import CaptureError, is_capturing, simulated
from .weights import build_weights


class _Entry:
    """A built route for one M: the decision and the family's plan; ``run`` is the plan's (bias-add launch
    attached to it when the route does not fuse bias), printing the ``ORT_FPA_INTB_DEBUG`` line first when
    that is on."""

    __slots__ = ("decision", "plan", "debug_line", "run")

    def __init__(self, decision: Decision, plan, debug_line: Optional[str]):
        self.decision = decision
        self.plan = plan
        self.debug_line = debug_line
        self.run = plan.run if debug_line is None else self._run_and_print

    def _run_and_print(self, a: DevArray, out: DevArray, stream: int) -> None:
        self.plan.run(a, out, stream)
        print(self.debug_line, file=sys.stderr)


def _runner_of(entry: _Entry):
    """The entry's ``Plan.pointer_runner`` (``bound.py``'s lean path), or None when every call must print the
    ``ORT_FPA_INTB_DEBUG`` line (only ``entry.run`` does)."""
    return entry.plan.pointer_runner if entry.debug_line is None else None


class MatMulNBits:
    """``com.microsoft::MatMulNBits``: ``Y = A @ dequant(B).T + bias`` with B block-quantized to 2/4/8 bits.

    Parameters follow the ONNX operator: B uint8 ``[N, k_blocks, block_size*bits/8]``; scales ``[N,
    k_blocks]`` (or flat) in A's dtype (float32, float16 or bfloat16); zero_points packed uint8 ``[N,
    ceil(k_blocks*bits/8)]`` or typed like scales ``[N, k_blocks]``; g_idx int32 ``[K]`` or
    ``[K_padded]``; bias ``[N]``. ``config`` is a mapping of session-config keys (``ep.cuda.*``,
    ``numba_nbits.*``, ``use_tf32``) or a ``Config``; ``environ`` defaults to ``os.environ`` and is
    read here, once.
    """

    def __init__(self, B, scales, zero_points=None, g_idx=None, bias=None, *, K: int, N: int, bits: int = 4,
                 block_size: int, accuracy_level: int = 0, weight_prepacked: int = 0,
                 config: Mapping[str, Any] | Config | None = None, environ: Mapping[str, str] | None = None):
        self.attrs = schema.check_attributes(K, N, bits, block_size, accuracy_level, weight_prepacked)
        B, scales, zero_points, g_idx, bias, dtype = schema.check_constant_inputs(
            self.attrs, B, scales, zero_points, g_idx, bias)
        self.config: Config = load_config(environ, config)
        self.dtype = dtype
        self._simulated = simulated()
        self.sm, self.device_id = self._device()
        if dtype == "bfloat16" and self.sm < 80:
            raise schema.MatMulNBitsError("BFloat16 MatMulNBits is not supported on cuda device with compute "
                                          f"capability < 8.0 (this device: sm_{self.sm})")
        zp_kind = "none" if zero_points is None else ("packed" if zero_points.dtype == np.uint8 else "typed")
        self._check_prepacked(Problem(M=1, N=N, K=K, bits=bits, block_size=block_size, dtype=dtype,
                                      zero_points=zp_kind, has_g_idx=g_idx is not None, has_bias=bias is not None,
                                      sm=self.sm, weight_prepacked=self.attrs.weight_prepacked))
        self.weights = build_weights(B, scales, zero_points, g_idx, bias, K=K, N=N, bits=bits, block_size=block_size,
                                     simulated=self._simulated, device_id=self.device_id)
        self.zero_points_kind = self.weights.zp_kind
        self._entries: dict[int, _Entry] = {}
        self._calls: dict = {}  # (type(A), A.shape, type(out), out.shape) -> CallRecord or None (bound.py)
        self._lock = threading.Lock()
        if self._serves_fpa_intb():  # spec §7.5: the runtime prepack happens at construction
            from .kernels import fpa_intb, mixed_gemm

            mixed_gemm.prepack(self.weights, fpa_intb.packing_sm(self.sm, weight_prepacked),
                               prepacked=weight_prepacked != 0)
        elif packed_layout_serves(self.problem(1), self.config):  # one copy of the weights, not two
            from .kernels.gemv import repack

            # (a simulated node's weights are host memory: NumPy builds the same layout without simulating a kernel)
            self.weights.keep_packed_only(repack.prepack_cached_on_host if self._simulated else repack.prepack)

    def _serves_fpa_intb(self, M: int = 1) -> bool:
        try:
            return select(self.problem(M), self.config).name == "fpa_intb"
        except ValueError:  # a forced route that cannot serve: reported at call time, like any forced route
            return False

    def _check_prepacked(self, p: Problem) -> None:
        """Spec §7.3: a prepacked B (``weight_prepacked`` 1 or 2) can only be served by the fpA_intB route.

        Under the simulator the device is taken to be sm 90 (``_device``), so ``weight_prepacked=2`` is
        accepted there."""
        wp = p.weight_prepacked
        if not wp:
            return
        if wp == 2:
            if p.sm != 90:
                raise schema.MatMulNBitsError("weight_prepacked=2 (SM90 layout) requires a compute capability 9.0 "
                                              f"(Hopper) device, but got sm {p.sm}")
            if p.block_size not in (64, 128):
                raise schema.MatMulNBitsError("weight_prepacked=2 (SM90 layout) supports block_size 64 or 128 only, "
                                              f"but got {p.block_size}")
        from .dispatch.routes import route_named
        from .kernels import fpa_intb

        bad = route_named("fpa_intb").first_failure(p, self.config)
        if bad is not None:
            raise schema.MatMulNBitsError(
                PREPACKED_NOT_ELIGIBLE + f" [guard {bad.name} fails: needs {bad.text}; {p.describe()}]")
        if self.config.force_route not in (None, "fpa_intb"):
            raise schema.MatMulNBitsError(
                f"weight_prepacked={wp}: input B is in the fpA_intB layout, which only the fpa_intb route reads; "
                f"the forced route {self.config.force_route!r} (NUMBA_NBITS_FORCE_ROUTE / numba_nbits.force_route) "
                "cannot serve it")
        required = fpa_intb.required_weight_prepacked_format(fpa_intb.packing_sm(p.sm, wp))
        if wp != required:
            raise schema.MatMulNBitsError(f"weight_prepacked={wp} does not match the format required by the selected "
                                          f"fpA_intB kernel: {required}")

    # ------------------------------------------------------------------------------ metadata
    K = property(lambda self: self.attrs.K)
    N = property(lambda self: self.attrs.N)
    bits = property(lambda self: self.attrs.bits)
    block_size = property(lambda self: self.attrs.block_size)

    def _device(self):
        if self._simulated:
            return 90, 0
        from .probe import require_gpu

        require_gpu()  # no GPU and no simulator: one clear NoGPUError instead of numba's CudaSupportError
        from numba import cuda

        dev = cuda.get_current_device()
        major, minor = dev.compute_capability
        return major * 10 + minor, dev.id

    def problem(self, M: int) -> Problem:
        w = self.weights
        return Problem(M=int(M), N=w.N, K=w.K, bits=w.bits, block_size=w.block_size, dtype=self.dtype,
                       zero_points=w.zp_kind, has_g_idx=w.g_idx is not None, has_bias=w.bias is not None,
                       sm=self.sm, weight_prepacked=self.attrs.weight_prepacked,
                       smem_per_block=DEFAULT_SMEM_PER_BLOCK)

    def explain(self, M: int = 1) -> Decision:
        """The dispatch decision for a call with M rows (``print(op.explain(M).explain())``)."""
        return select(self.problem(M), self.config)

    def route(self, M: int = 1) -> str:
        return self.explain(M).name

    # ------------------------------------------------------------------------------ building
    def _entry(self, M: int, stream: int) -> _Entry:
        e = self._entries.get(M)
        if e is not None:
            return e
        with self._lock:
            e = self._entries.get(M)
            if e is None:
                if is_capturing(stream):
                    if self._serves_fpa_intb(M):  # ORT's text when the M bucket was never profiled
                        self.fpa_profiler().get(M, stream)
                    raise CaptureError(
                        f"MatMulNBits: no plan for M={M}, N={self.N}, K={self.K} yet; building one compiles and "
                        "allocates, which cannot happen during CUDA graph capture; run a warmup inference outside "
                        "capture first.")
                e = self._entries[M] = self._build(M)
        return e

    def warmup(self, *Ms: int) -> None:
        """Build (compile, allocate) the plans for these M values now, outside any capture; on the
        fpa_intb route this also profiles the tactic bucket of each M (``dispatch/profiler.py``)."""
        for M in Ms:
            self._entry(int(M), 0)

    def fpa_profiler(self):
        """This node's fpA_intB ``TacticProfiler`` (created on first use, kept with the weights: the one the
        route's plans use; choices shared per GEMM key)."""
        from .kernels import fpa_intb

        return fpa_intb.profiler(self.weights, self.problem(1), self.config)

    def _build(self, M: int) -> _Entry:
        problem = self.problem(M)
        decision = select(problem, self.config)
        route = decision.route
        plan = get_family(route.family).build(self.weights, problem, self.config, route.name)
        w = self.weights
        if decision.bias == "add":
            plan.add_bias(w, M)
        debug = None
        if self.config.fpa_intb_debug:
            f = plan.debug_fields()
            debug = (f"[fpA_intB_debug] M={M} N={self.N} K={self.K} nbits={self.bits} block_size={self.block_size} "
                     f"device_sm={self.sm} packing_sm={f['packing_sm']} has_bias={int(w.bias is not None)} "
                     f"has_zero_points={int(w.zp_kind != 'none')} weight_format={f['weight_format']} "
                     f"route={route.name} kernel={f['kernel']} tactic={f['tactic']}")
        return _Entry(decision, plan, debug)

    # ------------------------------------------------------------------------------ calling
    def __call__(self, A, out=None, stream=None):
        if out is not None:  # the steady state: the record of an earlier call with these types and shapes
            try:
                rec = self._calls.get((type(A), A.shape, type(out), out.shape))
            except (AttributeError, TypeError):  # no .shape, or an unhashable one: the general path says why
                rec = None
            if rec is not None:
                done = rec(A, out, stream)
                if done is not None:
                    return done
        c = self._check_call(A, out, stream)
        if c.M > 0:
            c.entry.run(c.a2, c.o2, c.s)
            if out is not None and len(self._calls) < _MAX_CALL_RECORDS:
                self._record(A, out, c)
        if out is not None:
            return out
        o = c.o
        if c.kind == "numpy":
            return to_host(o, c.s).reshape(c.out_shape) if not self._simulated else o.owner.reshape(c.out_shape).copy()
        return result_of(o, c.kind, self._simulated, c.s)

    def bind(self, A, out, stream=None) -> Bound:
        """``op(A, out=out, stream=stream)`` on fixed buffers, for decode loops: checks A and out and builds
        the plan now (outside CUDA-graph capture: a missing plan raises ``CaptureError`` during capture);
        the returned callable takes no arguments, launches the plan on these buffers (seeing their
        current contents) and returns ``out``. ``stream=None``: the producer's current stream at each call
        (torch / CuPy), else the legacy default stream."""
        sim = self._simulated
        if out is None:
            raise TypeError("bind: out must be a device array of shape A.shape[:-1] + (N,)")
        if isinstance(A, np.ndarray) and not sim:
            raise schema.MatMulNBitsError("bind: A must be a device array (a NumPy A is copied to the device on "
                                          "every call)")
        c = self._check_call(A, out, stream)
        if c.M == 0:
            return Bound(None, None, None, out, A, 0, None)
        ra = reader_for(A, sim)
        runner = None if sim else _runner_of(c.entry)
        if runner is not None:
            runner = runner(c.a2, c.o2)
        graph = not sim and self._call_graphs(c.entry)
        if stream is None and ra is not None and not sim:  # the producer's current stream, read per call
            return Bound(c.entry.run, c.a2, c.o2, out, A, None, ra.stream_of, runner, graph)
        return Bound(c.entry.run, c.a2, c.o2, out, A, c.s, None, runner, graph)

    def _record(self, A, out, c) -> None:
        """Keep the ``CallRecord`` of a successful ``op(A, out=out)`` (``bound.py``)."""
        key = (type(A), A.shape, type(out), out.shape)
        if key in self._calls:  # a valid layout the record does not read, or kinds without readers
            return
        sim = self._simulated
        ra, ro = reader_for(A, sim), reader_for(out, sim)
        # None: NumPy / CAI objects / subclasses, which keep the general path (and are not looked at again)
        self._calls[key] = None if ra is None or ro is None else CallRecord(c.entry.run, ra, ro, c.a2, c.o2, sim,
                                                                             _runner_of(c.entry),
                                                                             graphs=self._call_graphs(c.entry))

    def _call_graphs(self, entry) -> bool:
        """Whether the steady-state path may keep this plan's launches as a CUDA graph (``bound.py``): the
        ``numba_nbits.call_graphs`` knob, and never for a plan that prints the ``ORT_FPA_INTB_DEBUG`` line
        (it needs ``entry.run`` on every call)."""
        return self.config.call_graphs and entry.debug_line is None

    def _check_call(self, A, out, stream) -> "_Call":
        """Adapt and check one call's inputs (every error of ``op(...)``), find the stream and, for M > 0,
        the plan (built on first use) and the 2-D views it runs on."""
        sim = self._simulated
        attrs = self.attrs
        act = self.dtype
        # the producer's current stream is only needed when no stream= is given
        a_in = adapt_input(A, "A", sim, stream is None)
        a_dev = a_in.dev
        shape = a_dev.shape
        name = dtype_name(a_dev.dtype)
        if len(shape) == 2 and shape[1] == attrs.K and name == act:
            M = shape[0]  # what check_activation returns for a valid 2-D A
        else:
            M = schema.check_activation(shape, name, attrs, act)
        N = attrs.N
        out_shape = (M, N) if len(shape) == 2 else tuple(shape[:-1]) + (N,)
        s = 0 if sim else (stream_handle(stream) if stream is not None else a_in.default_stream)
        if a_in.device_id not in (-1, self.device_id) and not sim:
            raise schema.MatMulNBitsError(f"input A is on device {a_in.device_id} but this MatMulNBits' weights are "
                                          f"on device {self.device_id}; build one operator per device")
        kind = a_in.kind
        # torch's caching allocator is graph-aware, so torch outputs may be allocated during capture
        if not sim and ((out is None and kind != "torch") or kind == "numpy") and is_capturing(s):
            raise CaptureError("MatMulNBits called during CUDA graph capture without a device A and an out= buffer: "
                               "allocating the output or copying host data cannot be captured; pass device arrays "
                               "and out=, and run a warmup inference outside capture first.")
        if kind == "numpy" and not sim:
            a_dev = to_device(a_dev.owner, False)
        if out is None:
            o = alloc_output("numba" if kind == "numpy" else kind, out_shape, self.weights.np_dtype, a_in.source, sim)
        else:
            o_in = adapt_input(out, "out", sim, False)
            o = o_in.dev
            o_name = dtype_name(o.dtype)
            if o.shape != out_shape or o_name != act:
                schema.check_output(o.shape, o_name, out_shape, act)
            if o_in.kind == "numpy" and not sim:
                raise schema.MatMulNBitsError("out: a NumPy out= is only accepted with NumPy A under the simulator; "
                                              "pass a device array, or no out")
            if not sim and o.ptr < a_dev.ptr + a_dev.nbytes and a_dev.ptr < o.ptr + o.nbytes:
                raise schema.MatMulNBitsError("out must not overlap A")
            if sim and np.shares_memory(o.owner, a_dev.owner):
                raise schema.MatMulNBitsError("out must not overlap A")
        c = _Call(M, kind, o, out_shape, s)
        if M > 0:
            c.entry = self._entries.get(M) or self._entry(M, s)
            K = attrs.K
            if sim:
                c.a2 = DevArray(a_dev.ptr, (M, K), (K * a_dev.itemsize, a_dev.itemsize), a_dev.dtype,
                                a_dev.owner.reshape(M, K))
                c.o2 = DevArray(o.ptr, (M, N), (N * o.itemsize, o.itemsize), o.dtype, o.owner.reshape(M, N))
            else:  # both are checked C-contiguous with M*K and M*N elements: the 2-D views need no checks
                its = a_dev.dtype.itemsize
                c.a2 = _mk(a_dev.ptr, (M, K), (K * its, its), a_dev.dtype, a_dev.owner, True)
                its = o.dtype.itemsize
                c.o2 = _mk(o.ptr, (M, N), (N * its, its), o.dtype, o.owner, True)
        return c


_MAX_CALL_RECORDS = 64  # distinct (types, shapes) of op(A, out=) calls kept per operator


class _Call:
    """One checked call: M, A's kind, the output view, Y's shape, the stream and (M > 0) plan and views."""

    __slots__ = ("M", "kind", "o", "out_shape", "s", "entry", "a2", "o2")

    def __init__(self, M: int, kind: str, o: DevArray, out_shape: tuple, s: int):
        self.M, self.kind, self.o, self.out_shape, self.s = M, kind, o, out_shape, s
        self.entry = self.a2 = self.o2 = None


def matmul_nbits(A, B, scales, zero_points=None, g_idx=None, bias=None, *, K: int, N: int, bits: int = 4,
                 block_size: int, accuracy_level: int = 0, weight_prepacked: int = 0, config=None, stream=None,
                 out=None):
    """One-shot ``MatMulNBits``: validates, uploads the weights and runs once (use the class to reuse them)."""
    op = MatMulNBits(B, scales, zero_points, g_idx, bias, K=K, N=N, bits=bits, block_size=block_size,
                     accuracy_level=accuracy_level, weight_prepacked=weight_prepacked, config=config)
    return op(A, out=out, stream=stream)


def dequantize(B, scales, zero_points=None, g_idx=None, *, K: int, N: int, bits: int, block_size: int):
    """Dequantized weights ``(N, K)`` in the scales' dtype: NumPy in, NumPy out (host); device arrays in,
    a numba device array out (dequantize kernel on the device)."""
    from .formats import dequantize_host

    if isinstance(B, np.ndarray) and isinstance(scales, np.ndarray):
        return dequantize_host(B, scales, zero_points, g_idx, K=K, N=N, bits=bits, block_size=block_size)
    from .kernels.dequant import bind_dequant
    from .arrays import device_empty

    attrs = schema.check_attributes(K, N, bits, block_size)
    B, scales, zero_points, g_idx, _, dtype = schema.check_constant_inputs(attrs, B, scales, zero_points, g_idx)
    sim = simulated()
    w = build_weights(B, scales, zero_points, g_idx, None, K=K, N=N, bits=bits, block_size=block_size, simulated=sim)
    out = device_empty((N * w.K_padded,), w.np_dtype, sim)
    from .kernels.dequant import _flat_views

    b, s, zpp, zpt = _flat_views(w, 0, N)
    gidx = w.g_idx if w.g_idx is not None else w.dummy(np.int32)
    bind_dequant(b, s, zpp, zpt, gidx, out, bits=bits, act=dtype, zp_kind=w.zp_kind, has_gidx=w.g_idx is not None,
                 n_rows=N, k_blocks=w.k_blocks, block_size=block_size, zp_row=w.zp_row).launch(0)
    from numba import cuda

    if sim:
        return cuda.to_device(np.ascontiguousarray(out.owner.reshape(N, w.K_padded)[:, :K]))
    full = out.owner  # numba uint8 device array holding N*K_padded elements
    arr = cuda.devicearray.DeviceNDArray((N, w.K_padded), (w.K_padded * w.np_dtype.itemsize, w.np_dtype.itemsize),
                                         w.np_dtype, gpu_data=full.gpu_data)
    return arr[:, :K] if K != w.K_padded else arr
