"""Benchmark scripts of numba_nbits (run from the repository root as ``python -m benchmarks.NAME``).

``bench_host`` (host time per eager call, every route), ``bench_mixed_gemm`` (every mixed-GEMM tactic
against dequantize + cuBLAS and dense cuBLAS), ``sweep_gemv_m1`` (the small-M tensor-core GEMV tactic
sweep that the tuned tables ``numba_nbits/kernels/gemv/tuned/*.json`` are fitted to, by ``gemv_tuned``)
and ``ptx_stats`` (registers, spills and occupancy from ptxas, no GPU). Every timing goes through ``numba_nbits.perf.harness``; the operator-level
suite is ``python -m numba_nbits.perf``. ``results/`` holds the committed measurements, one directory
per run (see README.md). ``common`` holds what scripts share (batches of timed host calls, the ``$OUT`` CSV).
"""
