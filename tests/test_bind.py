"""``op.bind(A, out, stream=None)``: the operator on fixed buffers.

The bound callable gives what ``op(A, out=out)`` gives, sees A's current contents at each call,
returns ``out`` itself, refuses bad A / out at bind time with the errors of ``op(A, out=)``, and is
refused during CUDA-graph capture when no plan for M was built (``CaptureError``) but works there
after a warmup.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import SIMULATED, to_dev

import numba_nbits as nb
from numba_nbits import op as op_module
from numba_nbits.formats import quantize
from numba_nbits.launch import CaptureError

K, N, BS = 64, 16, 32


def _op(rng, bias=False, config=None):
    W = rng.standard_normal((N, K)).astype(np.float32)
    B, sc, _ = quantize(W, bits=4, block_size=BS, symmetric=True)
    b = rng.standard_normal(N).astype(np.float16) if bias else None
    return nb.MatMulNBits(B, sc.astype(np.float16), None, None, b, K=K, N=N, bits=4, block_size=BS, config=config)


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def _a(rng, *lead):
    return rng.standard_normal(lead + (K,)).astype(np.float16)


@pytest.mark.parametrize("config", [None, {"numba_nbits.force_route": "dequant_cublas"}], ids=["gemv", "dequant"])
@pytest.mark.parametrize("bias", [False, True])
def test_bound_equals_eager_and_sees_new_contents(rng, config, bias):
    from numba import cuda

    op = _op(rng, bias, config)
    A = to_dev(_a(rng, 3))
    O, ref = cuda.device_array((3, N), np.float16), cuda.device_array((3, N), np.float16)
    f = op.bind(A, O)
    assert f() is O
    op(A, out=ref)
    np.testing.assert_array_equal(_host(O), _host(ref))
    for _ in range(2):
        A.copy_to_device(_a(rng, 3))  # new contents, same buffer: the next call reads them
        f()
        op(A, out=ref)
        np.testing.assert_array_equal(_host(O), _host(ref))
    assert (f._graph is not None) == (not SIMULATED)  # on a GPU: from the second call, one CUDA graph
    assert not np.array_equal(_host(O), np.zeros((3, N), np.float16))


def test_bound_rank3_and_empty(rng):
    from numba import cuda

    op = _op(rng)
    A = to_dev(_a(rng, 2, 3))
    O = cuda.device_array((2, 3, N), np.float16)
    assert op.bind(A, O)() is O
    np.testing.assert_array_equal(_host(O), _host(op(A)))
    E, EO = to_dev(np.zeros((0, K), np.float16)), cuda.device_array((0, N), np.float16)
    assert op.bind(E, EO)() is EO


@pytest.mark.parametrize("make_a, make_out, match", [
    (lambda r: _a(r, 2).astype(np.float32), lambda: np.zeros((2, N), np.float16), "float32"),
    (lambda r: r.standard_normal((2, K + 1)).astype(np.float16), lambda: np.zeros((2, N), np.float16), "65"),
    (lambda r: _a(r, 2), lambda: np.zeros((3, N), np.float16), r"\(2, 16\)"),
    (lambda r: _a(r, 2), lambda: np.zeros((2, N), np.float32), "float32"),
], ids=["A_dtype", "A_K", "out_shape", "out_dtype"])
def test_bind_refuses_what_the_call_refuses(rng, make_a, make_out, match):
    op = _op(rng)
    A, O = to_dev(make_a(rng)), to_dev(make_out())
    with pytest.raises(Exception, match=match) as eager:
        op(A, out=O)
    with pytest.raises(type(eager.value)) as bound:
        op.bind(A, O)
    assert str(bound.value) == str(eager.value)


def test_bind_refuses_overlap_and_a_missing_out(rng):
    from numba import cuda

    op = _op(rng)
    buf = cuda.device_array((2 * K,), np.float16)
    A, O = buf[:K].reshape(1, K), buf[:N].reshape(1, N)
    with pytest.raises(ValueError, match="out must not overlap A"):
        op.bind(A, O)
    with pytest.raises(TypeError, match="bind: out must be a device array"):
        op.bind(to_dev(_a(rng, 1)), None)


def test_bind_refuses_a_numpy_A_on_a_gpu(rng):
    op = _op(rng)
    op._simulated = False  # what a GPU process sees; the check comes before any device work
    with pytest.raises(ValueError, match="bind: A must be a device array"):
        op.bind(_a(rng, 1), np.zeros((1, N), np.float16))


def test_bind_during_capture_needs_a_warmup(rng, monkeypatch):
    from numba import cuda

    op = _op(rng)
    A, O = to_dev(_a(rng, 2)), cuda.device_array((2, N), np.float16)
    monkeypatch.setattr(op_module, "is_capturing", lambda s: True)  # every stream "is capturing"
    with pytest.raises(CaptureError, match="no plan for M=2.*run a warmup inference outside capture first"):
        op.bind(A, O)
    monkeypatch.undo()
    op.warmup(2)
    monkeypatch.setattr(op_module, "is_capturing", lambda s: True)
    f = op.bind(A, O)  # the plan exists: nothing to build
    assert f() is O
    monkeypatch.undo()
    np.testing.assert_array_equal(_host(O), _host(op(A)))


@pytest.mark.skipif(not SIMULATED, reason="NumPy in/out is a simulator-only form")
def test_bind_numpy_under_the_simulator(rng):
    op = _op(rng)
    A, O = _a(rng, 2), np.zeros((2, N), np.float16)
    f = op.bind(A, O)
    assert f() is O
    np.testing.assert_array_equal(O, op(A))
    A[...] = _a(rng, 2)
    f()
    np.testing.assert_array_equal(O, op(A))


def test_torch_record_and_bind_follow_the_current_stream(rng):
    torch = pytest.importorskip("torch")
    if SIMULATED or not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    op = _op(rng)
    A = torch.from_numpy(_a(rng, 2)).cuda()
    O, O2, ref = (torch.empty((2, N), dtype=torch.float16, device="cuda") for _ in range(3))
    op(A, out=O)
    assert op(A, out=O2) is O2  # the steady-state record
    f = op.bind(A, ref)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # both read torch's current stream per call
        A2 = torch.from_numpy(_a(rng, 2)).cuda()
        A.copy_(A2)
        op(A, out=O)
        f()
    s.synchronize()
    np.testing.assert_array_equal(O.cpu().numpy(), ref.cpu().numpy())
    np.testing.assert_array_equal(O.cpu().numpy(), op(A).cpu().numpy())
    with pytest.raises(Exception, match="float32"):  # same shapes, other dtype: the general path's error
        op(A.float(), out=O)


@pytest.mark.skipif(SIMULATED, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("config", [None, {"numba_nbits.force_route": "dequant_cublas"}], ids=["gemv", "dequant"])
def test_repeated_eager_calls_launch_a_graph_that_sees_new_contents(rng, config):
    """The second ``op(A, out=O)`` on the same buffers keeps the launches as a graph; later calls launch it and
    read A's contents of that moment; another out buffer is served too."""
    from numba import cuda

    op = _op(rng, True, config)
    A = to_dev(_a(rng, 3))
    O, O2 = cuda.device_array((3, N), np.float16), cuda.device_array((3, N), np.float16)
    for _ in range(3):
        op(A, out=O)
    rec, = [r for r in op._calls.values() if r is not None]
    assert len(rec.graphs) == 1
    for _ in range(3):
        A.copy_to_device(_a(rng, 3))
        assert op(A, out=O) is O
        np.testing.assert_array_equal(_host(O), _host(op(A)))
        op(A, out=O2)
        np.testing.assert_array_equal(_host(O2), _host(O))
    assert len(rec.graphs) == 2


@pytest.mark.skipif(SIMULATED, reason="CUDA graphs need a GPU")
def test_bound_and_eager_calls_inside_a_capture_are_recorded_by_it(rng):
    """Into a stream that is capturing, the bound call and the repeated eager call issue their launches (they
    do not launch their own graphs), so the caller's graph replays them."""
    from numba import cuda

    from numba_nbits.graphs import new_stream

    op = _op(rng)
    A = to_dev(_a(rng, 2))
    O, O2 = cuda.device_array((2, N), np.float16), cuda.device_array((2, N), np.float16)
    s = int(new_stream())
    f = op.bind(A, O, stream=s)
    f()
    f()
    assert f._graph is not None
    op(A, out=O2, stream=s)
    op(A, out=O2, stream=s)  # the eager record now has its graph for (A, O2)
    g = nb.capture(lambda st: (f(), op(A, out=O2, stream=st)), stream=s)
    O.copy_to_device(np.zeros((2, N), np.float16))
    O2.copy_to_device(np.zeros((2, N), np.float16))
    A.copy_to_device(_a(rng, 2))
    g.replay(sync=True)
    want = _host(op(A))
    np.testing.assert_array_equal(_host(O), want)
    np.testing.assert_array_equal(_host(O2), want)
    g.close()
