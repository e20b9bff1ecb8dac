"""Device check: ORT's CUDA EP on two problems, both modes, kernel time by CUPTI (ort_peer) before the big run."""
import numpy as np
import torch  # noqa: F401  (CUDA libraries loaded as in the perf run)

from numba_nbits.perf import ort_peer
from numba_nbits.perf.harness import make_backend
from numba_nbits.perf.subjects import Activations, random_weights, random_activation
from numba_nbits.reference import matmul_nbits_ref, relative_error

b = make_backend()
print("ort", ort_peer.ort_cuda_available(), "cupti", ort_peer.cupti_available())
for (N, K, bs, M, bias) in [(4096, 4096, 32, 1, False), (28672, 8192, 32, 1, False), (32, 2880, 32, 1, True)]:
    rng = np.random.default_rng(0)
    w = random_weights(N, K, 4, bs, "float16", "none", bias, rng)
    acts = Activations(b, M, w, 1, rng)
    notes = []
    for s in ort_peer.ort_subjects(b, M, w, acts, notes, flush_bytes=2 * b.l2_bytes):
        A = random_activation(M, K, "float16", rng)
        got = s.run_check(b, A, list(range(M)))
        ref = matmul_nbits_ref(A, w.B, w.scales, None, None, w.bias, K=K, N=N, bits=4, block_size=bs)
        t = s.time(b)
        print(f"{N}x{K} g{bs} M={M} {s.route}: {t['us_p50']:.2f} us (p20 {t['us_p20']:.2f}, p80 {t['us_p80']:.2f}),"
              f" rel err {relative_error(got.astype(np.float64), ref):.2e}")
    print(notes)
