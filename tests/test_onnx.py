"""numba_nbits.onnx: loading MatMulNBits nodes from ONNX models, errors, the graph runner, and parity
with ONNX Runtime (CPU) on real weights (all-MiniLM-L6-v2, see examples/_minilm.py).

On numba's simulator the real-model checks run one encoder layer, two nodes per quantization
config, cut to their first 8 output rows, with M=20 activation rows; on a GPU every node of the 6
layers runs in full, for M = 1 (GEMV routes) and M = 64 (all 4 sentences x 16 tokens), and the whole
quantized encoder runs through ``OnnxModel.run``.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from conftest import pythonpath_with  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from numba_nbits import TOLERANCES, matmul_nbits_ref, quantize, relative_error  # noqa: E402
from numba_nbits.onnx import SUPPORTED_OPS, load  # noqa: E402
from numba_nbits.schema import MatMulNBitsError  # noqa: E402
from tests.conftest import SIMULATED  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import _minilm  # noqa: E402

MS = "com.microsoft"
# numba_nbits and ORT CPU both accumulate in fp32 (different orders): a few fp32 ulps of ||Y||
ORT_TOL = 2e-5
# activation rows for the small synthetic cases: > 16 keeps them on the dequantize + GEMM route, whose
# simulator cost does not grow with M (the fused GEMV routes are covered by tests/test_op.py and, here,
# by the GPU runs of the real model at M = 1)
M_SIM = 17



# fp32 comparisons with TOLERANCES["float32"] need TF32 off (ORT CUDA and numba_nbits default it on)
EXACT = {"use_tf32": False}

def _have_quantizer():
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: F401
    except Exception as e:  # onnxruntime >= 1.32 needs onnx_ir for its quantizer
        return f"onnxruntime's MatMulNBitsQuantizer is unavailable ({type(e).__name__}: {e})"
    return None


needs_quantizer = pytest.mark.skipif(_have_quantizer() is not None, reason=str(_have_quantizer()))
needs_minilm = pytest.mark.skipif(_minilm.locate() is None, reason=_minilm.why_missing())


def _mlp(rng, K=40, H=24, N=16, opset=20):
    W1 = rng.standard_normal((K, H)).astype(np.float32)
    b1 = rng.standard_normal(H).astype(np.float32)
    W2 = rng.standard_normal((H, N)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="add1"),
             helper.make_node("Gelu", ["h1"], ["h2"], name="gelu"),
             helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
             helper.make_node("Sigmoid", ["h3"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", N])],
                          [numpy_helper.from_array(W1, "W1"), numpy_helper.from_array(b1, "b1"),
                           numpy_helper.from_array(W2, "W2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _one_node(B, scales, zp=None, bias=None, *, K, N, bits, block_size, name="mnb", b_as_input=False, **extra):
    """A hand-made one-node MatMulNBits model."""
    inits = [numpy_helper.from_array(scales, "scales")]
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", K])]
    if b_as_input:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.UINT8, list(B.shape)))
    else:
        inits.append(numpy_helper.from_array(B, "B"))
    names = ["A", "B", "scales", "", "", ""]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        names[3] = "zp"
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
        names[5] = "bias"
    while names[-1] == "":
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["Y"], name=name, domain=MS, K=K, N=N, bits=bits,
                            block_size=block_size, **extra)
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", N])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)


# ----------------------------------------------------------------------------- loading & API

def test_import_is_lazy():
    code = "import sys, numba_nbits.onnx; print('onnx' in sys.modules, 'numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": pythonpath_with(os.getcwd())}, check=True).stdout.split()
    assert out == ["False", "False"]


def test_hand_made_node(rng):
    K, N = 72, 12  # K not a multiple of the block
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, s, zp = quantize(W, 4, 32, symmetric=False)
    bias = rng.standard_normal(N).astype(np.float32)
    m = load(_one_node(B, s, zp, bias, K=K, N=N, bits=4, block_size=32, accuracy_level=4), config=EXACT)
    assert m.node_names == ["mnb"] and m.inputs == ["A"] and m.outputs == ["Y"]
    assert m.attributes("mnb") == {"K": K, "N": N, "bits": 4, "block_size": 32, "accuracy_level": 4,
                                   "weight_prepacked": 0}
    ins = m.constant_inputs("mnb")
    assert ins["g_idx"] is None and np.array_equal(ins["B"], B) and np.array_equal(ins["zero_points"], zp)
    op = m.node("mnb")
    assert op is m.node("mnb") and (op.K, op.N, op.bits, op.block_size) == (K, N, 4, 32)
    A = rng.standard_normal((2, 9, K)).astype(np.float32)
    y = m.run_node("mnb", A)
    assert y.shape == (2, 9, N)
    ref = matmul_nbits_ref(A, B, s, zp, None, bias, K=K, N=N, bits=4, block_size=32)
    assert relative_error(y, ref) <= TOLERANCES["float32"]
    assert np.allclose(m.run({"A": A})["Y"], y, rtol=0, atol=0)


def test_external_data_relative_to_model_path(tmp_path, rng):
    K, N = 64, 16
    B, s, _ = quantize(rng.standard_normal((N, K)).astype(np.float32), 8, 32, True)
    model = _one_node(B, s, K=K, N=N, bits=8, block_size=32)
    sub = tmp_path / "m"
    sub.mkdir()
    onnx.save_model(model, str(sub / "q.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="q.weights", size_threshold=0)
    assert (sub / "q.weights").exists()
    cwd = os.getcwd()
    os.chdir(tmp_path)  # resolution must not depend on the working directory
    try:
        m = load(str(sub / "q.onnx"), config=EXACT)
        A = rng.standard_normal((M_SIM, K)).astype(np.float32)
        y = m.run_node(m.node_names[0], A)
    finally:
        os.chdir(cwd)
    ref = matmul_nbits_ref(A, B, s, K=K, N=N, bits=8, block_size=32)
    assert relative_error(y, ref) <= TOLERANCES["float32"]


def test_constant_node_inputs(rng):
    K, N = 32, 8
    B, s, _ = quantize(rng.standard_normal((N, K)).astype(np.float32), 4, 32, True)
    model = _one_node(B, s, K=K, N=N, bits=4, block_size=32)
    g = model.graph
    init = [t for t in g.initializer if t.name == "scales"][0]
    g.initializer.remove(init)
    g.node.insert(0, helper.make_node("Constant", [], ["scales"], value=init))
    m = load(model, config=EXACT)
    A = rng.standard_normal((M_SIM, K)).astype(np.float32)
    assert relative_error(m.run({"A": A})["Y"], matmul_nbits_ref(A, B, s, K=K, N=N, bits=4, block_size=32)) \
        <= TOLERANCES["float32"]


# ----------------------------------------------------------------------------- errors

def _base(rng, **kw):
    K, N = 32, 8
    B, s, _ = quantize(rng.standard_normal((N, K)).astype(np.float32), 4, 32, True)
    return B, s, K, N


def test_error_missing_initializer(rng):
    B, s, K, N = _base(rng)
    model = _one_node(B, s, K=K, N=N, bits=4, block_size=32, name="layer3")
    model.graph.node[0].input.append("")
    model.graph.node[0].input.append("")
    model.graph.node[0].input.append("nope")  # bias
    with pytest.raises(MatMulNBitsError, match=r"MatMulNBits node 'layer3': missing initializer 'nope'"):
        load(model, config=EXACT).node("layer3")


def test_error_weights_as_graph_input(rng):
    B, s, K, N = _base(rng)
    m = load(_one_node(B, s, K=K, N=N, bits=4, block_size=32, name="qkv", b_as_input=True), config=EXACT)
    with pytest.raises(MatMulNBitsError, match=r"node 'qkv': input B \('B'\) is a graph input, not a constant"):
        m.node("qkv")


def test_error_weights_computed(rng):
    B, s, K, N = _base(rng)
    model = _one_node(B, s, K=K, N=N, bits=4, block_size=32, name="n0")
    g = model.graph
    g.node[0].input[2] = "scales2"
    g.node.insert(0, helper.make_node("Identity", ["scales"], ["scales2"], name="ident"))
    with pytest.raises(MatMulNBitsError, match=r"node 'n0': input scales \('scales2'\) is computed at run time "
                                               r"by node 'ident'"):
        load(model, config=EXACT).node("n0")


@pytest.mark.parametrize("attr,value,msg", [
    ("bits", 3, "bits should be 2, 4 or 8, got 3"),
    ("block_size", 24, "block_size must be a power of 2, and >= 16. Got 24"),
    ("weight_prepacked", 5, "weight_prepacked must be 0"),
    ("accuracy_level", 9, "accuracy_level"),
])
def test_error_bad_attribute(rng, attr, value, msg):
    B, s, K, N = _base(rng)
    model = _one_node(B, s, K=K, N=N, bits=4, block_size=32, name="bad")
    for a in model.graph.node[0].attribute:
        if a.name == attr:
            a.i = value
    if not any(a.name == attr for a in model.graph.node[0].attribute):
        model.graph.node[0].attribute.append(helper.make_attribute(attr, value))
    with pytest.raises(MatMulNBitsError, match="MatMulNBits node 'bad': .*" + msg.replace("(", r"\(")):
        load(model, config=EXACT).node("bad")


def test_error_missing_attribute_and_bad_shape(rng):
    B, s, K, N = _base(rng)
    model = _one_node(B, s, K=K, N=N, bits=4, block_size=32, name="x")
    del model.graph.node[0].attribute[0]  # K
    with pytest.raises(MatMulNBitsError, match="node 'x': missing required attribute K"):
        load(model, config=EXACT).node("x")
    model = _one_node(B[:, :, :8], s, K=K, N=N, bits=4, block_size=32, name="y")
    with pytest.raises(MatMulNBitsError, match=r"node 'y': input B must have shape"):
        load(model, config=EXACT).node("y")
    m = load(_one_node(B, s, K=K, N=N, bits=4, block_size=32, name="z"), config=EXACT)
    with pytest.raises(MatMulNBitsError, match=r"node 'z': input A's last dimension"):
        m.run_node("z", np.zeros((2, K + 1), np.float32))
    with pytest.raises(KeyError, match="no node named 'w'"):
        m.node("w")


def test_unsupported_op_names_op_and_node(rng):
    B, s, K, N = _base(rng)
    model = _one_node(B, s, K=K, N=N, bits=4, block_size=32)
    model.graph.node.append(helper.make_node("Hardmax", ["Y"], ["Z"], name="hm"))
    model.graph.output[0].name = "Z"
    with pytest.raises(NotImplementedError, match=r"op Hardmax \(node 'hm'\) is not supported"):
        load(model, config=EXACT).run({"A": np.zeros((1, K), np.float32)})
    assert "Gelu" in SUPPORTED_OPS and "com.microsoft:FastGelu" in SUPPORTED_OPS


# ----------------------------------------------------------------------------- ORT-quantized graphs

@needs_quantizer
@pytest.mark.parametrize("bits,symmetric", [(4, False), (8, True)])
def test_ort_quantized_mlp_run_matches_ort(rng, bits, symmetric):
    model = _minilm.quantize(_mlp(rng), bits=bits, block_size=32, symmetric=symmetric)
    m = load(model, config=EXACT)
    assert len(m.node_names) == 2 and all(n.endswith(f"_Q{bits}") for n in m.node_names)
    x = rng.standard_normal((20, 40)).astype(np.float32)  # M=20
    ours = m.run({"x": x})["y"]
    ref = _minilm.ort_session(model).run(None, {"x": x})[0]
    assert relative_error(ours, ref) <= ORT_TOL
    for name in m.node_names:
        A = rng.standard_normal((17, m.attributes(name)["K"])).astype(np.float32)
        one = m.node_model(name)
        assert relative_error(m.run_node(name, A), _minilm.ort_session(one).run(None, {"A": A})[0]) <= ORT_TOL


def test_host_ops_match_ort(rng):
    """The NumPy ops of the runner against ORT on a float graph using each of them."""
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    c = rng.standard_normal(8).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Sub", ["a", "c"], ["b"]),
             helper.make_node("Mul", ["b", "c"], ["m"]), helper.make_node("Div", ["m", "two"], ["d"]),
             helper.make_node("Tanh", ["d"], ["t"]), helper.make_node("Relu", ["t"], ["r"]),
             helper.make_node("Neg", ["d"], ["n"]), helper.make_node("Exp", ["n"], ["e"]),
             helper.make_node("Sqrt", ["e"], ["q"]), helper.make_node("Erf", ["q"], ["f"]),
             helper.make_node("Gelu", ["f"], ["g1"]), helper.make_node("Gelu", ["d"], ["g2"], approximate="tanh"),
             helper.make_node("Gelu", ["g2"], ["g3"], domain=MS),
             helper.make_node("FastGelu", ["g3", "c"], ["g4"], domain=MS),
             helper.make_node("Add", ["g4", "r"], ["s0"]), helper.make_node("Add", ["s0", "g1"], ["s1"]),
             helper.make_node("Sigmoid", ["s1"], ["sg"]), helper.make_node("Softmax", ["sg"], ["sm"], axis=1),
             helper.make_node("LayerNormalization", ["sm", "c", "c"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("Reshape", ["ln", "shape"], ["rs"]),
             helper.make_node("Transpose", ["rs"], ["tr"], perm=[0, 2, 1, 3]),
             helper.make_node("MatMul", ["tr", "w"], ["mm"]), helper.make_node("Cast", ["mm"], ["h"], to=10),
             helper.make_node("Cast", ["h"], ["hh"], to=1), helper.make_node("Identity", ["hh"], ["y"])]
    inits = [numpy_helper.from_array(c, "c"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array([0, 0, 2, 4], np.int64), "shape"),
             numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")]
    g = helper.make_graph(nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid(MS, 1)], ir_version=10)
    ours = load(model, config=EXACT).run({"x": x})["y"]
    ref = _minilm.ort_session(model).run(None, {"x": x})[0]
    assert ours.shape == ref.shape == (2, 2, 4, 3)
    assert np.allclose(ours, ref, rtol=2e-3, atol=2e-3)  # one fp16 round trip (Cast to=10) inside


# ----------------------------------------------------------------------------- real weights

CONFIGS = [(4, 32, True), (4, 32, False), (4, 128, True), (4, 128, False),
           (8, 32, True), (8, 32, False), (8, 128, True), (8, 128, False)]


@pytest.fixture(scope="module")
def minilm():
    w = _minilm.load_weights()
    layers = 1 if SIMULATED else _minilm.LAYERS
    return w, _minilm.build_float_model(w, layers=layers)


def _node_inputs(qmodel, m, hidden):
    """Each MatMulNBits node's real input activation, as ONNX Runtime computes it in the quantized model."""
    by_name = {n.name: n for n in qmodel.graph.node}
    names = sorted({by_name[n].input[0] for n in m.node_names})
    sess = _minilm.ort_session(_minilm.with_outputs(qmodel, names))
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"hidden": hidden})))
    return {n: outs[by_name[n].input[0]] for n in m.node_names}


@needs_minilm
@needs_quantizer
@pytest.mark.parametrize("bits,block_size,symmetric", CONFIGS)
def test_minilm_nodes_match_ort(minilm, bits, block_size, symmetric):
    w, fmodel = minilm
    qmodel = _minilm.quantize(fmodel, bits=bits, block_size=block_size, symmetric=symmetric)
    m = load(qmodel, config=EXACT)
    assert len(m.node_names) == 6 * (1 if SIMULATED else _minilm.LAYERS)
    for n in m.node_names:
        at = m.attributes(n)
        assert (at["bits"], at["block_size"]) == (bits, block_size)
        assert (m.constant_inputs(n)["zero_points"] is None) == symmetric
    acts = _node_inputs(qmodel, m, w["hidden"][:2] if SIMULATED else w["hidden"])
    if SIMULATED:  # query (K=384) and FFN-out (K=1536), first 8 rows of N, 20 real rows of A
        plan = [(m.node_names[0], 8, (20,)), (m.node_names[5], 8, (20,))]
    else:
        plan = [(n, None, (1, 64)) for n in m.node_names]
    for name, rows, Ms in plan:
        nm = m.node_model(name)
        if rows is not None:
            nm = _minilm.slice_rows(nm, rows)
        sub = load(nm, config=EXACT)
        sess = _minilm.ort_session(nm)
        ins = sub.constant_inputs(sub.node_names[0])
        at = sub.attributes(sub.node_names[0])
        for M in Ms:
            A = np.ascontiguousarray(acts[name].reshape(-1, at["K"])[:M])
            ours = sub.run_node(sub.node_names[0], A)
            theirs = sess.run(None, {"A": A})[0]
            err = relative_error(ours, theirs)
            assert err <= ORT_TOL, f"{name} M={M}: relative error vs ORT {err:.3g}"
            oracle = matmul_nbits_ref(A, ins["B"], ins["scales"], ins["zero_points"], None, ins["bias"],
                                      K=at["K"], N=at["N"], bits=bits, block_size=block_size)
            assert relative_error(ours, oracle) <= TOLERANCES["float32"], name


@needs_minilm
@needs_quantizer
@pytest.mark.skipif(SIMULATED, reason="the whole encoder is too slow for the simulator")
@pytest.mark.parametrize("bits,block_size,symmetric", [(4, 32, True), (8, 128, False)])
def test_minilm_whole_graph_matches_ort(minilm, bits, block_size, symmetric):
    w, fmodel = minilm
    qmodel = _minilm.quantize(fmodel, bits=bits, block_size=block_size, symmetric=symmetric)
    ours = load(qmodel, config=EXACT).run({"hidden": w["hidden"]})["last_hidden_state"]
    theirs = _minilm.ort_session(qmodel).run(None, {"hidden": w["hidden"]})[0]
    assert relative_error(ours, theirs) <= 1e-4
