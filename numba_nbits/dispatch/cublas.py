"""cuBLAS from Python through nvmath-python's low-level bindings (``nvmath.bindings.cublas``).

One handle per device, created on first use (never while a graph is being captured); the handle is
pointed at the caller's stream on every call, and at a workspace of that stream's own: cuBLAS
guarantees bitwise-reproducible results only while a single stream is active, unless each stream has
its own workspace (cuBLAS docs, "Results reproducibility"; ``cublasSetStream`` also resets the
workspace to the library's pool). Workspaces are allocated on a stream's first GEMM outside graph
capture and kept (at most ``MAX_STREAM_WORKSPACES`` streams; beyond that, and for a stream first
seen while capturing, the library's pool is used: correct, not guaranteed bitwise-identical across
concurrent streams). Found by the soak test on the H200: the same GEMM on six concurrent streams gave
results differing in the last bits (all within tolerance of the oracle).

The GEMM of the universal route, row-major ``Y[M, N] = A[M, K] @ W[N, K]^T`` with W the dequantized
``N x K_padded`` scratch, is the column-major ``Y^T = op_T(W) * A^T``:
``gemmEx(T, N, m=N, n=M, k=K, W, ldw=K_padded, A, lda=K, Y, ldy)`` with fp32 accumulation
(``COMPUTE_32F``; ``COMPUTE_32F_FAST_TF32`` for fp32 when TF32 is allowed; ``COMPUTE_16F`` for fp16
when ``ORT_CUDA_GEMM_OPTIONS`` has bit 0x01, as ORT does). cuBLAS's "disallow reduced-precision
reduction" mode is always on (ORT: only with bit 0x02) so split-K reductions stay fp32; bit 0x04
adds "pedantic" math.

Under numba's CUDA simulator there is no cuBLAS: ``gemm_host`` does the same product in NumPy
(float32 accumulation, one rounding to the output dtype). It is the only non-kernel stand-in.
"""
from __future__ import annotations

import threading

import numpy as np

WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommended workspace for Hopper is 32 MiB
MAX_STREAM_WORKSPACES = 16

_CUDA_R = {"float32": 0, "float16": 2, "bfloat16": 14}
_OP_N, _OP_T = 0, 1
_ALGO_DEFAULT = -1
_ONE = np.ones(1, np.float32)
_ZERO = np.zeros(1, np.float32)
_ONE_H = np.ones(1, np.float16)
_ZERO_H = np.zeros(1, np.float16)
# host addresses of the scalars above, taken once (``ndarray.ctypes`` costs ~1 us per access)
_PTR = {id(x): x.ctypes.data for x in (_ONE, _ZERO, _ONE_H, _ZERO_H)}

_handles: dict[int, "_Handle"] = {}
_lock = threading.Lock()


class _Handle:
    def __init__(self, device_id: int):
        from nvmath.bindings import cublas

        from ..arrays import device_empty

        self.cublas = cublas
        self.handle = cublas.create()
        self._alloc = lambda: device_empty((WORKSPACE_BYTES,), np.uint8, False)
        self.workspaces: dict[int, object] = {}  # stream handle -> its workspace (kept for the process)
        self.math_mode = None
        self.sm_target = 0  # cublasSetSmCountTarget's value (0: all SMs, the library's default)
        self.lock = threading.Lock()

    def workspace_for(self, stream: int):
        """``stream``'s own workspace (allocated on first use outside capture), or None: use the pool."""
        ws = self.workspaces.get(stream)
        if ws is None and len(self.workspaces) < MAX_STREAM_WORKSPACES:
            from ..launch import is_capturing

            if not is_capturing(stream):
                ws = self.workspaces[stream] = self._alloc()
        return ws


def reserve_workspaces(stream: int) -> None:
    """Give ``stream`` its own workspace on every handle made so far (outside capture): a graph captured on
    ``stream`` then runs its GEMMs with a workspace of the size eager calls have, so cuBLAS picks the same
    algorithms and the replay gives the eager call's bits (the library's pool could change the choice)."""
    for h in list(_handles.values()):
        with h.lock:
            h.workspace_for(stream)


def handle_for(device_id: int) -> _Handle:
    """The cuBLAS handle of ``device_id`` (created once; call before any graph capture)."""
    h = _handles.get(device_id)
    if h is None:
        with _lock:
            h = _handles.get(device_id)
            if h is None:
                h = _handles[device_id] = _Handle(device_id)
    return h


def gemm(h: _Handle, stream: int, M: int, N: int, K: int, w_ptr: int, ldw: int, a_ptr: int, y_ptr: int, ldy: int,
         dtype: str, use_tf32: bool, options: int, sm_target: int = 0) -> None:
    """``Y[:M, :N] = A[M, K] @ W[:N, :K]^T`` on ``stream`` (see module docstring). ``sm_target`` > 0 asks cuBLAS to
    size the GEMM for that many SMs (``cublasSetSmCountTarget``), leaving the rest to work on another stream (the
    overlapped dequantize, ``kernels.dequant_overlap``); 0 is the library's default (all SMs)."""
    cb = h.cublas
    ct = cb.ComputeType
    alpha, beta = _ONE, _ZERO
    if dtype == "float32":
        compute = ct.COMPUTE_32F_FAST_TF32 if use_tf32 else ct.COMPUTE_32F
    elif dtype == "float16" and options & 0x01:
        compute, alpha, beta = ct.COMPUTE_16F, _ONE_H, _ZERO_H
    else:
        compute = ct.COMPUTE_32F
    # fp32 accumulation everywhere: cuBLAS may otherwise reduce split-K partial sums in fp16/bf16
    # (seen on the H200: a bf16 GEMM lost exactness that the fp32-accumulating kernels keep). ORT sets
    # this only for ORT_CUDA_GEMM_OPTIONS bit 0x02; we always do (the bit stays accepted).
    mode = int(cb.Math.DISALLOW_REDUCED_PRECISION_REDUCTION)
    if options & 0x01 and dtype == "float16":  # fp16 accumulation was asked for explicitly
        mode = 0
    if options & 0x04:
        mode |= int(cb.Math.PEDANTIC_MATH)
    r = _CUDA_R[dtype]
    with h.lock:  # a handle carries one stream at a time
        if h.math_mode != mode:
            cb.set_math_mode(h.handle, mode)
            h.math_mode = mode
        if h.sm_target != sm_target:
            cb.set_sm_count_target(h.handle, sm_target)
            h.sm_target = sm_target
        cb.set_stream(h.handle, stream)  # also resets the workspace to the library's pool
        ws = h.workspaces.get(stream)
        if ws is None:
            ws = h.workspace_for(stream)
        if ws is not None:
            cb.set_workspace(h.handle, ws.ptr, WORKSPACE_BYTES)
        cb.gemm_ex(h.handle, _OP_T, _OP_N, N, M, K, _PTR[id(alpha)], w_ptr, r, ldw, a_ptr, r, K,
                   _PTR[id(beta)], y_ptr, r, ldy, int(compute), _ALGO_DEFAULT)


def gemm_host(a: np.ndarray, w: np.ndarray, K: int, out: np.ndarray) -> None:
    """Simulator stand-in for ``gemm``: ``out = A @ W[:, :K]^T`` with float32 accumulation."""
    a32 = _as_f32(a)
    w32 = _as_f32(w)[:, :K]
    res = a32 @ w32.T
    if out.dtype == np.uint16:  # bf16 bits
        import ml_dtypes

        out[...] = res.astype(ml_dtypes.bfloat16).view(np.uint16)
    else:
        out[...] = res.astype(out.dtype)


def _as_f32(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint16 or x.dtype.name == "bfloat16":
        return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)
