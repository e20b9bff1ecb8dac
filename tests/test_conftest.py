"""The test harness's own knobs: ``NUMBA_NBITS_TEST_SKIP_CUBLAS`` (gpu_sanitize.sh's initcheck), the worker
count, heavy-tests-first ordering and the ``exhaustive`` marker."""
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import HEAVY_TESTS, default_workers, heavy_first, refuse_cublas_if_asked
from numba_nbits.dispatch import cublas


def test_skip_cublas_knob_skips_at_the_gemm_call(monkeypatch):
    original = cublas.gemm
    assert not refuse_cublas_if_asked(monkeypatch, {})
    assert not refuse_cublas_if_asked(monkeypatch, {"NUMBA_NBITS_TEST_SKIP_CUBLAS": "0"})
    assert cublas.gemm is original
    assert refuse_cublas_if_asked(monkeypatch, {"NUMBA_NBITS_TEST_SKIP_CUBLAS": "1"})
    assert cublas.gemm is not original
    with pytest.raises(pytest.skip.Exception, match="cuBLAS GEMM"):
        cublas.gemm(None, 0, 1, 1, 1, 0, 1, 0, 0, 1, None, False, 0)
    assert cublas.gemm_host is not None  # the simulator's GEMM step is untouched


def test_default_workers():
    assert default_workers({}, False, 16, True) == 16  # a GPU: one worker per core
    assert default_workers({}, False, 128, True) == 16  # capped
    assert default_workers({}, False, 1, True) == 0  # one core: no point in a worker
    assert default_workers({}, True, 16, True) == 0  # the simulator: serial unless asked
    assert default_workers({"NUMBA_NBITS_TEST_WORKERS": "4"}, True, 2, True) == 4
    assert default_workers({"NUMBA_NBITS_TEST_WORKERS": "0"}, False, 16, True) == 0
    assert default_workers({"NUMBA_NBITS_TEST_WORKERS": " "}, False, 8, True) == 8  # blank = default
    assert default_workers({}, False, 16, False) == 0  # no pytest-xdist installed
    for bad in ("-1", "many"):
        with pytest.raises(pytest.UsageError, match="NUMBA_NBITS_TEST_WORKERS"):
            default_workers({"NUMBA_NBITS_TEST_WORKERS": bad}, False, 16, True)


class _Item:
    def __init__(self, name):
        self.originalname, self.name = name.split("[")[0], name


def test_heavy_tests_run_first_heaviest_first():
    names = ["test_a", "test_gpu_fpa_intb_matches_oracle[x]", "test_fuzz_vs_oracle[0]", "test_b[1]",
             "test_fuzz_vs_oracle[1]", "test_c"]
    got = [it.name for it in heavy_first([_Item(n) for n in names])]
    assert HEAVY_TESTS.index("test_fuzz_vs_oracle") < HEAVY_TESTS.index("test_gpu_fpa_intb_matches_oracle")
    assert got == ["test_fuzz_vs_oracle[0]", "test_fuzz_vs_oracle[1]", "test_gpu_fpa_intb_matches_oracle[x]",
                   "test_a", "test_b[1]", "test_c"]


def test_heavy_tests_are_named_once():
    assert len(set(HEAVY_TESTS)) == len(HEAVY_TESTS)


def test_every_heavy_test_exists():
    here = pathlib.Path(__file__).parent
    defined = {m for f in here.glob("test_*.py") for m in re.findall(r"^def (test_\w+)", f.read_text(), re.M)}
    missing = sorted(set(HEAVY_TESTS) - defined)
    assert not missing, f"HEAVY_TESTS names no test: {missing}"


def test_exhaustive_cases_skip_unless_asked(tmp_path):
    (tmp_path / "conftest.py").write_text((pathlib.Path(__file__).parent / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\nfrom conftest import exhaustive\n"
        "@pytest.mark.parametrize('v', [1, pytest.param(2, marks=exhaustive)])\ndef test_v(v):\n    assert v\n")
    env = {"NUMBA_ENABLE_CUDASIM": "1", "NUMBA_NBITS_TEST_WORKERS": "0"}

    def run(extra):
        import os

        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
                           capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **env, **extra})
        return r.stdout

    out = run({"NUMBA_NBITS_TEST_EXHAUSTIVE": "0"})
    assert "1 passed, 1 skipped" in out and "NUMBA_NBITS_TEST_EXHAUSTIVE=1" in out
    assert "2 passed" in run({"NUMBA_NBITS_TEST_EXHAUSTIVE": "1"})
