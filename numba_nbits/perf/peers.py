"""Peers, measured in the same run on the same random problem; each optional, skipped with a note.

* ``torch_dense``: ``F.linear`` with the dequantized weights in A's dtype (cuBLAS);
* ``torch_dequant_matmul``: the composite "unpack + dequantize with torch ops, then ``F.linear``",
  every call (ORT's universal route written in torch);
* ``tinygemm``: ``torch._weight_int4pack_mm`` (bf16, 4-bit; packing by
  ``torch._convert_weight_to_int4pack``, whose input changed across torch versions: both forms are
  tried and the one that reproduces the dequantized weights is kept);
* ``gemlite`` (4-bit fp16, when importable);
* ONNX Runtime's CUDA kernels (``ort_default``, ``ort_fpA_intB``): ``perf.ort_peer``.

Every peer computes the same function as our operator (tinygemm's zero is ``(8 - zp) * scale``), so its
output is checked against the same float64 oracle. Nothing here imports torch at module import.
"""
from __future__ import annotations


import numpy as np

from ..formats import quant_format
from .metrics import dense_bytes, nbits_bytes, tinygemm_bytes

TINYGEMM_MAX_M = 1024  # a decode kernel: past M = 1024 one call on an LLM-sized layer takes tens of ms


def cuda_torch():
    """torch, when it imports and has CUDA; else None."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch
    except Exception:  # noqa: BLE001
        return None


def torch_version() -> str:
    try:
        import torch

        return str(torch.__version__)
    except Exception:  # noqa: BLE001
        return ""


class _TorchSubject:
    """Base: torch calls issued on our stream (``torch.cuda.ExternalStream``), torch-captured graphs."""

    kind = "peer"
    forced = False

    def __init__(self, torch, backend, M: int, w, copies: int):
        self.t = torch
        self.backend = backend
        self.M, self.w = M, w
        self.copies = max(1, int(copies))
        self.tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[w.dtype]
        self.ext = torch.cuda.ExternalStream(backend.stream)
        gen = torch.Generator(device="cuda").manual_seed(1234 + M)
        self.A = [torch.empty(M, w.K, device="cuda", dtype=torch.float32).uniform_(-1, 1, generator=gen).to(self.tdt)
                  for _ in range(self.copies)]

    def call(self, i: int):  # pragma: no cover - overridden
        raise NotImplementedError

    def launch(self, i: int, stream) -> None:
        with self.t.cuda.stream(self.ext):
            self.call(i)

    def capture(self, n: int):
        t = self.t
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for i in range(min(n, 3)):
                self.call(i)
        t.cuda.current_stream().wait_stream(side)
        t.cuda.synchronize()
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            for i in range(n):
                self.call(i % self.copies)
        return _TorchGraph(t, g, self.ext)

    def run_check(self, backend, A_host: np.ndarray, rows) -> np.ndarray:
        t = self.t
        self.A[0].copy_(t.from_numpy(np.asarray(A_host, dtype=np.float32)).to(device="cuda", dtype=self.tdt))
        t.cuda.synchronize()
        with t.cuda.stream(self.ext):
            y = self.call(0)
        t.cuda.synchronize()
        idx = t.as_tensor(np.asarray(rows), device="cuda", dtype=t.long)
        return y.index_select(0, idx).float().cpu().numpy()


class _TorchGraph:
    def __init__(self, torch, g, ext):
        self.t, self.g, self.ext = torch, g, ext

    def launch(self) -> None:
        with self.t.cuda.stream(self.ext):
            self.g.replay()

    def close(self) -> None:
        self.g.reset()


def dequant_torch(torch, B, scales, zp, bits: int, block: int, K: int, dtype):
    """``(q - zp) * scale`` as an ``(N, K)`` tensor of ``dtype``, from ORT's packed layouts (torch ops)."""
    N, kb, blob = B.shape
    fmt = quant_format(bits)
    per, mask = fmt.codes_per_byte, fmt.code_mask
    shifts = torch.arange(0, 8, bits, device=B.device, dtype=torch.uint8)
    q = ((B.unsqueeze(-1) >> shifts) & mask).reshape(N, kb, blob * per)
    if zp is None:
        z = torch.full((N, kb, 1), float(fmt.default_zero_point), device=B.device, dtype=torch.float32)
    else:
        z = ((zp.unsqueeze(-1) >> shifts) & mask).reshape(N, -1)[:, :kb].unsqueeze(-1).float()
    w = (q.float() - z) * scales.float().unsqueeze(-1)
    return w.reshape(N, kb * block)[:, :K].to(dtype)


def _device_weights(torch, w):
    """B, scales, zero points and bias of ``w`` as CUDA tensors (bf16 via its bits)."""
    def tens(a, dt=None):
        if a is None:
            return None
        a = np.ascontiguousarray(a)
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        return torch.from_numpy(a).cuda()
    return tens(w.B), tens(w.scales), tens(w.zero_points), tens(w.bias)


class TorchDense(_TorchSubject):
    route = "torch_dense"

    def __init__(self, torch, backend, M, w, copies, W):
        super().__init__(torch, backend, M, w, copies)
        self.W = [W] + [W.clone() for _ in range(self.copies - 1)]
        self.bias = _device_weights(torch, w)[3] if w.bias is not None else None
        self.F = torch.nn.functional
        self.nbytes = dense_bytes(M, w.N, w.K, w.dtype, w.bias is not None).total

    def call(self, i):
        return self.F.linear(self.A[i % self.copies], self.W[i % self.copies], self.bias)


class TorchDequantMatmul(_TorchSubject):
    route = "torch_dequant_matmul"

    def __init__(self, torch, backend, M, w, copies):
        super().__init__(torch, backend, M, w, copies)
        B, s, z, b = _device_weights(torch, w)
        self.packed = [(B, s, z)] + [(B.clone(), s.clone(), None if z is None else z.clone())
                                     for _ in range(self.copies - 1)]
        self.bias = b
        self.F = torch.nn.functional
        self.nbytes = nbits_bytes(M, w.N, w.K, w.bits, w.block, w.dtype, w.zp, w.bias is not None).total

    def call(self, i):
        B, s, z = self.packed[i % self.copies]
        W = dequant_torch(self.t, B, s, z, self.w.bits, self.w.block, self.w.K, self.tdt)
        return self.F.linear(self.A[i % self.copies], W, self.bias)


class Tinygemm(_TorchSubject):
    route = "tinygemm"

    def __init__(self, torch, backend, M, w, copies, W_ref):
        super().__init__(torch, backend, M, w, copies)
        B, s, z, b = _device_weights(torch, w)
        N, K, g = w.N, w.K, w.block
        q = ((B.unsqueeze(-1) >> torch.arange(0, 8, 4, device="cuda", dtype=torch.uint8)) & 15).reshape(N, -1)[:, :K]
        zpf = (torch.full((N, s.shape[1]), 8.0, device="cuda") if z is None else
               ((z.unsqueeze(-1) >> torch.arange(0, 8, 4, device="cuda", dtype=torch.uint8)) & 15)
               .reshape(N, -1)[:, :s.shape[1]].float())
        sf = s.float()
        sz = torch.stack([sf, (8.0 - zpf) * sf], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
        self.sz, self.group, self.bias = sz, g, b
        tiles = next((t for t in (8, 4, 2) if K % (t * 16) == 0), None)
        if tiles is None:
            raise ValueError(f"K={K} is not a multiple of 32 (tinygemm's inner k tiles)")
        self.packed, self.pack_note = self._pack(q, tiles, W_ref)
        self.W = [self.packed] + [self.packed.clone() for _ in range(self.copies - 1)]
        self.nbytes = tinygemm_bytes(M, N, K, g, w.bias is not None).total

    def _pack(self, q, tiles, W_ref):
        t = self.t
        forms = (("uint8 [N, K/2], even k in the high nibble", lambda: (q[:, ::2] << 4 | q[:, 1::2]).to(t.uint8)),
                 ("int32 [N, K]", lambda: q.to(t.int32)))
        x = t.randn(8, self.w.K, device="cuda", dtype=t.bfloat16)
        want = (x.float() @ W_ref.float().t())
        errors = []
        first = None
        for name, make in forms:
            try:
                packed = t._convert_weight_to_int4pack(make().contiguous(), tiles)
                got = t._weight_int4pack_mm(x, packed, self.group, self.sz).float()
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name}: {type(e).__name__}: {e}"[:160])
                continue
            first = first or (packed, name)
            if float((got - want).norm() / want.norm().clamp_min(1e-30)) < 2e-2:
                return packed, f"packing {name}"
        if first is None:
            raise RuntimeError("torch._convert_weight_to_int4pack rejected every form: " + "; ".join(errors))
        return first[0], f"packing {first[1]} (no form reproduced the weights)"

    def call(self, i):
        y = self.t._weight_int4pack_mm(self.A[i % self.copies], self.W[i % self.copies], self.group, self.sz)
        return y + self.bias if self.bias is not None else y


class Gemlite(_TorchSubject):
    route = "gemlite"

    def __init__(self, torch, backend, M, w, copies):
        super().__init__(torch, backend, M, w, copies)
        from gemlite.core import DType, GemLiteLinearTriton  # noqa: import here: optional

        B, s, z, b = _device_weights(torch, w)
        N, K = w.N, w.K
        q = ((B.unsqueeze(-1) >> torch.arange(0, 8, 4, device="cuda", dtype=torch.uint8)) & 15).reshape(N, -1)[:, :K]
        zpf = (torch.full_like(s, 8) if z is None else
               ((z.unsqueeze(-1) >> torch.arange(0, 8, 4, device="cuda", dtype=torch.uint8)) & 15)
               .reshape(N, -1)[:, :s.shape[1]].to(s.dtype))
        self.layers = []
        for _ in range(self.copies):
            lin = GemLiteLinearTriton(4, group_size=w.block, in_features=K, out_features=N,
                                      input_dtype=DType.FP16, output_dtype=DType.FP16)
            lin.pack(q.to(torch.uint8), s.reshape(N, -1), zpf.reshape(N, -1), b)
            self.layers.append(lin)
        self.nbytes = nbits_bytes(M, N, K, 4, w.block, w.dtype, w.zp, w.bias is not None).total

    def call(self, i):
        return self.layers[i % self.copies](self.A[i % self.copies])


def dense_weights(torch, w, W_cache: dict):
    """``w``'s weights dequantized by torch ops (``dequant_torch``) in A's dtype, an (N, K) CUDA tensor; made once
    per case group and kept in ``W_cache``."""
    if "W" not in W_cache:
        B, s, z, _ = _device_weights(torch, w)
        tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[w.dtype]
        W_cache["W"] = dequant_torch(torch, B, s, z, w.bits, w.block, w.K, tdt)
    return W_cache["W"]


def build_peers(backend, M: int, w, copies_for, *, W_cache: dict, notes: list) -> list:
    """The peers that apply to this case (each skipped with a note in ``notes`` when unavailable)."""
    torch = cuda_torch()
    if torch is None:
        notes.append(("torch_dense", "torch with CUDA not importable"))
        notes.append(("torch_dequant_matmul", "torch with CUDA not importable"))
        return []
    out = []
    W = dense_weights(torch, w, W_cache)
    dense = dense_bytes(M, w.N, w.K, w.dtype, w.bias is not None)
    tries = [("torch_dense", lambda: TorchDense(torch, backend, M, w, copies_for(dense.constant, dense.A + dense.Y), W)),
             ("torch_dequant_matmul", lambda: TorchDequantMatmul(torch, backend, M, w, copies_for(
                 nbits_bytes(M, w.N, w.K, w.bits, w.block, w.dtype, w.zp).constant, dense.A + dense.Y)))]
    if w.bits == 4 and w.dtype == "bfloat16":
        if M > TINYGEMM_MAX_M:
            notes.append(("tinygemm", f"M > {TINYGEMM_MAX_M} not timed (decode kernel, tens of ms per call)"))
        elif w.block not in (32, 64, 128, 256) or w.K % w.block:
            notes.append(("tinygemm", f"group size {w.block} with K={w.K} not supported"))
        elif not hasattr(torch, "_weight_int4pack_mm"):
            notes.append(("tinygemm", "torch._weight_int4pack_mm missing in this torch"))
        else:
            tg = tinygemm_bytes(M, w.N, w.K, w.block)
            tries.append(("tinygemm", lambda: Tinygemm(torch, backend, M, w, copies_for(tg.constant, tg.A + tg.Y), W)))
    if w.bits == 4 and w.dtype == "float16":
        try:
            import gemlite  # noqa: F401
            nb = nbits_bytes(M, w.N, w.K, 4, w.block, w.dtype, w.zp)
            tries.append(("gemlite", lambda: Gemlite(torch, backend, M, w, copies_for(nb.constant, nb.A + nb.Y))))
        except Exception:  # noqa: BLE001
            notes.append(("gemlite", "gemlite not importable"))
    for name, make in tries:
        try:
            out.append(make())
        except Exception as e:  # noqa: BLE001 - skipped, with the reason
            notes.append((name, f"setup failed: {type(e).__name__}: {e}"[:300]))
    return out
