"""Tensor-parallel QuantLinear layers over torch.distributed (issue 22).

The multi-process checks live in tests/tp_worker.py (one process per rank): every sharded layer against
the float64 oracle of the unsharded layer, exact buffer slices, a Llama-style block sharded by
``quantize_model_(tp_group=...)``, and the refusal of uneven splits. Here: 2 ranks over gloo on CPU
tensors (runs on the simulator), and 2 ranks over NCCL with CUDA-graph capture (needs 2 GPUs).
The slicing itself is tested without torch in tests/test_shard.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from numba_nbits.torch import ColumnParallelQuantLinear, RowParallelQuantLinear  # noqa: E402
from tests.conftest import requires_gpu  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _run_ranks(tmp_path, world, backend, *extra, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    init = f"file://{tmp_path}/rendezvous"
    procs = [subprocess.Popen([sys.executable, "-m", "tests.tp_worker", "--rank", str(r), "--world", str(world),
                               "--init", init, "--backend", backend, *extra], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"rank {r}/{world}: ok" in out, f"rank {r} failed (rc {p.returncode}):\n{out}"


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo")
def test_two_ranks_gloo_cpu(tmp_path):
    """2 processes, gloo, CPU tensors: column-parallel (with and without all-gather), row-parallel (sharded
    or full input), a sharded Llama-style block vs the unsharded model's oracle, uneven splits refused."""
    _run_ranks(tmp_path, 2, "gloo")


@requires_gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2 or not dist.is_nccl_available(),
                    reason="needs 2 CUDA GPUs and NCCL")
def test_two_ranks_nccl_cuda_graph(tmp_path):
    """The same checks on 2 GPUs over NCCL, plus the sharded block (all-reduces inside) captured in a CUDA
    graph and replayed equal to eager."""
    _run_ranks(tmp_path, 2, "nccl", "--graph")


def test_layers_need_initialised_distributed():
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    for cls in (ColumnParallelQuantLinear, RowParallelQuantLinear):
        with pytest.raises(RuntimeError, match=r"need torch.distributed initialised first: "
                                               r"torch.distributed.init_process_group\('nccl'\)"):
            cls.from_linear(nn.Linear(64, 32))
