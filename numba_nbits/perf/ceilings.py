"""Ceilings measured at the start of every run, and the environment columns of every row.

* ``bw_tb_s``: device-to-device copy of 1 GiB (``cuMemcpyDtoDAsync``), bytes read + written over
  the median time: the practical HBM ceiling (a copy reads and writes every byte once, with no
  compute to hide latency behind), which is what a weight-streaming kernel can approach;
* ``tflops_<dtype>``: a dense 8192^3 matmul, median of several, through torch when importable (fp16,
  bf16, fp32 with TF32 off, ``tf32``), else through the project's cuBLAS binding
  (``numba_nbits.dispatch.cublas``, fp32 accumulation).
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

from .metrics import quantiles

NAN = float("nan")
GEMM_N = 8192


def measure_ceilings(backend, *, bw_bytes: int = 1 << 30, reps: int = 10) -> dict:
    """``{"bw_tb_s", "tflops_float16", "tflops_bfloat16", "tflops_float32", "tflops_tf32", "ceiling_note"}``."""
    out = {"bw_tb_s": NAN, "tflops_float16": NAN, "tflops_bfloat16": NAN, "tflops_float32": NAN,
           "tflops_tf32": NAN, "ceiling_note": ""}
    if backend.simulated:
        out["ceiling_note"] = "simulator: no ceilings"
        return out
    notes = []
    try:
        out["bw_tb_s"] = _copy_bw(backend, bw_bytes, reps)
    except Exception as e:  # noqa: BLE001
        notes.append(f"copy bandwidth failed: {type(e).__name__}: {e}")
    try:
        out.update(_gemm_torch(reps))
        notes.append("GEMM ceilings via torch")
    except Exception as e:  # noqa: BLE001
        notes.append(f"torch GEMM unavailable ({type(e).__name__}: {e}); using numba_nbits.dispatch.cublas")
        try:
            out.update(_gemm_cublas(backend, reps))
        except Exception as e2:  # noqa: BLE001
            notes.append(f"cuBLAS GEMM failed: {type(e2).__name__}: {e2}")
    out["ceiling_note"] = "; ".join(notes)[:500]
    return out


def _copy_bw(backend, nbytes: int, reps: int) -> float:
    d = backend.d
    src = backend.alloc((nbytes,), np.uint8)
    dst = backend.alloc((nbytes,), np.uint8)
    backend.poison(src)
    cs = d.CUstream(backend.stream)
    samples = []
    for r in range(reps + 2):
        a = backend.record()
        res = d.cuMemcpyDtoDAsync(d.CUdeviceptr(dst.ptr), d.CUdeviceptr(src.ptr), nbytes, cs)
        if int(res[0]) != 0:
            raise RuntimeError(f"cuMemcpyDtoDAsync: {res[0]}")
        z = backend.record()
        ms = backend.elapsed_ms(a, z)
        if r >= 2:
            samples.append(ms)
    _, p50, _ = quantiles(samples)
    return 2 * nbytes / (p50 * 1e-3) / 1e12


def _gemm_torch(reps: int) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda not available")
    n = GEMM_N
    res = {}
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for key, dt, tf32 in (("tflops_float16", torch.float16, False), ("tflops_bfloat16", torch.bfloat16, False),
                              ("tflops_float32", torch.float32, False), ("tflops_tf32", torch.float32, True)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            for _ in range(2):
                torch.mm(a, b)
            times = []
            for _ in range(reps if dt != torch.float32 else max(3, reps // 3)):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                torch.mm(a, b)
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            _, p50, _ = quantiles(times)
            res[key] = 2 * n ** 3 / (p50 * 1e-3) / 1e12
            del a, b
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return res


def _gemm_cublas(backend, reps: int) -> dict:
    from ..arrays import np_dtype
    from ..dispatch import cublas

    n = GEMM_N
    h = cublas.handle_for(0)
    rng = np.random.default_rng(0)
    res = {}
    for key, dt, tf32 in (("tflops_float16", "float16", False), ("tflops_bfloat16", "bfloat16", False),
                          ("tflops_float32", "float32", False), ("tflops_tf32", "float32", True)):
        host = rng.standard_normal((n, n), dtype=np.float32).astype(np_dtype(dt))
        a = backend.alloc((n, n), np_dtype(dt))
        w = backend.alloc((n, n), np_dtype(dt))
        y = backend.alloc((n, n), np_dtype(dt))
        backend.upload(a, host)
        backend.upload(w, host)
        times = []
        for r in range(reps + 2):
            s = backend.record()
            cublas.gemm(h, backend.stream, n, n, n, w.ptr, n, a.ptr, y.ptr, n, dt, tf32, 0)
            e = backend.record()
            ms = backend.elapsed_ms(s, e)
            if r >= 2:
                times.append(ms)
        _, p50, _ = quantiles(times)
        res[key] = 2 * n ** 3 / (p50 * 1e-3) / 1e12
    return res


def peak_for(ceilings: dict, dtype: str, use_tf32: bool = True) -> float:
    """The dense GEMM ceiling that a case of ``dtype`` is compared with (fp32: TF32 when allowed)."""
    if dtype == "float32" and use_tf32:
        v = ceilings.get("tflops_tf32", NAN)
        if v == v:
            return v
    return ceilings.get(f"tflops_{dtype}", NAN)


# ------------------------------------------------------------------------------------ environment

def _version(mod: str) -> str:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:  # noqa: BLE001
        return ""


def git_commit(repo: Path | None = None) -> str:
    repo = repo or Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if sha and dirty else "")
    except Exception:  # noqa: BLE001
        return ""


def environment(backend) -> dict:
    """Columns repeated on every row: GPU, SM count, L2, driver, library versions, commit, date."""
    env = {"gpu": "simulator", "sm_count": 0, "l2_bytes": 0, "driver": "", "numba_cuda": _version("numba-cuda"),
           "cuda_core": _version("cuda-core"), "torch": "", "git_commit": git_commit(),
           "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "host": platform.node()}
    env["torch"] = _version("torch")
    if backend.simulated:
        return env
    d = backend.d
    try:
        dev = int(backend.device_id)
        cudev = d.cuDeviceGet(dev)[1]
        name = d.cuDeviceGetName(256, cudev)[1]
        env["gpu"] = (name.decode(errors="replace") if isinstance(name, bytes) else str(name)).split("\x00")[0].strip()
        A = d.CUdevice_attribute
        env["sm_count"] = int(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cudev)[1])
        env["l2_bytes"] = int(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cudev)[1])
        v = int(d.cuDriverGetVersion()[1])
        env["driver"] = f"CUDA {v // 1000}.{(v % 1000) // 10}"
    except Exception as e:  # noqa: BLE001
        env["gpu"] = env["gpu"] if env["gpu"] != "simulator" else f"unknown GPU ({type(e).__name__})"
    smi = _nvidia_smi_driver()
    if smi:
        env["driver"] = f"{smi} ({env['driver']})" if env["driver"] else smi
    return env


def _nvidia_smi_driver() -> str:
    if os.environ.get("NUMBA_NBITS_PERF_NO_SMI"):
        return ""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
    except Exception:  # noqa: BLE001
        return ""
