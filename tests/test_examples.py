"""Run every script in examples/ (in a subprocess, with its --small flag).

Examples that need what this machine lacks are skipped with the reason: the CuPy and PyTorch ones
need a real GPU (and CuPy / torch with CUDA); the ONNX and torch ones need the real-model weights
(examples/_minilm.py says how to get them). numba_device_arrays.py runs on the simulator too.
"""
from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import SIMULATED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
sys.path.insert(0, EX)
import _minilm  # noqa: E402

SCRIPTS = sorted(f for f in os.listdir(EX) if f.endswith(".py") and not f.startswith("_"))


def _missing(mod):
    return importlib.util.find_spec(mod) is None


def _torch_cuda():
    if SIMULATED or _missing("torch"):
        return False
    import torch

    return torch.cuda.is_available()


def _quantizer_error():
    try:
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: F401
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def _skip_reason(script):
    if script == "cupy_matmul.py":
        if SIMULATED:
            return "needs a real GPU"
        if _missing("cupy"):
            return "needs CuPy"
    if script == "torch_quantize_model.py":
        if not _torch_cuda():
            return "needs torch with a CUDA GPU"
        if _minilm.locate() is None:
            return _minilm.why_missing()
    if script == "onnx_parity.py":
        if _missing("onnx") or _missing("onnxruntime"):
            return "needs onnx and onnxruntime"
        if _minilm.locate() is None:
            return _minilm.why_missing()
        err = _quantizer_error()
        if err:
            return f"ONNX Runtime's MatMulNBitsQuantizer unavailable ({err})"
    return None


def test_every_example_is_covered():
    assert set(SCRIPTS) >= {"onnx_parity.py", "torch_quantize_model.py", "cupy_matmul.py",
                            "numba_device_arrays.py"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs(script):
    reason = _skip_reason(script)
    if reason:
        pytest.skip(reason)
    env = copy.copy(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, os.path.join(EX, script)]
    if SIMULATED or script != "onnx_parity.py":
        args.append("--small")
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert r.returncode == 0, f"{script} failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    assert r.stdout.strip(), f"{script} printed nothing"
