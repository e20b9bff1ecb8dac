"""Entry points without a GPU (issue 18 items 2 and 6).

* The library never picks the simulator: with numba on the real driver and no CUDA GPU, building a
  ``MatMulNBits`` raises ``NoGPUError``, whose message says so and how to use the simulator; the demo,
  the perf suite and the examples print that on one line and exit with status 2.
* The demo, with ``NUMBA_ENABLE_CUDASIM`` unset and no GPU, selects the simulator with a one-line notice.
* ``python -m numba_nbits.perf`` refuses the simulator (its times mean nothing; it cannot keep the budget).
* ``python -m numba_nbits.explain`` validates attributes as the operator does and says where ``sm`` came from.

"No GPU" is made on any machine with ``CUDA_VISIBLE_DEVICES=""`` (the driver then reports no device) and
``NUMBA_ENABLE_CUDASIM=0`` (numba on the real driver), in a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import numba_nbits
from numba_nbits import probe
from numba_nbits.explain import explain, main as explain_main, resolve_sm
from numba_nbits.schema import MatMulNBitsError
from tests.conftest import SIMULATED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(sim: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if sim is not None:
        env["NUMBA_ENABLE_CUDASIM"] = sim
    return env


def _run(args, sim: str | None = "0", timeout=300):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, env=_env(sim), cwd=ROOT,
                          timeout=timeout)


def _one_line_no_gpu(r):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: no CUDA GPU found"), r.stderr
    assert "Traceback" not in r.stderr and "CudaSupportError" not in r.stderr
    return lines[0]


def test_no_gpu_error_is_public_and_a_runtime_error():
    assert numba_nbits.NoGPUError is probe.NoGPUError and issubclass(probe.NoGPUError, RuntimeError)
    msg = probe.no_gpu_message("the CUDA driver reports no device")
    assert msg.startswith("no CUDA GPU found (the CUDA driver reports no device)") and "NUMBA_ENABLE_CUDASIM=1" in msg
    assert "\n" not in msg


def test_run_cli_prints_no_gpu_error_on_one_line(capsys):
    def boom(argv):
        raise probe.NoGPUError("no CUDA GPU found (x); hint")

    assert probe.run_cli(boom) == 2
    assert capsys.readouterr().err == "error: no CUDA GPU found (x); hint\n"
    assert probe.run_cli(lambda argv: 0) == 0


QUICK = ("import numpy as np, numba_nbits as nb\n"
         "W = np.random.randn(16, 64).astype(np.float16)\n"
         "B, s, zp = nb.quantize(W, bits=4, block_size=32)\n"
         "try:\n"
         "    nb.MatMulNBits(B, s, zp, K=64, N=16, bits=4, block_size=32)\n"
         "except nb.NoGPUError as e:\n"
         "    print('NoGPUError:', e)\n")


def test_operator_without_gpu_raises_no_gpu_error():
    r = _run(["-c", QUICK])
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("NoGPUError: no CUDA GPU found (") and "NUMBA_ENABLE_CUDASIM=1" in out, out


def test_demo_without_gpu_and_simulator_off_says_so():
    line = _one_line_no_gpu(_run(["-m", "numba_nbits", "--M", "1"]))
    assert "NUMBA_ENABLE_CUDASIM=1" in line


def test_demo_without_gpu_selects_the_simulator_with_a_notice():
    r = _run(["-m", "numba_nbits", "--M", "1", "--N", "16", "--K", "64"], sim=None, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines()[0] == ("no CUDA GPU found: running on numba's CUDA simulator (slow; default "
                                        "shape N=64 K=128)")
    assert "-> OK" in r.stdout


def test_example_without_gpu_says_so():
    _one_line_no_gpu(_run([os.path.join("examples", "numba_device_arrays.py"), "--small"]))


def test_perf_without_gpu_says_so():
    line = _one_line_no_gpu(_run(["-m", "numba_nbits.perf", "--quick", "--no-plots", "--no-peers"]))
    assert "perf suite times kernels on a CUDA GPU" in line


def test_perf_refuses_the_simulator():
    r = _run(["-m", "numba_nbits.perf", "--quick", "--no-plots", "--no-peers"], sim="1", timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)
    assert "simulator" in lines[0] and "Traceback" not in r.stderr
    assert _run(["-m", "numba_nbits.perf", "--quick", "--dry-run"], sim="1").returncode == 0  # the plan: no GPU


@pytest.mark.skipif(not SIMULATED, reason="in-process refusal is checked on the simulator")
def test_perf_main_refuses_the_simulator_in_process(capsys):
    from numba_nbits.perf import cli

    assert cli.main(["--quick", "--no-plots"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {cli.SIMULATOR_REFUSED}"


# ------------------------------------------------------------------------------------------ explain (item 6)

def test_explain_rejects_what_the_operator_rejects(capsys):
    with pytest.raises(MatMulNBitsError, match=r"block_size must be a power of 2, and >= 16. Got 48"):
        explain(1, 4096, 4096, block_size=48)
    with pytest.raises(MatMulNBitsError, match="bits should be 2, 4 or 8"):
        explain(1, 4096, 4096, bits=3)
    with pytest.raises(MatMulNBitsError, match="BFloat16 MatMulNBits is not supported"):
        explain(1, 4096, 4096, dtype="bfloat16", sm=75)
    assert explain_main(["--block-size", "48", "--no-env"]) == 2
    cap = capsys.readouterr()
    assert cap.err == "error: block_size must be a power of 2, and >= 16. Got 48\n" and "route:" not in cap.out


def test_explain_cli_block_size_48_exits_2():
    r = _run(["-m", "numba_nbits.explain", "--M", "1", "--N", "4096", "--K", "4096", "--block-size", "48"])
    assert r.returncode == 2 and r.stderr == "error: block_size must be a power of 2, and >= 16. Got 48\n", r.stderr


def test_explain_says_where_sm_came_from(capsys):
    assert resolve_sm(80) == (80, "--sm")
    assert explain_main(["--sm", "80", "--no-env"]) == 0
    assert "sm: 80 (--sm)" in capsys.readouterr().out
    sm, source = resolve_sm()
    if probe.gpu_present():
        assert source.startswith("device 0: ")
    else:
        assert (sm, source) == (90, "assumed: no GPU found; pass --sm")
    assert explain_main(["--no-env"]) == 0
    assert f"sm: {sm} ({source})" in capsys.readouterr().out


def test_explain_without_gpu_assumes_sm_90_and_says_so():
    r = _run(["-m", "numba_nbits.explain", "--M", "1", "--no-env"])
    assert r.returncode == 0, r.stderr
    assert "sm: 90 (assumed: no GPU found; pass --sm)" in r.stdout.splitlines()
