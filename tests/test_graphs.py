"""CUDA graphs, streams and threads: a captured 4-layer decode step replays to the eager results; a call
that would compile or allocate during capture raises CaptureError; torch.cuda.graph captures our ops;
concurrent calls from several threads on their own streams are correct."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import SIMULATED, requires_gpu

import numba_nbits as nb
from numba_nbits.reference import TOLERANCES, matmul_nbits_ref, relative_error

D = 64 if SIMULATED else 1024
REPLAYS = 3 if SIMULATED else 1000


def _layer(rng, N, K, bits, block, zp=None, bias=False, dtype=np.float16):
    W = rng.normal(0, 1 / np.sqrt(K), (N, K)).astype(np.float32)
    B, s, zpp = nb.quantize(W, bits=bits, block_size=block, symmetric=zp is None)
    s = s.astype(dtype)
    if zp == "typed":
        zpp = rng.integers(0, 2**bits, s.shape).astype(dtype)
    b = rng.uniform(-1, 1, N).astype(dtype) if bias else None
    return nb.MatMulNBits(B, s, zpp, None, b, K=K, N=N, bits=bits, block_size=block), (B, s, zpp, b)


def _decode_layers(rng):
    return [_layer(rng, D, D, 4, 16, bias=True),          # gemv_w4 + bias-add (block 16: not the router's)
            _layer(rng, D, D, 8, 64, zp="packed"),         # gemv_w8
            _layer(rng, D, D, 4, 64, zp="typed"),          # dequant + cuBLAS (typed zp)
            _layer(rng, D, D, 2, 64, bias=True),           # gemv_w2 + bias-add
            _layer(rng, 32, D, 4, 32, bias=True)]          # router_gemv, bias fused (a small-N gate)


def test_captured_decode_step_replays_to_eager(rng):
    from numba import cuda

    layers = _decode_layers(rng)
    x = cuda.to_device(rng.normal(0, 1, (1, D)).astype(np.float16))
    bufs = [cuda.device_array((1, op.N), np.float16) for op, _ in layers]

    def step(stream):
        h = x
        for (op, _), buf in zip(layers, bufs):
            op(h, out=buf, stream=stream)
            h = buf

    step(0)  # eager warm-up: builds every plan outside capture
    cuda.synchronize()
    eager = [b.copy_to_host() for b in bufs]
    routes = {op.route(1) for op, _ in layers}
    assert {"gemv_w4", "gemv_w8", "dequant_cublas", "gemv_w2", "router_gemv"} <= routes
    for b in bufs:
        b.copy_to_device(np.full(b.shape, np.nan, np.float16))
    graph = nb.capture(step)
    for _ in range(REPLAYS):
        graph.replay()
    graph.synchronize()
    for b, e in zip(bufs, eager):
        np.testing.assert_array_equal(b.copy_to_host(), e)
    # and the eager chain itself is right
    h = x.copy_to_host()
    for (op, (B, s, zp, b)), e in zip(layers, eager):
        ref = matmul_nbits_ref(h, B, s, zp, None, b, K=D, N=op.N, bits=op.bits, block_size=op.block_size)
        assert relative_error(e, ref) <= TOLERANCES["float16"]
        h = e
    graph.close()


@requires_gpu
def test_capture_without_warmup_raises(rng):
    from numba import cuda

    op, _ = _layer(rng, D, D, 4, 32)
    x = cuda.to_device(np.ones((3, D), np.float16))
    y = cuda.device_array((3, D), np.float16)
    with pytest.raises(nb.CaptureError, match="run a warmup inference outside capture first"):
        nb.capture(lambda s: op(x, out=y, stream=s))
    op.warmup(3)
    g = nb.capture(lambda s: op(x, out=y, stream=s))
    g.replay(sync=True)
    with pytest.raises(nb.CaptureError, match="out= buffer"):
        nb.capture(lambda s: op(x, stream=s))


@requires_gpu
def test_torch_cuda_graph_captures_ops(rng):
    torch = pytest.importorskip("torch")
    op, (B, s, zp, b) = _layer(rng, D, D, 4, 32, bias=True)
    x = torch.randn(1, D, dtype=torch.float16, device="cuda")
    y = torch.empty(1, D, dtype=torch.float16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(x, out=y)  # warm-up on torch's current stream
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        op(x, out=y)  # torch's current stream is the capture stream
    x.copy_(torch.randn(1, D, dtype=torch.float16, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    ref = matmul_nbits_ref(x.cpu().numpy(), B, s, zp, None, b, K=D, N=D, bits=4, block_size=32)
    assert relative_error(y.cpu().numpy(), ref) <= TOLERANCES["float16"]


def test_threads_on_their_own_streams(rng):
    from numba import cuda

    op, (B, s, zp, b) = _layer(rng, D, D, 4, 32, bias=True)
    n_threads = 2 if SIMULATED else 8
    inputs = [rng.normal(0, 1, (2, D)).astype(np.float16) for _ in range(n_threads)]
    op.warmup(2)
    results, errors = [None] * n_threads, []

    def work(i):
        try:
            stream = cuda.stream()
            x = cuda.to_device(inputs[i], stream=stream)
            y = cuda.device_array((2, D), np.float16, stream=stream)
            for _ in range(1 if SIMULATED else 50):
                op(x, out=y, stream=stream)
            stream.synchronize()
            results[i] = y.copy_to_host()
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for x, y in zip(inputs, results):
        ref = matmul_nbits_ref(x, B, s, zp, None, b, K=D, N=D, bits=4, block_size=32)
        assert relative_error(y, ref) <= TOLERANCES["float16"]
