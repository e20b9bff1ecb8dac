"""``numba_nbits.precompile`` / ``python -m numba_nbits.precompile``: the M-range reduction, signature
dedupe (ops, shape specs, ONNX models), parallel workers, failures counted not fatal, the CLI and its
argument errors. Tiny shapes, M <= 2 (on the simulator every worker compiles through numba's simulator)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import SIMULATED, pythonpath_with

import numba_nbits as nb
from numba_nbits import precompile as pc
from numba_nbits.config import load_config
from numba_nbits.precompile import Signature

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=pythonpath_with(ROOT))
    return subprocess.run([sys.executable, "-m", "numba_nbits.precompile", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def _op(N, K, bits=4, block=32, zp=False, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((N, K)).astype(np.float16)
    B, scales, z = nb.quantize(W, bits=bits, block_size=block, symmetric=not zp)
    op = nb.MatMulNBits(B, scales, z, K=K, N=N, bits=bits, block_size=block)
    op.host_inputs = (B, scales, z)  # for the reference check
    return op


def _model(path=None):
    """Three MatMulNBits nodes, two of one signature (64x128 4-bit g32), one 32x64 8-bit with packed zp + bias."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    MS = "com.microsoft"
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "A"
    for i, (N, K, bits, zp, bias) in enumerate([(128, 128, 4, False, False), (128, 128, 4, False, False),
                                                 (32, 128, 8, True, True)]):
        B, scales, z = nb.quantize(rng.standard_normal((N, K)).astype(np.float32), bits=bits, block_size=32,
                                   symmetric=not zp)
        names = [x, f"B{i}", f"s{i}", "", "", ""]
        inits += [numpy_helper.from_array(B, f"B{i}"), numpy_helper.from_array(scales, f"s{i}")]
        if z is not None:
            inits.append(numpy_helper.from_array(z, f"z{i}"))
            names[3] = f"z{i}"
        if bias:
            inits.append(numpy_helper.from_array(np.zeros(N, np.float32), f"b{i}"))
            names[5] = f"b{i}"
        while names[-1] == "":
            names.pop()
        nodes.append(helper.make_node("MatMulNBits", names, [f"y{i}"], name=f"mm{i}", domain=MS, K=K, N=N,
                                      bits=bits, block_size=32))
        x = f"y{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", 128])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["M", 32])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=10)
    if path is not None:
        onnx.save(m, str(path))
    return m


def test_parse_M_and_shapes():
    assert pc.parse_M("1-4") == [1, 2, 3, 4] and pc.parse_M("4,1,2,2") == [1, 2, 4]
    assert pc.parse_M("1-3,8") == [1, 2, 3, 8]
    for bad in ("", "a", "0-4", "5-2", "1,,2", "1-2-3"):
        with pytest.raises(ValueError, match="bad --M"):
            pc.parse_M(bad)
    assert pc.parse_shape("4096x14336") == Signature(4096, 14336, 4, 128, "float16", "none", False)
    assert pc.parse_shape("64x128:8:32:bfloat16:packed:bias") == Signature(64, 128, 8, 32, "bfloat16", "packed", True)
    for bad, why in (("64", "expected NxK"), ("64x128:3", "bits should be 2, 4 or 8"), ("0x128", "N must be > 0"),
                     ("64x128:4:48", "block_size must be a power of 2"), ("64xK", "integers"),
                     ("64x128:4:32:float64", "dtype must be one of"),
                     ("64x128:4:32:float16:yes", "zero points must be"),
                     ("1x2x3", "integers"), ("64x128:4:32:float16:none:bias:x", "expected NxK"),
                     ("64x128:4:32:float16:none:maybe", "bias must be one of bias, nobias")):
        with pytest.raises(ValueError, match=why):
            pc.parse_shape(bad)


def test_M_range_reduction_rule(monkeypatch):
    cfg = load_config({}, None)
    llama = Signature(4096, 4096, 4, 128)
    # every M <= 16, then the first M of each route run (17: the fused GEMM, 65: dequant + cuBLAS) and, in the fused
    # GEMM's run, of each m-tile count (25, 33, 49) and nothing else; elsewhere powers of two and the max
    assert pc.plan_Ms(llama, range(1, 4097), cfg, 90) == list(range(1, 18)) + [25, 33, 49, 65, 128, 256, 512, 1024,
                                                                               2048, 4096]
    # wide 4-bit block-128 weights on sm_90: the fused GEMM to 256 (12 / 16 / 24 / 32 m-tiles from 65 / 97 / 129 / 193)
    wide = Signature(28672, 8192, 4, 128)
    assert pc.plan_Ms(wide, range(1, 257), cfg, 90)[17:] == [25, 33, 49, 65, 97, 129, 193]
    # past the fused GEMM ORT's chain from 257, the overlapped route from 293 (M * N >= 2**23)
    assert pc.plan_Ms(wide, range(1, 513), cfg, 90)[17:] == [25, 33, 49, 65, 97, 129, 193, 257, 293, 512]
    assert pc.plan_Ms(wide, range(1, 257), cfg, 80)[17:] == [25, 33, 49, 65, 128, 256]
    assert pc.plan_Ms(wide, range(1, 61), cfg, 90)[17:] == [25, 33, 49]  # a fused run's last M is not kept
    assert pc.plan_Ms(llama, range(1, 3001), cfg, 90)[-2:] == [2048, 3000]
    assert pc.plan_Ms(llama, [2, 1, 2], cfg, 90) == [1, 2]
    with pytest.raises(ValueError, match="M must be >= 1"):
        pc.plan_Ms(llama, [0, 1], cfg, 90)
    # fpA_intB on: the listed profile buckets are kept too
    fpa = load_config({}, {"ep.cuda.fpa_intb_gemm": "1", "ep.cuda.fpa_intb_profile_m": "24,100,512"})
    from numba_nbits.dispatch.select import select

    assert select(pc._problem(llama, 24, 90), fpa).name == "fpa_intb"
    assert {24, 100, 512} <= set(pc.plan_Ms(llama, range(1, 513), fpa, 90))
    # a route change above 16 keeps the first M of the new route
    import numba_nbits.dispatch.select as sel

    class D:
        def __init__(self, name):
            self.name = name

    monkeypatch.setattr(sel, "select", lambda p, c: D("a" if p.M < 100 else "b"))
    assert 100 in pc.plan_Ms(llama, range(1, 200), cfg, 90) and 99 not in pc.plan_Ms(llama, range(1, 200), cfg, 90)


def test_signatures_dedupe_across_repeated_shapes():
    sigs = pc.signatures(["64x128:4:32", "64x128:4:32", Signature(64, 128, 4, 32), "32x64:8:32"])
    assert sigs == [Signature(64, 128, 4, 32), Signature(32, 64, 8, 32)]
    assert pc.signatures("64x128:4:32") == [Signature(64, 128, 4, 32)]
    m = _model()  # three nodes, two of one shape: two signatures, read from the initializers' headers
    assert pc.signatures(m) == [Signature(128, 128, 4, 32, "float32"),
                                Signature(32, 128, 8, 32, "float32", "packed", True)]
    op = _op(64, 128)
    assert pc.signatures([op, op, "64x128:4:32:float16"]) == [Signature(64, 128, 4, 32)]
    with pytest.raises(TypeError, match="cannot read a target"):
        pc.signatures([3.5])


def test_api_two_ops_in_two_workers_then_the_ops_run():
    ops = [_op(64, 128), _op(32, 64, bits=8, zp=True, seed=1)]
    s = nb.precompile(ops, M=range(1, 3), workers=2, progress=False)
    assert isinstance(s, nb.PrecompileSummary)
    assert (s.tasks, s.workers, s.built, s.failed, s.failures) == (4, 2, 4, 0, []), str(s)
    assert s.ok and "4 plans of 2 signatures in 2 workers" in str(s)
    # where the time went: every task's seconds, the slowest three named (each signature's first task in a worker
    # includes building its op)
    assert sorted(i for _, _, i in s.task_seconds) == [0, 1, 2, 3] and len(s.slowest) == pc.SLOWEST
    secs = sorted((t for t, _, _ in s.task_seconds), reverse=True)
    assert str(s).splitlines()[2] == "slowest plans: " + "; ".join(s.slowest)
    assert [float(x.split(": ")[1].split(" s")[0]) for x in s.slowest] == [round(t, 1) for t in secs[:3]]
    assert sorted(i for _, b, i in s.task_seconds if b > 0) == [0, 2]  # each worker built its signature's op once
    assert all(b <= t for t, b, _ in s.task_seconds)
    if SIMULATED:  # no disk cache on the simulator: the summary says so instead of counting
        assert s.kernels_compiled is None and s.cache.startswith("off: numba's CUDA simulator")
        assert "kernel cache is off" in str(s)
    else:
        assert s.cache.startswith("on: ") and s.kernels_compiled + s.kernels_loaded > 0
    for op in ops:
        A = np.random.default_rng(2).standard_normal((2, op.K)).astype(np.float16)
        ref = nb.matmul_nbits_ref(A, *op.host_inputs, K=op.K, N=op.N, bits=op.bits, block_size=op.block_size)
        assert nb.relative_error(op(A), ref) < 1e-2


def test_failing_tasks_are_counted_not_fatal(monkeypatch, capsys):
    # a signature the worker cannot build (2-bit with g_idx): both of its tasks fail, the other builds
    # (without tqdm the progress is one stderr line per worker)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    s = nb.precompile(["32x64:4:32", Signature(32, 64, 2, 32, g_idx=True)], M=[1, 2], workers=2, progress=True)
    assert (s.tasks, s.built, s.failed) == (4, 2, 2) and not s.ok
    assert len(s.failures) == 2 and all("2-bit dequantization does not support g_idx" in f for f in s.failures)
    err = capsys.readouterr().err
    assert "precompile: worker 0 done: 2 plans, 0 failed" in err
    assert "precompile: worker 1 done: 2 plans, 2 failed" in err
    monkeypatch.undo()
    assert str(nb.precompile([], M=[1, 2], progress=False)).splitlines()[1] == \
        "kernels: none counted (cache not used: nothing to compile)"
    # in this process (workers=0): warmup raising for one M
    from numba_nbits.op import MatMulNBits

    real = MatMulNBits.warmup

    def flaky(self, *Ms):
        if 2 in Ms:
            raise RuntimeError("boom")
        return real(self, *Ms)

    monkeypatch.setattr(MatMulNBits, "warmup", flaky)
    s = nb.precompile("32x64:4:32", M=[1, 2], workers=0, progress=True)
    assert (s.tasks, s.built, s.failed) == (2, 1, 1)
    assert s.failures == ["32x64:4:32:float16:none:nobias M=2: RuntimeError: boom"]
    assert "failed: 32x64:4:32:float16:none:nobias M=2: RuntimeError: boom" in str(s)


def test_callable_module():
    import numba_nbits.precompile as mod

    assert callable(mod) and callable(nb.precompile)
    assert mod(["32x64:4:32"], M=1, workers=0, progress=False).ok


def test_cli_on_an_onnx_model(tmp_path):
    path = tmp_path / "tiny.onnx"
    _model(path)
    r = _cli(str(path), "--M", "1", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert "2 plans of 2 signatures in 2 workers" in r.stdout and "2 built, 0 failed" in r.stdout
    assert "precompile" in r.stderr  # the progress (tqdm bar, or one line per worker)


def test_cli_on_shapes_and_failure_exit_status():
    r = _cli("--shapes", "64x128:4:32", "32x64:8:32:float16:packed:bias", "--M", "1,2", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "4 plans of 2 signatures" in r.stdout and r.stderr == ""
    r = _cli("--shapes", "64x128:4:32", "--M", "1", "--config", "numba_nbits.force_route=gemv_w8", "--no-progress")
    assert r.returncode == 1 and "1 failed" in r.stdout and "failed: 64x128" in r.stdout


@pytest.mark.parametrize("args, text", [
    (["--shapes", "64x128:5"], "bad shape '64x128:5': bits should be 2, 4 or 8, got 5"),
    (["--shapes", "64by128"], "bad shape '64by128'"),
    (["--shapes", "64x128", "--M", "4-1"], "bad --M '4-1'"),
    (["--shapes", "64x128", "--M", "one"], "bad --M 'one'"),
    (["--shapes", "64x128", "--config", "nope=1"], 'unknown config key "nope"'),
    (["--shapes", "64x128", "--config", "novalue"], "bad --config 'novalue'"),
    (["missing.onnx"], "no such model file"),
    ([], "nothing to compile"),
    (["--workers"], "expected one argument"),
])
def test_cli_bad_arguments_exit_2_with_one_line(args, text, capsys):
    assert pc.main(args) == 2
    err = capsys.readouterr().err
    assert text in err and err.count("\n") == 1, err


def test_cli_without_gpu_and_simulator_off_exits_2():
    env = dict(os.environ, PYTHONPATH=pythonpath_with(ROOT), CUDA_VISIBLE_DEVICES="", NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-m", "numba_nbits.precompile", "--shapes", "64x128", "--M", "1"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: no CUDA GPU found"), r.stderr


def test_a_worker_that_does_not_finish_is_reported():
    s = nb.precompile("32x64:4:32", M=[1, 2], workers=1, progress=False, timeout_s=0.01)
    assert (s.tasks, s.built) == (2, 0) and not s.ok
    assert s.failures == ["worker 0 (2 plans unreported): killed after 0 s"], s.failures
