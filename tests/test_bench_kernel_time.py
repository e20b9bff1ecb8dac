"""benchmarks/kernel_time.py: ncu's CSV read into kernel times (every unit ncu prints), and the default call it
profiles runs and matches the oracle (on the simulator here)."""
from __future__ import annotations

import pytest

_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
         '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _row(i, name, unit, value, metric="gpu__time_duration.sum"):
    return (f'"{i}","1","python3","h","{name}","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


def test_parse_reads_every_unit_and_only_the_duration_metric():
    from benchmarks import kernel_time as KT

    text = "\n".join(["==PROF== Connected to process 1", _HEAD, _row(0, "gemv(a)", "ns", "6,560"),
                      _row(1, "gemv(a)", "usecond", "6.2"), _row(2, "bias_add(b)", "nsecond", "2464"),
                      _row(3, "gemv(a)", "ms", "0.0071"), _row(4, "gemv(a)", "ns", "1", metric="sm__cycles.sum")])
    got = KT.parse(text)
    assert got.keys() == {"gemv(a)", "bias_add(b)"}
    assert got["gemv(a)"] == pytest.approx([6.56, 6.2, 7.1]) and got["bias_add(b)"] == pytest.approx([2.464])
    with pytest.raises(ValueError, match="unknown unit 'furlong'"):
        KT.parse("\n".join([_HEAD, _row(0, "k", "furlong", "1")]))


def test_the_profiled_default_call_matches_the_oracle(capsys):
    from benchmarks import kernel_time as KT

    assert KT.main(["--shape", "32x256", "--block", "32", "--bias", "--calls", "2"]) == 0
    assert "route router_gemv (bias fused)" in capsys.readouterr().err  # a small-N gate
    assert KT.main(["--shape", "32x256", "--block", "128", "--bias", "--calls", "2"]) == 0
    assert "route gemv_w4 (bias add)" in capsys.readouterr().err


def test_cupti_mode_says_why_it_cannot_run_here(capsys, monkeypatch):
    from benchmarks import kernel_time as KT
    from numba_nbits.perf import ort_peer

    monkeypatch.setattr(ort_peer, "cupti_available", lambda: "torch's CUDA profiler (CUPTI) not available")
    assert KT.main(["--cupti", "--shape", "32x256"]) == 2
    assert "CUPTI" in capsys.readouterr().err
