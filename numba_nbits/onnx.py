"""Run the ``com.microsoft::MatMulNBits`` nodes of an ONNX model with numba_nbits.

Optional extra ``onnx`` (``pip install 'numba_nbits[onnx]'``); the ``onnx`` package is imported on
first use, not when this module is imported.

    from numba_nbits.onnx import load

    m = load("model_q4.onnx")          # a path (external data resolved next to it) or a ModelProto
    m.node_names                       # the MatMulNBits nodes, in graph order
    op = m.node(m.node_names[0])       # the built numba_nbits.MatMulNBits (built on first request)
    y = m.run_node(m.node_names[0], A) # that node's output for input A (NumPy or any CUDA array)
    outs = m.run({"x": x})             # the whole graph, if it only uses SUPPORTED_OPS

Reading a node: the attributes ``K``, ``N``, ``block_size`` (required), ``bits`` (default 4),
``accuracy_level`` (0) and ``weight_prepacked`` (0), and the constant inputs ``B``, ``scales``,
``zero_points``, ``g_idx``, ``bias`` (an empty input name means "absent"). Constant means an
initializer of the main graph or the output of a ``Constant`` node. Every problem is reported as
``numba_nbits.schema.MatMulNBitsError`` (a ``ValueError``) whose message starts with
``MatMulNBits node '<name>':`` -- a missing initializer, weights that are graph inputs or computed
at run time, a bad attribute or tensor (the operator's own checks, prefixed).

``run(feeds)`` executes the main graph in order: MatMulNBits nodes on the GPU through numba_nbits
(NumPy in, NumPy out), every other node with NumPy on the host. Supported other ops
(``SUPPORTED_OPS``; default ONNX domain unless marked ``ms:`` for ``com.microsoft``):

* elementwise: Identity, Cast, Add, Sub, Mul, Div, Neg, Sqrt, Exp, Erf, Relu, Sigmoid, Tanh,
  Gelu (opset 20, ``approximate`` none/tanh), ms:Gelu, ms:FastGelu (optional bias);
* glue that transformer blocks need: MatMul (float, on the host), Softmax, LayerNormalization,
  Reshape, Transpose.

Anything else raises ``NotImplementedError`` naming the op and the node. Broadcasting is NumPy's,
which matches ONNX's multidirectional broadcasting; arithmetic keeps the inputs' dtype (fp16 stays
fp16, as in ONNX).
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional

import numpy as np

__all__ = ["load", "OnnxModel", "SUPPORTED_OPS", "MS_DOMAIN"]

MS_DOMAIN = "com.microsoft"
_INPUT_NAMES = ("A", "B", "scales", "zero_points", "g_idx", "bias")


def _onnx():
    try:
        import onnx  # noqa: F401
        from onnx import numpy_helper  # noqa: F401
    except ImportError as e:  # pragma: no cover - exercised only without onnx
        raise ImportError("numba_nbits.onnx needs the 'onnx' package; install the extra: "
                          "pip install 'numba_nbits[onnx]'") from e
    return onnx


def _err(node: str, msg: str):
    from .schema import MatMulNBitsError

    return MatMulNBitsError(f"MatMulNBits node {node!r}: {msg}")


# --------------------------------------------------------------------------------- host ops

_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (``math.erf`` element by element: exact to float64, ~1M elements/s)."""
    x = np.asarray(x, dtype=np.float64)
    return _ERF(x).astype(np.float64) if x.size else x


def _f(x: np.ndarray, fn) -> np.ndarray:
    """Apply a float64 function and return the input's dtype."""
    return fn(np.asarray(x, dtype=np.float64)).astype(np.asarray(x).dtype)


def _gelu_erf(x):
    return _f(x, lambda v: 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0))))


def _gelu_tanh(x):
    return _f(x, lambda v: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3))))


def _softmax(x, axis):
    def fn(v):
        v = v - v.max(axis=axis, keepdims=True)
        e = np.exp(v)
        return e / e.sum(axis=axis, keepdims=True)
    return _f(x, fn)


def _layernorm(x, scale, bias, axis, eps):
    x64 = np.asarray(x, dtype=np.float64)
    axis = axis % x64.ndim
    axes = tuple(range(axis, x64.ndim))
    mu = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + eps) * np.asarray(scale, dtype=np.float64)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y.astype(np.asarray(x).dtype)


def _reshape(x, shape, allowzero):
    shape = [int(s) for s in np.asarray(shape).reshape(-1)]
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return np.reshape(x, shape)


def _same(a, b):
    """Binary op result in the dtype of the inputs (ONNX requires equal dtypes)."""
    return np.asarray(a).dtype


def _binary(fn):
    return lambda ins, at: [fn(ins[0], ins[1]).astype(_same(ins[0], ins[1]), copy=False)]


def _cast(ins, at):
    from onnx import helper

    to = at["to"]
    dt = helper.tensor_dtype_to_np_dtype(to)
    return [np.asarray(ins[0]).astype(dt)]


def _gelu(ins, at):
    approx = at.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    return [_gelu_tanh(ins[0]) if approx == "tanh" else _gelu_erf(ins[0])]


def _fastgelu(ins, at):
    x = ins[0] if len(ins) < 2 or ins[1] is None else (ins[0] + ins[1]).astype(ins[0].dtype)
    return [_gelu_tanh(x)]


def _matmul(ins, at):
    a, b = ins
    dt = np.result_type(a.dtype, b.dtype)
    return [np.matmul(a.astype(np.float64) if dt.kind == "f" else a, b.astype(np.float64) if dt.kind == "f" else b)
            .astype(dt)]


def _transpose(ins, at):
    perm = at.get("perm")
    return [np.transpose(ins[0], None if perm is None else [int(p) for p in perm])]


def _ln(ins, at):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    return [_layernorm(x, scale, bias, int(at.get("axis", -1)), float(at.get("epsilon", 1e-5)))]


_HOST_OPS = {
    ("", "Identity"): lambda ins, at: [ins[0]],
    ("", "Cast"): _cast,
    ("", "Add"): _binary(np.add),
    ("", "Sub"): _binary(np.subtract),
    ("", "Mul"): _binary(np.multiply),
    ("", "Div"): _binary(lambda a, b: a // b if np.asarray(a).dtype.kind in "iu" else np.divide(a, b)),
    ("", "Neg"): lambda ins, at: [np.negative(ins[0])],
    ("", "Sqrt"): lambda ins, at: [_f(ins[0], np.sqrt)],
    ("", "Exp"): lambda ins, at: [_f(ins[0], np.exp)],
    ("", "Erf"): lambda ins, at: [_f(ins[0], _erf)],
    ("", "Relu"): lambda ins, at: [np.maximum(ins[0], np.zeros((), ins[0].dtype))],
    ("", "Sigmoid"): lambda ins, at: [_f(ins[0], lambda v: 1.0 / (1.0 + np.exp(-v)))],
    ("", "Tanh"): lambda ins, at: [_f(ins[0], np.tanh)],
    ("", "Gelu"): _gelu,
    (MS_DOMAIN, "Gelu"): lambda ins, at: [_gelu_erf(ins[0])],
    (MS_DOMAIN, "FastGelu"): _fastgelu,
    ("", "MatMul"): _matmul,
    ("", "Softmax"): lambda ins, at: [_softmax(ins[0], int(at.get("axis", -1)))],
    ("", "LayerNormalization"): _ln,
    ("", "Reshape"): lambda ins, at: [_reshape(ins[0], ins[1], int(at.get("allowzero", 0)))],
    ("", "Transpose"): _transpose,
}

#: The ops ``OnnxModel.run`` executes besides MatMulNBits, as ``"Op"`` or ``"com.microsoft:Op"``.
SUPPORTED_OPS = tuple(sorted(op if dom == "" else f"{dom}:{op}" for dom, op in _HOST_OPS))


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


# --------------------------------------------------------------------------------- the model

class OnnxModel:
    """A loaded ONNX model whose ``com.microsoft::MatMulNBits`` nodes run on numba_nbits (see module doc)."""

    def __init__(self, model, base_dir: Optional[str] = None, config=None):
        onnx = _onnx()
        from onnx import numpy_helper

        self.path = None
        if isinstance(model, (str, os.PathLike)):
            self.path = os.fspath(model)
            if base_dir is None:
                base_dir = os.path.dirname(os.path.abspath(self.path))
            model = onnx.load(self.path, load_external_data=False)
        if not isinstance(model, onnx.ModelProto):
            raise TypeError(f"load(): expected a path or an onnx.ModelProto, got {type(model).__name__}")
        self.model = model
        self.base_dir = base_dir or ""
        self.config = config
        self._numpy_helper = numpy_helper
        g = model.graph
        self._init_protos = {t.name: t for t in g.initializer}
        self._consts: Dict[str, np.ndarray] = {}
        self._producer: Dict[str, str] = {}
        names: List[str] = []
        seen: Dict[str, int] = {}
        self._nodes = []
        for i, nd in enumerate(g.node):
            name = nd.name or f"{nd.op_type}_{i}"
            if name in seen:
                seen[name] += 1
                name = f"{name}#{seen[name]}"
            else:
                seen[name] = 0
            self._nodes.append((name, nd))
            for o in nd.output:
                if o:
                    self._producer[o] = name
            if nd.op_type == "MatMulNBits" and nd.domain == MS_DOMAIN:
                names.append(name)
        self.node_names: List[str] = names
        self._by_name = {name: nd for name, nd in self._nodes}
        self._ops: Dict[str, Any] = {}
        self.inputs: List[str] = [vi.name for vi in g.input if vi.name not in self._init_protos]
        self.outputs: List[str] = [vi.name for vi in g.output]

    # ------------------------------------------------------------------ constants
    def _constant(self, tensor_name: str) -> Optional[np.ndarray]:
        """The value of a constant (initializer or Constant node output), else None."""
        if tensor_name in self._consts:
            return self._consts[tensor_name]
        proto = self._init_protos.get(tensor_name)
        value = None
        if proto is not None:
            value = self._numpy_helper.to_array(proto, base_dir=self.base_dir)
        else:
            prod = self._producer.get(tensor_name)
            nd = self._by_name.get(prod) if prod else None
            if nd is not None and nd.op_type == "Constant" and _domain(nd.domain) == "":
                value = self._constant_node_value(nd)
        if value is not None:
            self._consts[tensor_name] = value
        return value

    def _constant_node_value(self, nd) -> np.ndarray:
        from onnx import helper

        for a in nd.attribute:
            v = helper.get_attribute_value(a)
            if a.name == "value":
                return self._numpy_helper.to_array(v, base_dir=self.base_dir)
            if a.name in ("value_float", "value_int"):
                return np.array(v, dtype=np.float32 if a.name == "value_float" else np.int64)
            if a.name in ("value_floats", "value_ints"):
                return np.array(list(v), dtype=np.float32 if a.name == "value_floats" else np.int64)
        raise NotImplementedError(f"Constant node {nd.name!r}: unsupported attribute "
                                  f"{[a.name for a in nd.attribute]}")

    def _check_name(self, name: str):
        if name not in self._by_name:
            raise KeyError(f"no node named {name!r} (MatMulNBits nodes: {self.node_names})")
        nd = self._by_name[name]
        if not (nd.op_type == "MatMulNBits" and nd.domain == MS_DOMAIN):
            raise ValueError(f"node {name!r} is {nd.domain or 'ai.onnx'}::{nd.op_type}, not com.microsoft::MatMulNBits")
        return nd

    # ------------------------------------------------------------------ MatMulNBits nodes
    def attributes(self, name: str) -> Dict[str, int]:
        """The node's attributes with defaults filled in (K, N, bits, block_size, accuracy_level, weight_prepacked)."""
        from onnx import helper

        nd = self._check_name(name)
        at = {a.name: helper.get_attribute_value(a) for a in nd.attribute}
        for req in ("K", "N", "block_size"):
            if req not in at:
                raise _err(name, f"missing required attribute {req}")
        out = {"K": at["K"], "N": at["N"], "bits": at.get("bits", 4), "block_size": at["block_size"],
               "accuracy_level": at.get("accuracy_level", 0), "weight_prepacked": at.get("weight_prepacked", 0)}
        for k, v in out.items():
            if not isinstance(v, int):
                raise _err(name, f"attribute {k} must be an int, got {v!r}")
        unknown = sorted(set(at) - set(out))
        if unknown:
            raise _err(name, f"unknown attribute(s) {unknown} (MatMulNBits has K, N, bits, block_size, "
                             "accuracy_level, weight_prepacked)")
        return out

    def constant_inputs(self, name: str) -> Dict[str, Optional[np.ndarray]]:
        """The node's constant inputs B, scales, zero_points, g_idx, bias as NumPy arrays (None = absent)."""
        nd = self._check_name(name)
        if len(nd.input) < 3 or not nd.input[1] or not nd.input[2]:
            raise _err(name, f"needs at least inputs A, B, scales (got {list(nd.input)})")
        if len(nd.input) > 6:
            raise _err(name, f"has {len(nd.input)} inputs; MatMulNBits takes at most 6 {_INPUT_NAMES}")
        graph_inputs = {vi.name for vi in self.model.graph.input}
        out: Dict[str, Optional[np.ndarray]] = {}
        for idx in range(1, 6):
            role = _INPUT_NAMES[idx]
            tname = nd.input[idx] if idx < len(nd.input) else ""
            if not tname:
                out[role] = None
                continue
            value = self._constant(tname)
            if value is None:
                if tname in graph_inputs:
                    raise _err(name, f"input {role} ({tname!r}) is a graph input, not a constant initializer; "
                                     "numba_nbits needs B, scales, zero_points, g_idx and bias as initializers")
                prod = self._producer.get(tname)
                if prod is not None:
                    raise _err(name, f"input {role} ({tname!r}) is computed at run time by node {prod!r}; "
                                     "numba_nbits needs it as a constant initializer")
                raise _err(name, f"missing initializer {tname!r} for input {role}")
            out[role] = value
        return out

    def input_specs(self, name: str) -> Dict[str, Optional[tuple]]:
        """``{role: (numpy dtype, shape) or None}`` for B, scales, zero_points, g_idx, bias, read from the
        initializers' headers without loading their data (what ``numba_nbits.precompile`` needs)."""
        from onnx import helper

        nd = self._check_name(name)
        out: Dict[str, Optional[tuple]] = {}
        for idx in range(1, 6):
            tname = nd.input[idx] if idx < len(nd.input) else ""
            proto = self._init_protos.get(tname) if tname else None
            if not tname:
                out[_INPUT_NAMES[idx]] = None
            elif proto is not None:
                out[_INPUT_NAMES[idx]] = (np.dtype(helper.tensor_dtype_to_np_dtype(proto.data_type)),
                                          tuple(proto.dims))
            else:  # a Constant node's output (small), or an error constant_inputs words
                value = self._constant(tname)
                if value is None:
                    self.constant_inputs(name)
                out[_INPUT_NAMES[idx]] = (value.dtype, value.shape)
        return out

    def node(self, name: str):
        """The ``numba_nbits.MatMulNBits`` for this node (built, weights uploaded, on first request)."""
        op = self._ops.get(name)
        if op is not None:
            return op
        from .op import MatMulNBits
        from .schema import MatMulNBitsError

        at = self.attributes(name)
        ins = self.constant_inputs(name)
        try:
            op = MatMulNBits(ins["B"], ins["scales"], ins["zero_points"], ins["g_idx"], ins["bias"],
                             config=self.config, **at)
        except MatMulNBitsError as e:
            raise _err(name, str(e)) from e
        self._ops[name] = op
        return op

    def run_node(self, name: str, A, out=None, stream=None):
        """The node's output for input ``A`` (same kinds as ``MatMulNBits.__call__``)."""
        from .schema import MatMulNBitsError

        op = self.node(name)
        try:
            return op(A, out=out, stream=stream)
        except MatMulNBitsError as e:
            raise _err(name, str(e)) from e

    def node_model(self, name: str, opset: int = 17):
        """A standalone one-node ``ModelProto`` of this node: input ``A``, output ``Y``, constants as
        initializers (for running the node alone, e.g. with ONNX Runtime)."""
        from onnx import TensorProto, helper

        nd = self._check_name(name)
        ins = self.constant_inputs(name)
        at = self.attributes(name)
        dt = helper.np_dtype_to_tensor_dtype(ins["scales"].dtype)
        inits, names = [], ["A"]
        for role in _INPUT_NAMES[1:]:
            v = ins[role]
            if v is None:
                names.append("")
            else:
                names.append(role)
                inits.append(self._numpy_helper.from_array(v, role))
        while names and names[-1] == "":
            names.pop()
        attrs = {k: v for k, v in at.items()
                 if k in ("K", "N", "bits", "block_size") or v != 0 or any(a.name == k for a in nd.attribute)}
        node = helper.make_node("MatMulNBits", names, ["Y"], name=name, domain=MS_DOMAIN, **attrs)
        graph = helper.make_graph([node], f"{name}_alone",
                                  [helper.make_tensor_value_info("A", dt, None)],
                                  [helper.make_tensor_value_info("Y", dt, None)], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                       helper.make_opsetid(MS_DOMAIN, 1)], ir_version=10)

    # ------------------------------------------------------------------ whole graph
    def check_supported(self) -> None:
        """Raise NotImplementedError if ``run`` would meet a node it cannot execute."""
        for name, nd in self._nodes:
            self._host_fn(name, nd)

    def _host_fn(self, name, nd):
        dom = _domain(nd.domain)
        if dom == MS_DOMAIN and nd.op_type == "MatMulNBits":
            return None
        if dom == "" and nd.op_type == "Constant":
            return None
        fn = _HOST_OPS.get((dom, nd.op_type))
        if fn is None:
            raise NotImplementedError(f"OnnxModel.run: op {(dom + ':') if dom else ''}{nd.op_type} (node {name!r}) "
                                      f"is not supported; supported besides MatMulNBits: {', '.join(SUPPORTED_OPS)}")
        return fn

    def run(self, feeds: Mapping[str, Any], outputs: Optional[Iterable[str]] = None) -> Dict[str, np.ndarray]:
        """Run the main graph: ``feeds`` maps graph input names to NumPy arrays; returns ``{name: array}``
        for ``outputs`` (default: the graph outputs)."""
        from onnx import helper

        self.check_supported()
        wanted = list(self.outputs if outputs is None else outputs)
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise ValueError(f"OnnxModel.run: missing feeds for graph inputs {missing}")
        env: Dict[str, Any] = {k: np.asarray(v) for k, v in feeds.items()}
        for name, nd in self._nodes:
            fn = self._host_fn(name, nd)
            if fn is None and nd.op_type == "Constant":
                env[nd.output[0]] = self._constant(nd.output[0])
                continue
            args = []
            for i, t in enumerate(nd.input):
                if not t:
                    args.append(None)
                elif t in env:
                    args.append(env[t])
                else:
                    if fn is None and i > 0:  # MatMulNBits constants are owned by the op
                        args.append(None)
                        continue
                    v = self._constant(t)
                    if v is None:
                        raise ValueError(f"OnnxModel.run: node {name!r} input {t!r} is neither fed, "
                                         "an initializer nor computed earlier")
                    env[t] = v
                    args.append(v)
            if fn is None:
                res = [self.run_node(name, args[0])]
            else:
                at = {a.name: helper.get_attribute_value(a) for a in nd.attribute}
                res = fn(args, at)
            for o, v in zip(nd.output, res):
                if o:
                    env[o] = v
        out = {}
        for n in wanted:
            if n in env:
                out[n] = env[n]
            else:
                v = self._constant(n)
                if v is None:
                    raise KeyError(f"OnnxModel.run: {n!r} was not computed")
                out[n] = v
        return out

    def __repr__(self):
        return (f"OnnxModel({self.path or '<ModelProto>'}, {len(self.node_names)} MatMulNBits nodes, "
                f"inputs={self.inputs}, outputs={self.outputs})")


def load(model, *, base_dir: Optional[str] = None, config=None) -> OnnxModel:
    """Load an ONNX model (a path, or an ``onnx.ModelProto``) for running its MatMulNBits nodes.

    External data is read relative to the model file's folder (or ``base_dir`` for a ModelProto whose
    tensors still point at external files). ``config`` is passed to every ``MatMulNBits``.
    """
    return OnnxModel(model, base_dir=base_dir, config=config)
