"""Performance suite: ``python -m numba_nbits.perf`` (see benchmarks/README.md).

Modules: ``shapes`` (named shapes, sweep plans), ``metrics`` (bytes, FLOPs, rotation sizing),
``harness`` (events, CUDA graphs, host time), ``subjects`` (our operators, oracle checks), ``peers``
(torch, tinygemm, gemlite, ORT CUDA), ``reference_rows`` (ORT's published H200 figures, used when ORT CUDA is absent),
``ceilings`` (copy bandwidth, dense GEMM, environment), ``runner`` (the sweep), ``report`` (CSV,
markdown, plots, README section), ``shard`` (``--shard I/N``: cost-balanced partition of the cases),
``merge`` (``python -m numba_nbits.perf merge``: shard directories into one report), ``cli`` (arguments).

Importing this package imports neither torch nor numba and touches no GPU.
"""
from pathlib import Path

#: where runs are written by default and where ``merge``, ``report`` and ``numba_nbits.readme`` look:
#: ``benchmarks/results/<date>-<gpu>[-<what>]/`` of the repository checkout
RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
