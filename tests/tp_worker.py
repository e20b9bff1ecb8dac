"""One rank of the tensor-parallel checks (tests/test_torch_tp.py starts one process per rank).

    python -m tests.tp_worker --rank R --world W --init file:///tmp/x/rendezvous --backend gloo
    python -m tests.tp_worker --rank R --world W --init file:///tmp/x/rendezvous --backend nccl --graph

gloo: CPU tensors (the host path of QuantLinear: numba's simulator, or host copies on a GPU);
nccl: CUDA tensors, rank R on GPU R, optionally capturing the whole sharded block -- collectives
included -- in a CUDA graph. Every sharded layer is checked against the float64 oracle of the
unsharded layer (numba_nbits.reference) and its buffers against exact slices of the unsharded
quantized layer; uneven splits must be refused. Exits non-zero (with a traceback) on any failure.
"""
from __future__ import annotations

import argparse
import copy
import datetime

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from numba_nbits import TOLERANCES, matmul_nbits_ref, relative_error
from numba_nbits.reference import dequantize_ref
from numba_nbits.torch import ColumnParallelQuantLinear, QuantLinear, RowParallelQuantLinear, quantize_model_

NO_TF32 = {"use_tf32": False}


def _np(t):
    return None if t is None else t.detach().cpu().float().numpy() if t.dtype != torch.uint8 else t.cpu().numpy()


def oracle(q: QuantLinear, x) -> np.ndarray:
    """float64 Y of an (unsharded) QuantLinear for input x [..., K]."""
    return matmul_nbits_ref(_np(x).reshape(-1, q.in_features), _np(q.qweight), _np(q.scales), _np(q.zero_points),
                            None, _np(q.bias), K=q.in_features, N=q.out_features, bits=q.bits,
                            block_size=q.block_size).reshape(tuple(x.shape[:-1]) + (q.out_features,))


def dense64(q: QuantLinear) -> nn.Linear:
    """An exact float64 nn.Linear with q's dequantized weight (float64 oracle of a whole model)."""
    w = dequantize_ref(_np(q.qweight), _np(q.scales), _np(q.zero_points), K=q.in_features, N=q.out_features,
                       bits=q.bits, block_size=q.block_size)
    lin = nn.Linear(q.in_features, q.out_features, bias=q.bias is not None).double()
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(w))
        if q.bias is not None:
            lin.bias.copy_(torch.from_numpy(_np(q.bias).astype(np.float64)))
    return lin


class Block(nn.Module):
    """A tiny Llama-style block: attention projections (no attention itself) and a gated MLP, then lm_head."""

    def __init__(self, hidden=32, inter=64, vocab=16):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.o_proj = nn.Linear(hidden, hidden, bias=True)
        self.gate_proj, self.up_proj = nn.Linear(hidden, inter, bias=False), nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, x):
        # elementwise mixing of q/k/v keeps every feature on the rank that computed it (like attention heads)
        h = x + self.o_proj(self.q_proj(x) * torch.sigmoid(self.k_proj(x)) + self.v_proj(x))
        h = h + self.down_proj(nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))
        return self.lm_head(h)


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def expect_value_error(fn, text):
    try:
        fn()
    except ValueError as e:
        check(text in str(e), f"ValueError {str(e)!r} does not contain {text!r}")
        return
    raise AssertionError(f"no ValueError containing {text!r}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--init", required=True)
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--graph", action="store_true", help="nccl: also capture the sharded block in a CUDA graph")
    a = p.parse_args()
    r, w = a.rank, a.world
    if a.backend == "nccl":
        torch.cuda.set_device(r)
    dev = torch.device("cuda", r) if a.backend == "nccl" else torch.device("cpu")
    dist.init_process_group(a.backend, init_method=a.init, rank=r, world_size=w,
                            timeout=datetime.timedelta(seconds=180))
    tol = TOLERANCES["float32"]
    try:
        torch.manual_seed(0)  # same weights and inputs on every rank
        x = torch.randn(2, 96, device=dev)

        # ---- column-parallel, asymmetric 4-bit, bias; without and with the all-gather
        lin = nn.Linear(96, 32).to(dev)
        full = QuantLinear.from_linear(lin, bits=4, block_size=16, symmetric=False)
        col = ColumnParallelQuantLinear.from_linear(lin, bits=4, block_size=16, symmetric=False, config=NO_TF32)
        n = 32 // w
        rows = slice(r * n, (r + 1) * n)
        check((col.in_features, col.out_features, col.full_out_features) == (96, n, 32), "column shard sizes")
        for name in ("qweight", "scales", "zero_points", "bias"):
            check(torch.equal(getattr(col, name), getattr(full, name)[rows]), f"column shard {name} is a slice")
        y_full = oracle(full, x)
        y = col(x)
        check(y.shape == (2, n) and y.device == dev, "column output shape/device")
        check(relative_error(_np(y), y_full[:, rows]) <= tol, "column-parallel vs oracle")
        col.gather_output = True
        yg = col(x)
        check(yg.shape == (2, 32), "gathered output shape")
        check(torch.equal(yg[:, rows], y), "gathered output holds this rank's slice")
        check(relative_error(_np(yg), y_full) <= tol, "column-parallel + all-gather vs oracle")

        # ---- row-parallel: 4-bit block 16, K = 96 = 6 blocks: with world 2, rank 1 starts mid-byte in the
        # packed zero points (re-packed exactly); bias added once after the all-reduce
        lin = nn.Linear(96, 16).to(dev)
        full = QuantLinear.from_linear(lin, bits=4, block_size=16, symmetric=False)
        row = RowParallelQuantLinear.from_linear(lin, bits=4, block_size=16, symmetric=False, config=NO_TF32)
        k = 96 // w
        check((row.in_features, row.full_in_features, row.out_features) == (k, 96, 16), "row shard sizes")
        check(torch.equal(row.qweight, full.qweight[:, r * k // 16:(r + 1) * k // 16]), "row shard qweight")
        check((row.bias is not None) == (r == 0), "bias on rank 0 only")
        y_full = oracle(full, x)
        y = row(x[:, r * k:(r + 1) * k])
        check(y.shape == (2, 16), "row output shape")
        check(relative_error(_np(y), y_full) <= tol, f"row-parallel vs oracle: {relative_error(_np(y), y_full)}")
        row.input_is_parallel = False
        check(torch.equal(row(x), y), "row-parallel with the full input slices it itself")

        # ---- a Llama-style block sharded by quantize_model_ vs the float64 oracle of the unsharded model
        torch.manual_seed(1)
        model = Block().to(dev)
        h = torch.randn(2, 32, device=dev)
        ref = quantize_model_(copy.deepcopy(model), bits=4, block_size=16, symmetric=False, config=NO_TF32)
        tp = quantize_model_(model, bits=4, block_size=16, symmetric=False, config=NO_TF32,
                             tp_group=dist.group.WORLD)
        for name in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
            m = getattr(tp, name)
            check(type(m) is ColumnParallelQuantLinear and not m.gather_output, f"{name} column-parallel")
            n = getattr(ref, name).out_features // w
            check(torch.equal(m.qweight, getattr(ref, name).qweight[r * n:(r + 1) * n]), f"{name} exact slice")
        for name in ("o_proj", "down_proj"):
            check(type(getattr(tp, name)) is RowParallelQuantLinear, f"{name} row-parallel")
        check(type(tp.lm_head) is QuantLinear, "lm_head stays unsharded")
        check(torch.equal(tp.lm_head.qweight, ref.lm_head.qweight), "lm_head replicated")
        oracle_model = copy.deepcopy(ref)
        for name, m in list(oracle_model.named_children()):
            setattr(oracle_model, name, dense64(m))
        with torch.no_grad():
            y_ref = oracle_model(h.double().cpu()).numpy()
        y = tp(h)
        # 4 layers in sequence (o, down and their inputs), each within the fp32 tolerance of its oracle
        err = relative_error(_np(y), y_ref)
        check(err <= 4 * tol, f"sharded block vs float64 oracle of the unsharded model: {err}")

        # ---- per-rank state dicts load into per-rank skeletons; deepcopy keeps the group
        sk = RowParallelQuantLinear.empty(96, 16, bits=4, block_size=16, symmetric=False, device=dev)
        check(set(sk.state_dict()) == set(row.state_dict()) == ({"qweight", "scales", "zero_points"} |
                                                                 ({"bias"} if r == 0 else set())), "row state dict")
        sk.load_state_dict(row.state_dict())
        check(all(torch.equal(v, sk.state_dict()[k]) for k, v in row.state_dict().items()), "row skeleton loaded")
        sk = ColumnParallelQuantLinear.empty(96, 32, bits=4, block_size=16, symmetric=False, device=dev,
                                             gather_output=True)
        sk.load_state_dict(col.state_dict())
        check(sk.out_features == 32 // w and torch.equal(sk.qweight, col.qweight), "column skeleton loaded")
        dup = copy.deepcopy(col)
        check(dup.tp_group is col.tp_group and torch.equal(dup.qweight, col.qweight), "deepcopy")
        B, s, zp = (getattr(full, n) for n in ("qweight", "scales", "zero_points"))
        ff = RowParallelQuantLinear.from_full(B, s, zp, full.bias, in_features=96, out_features=16, bits=4,
                                              block_size=16)
        check(ff.qweight.device == B.device and torch.equal(ff.zero_points, row.zero_points), "from_full")

        # ---- uneven splits are refused, naming the layer, the dimension, the world size and the rule
        if w > 1:
            expect_value_error(lambda: ColumnParallelQuantLinear.from_linear(nn.Linear(64, 32 * w + 1)),
                               f"cannot split N (out_features) = {32 * w + 1} over world size {w}")
            expect_value_error(lambda: RowParallelQuantLinear.from_linear(nn.Linear(16 * w + 16, 8), block_size=16),
                               f"cannot split K (in_features) = {16 * w + 16} over world size {w} with block_size 16: "
                               f"K must be a multiple of world * block_size = {16 * w}")
            bad = Block(inter=16 * w + 16)
            expect_value_error(lambda: quantize_model_(bad, block_size=16, tp_group=dist.group.WORLD),
                               "quantize_model_: layer 'down_proj': row-parallel: cannot split K")
            check(type(bad.q_proj) is nn.Linear, "a refused quantize_model_ leaves the model unchanged")

        # ---- CUDA graph: the sharded block, collectives included, captured and replayed
        if a.graph:
            static_h = h.clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    tp(static_h)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_y = tp(static_h)
            for seed in range(3):
                torch.manual_seed(10 + seed)
                static_h.copy_(torch.randn(2, 32, device=dev))
                g.replay()
                torch.cuda.synchronize()
                check(torch.equal(static_y, tp(static_h)), "graph replay equals eager")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    print(f"rank {r}/{w}: ok", flush=True)


if __name__ == "__main__":
    main()
