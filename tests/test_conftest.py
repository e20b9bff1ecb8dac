"""The test harness's own knob: ``NUMBA_NBITS_TEST_SKIP_CUBLAS`` (used by gpu_sanitize.sh for initcheck)."""
import pytest

from conftest import refuse_cublas_if_asked
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
