"""The test harness's own knob: ``NUMBA_NBITS_TEST_SKIP_CUBLAS`` (used by gpu_sanitize.sh for initcheck)."""
import pytest

from conftest import default_workers, refuse_cublas_if_asked
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
