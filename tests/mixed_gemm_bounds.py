"""Bounds checker for the generated mixed-GEMM source (tests/test_guarded_loads.py).

Runs ``mixed_gemm.source.gen_source`` thread by thread in plain Python, every global array exactly sized
and rejecting any index outside it (negative too), with cheap stand-ins for the tensor-core and
conversion intrinsics (values do not matter, only indices). Much faster than the simulator, so
whole grids of GPU-sized problems can be walked. Shared memory is per block; barriers are no-ops,
which is sound for indices because no index depends on shared-memory contents except the split-K
arrival counter, and threads run in order (tid 0 first), blocks of a tile in split order.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from numba_nbits.kernels import mixed_gemm as X
from numba_nbits.kernels.mixed_gemm.layout import _chunks
from numba_nbits.kernels.mixed_gemm.source import gen_source


class OutOfBounds(IndexError):
    pass


class _Arr:
    def __init__(self, name, n, dtype):
        self.name, self.a = name, np.zeros(max(n, 1), dtype)

    def _chk(self, i):
        i = int(i)
        if i < 0 or i >= len(self.a):
            raise OutOfBounds(f"{self.name}[{i}] of {len(self.a)}")
        return i

    def __getitem__(self, i):
        return self.a[self._chk(i)]

    def __setitem__(self, i, v):
        self.a[self._chk(i)] = v

    def __len__(self):
        return len(self.a)


class _D3:
    x = y = z = 0


class _Cuda:
    def __init__(self):
        self.threadIdx, self.blockIdx, self.gridDim = _D3(), _D3(), _D3()
        self.shared = self.atomic = self
        self.sh = {}

    def array(self, shape, dtype):
        key = (shape, np.dtype(dtype).str)
        if key not in self.sh:
            self.sh[key] = _Arr(f"shared{key}", shape, dtype)
        return self.sh[key]

    def syncthreads(self):
        pass

    def threadfence(self):
        pass

    def add(self, arr, i, v):
        old = arr[i]
        arr[i] = old + v
        return old


def _ldg_v4(arr, i):
    j = 4 * int(i)
    if j < 0 or j + 4 > len(arr):
        raise OutOfBounds(f"ldg_v4({arr.name}, {int(i)}): words [{j}, {j + 4}) of {len(arr)}")
    return tuple(np.uint32(arr.a[j + k]) for k in range(4))


def check(M, N, K, bs, bits, tac, arch, zp="packed", bias=True, act="float16"):
    """Walk the whole grid of one launch; return None, or a message naming the first out-of-bounds access."""
    n_full, half = _chunks(K)
    kb = K // bs
    gx, gy = -(-N // tac.bn), -(-M // tac.bm)
    splits, sps = X.split_count(tac, gx * gy, n_full + int(half), bs)
    if tac.splitk != 1 and splits == 1:
        tac = replace(tac, splitk=1)
    cu = _Cuda()
    ns = {"cuda": cu, "np": np, "ldg_v4": _ldg_v4,
          "ld": lambda a, i: np.float32(a[i]), "st_": lambda a, i, v: a.__setitem__(i, v),
          "mma": lambda a0, a1, a2, a3, b0, b1, c0, c1, c2, c3: (c0, c1, c2, c3),
          "fma2": lambda a, b, c: np.uint32(0), "pack2": lambda a, b: np.uint32(0),
          "u32_as_f32": lambda x: np.float32(0), "ldcg": lambda a, i: np.float32(a[i]),
          "threadfence": lambda: None}
    exec(compile(gen_source(act, tac, bs, zp, bias, arch, bits), "<mixed_gemm>", "exec"), ns)
    fn = ns["mixed_gemm"]
    split = tac.splitk != 1
    args = (_Arr("a32", M * K // 2, np.uint32), _Arr("bq", N * K * bits // 32, np.uint32),
            _Arr("scales", N * kb, np.float16), _Arr("zpk", N * kb if zp == "packed" else 1, np.uint8),
            _Arr("zpt", N * kb if zp == "typed" else 1, np.float16), _Arr("bias", N if bias else 1, np.float16),
            _Arr("out", M * N, np.float32), M, K, N, kb, n_full, int(half),
            _Arr("ws", splits * M * N if split else 1, np.float32),  # a slice per split, as the plan's
            _Arr("cnt", gx * gy if split else 1, np.int32), sps)
    cu.gridDim.x, cu.gridDim.y, cu.gridDim.z = gx, gy, splits
    for bz in range(splits):
        for by in range(gy):
            for bx in range(gx):
                cu.sh = {}
                cu.blockIdx.x, cu.blockIdx.y, cu.blockIdx.z = bx, by, bz
                for tid in range(tac.threads):
                    cu.threadIdx.x = tid
                    try:
                        fn(*args)
                    except OutOfBounds as e:
                        return (f"M={M} N={N} K={K} block={bs} bits={bits} {tac.name} arch={arch} zp={zp}: "
                                f"block ({bx},{by},{bz}) thread {tid}: {e}")
    return None
