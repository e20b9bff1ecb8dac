"""The tuned tactic tables of the tensor-core GEMV: which file a plan's tactic comes from.

``tuned/<gpu>-v<KERNEL_VERSION>.json`` holds, per bit width, rows ``[N, K, block_size, m_class,
tactic tag]`` fitted to a sweep of the tactics on that GPU (the ``sources`` field names the
measurement under ``benchmarks/results/``). ``KERNEL_VERSION`` names the generated kernels the
tables were measured with: a change to the generators that moves timings bumps it, and tables of an
older version are not used. The same kernel source compiles to different code under numba-cuda-mlir, so a
table can be fitted under it too: ``tuned/<gpu>-v<KERNEL_VERSION>-mlir.json``, whose rows replace the same keys
of the GPU's table in processes whose kernels that compiler builds (``backend.compiler()``; ``h200-v2-mlir.json``:
``benchmarks/results/2026-12-06-h200-backend-v4/``). Plans take the table of the GPU they run on (``gpu_key`` of
the device's name: ``h100``, ``h200``, ...; ``DEFAULT_GPU`` on the simulator). Lookup rule, per bit width: the
rows of ``gpu``'s table when it has that bit width for this version, else those of ``DEFAULT_GPU`` (the H200,
the GPU every bit width was fitted on; its tactics are valid on any sm_80+ GPU, only possibly not the fastest
there: ``h100-v2.json`` holds the H100's own fit of every bit width, ``h100-v2-mlir.json`` its numba-cuda-mlir rows;
``benchmarks/results/2026-12-06-h100-tactics/``). Tags with ``k`` (split-K across CTAs) make a plan own a
workspace, so the fit takes them only when they win by a clear margin.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

#: version of the generated tensor-core kernels the tuned tables were measured with (2: one-LOP3 decode,
#: fp16 registers 1/3 decoded in place, cvt scales, 8-byte scale loads, one-compare activation guards). The
#: K-full kernels (unguarded activation loads) did not bump it: they were timed on the v2 table's own tactics
#: against the v2 kernels, default calls of 4-, 8- and 2-bit (``benchmarks/results/2026-12-03-h200-gemv-kfull``),
#: not refitted; the H100's table, fitted after them (2026-12-06), is version 2 as well.
KERNEL_VERSION = 2
#: the GPU whose table serves GPUs without one of their own
DEFAULT_GPU = "h200"
TUNED_DIR = Path(__file__).with_name("tuned")


def _table_path(gpu: str, compiler: str = "numba") -> Path:
    return TUNED_DIR / f"{gpu}-v{KERNEL_VERSION}{'' if compiler == 'numba' else '-' + compiler}.json"


def _read_tables(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    return {int(bits): {tuple(row[:4]): row[4] for row in rows} for bits, rows in data["tables"].items()}


@lru_cache(maxsize=None)
def _load_tables(gpu: str, compiler: str = "numba") -> dict:
    """``bits -> {(N, K, block_size, m_class): tag}``: per bit width, the rows of ``gpu``'s file where it has that
    bit width, else of ``DEFAULT_GPU``'s; for another compiler than numba-cuda, the rows of the serving GPU's
    ``-<compiler>`` file (where one was fitted) replace those of the same key."""
    tables, served_by = {}, {}
    for g in dict.fromkeys((DEFAULT_GPU, gpu)):  # the GPU's own bit widths replace the default GPU's
        path = _table_path(g)
        if path.is_file():
            for bits, rows in _read_tables(path).items():
                tables[bits], served_by[bits] = rows, g
    if compiler != "numba":
        for g in dict.fromkeys(served_by.values()):
            extra = _table_path(g, compiler)
            if extra.is_file():
                for bits, rows in _read_tables(extra).items():
                    if served_by.get(bits) == g:
                        tables[bits] = {**tables[bits], **rows}
    return tables


def tuned_table(bits: int, gpu: str = DEFAULT_GPU, compiler: str | None = None) -> dict:
    """The tuned tactics of ``bits`` for ``gpu`` and ``compiler`` (default: this process's, ``backend.compiler``;
    module docstring: lookup rule); empty when none were fitted."""
    if compiler is None:
        from ...backend import compiler as current

        compiler = current()
    return _load_tables(gpu, compiler).get(bits, {})


def gpu_key(name: str) -> str:
    """The tuned-table key of a device name: its first model token (``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``,
    ``"NVIDIA H200"`` -> ``"h200"``, ``"NVIDIA A100-SXM4-80GB"`` -> ``"a100"``), else the whole name in lower case
    with runs of other characters as ``-``."""
    low = name.decode() if isinstance(name, bytes) else str(name)
    low = low.lower()
    m = re.search(r"(?<![a-z0-9])([a-z]{1,3}\d{2,4}[a-z]?)(?![a-z0-9])", low.replace("nvidia", " "))
    return m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", low).strip("-")


def device_gpu(simulated: bool) -> str:
    """The tuned-table key of the current device (``DEFAULT_GPU`` on the simulator)."""
    if simulated:
        return DEFAULT_GPU
    from .core import device_info  # cached current-device query (as the CUDA-core engine's)

    return gpu_key(device_info()[2])
