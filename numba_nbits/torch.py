"""PyTorch integration: ``QuantLinear`` (a weight-only quantized ``nn.Linear``) and ``quantize_model_``.

Optional extra ``torch`` (``pip install 'numba_nbits[torch]'``). Importing ``numba_nbits`` never
imports torch; importing ``numba_nbits.torch`` does (and fails with a clear ImportError without it).

    import torch
    from numba_nbits.torch import QuantLinear, quantize_model_

    model = quantize_model_(model.cuda(), bits=4, block_size=32)   # every nn.Linear, in place
    y = model(x.cuda())                                             # runs numba_nbits kernels

``QuantLinear`` holds the ONNX ``MatMulNBits`` tensors as buffers -- ``qweight`` (B, uint8
``[N, k_blocks, block_size*bits/8]``), ``scales`` ``[N, k_blocks]``, and when present
``zero_points`` (packed uint8), ``g_idx`` (int32) and ``bias`` -- so ``state_dict()`` /
``load_state_dict()`` / ``torch.save`` round-trip them, and ``.to()``/``.cuda()``/``.half()``
move or cast them like any buffer. The bytes are exactly what ONNX Runtime's quantizer writes
(``numba_nbits.quantize``), so a state dict can be turned into a MatMulNBits node and back.

``forward(x)`` takes a CUDA tensor of any leading shape ``[..., in_features]`` in float32, float16
or bfloat16 and returns ``[..., out_features]`` in x's dtype, computed by ``numba_nbits.MatMulNBits``
zero-copy on torch's current stream (the output comes from torch's caching allocator). The operator
is built -- weights uploaded with scales/bias cast to x's dtype -- on the first call for each (dtype,
device) and rebuilt when a buffer is modified or moved. Under ``torch.cuda.graph`` it captures like
any kernel once warmed up: run the module eagerly with the same input shape first (that builds the
operator and its launch plan for that M; building cannot happen during capture).

CPU tensors take the operator's host path, as NumPy arrays do (``MatMulNBits``: host in, host out):
on a GPU the input is copied to the device and the result back, synchronously -- a convenience for
checks and for CPU-side code such as ``torch.distributed``'s gloo backend, not a fast path, and not
capturable; on numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) everything stays on the host.
Without a GPU or the simulator a CPU input is refused (``RuntimeError`` saying so).

Tensor parallelism (``torch.distributed``, NCCL on GPUs, gloo on CPU): ``ColumnParallelQuantLinear``
(N sharded, optional all-gather of the output), ``RowParallelQuantLinear`` (K sharded on whole
quantization blocks, partial outputs all-reduced, bias added once) and ``quantize_model_(...,
tp_group=group)``; the shards are exact slices of the full ORT tensors (``numba_nbits.shard``).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("numba_nbits.torch needs PyTorch; install the extra: pip install 'numba_nbits[torch]'") from e

__all__ = ["COLUMN_PARALLEL", "ROW_PARALLEL", "ColumnParallelQuantLinear", "QuantLinear", "RowParallelQuantLinear",
           "quantize_model_"]

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _to_numpy(t) -> Optional[np.ndarray]:
    """A host NumPy copy of a tensor (bfloat16 as ml_dtypes.bfloat16); NumPy arrays pass through."""
    if t is None:
        return None
    if isinstance(t, np.ndarray):
        return t
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        from .arrays import bfloat16

        return t.view(torch.int16).numpy().view(bfloat16())
    return t.numpy()


def _to_torch(a, device=None) -> Optional["torch.Tensor"]:
    if a is None:
        return None
    if isinstance(a, torch.Tensor):
        return a.detach().to(device) if device is not None else a.detach()
    a = np.ascontiguousarray(a)
    if a.dtype.name == "bfloat16":
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    else:
        t = torch.from_numpy(a.copy())
    return t.to(device) if device is not None else t


def _np_dtype(tdt):
    from .arrays import bfloat16

    return {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16),
            torch.bfloat16: bfloat16()}[tdt]


def _zero_tensors(in_features, out_features, bits, block_size, symmetric, bias, dtype):
    from .formats import blob_size, k_blocks, zp_blob_size

    kb = k_blocks(in_features, block_size)
    B = np.zeros((out_features, kb, blob_size(block_size, bits)), np.uint8)
    s = np.zeros((out_features, kb), _np_dtype(dtype))
    zp = None if symmetric else np.zeros((out_features, zp_blob_size(kb, bits)), np.uint8)
    b = np.zeros(out_features, _np_dtype(dtype)) if bias else None
    return B, s, zp, b


class QuantLinear(nn.Module):
    """``y = x @ dequant(qweight).T + bias``: an ``nn.Linear`` whose weight is MatMulNBits-quantized.

    Construct from MatMulNBits tensors (torch tensors or NumPy arrays, ONNX layouts; validated by
    ``numba_nbits.schema``), from an ``nn.Linear`` with ``from_linear``, or as an all-zero skeleton
    to load a state dict into with ``empty``. ``config`` is passed to ``numba_nbits.MatMulNBits``.
    """

    def __init__(self, B, scales, zero_points=None, bias=None, *, in_features: int, out_features: int,
                 bits: int = 4, block_size: int = 32, g_idx=None, config=None):
        super().__init__()
        from . import schema

        attrs = schema.check_attributes(in_features, out_features, bits, block_size)
        Bn, sn, zn, gn, bn, _ = schema.check_constant_inputs(
            attrs, _to_numpy(B), _to_numpy(scales), _to_numpy(zero_points), _to_numpy(g_idx), _to_numpy(bias))
        device = B.device if isinstance(B, torch.Tensor) else None
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.bits, self.block_size = int(bits), int(block_size)
        self.config = config
        self.register_buffer("qweight", _to_torch(Bn, device))
        self.register_buffer("scales", _to_torch(np.asarray(sn).reshape(attrs.N, attrs.k_blocks), device))
        self.register_buffer("zero_points", _to_torch(zn, device))
        self.register_buffer("g_idx", _to_torch(gn, device))
        self.register_buffer("bias", _to_torch(bn, device))
        self._ops = {}

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_linear(cls, linear: "nn.Linear", bits: int = 4, block_size: int = 32, symmetric: bool = True,
                    config=None) -> "QuantLinear":
        """Quantize ``linear.weight`` exactly like ONNX Runtime's MatMulNBitsQuantizer (RTN, per block of
        ``block_size`` along in_features; scales in the weight's dtype; packed zero points when
        ``symmetric=False``). in_features need not be a multiple of block_size."""
        W = linear.weight
        B, s, zp = _quantize_linear(linear, bits, block_size, symmetric)
        q = cls(B, s, zp, linear.bias, in_features=linear.in_features, out_features=linear.out_features,
                bits=bits, block_size=block_size, config=config)
        return q.to(W.device)

    @classmethod
    def empty(cls, in_features: int, out_features: int, bits: int = 4, block_size: int = 32, symmetric: bool = True,
              bias: bool = True, dtype=torch.float32, device=None, config=None) -> "QuantLinear":
        """A zero-filled module with the buffers of ``from_linear(..., symmetric)``, to ``load_state_dict`` into."""
        B, s, zp, b = _zero_tensors(in_features, out_features, bits, block_size, symmetric, bias, dtype)
        q = cls(B, s, zp, b, in_features=in_features, out_features=out_features, bits=bits, block_size=block_size,
                config=config)
        return q.to(device) if device is not None else q

    def __getstate__(self):  # copy.deepcopy / pickle: built operators hold device memory; rebuild lazily
        state = self.__dict__.copy()
        state["_ops"] = {}
        return state

    # ------------------------------------------------------------------ helpers
    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"block_size={self.block_size}, symmetric={self.zero_points is None}, bias={self.bias is not None}")

    def dequantize_weight(self) -> "torch.Tensor":
        """The dequantized weight ``[out_features, in_features]`` as a float32 CPU tensor (host math)."""
        from .formats import dequantize_host

        s = _to_numpy(self.scales).astype(np.float32)
        w = dequantize_host(_to_numpy(self.qweight), s, _to_numpy(self.zero_points), _to_numpy(self.g_idx),
                            K=self.in_features, N=self.out_features, bits=self.bits, block_size=self.block_size)
        return torch.from_numpy(np.asarray(w, dtype=np.float32).copy())

    def _buffers_key(self):
        return tuple((t.data_ptr(), t._version) if t is not None else None
                     for t in (self.qweight, self.scales, self.zero_points, self.g_idx, self.bias))

    def _op_for(self, x: "torch.Tensor"):
        on_host = x.device.type == "cpu"
        dev = None if on_host else x.device.index if x.device.index is not None else torch.cuda.current_device()
        slot = (x.dtype, "cpu" if on_host else dev)
        key = self._buffers_key()
        hit = self._ops.get(slot)
        if hit is not None and hit[0] == key:
            return hit[1]
        if not on_host and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("QuantLinear: the operator for this dtype/device is not built (or its buffers "
                               "changed); run the module once eagerly before CUDA graph capture")
        from numba import cuda

        from .op import MatMulNBits

        if on_host and not cuda.is_available():
            raise RuntimeError("QuantLinear runs numba_nbits CUDA kernels: a CPU tensor is copied to the GPU and back, "
                               "but no CUDA GPU is available (nor numba's simulator, NUMBA_ENABLE_CUDASIM=1)")

        npdt = _np_dtype(x.dtype)

        def cast(t):
            a = _to_numpy(t)
            if a is None:
                return None
            return a if a.dtype == npdt else a.astype(np.float32).astype(npdt)

        zp = _to_numpy(self.zero_points)
        if zp is not None and zp.dtype != np.uint8:
            zp = cast(self.zero_points)
        with contextlib.nullcontext() if on_host else cuda.gpus[dev]:
            op = MatMulNBits(_to_numpy(self.qweight), cast(self.scales), zp, _to_numpy(self.g_idx), cast(self.bias),
                             K=self.in_features, N=self.out_features, bits=self.bits, block_size=self.block_size,
                             config=self.config)
        self._ops[slot] = (key, op)
        return op

    def operator(self, dtype=torch.float16, device=None):
        """The ``numba_nbits.MatMulNBits`` used for inputs of ``dtype`` on ``device`` (``"cpu"``: the host path;
        built if needed)."""
        probe = torch.empty(0, dtype=dtype, device=device or "cuda")
        return self._op_for(probe)

    # ------------------------------------------------------------------ forward
    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"QuantLinear expects a torch.Tensor, got {type(x).__name__}")
        if x.device.type not in ("cuda", "cpu"):
            raise RuntimeError(f"QuantLinear runs numba_nbits CUDA kernels and needs a CUDA (or CPU) tensor, got one "
                               f"on '{x.device}'; move the model and its inputs to the GPU (model.cuda(), x.cuda())")
        if x.dtype not in _FLOATS:
            raise TypeError(f"QuantLinear: input dtype must be float32, float16 or bfloat16, got {x.dtype}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(f"QuantLinear: input's last dimension must be in_features={self.in_features}, "
                             f"got shape {tuple(x.shape)}")
        lead = tuple(x.shape[:-1])
        x2 = x.reshape(-1, self.in_features)
        if x2.shape[0] == 0:
            return x.new_empty(lead + (self.out_features,))
        op = self._op_for(x)
        if x.device.type == "cpu":  # host path: NumPy in, NumPy out
            y = _to_torch(op(_to_numpy(x2)))
        else:
            y = op(x2.contiguous())
        return y.reshape(lead + (self.out_features,))


# ============================================================================ tensor parallelism

class _Group:
    """Holds a ``torch.distributed`` process group (None = the default group) through ``copy.deepcopy``."""

    def __init__(self, group):
        self.group = group

    def __deepcopy__(self, memo):
        return self


def _tp_rank_world(group) -> tuple[int, int]:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("tensor-parallel QuantLinear layers need torch.distributed initialised first: "
                           "torch.distributed.init_process_group('nccl') on GPUs ('gloo' for CPU tensors)")
    return dist.get_rank(group), dist.get_world_size(group)


def _full_tensors(B, scales, zero_points, bias):
    return tuple(_to_numpy(t) for t in (B, scales, zero_points, bias))


class _TensorParallel:
    """Shared by the two tensor-parallel layers: the group, this rank and the world size."""

    def _init_tp(self, tp_group):
        self._tp = _Group(tp_group)
        self.tp_rank, self.tp_world = _tp_rank_world(tp_group)

    @property
    def tp_group(self):
        """The ``torch.distributed`` process group (``None``: the default group)."""
        return self._tp.group

    @classmethod
    def _sharded(cls, shard_fn, B, scales, zero_points, bias, *, in_features: int, out_features: int, bits: int,
                 block_size: int, g_idx, config, tp_group, **mode):
        """This rank's layer from the full tensors, sliced by ``shard_fn`` (``numba_nbits.shard``); ``mode``:
        the subclass's own keyword (``gather_output`` / ``input_is_parallel``)."""
        rank, world = _tp_rank_world(tp_group)
        sh = shard_fn(*_full_tensors(B, scales, zero_points, bias), N=out_features, K=in_features,
                      bits=bits, block_size=block_size, rank=rank, world=world, g_idx=_to_numpy(g_idx))
        m = cls(sh.B, sh.scales, sh.zero_points, sh.bias, in_features=sh.K, out_features=sh.N, bits=bits,
                block_size=block_size, g_idx=sh.g_idx, config=config, tp_group=tp_group, **mode)
        return m.to(B.device) if isinstance(B, torch.Tensor) else m

    @classmethod
    def _quantized(cls, linear, bits, block_size, symmetric, config, tp_group, **mode):
        """Quantize the full ``linear`` (the same bytes on every rank), then ``from_full``; on the weight's device."""
        B, s, zp = _quantize_linear(linear, bits, block_size, symmetric)
        m = cls.from_full(B, s, zp, linear.bias, in_features=linear.in_features, out_features=linear.out_features,
                          bits=bits, block_size=block_size, config=config, tp_group=tp_group, **mode)
        return m.to(linear.weight.device)


class ColumnParallelQuantLinear(_TensorParallel, QuantLinear):
    """Column-parallel ``QuantLinear``: this rank holds output features ``[r*N/w, (r+1)*N/w)`` of the full layer.

    ``in_features`` / ``out_features`` and the buffers are this rank's shard (``out_features = N / world``);
    ``full_out_features`` is N. ``forward(x)`` takes the full input ``[..., in_features]`` and returns this
    rank's slice of the output, or with ``gather_output=True`` the full ``[..., N]`` (an all-gather over
    ``tp_group``). Build with ``from_full`` (exact slices of full ORT tensors) or ``from_linear``.
    Rule: ``N % world == 0``. Collectives: ``torch.distributed`` on ``tp_group`` (None = the default
    group): NCCL for CUDA tensors (capturable in a CUDA graph after an eager warm-up), gloo for CPU ones.
    """

    def __init__(self, B, scales, zero_points=None, bias=None, *, in_features: int, out_features: int,
                 bits: int = 4, block_size: int = 32, g_idx=None, config=None, tp_group=None,
                 gather_output: bool = False):
        super().__init__(B, scales, zero_points, bias, in_features=in_features, out_features=out_features, bits=bits,
                         block_size=block_size, g_idx=g_idx, config=config)
        self._init_tp(tp_group)
        self.gather_output = bool(gather_output)
        self.full_out_features = self.out_features * self.tp_world

    @classmethod
    def from_full(cls, B, scales, zero_points=None, bias=None, *, in_features: int, out_features: int, bits: int = 4,
                  block_size: int = 32, g_idx=None, config=None, tp_group=None,
                  gather_output: bool = False) -> "ColumnParallelQuantLinear":
        """This rank's shard of the full MatMulNBits tensors (``out_features`` = the full N), sliced exactly
        (``numba_nbits.shard.shard_columns``); on B's device when B is a torch tensor."""
        from .shard import shard_columns

        return cls._sharded(shard_columns, B, scales, zero_points, bias, in_features=in_features,
                            out_features=out_features, bits=bits, block_size=block_size, g_idx=g_idx, config=config,
                            tp_group=tp_group, gather_output=gather_output)

    @classmethod
    def from_linear(cls, linear: "nn.Linear", bits: int = 4, block_size: int = 32, symmetric: bool = True,
                    config=None, *, tp_group=None, gather_output: bool = False) -> "ColumnParallelQuantLinear":
        """Quantize the full ``linear`` like ``QuantLinear.from_linear`` (deterministic: every rank gets the same
        bytes), then keep this rank's exact slice; on the weight's device."""
        return cls._quantized(linear, bits, block_size, symmetric, config, tp_group, gather_output=gather_output)

    @classmethod
    def empty(cls, in_features: int, out_features: int, bits: int = 4, block_size: int = 32, symmetric: bool = True,
              bias: bool = True, dtype=torch.float32, device=None, config=None, *, tp_group=None,
              gather_output: bool = False) -> "ColumnParallelQuantLinear":
        """A zero-filled shard of a layer with the full ``out_features``, to ``load_state_dict`` this rank's into."""
        from .shard import check_column_split

        _, world = _tp_rank_world(tp_group)
        n = check_column_split(out_features, world)
        q = cls(*_zero_tensors(in_features, n, bits, block_size, symmetric, bias, dtype), in_features=in_features,
                out_features=n, bits=bits, block_size=block_size, config=config, tp_group=tp_group,
                gather_output=gather_output)
        return q.to(device) if device is not None else q

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", tp_rank={self.tp_rank}, tp_world={self.tp_world}, "
                f"full_out_features={self.full_out_features}, gather_output={self.gather_output}")

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        y = super().forward(x)
        if not self.gather_output or self.tp_world == 1:
            return y
        import torch.distributed as dist

        y = y.contiguous()
        parts = [torch.empty_like(y) for _ in range(self.tp_world)]
        dist.all_gather(parts, y, group=self.tp_group)
        return torch.cat(parts, dim=-1)


class RowParallelQuantLinear(_TensorParallel, QuantLinear):
    """Row-parallel ``QuantLinear``: this rank holds inputs ``[r*K/w, (r+1)*K/w)`` (whole quantization blocks).

    ``in_features`` / ``out_features`` and the buffers are this rank's shard (``in_features = K / world``);
    ``full_in_features`` is K. ``forward(x)`` takes this rank's slice of the input (``input_is_parallel=True``,
    what a column-parallel layer without gather produces) or the full ``[..., K]`` input
    (``input_is_parallel=False``: sliced here), computes the partial product and all-reduces (SUM) it over
    ``tp_group``; every rank returns the full ``[..., N]``. The bias is a buffer of rank 0 only (``None``
    on the others), so the sum adds it once. Rule: ``K % (world * block_size) == 0``; ``g_idx`` is refused
    (unless trivial). Collectives as for ``ColumnParallelQuantLinear``.
    """

    def __init__(self, B, scales, zero_points=None, bias=None, *, in_features: int, out_features: int,
                 bits: int = 4, block_size: int = 32, g_idx=None, config=None, tp_group=None,
                 input_is_parallel: bool = True):
        super().__init__(B, scales, zero_points, bias, in_features=in_features, out_features=out_features, bits=bits,
                         block_size=block_size, g_idx=g_idx, config=config)
        self._init_tp(tp_group)
        if self.bias is not None and self.tp_rank != 0:
            raise ValueError(f"RowParallelQuantLinear: only rank 0 holds the bias (it is added once, by the "
                             f"all-reduce); rank {self.tp_rank} got one")
        self.input_is_parallel = bool(input_is_parallel)
        self.full_in_features = self.in_features * self.tp_world

    @classmethod
    def from_full(cls, B, scales, zero_points=None, bias=None, *, in_features: int, out_features: int, bits: int = 4,
                  block_size: int = 32, g_idx=None, config=None, tp_group=None,
                  input_is_parallel: bool = True) -> "RowParallelQuantLinear":
        """This rank's shard of the full MatMulNBits tensors (``in_features`` = the full K), sliced exactly on
        whole blocks (``numba_nbits.shard.shard_rows_k``); on B's device when B is a torch tensor."""
        from .shard import shard_rows_k

        return cls._sharded(shard_rows_k, B, scales, zero_points, bias, in_features=in_features,
                            out_features=out_features, bits=bits, block_size=block_size, g_idx=g_idx, config=config,
                            tp_group=tp_group, input_is_parallel=input_is_parallel)

    @classmethod
    def from_linear(cls, linear: "nn.Linear", bits: int = 4, block_size: int = 32, symmetric: bool = True,
                    config=None, *, tp_group=None, input_is_parallel: bool = True) -> "RowParallelQuantLinear":
        """Quantize the full ``linear`` like ``QuantLinear.from_linear`` (same bytes on every rank), then keep
        this rank's exact K slice; on the weight's device."""
        return cls._quantized(linear, bits, block_size, symmetric, config, tp_group,
                              input_is_parallel=input_is_parallel)

    @classmethod
    def empty(cls, in_features: int, out_features: int, bits: int = 4, block_size: int = 32, symmetric: bool = True,
              bias: bool = True, dtype=torch.float32, device=None, config=None, *, tp_group=None,
              input_is_parallel: bool = True) -> "RowParallelQuantLinear":
        """A zero-filled shard of a layer with the full ``in_features`` (bias on rank 0 only), to load into."""
        from .shard import check_row_split

        rank, world = _tp_rank_world(tp_group)
        k = check_row_split(in_features, block_size, world)
        q = cls(*_zero_tensors(k, out_features, bits, block_size, symmetric, bias and rank == 0, dtype),
                in_features=k, out_features=out_features, bits=bits, block_size=block_size, config=config,
                tp_group=tp_group, input_is_parallel=input_is_parallel)
        return q.to(device) if device is not None else q

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", tp_rank={self.tp_rank}, tp_world={self.tp_world}, "
                f"full_in_features={self.full_in_features}, input_is_parallel={self.input_is_parallel}")

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        if not self.input_is_parallel and isinstance(x, torch.Tensor):
            if x.dim() == 0 or x.shape[-1] != self.full_in_features:
                raise ValueError(f"RowParallelQuantLinear (input_is_parallel=False): input's last dimension must be "
                                 f"the full in_features={self.full_in_features}, got shape {tuple(x.shape)}")
            k = self.in_features
            x = x[..., self.tp_rank * k:(self.tp_rank + 1) * k]
        y = super().forward(x)
        if self.tp_world > 1:
            import torch.distributed as dist

            y = y.contiguous()
            dist.all_reduce(y, op=dist.ReduceOp.SUM, group=self.tp_group)
        return y


def _quantize_linear(linear, bits, block_size, symmetric):
    from .formats import quantize

    W = linear.weight
    if W.dtype not in _FLOATS:
        raise TypeError(f"from_linear: weight dtype must be float32, float16 or bfloat16, got {W.dtype}")
    return quantize(_to_numpy(W), bits, block_size, symmetric)


#: Llama-style layer names (the last component of a module's qualified name) sharded by
#: ``quantize_model_(..., tp_group=...)``: column-parallel without gather, then row-parallel.
COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
ROW_PARALLEL = ("o_proj", "down_proj")


def quantize_model_(model: "nn.Module", bits: int = 4, block_size: int = 32, symmetric: bool = True,
                    skip: Callable[[str, "nn.Module"], bool] = lambda name, mod: False, config=None, *,
                    tp_group=None, column_parallel=COLUMN_PARALLEL, row_parallel=ROW_PARALLEL) -> "nn.Module":
    """Replace every ``nn.Linear`` in ``model`` (recursively, in place) by ``QuantLinear.from_linear``,
    except those for which ``skip(qualified_name, module)`` is true. Returns ``model``.

    With ``tp_group`` (a ``torch.distributed`` process group; ``torch.distributed.group.WORLD`` for the
    default one), layers are sharded over it, Llama-style: a Linear whose name ends in one of
    ``column_parallel`` becomes a ``ColumnParallelQuantLinear`` (no gather: its output stays sharded),
    one in ``row_parallel`` a ``RowParallelQuantLinear`` (sharded input, all-reduced output); every other
    Linear (e.g. ``lm_head``) stays an unsharded ``QuantLinear``, replicated on every rank. Call it on
    every rank with the same (same-seeded or loaded) model. Only the Linears are sharded: an attention
    module reshaping q/k/v into heads must be set up for ``num_heads / world`` heads (and kv heads) per
    rank. A layer that cannot be split evenly raises ``ValueError`` naming it."""
    targets = []
    for parent_name, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                full = f"{parent_name}.{child_name}" if parent_name else child_name
                if not skip(full, child):
                    targets.append((full, parent, child_name, child))
    kw = dict(bits=bits, block_size=block_size, symmetric=symmetric, config=config)
    built = []
    for full, parent, child_name, child in targets:  # build all first: a refused layer leaves the model unchanged
        try:
            if tp_group is not None and child_name in column_parallel:
                q = ColumnParallelQuantLinear.from_linear(child, **kw, tp_group=tp_group, gather_output=False)
            elif tp_group is not None and child_name in row_parallel:
                q = RowParallelQuantLinear.from_linear(child, **kw, tp_group=tp_group, input_is_parallel=True)
            else:
                q = QuantLinear.from_linear(child, **kw)
        except ValueError as e:
            raise ValueError(f"quantize_model_: layer '{full}': {e}") from e
        built.append((parent, child_name, q))
    for parent, child_name, q in built:
        setattr(parent, child_name, q)
    return model
