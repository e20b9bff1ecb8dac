"""The float64 NumPy oracle for ``com.microsoft::MatMulNBits`` (the one every test compares to).

Pure NumPy (+ ``ml_dtypes`` for bfloat16 inputs). Importing does no I/O and reads no env var.

Semantics (spec §1-3)::

    w[n, k] = (q[n, k] - zp[n, g]) * scale[n, g],   g = g_idx[k] if g_idx is given else k // block_size
    Y       = A @ w.T (+ bias),                     Y.shape = A.shape[:-1] + (N,)

Everything is computed in float64 from the *stored* values (fp16/bf16 scales, zero points, A and
bias are widened exactly), so the oracle has no rounding of its own beyond float64 summation.
The decoding of B and zero points here (shifts and masks) is written independently of ``formats.py``
so that the two cross-check each other (only the default zero point, a constant of the bit width,
is ``QuantFormat.default_zero_point``); ``naive_matmul_nbits`` is a third, loop-level implementation.

Tolerances (``TOLERANCES``), relative Frobenius error vs this oracle
--------------------------------------------------------------------
A kernel dequantizes ``(q - zp) * s`` (one rounding to fp32, then possibly one to T) and
accumulates ``K`` products in fp32, then rounds Y to T once.

* float32: per-product relative error ~ u32 = 6e-8, accumulation error grows like
  ``sqrt(K) * u32`` for random-sign data in the Frobenius norm (pairwise / blocked sums do better
  still); for K up to ~16k that is < 1e-5 with margin.
* float16: the output rounding alone is u16 = 4.9e-4 relative (half an ulp, ~2.9e-4 on average);
  dequantized weights rounded to fp16 add another ~u16 per term, which averages out across K, and
  fp16 A is exact in the oracle. 2e-3 is ~4x the worst single rounding.
* bfloat16: u_bf16 = 3.9e-3 for the output rounding, plus bf16 dequantized weights (tensor-core
  paths); 1e-2 is ~2.5x a single rounding.

Relative *Frobenius* error is used (not elementwise) so that entries of Y that cancel to ~0 do
not produce spurious failures; ORT's own elementwise ``atol + rtol*|e|`` rule (spec §10.1) is much
looser than these numbers.

When *every* entry cancels (a problem with one or a few outputs, e.g. M = N = 1, whose sum of
products is hundreds of times smaller than the products), ``||Y||`` no longer measures the size of
the rounding errors: those scale with the products, not with their sum. ``rounding_scale`` gives
that size — ``sqrt(A**2 @ (W**2).T + bias**2)`` per output, the root-sum-square of the terms the
kernel adds, which is what random-sign rounding errors of the terms (weights rounded to T, fp32
accumulation) add up to — and ``relative_error(actual, expected, scale=...)`` divides by
``max(||expected||, ||scale||)``. For well-conditioned data (random signs, many outputs) the two
norms are about equal, so the tolerances above are unchanged; for a cancelling output the
denominator stays the size of the rounding errors rather than of the (tiny) result.
(Found by the GPU fuzz: 8-bit, K = 40, N = 1, M = 1, where ``|Y| = 0.005`` and ``sum |a w| = 3.5``:
fp16 relative error 1.2e-2 from the fp16-rounded weights, 7.3e-5 relative to the rounding scale.)
"""

from __future__ import annotations

import numpy as np

from .formats import quant_format

__all__ = [
    "TOLERANCES",
    "dequantize_ref",
    "matmul_nbits_ref",
    "naive_matmul_nbits",
    "relative_error",
    "rounding_scale",
]

#: Relative Frobenius error allowed against the oracle, by output dtype (see module docstring).
TOLERANCES = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}


def _f64(x) -> np.ndarray:
    """Widen any float (incl. ml_dtypes bfloat16) or int array to float64 exactly."""
    arr = np.asarray(x)
    if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16":
        return arr.astype(np.float32).astype(np.float64)
    return arr.astype(np.float64)


def _check_common(K, N, bits, block_size):
    for name, v in (("K", K), ("N", N), ("bits", bits), ("block_size", block_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if bits not in (2, 4, 8):
        raise ValueError(f"bits should be 2, 4 or 8, got {bits}")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of 2, and >= 16. Got {block_size}")
    if K < 0 or N < 0:
        raise ValueError(f"K and N must be >= 0, got K={K}, N={N}")
    return int(K), int(N), int(bits), int(block_size)


def _decode_codes(B, K, N, bits, block_size) -> np.ndarray:
    """B uint8 [N, k_blocks, blob] -> int64 codes (N, K_padded); independent of formats.py."""
    arr = np.asarray(B)
    kb = -(-K // block_size)
    blob = block_size * bits // 8
    if arr.dtype != np.uint8:
        raise TypeError(f"B must be uint8, got dtype {arr.dtype}")
    if arr.shape != (N, kb, blob):
        raise ValueError(f"B must have shape (N, k_blocks, blob_size) = {(N, kb, blob)}, got {arr.shape}")
    per = 8 // bits
    flat = arr.reshape(N, kb * blob).astype(np.int64)
    shifts = bits * np.arange(per)
    codes = (flat[:, :, None] >> shifts[None, None, :]) & ((1 << bits) - 1)
    return codes.reshape(N, kb * blob * per)


def _decode_zero_points(zero_points, N, kb, bits) -> np.ndarray:
    if zero_points is None:
        return np.full((N, kb), float(quant_format(bits).default_zero_point))
    zp = np.asarray(zero_points)
    if zp.dtype == np.uint8:
        zb = (kb * bits + 7) // 8
        if zp.shape not in ((N, zb), (N * zb,)):
            raise ValueError(f"uint8 zero_points must have shape {(N, zb)} or {(N * zb,)}, got {zp.shape}")
        per = 8 // bits
        flat = zp.reshape(N, zb).astype(np.int64)
        vals = (flat[:, :, None] >> (bits * np.arange(per))[None, None, :]) & ((1 << bits) - 1)
        return vals.reshape(N, zb * per)[:, :kb].astype(np.float64)
    if zp.shape not in ((N, kb), (N * kb,)):
        raise ValueError(f"typed zero_points must have shape {(N, kb)} or {(N * kb,)}, got {zp.shape}")
    return _f64(zp).reshape(N, kb)


def _groups(g_idx, K, kb, block_size) -> np.ndarray:
    if g_idx is None:
        return np.arange(K) // block_size
    g = np.asarray(g_idx)
    if g.ndim != 1 or g.shape[0] not in (K, kb * block_size):
        raise ValueError(f"g_idx must have K={K} or K_padded={kb * block_size} entries, got shape {g.shape}")
    g = g[:K].astype(np.int64)
    if g.size and (g.min() < 0 or g.max() >= kb):
        raise ValueError(f"g_idx values must be in [0, {kb}), got range [{g.min()}, {g.max()}]")
    return g


def dequantize_ref(
    B, scales, zero_points=None, g_idx=None, *, K: int, N: int, bits: int, block_size: int
) -> np.ndarray:
    """float64 ``(N, K)`` weight: ``(q[n,k] - zp[n,g]) * scale[n,g]`` (see module docstring)."""
    K, N, bits, block_size = _check_common(K, N, bits, block_size)
    kb = -(-K // block_size)
    q = _decode_codes(B, K, N, bits, block_size)[:, :K].astype(np.float64)
    s = np.asarray(scales)
    if s.shape not in ((N, kb), (N * kb,)):
        raise ValueError(f"scales must have shape {(N, kb)} or {(N * kb,)}, got {s.shape}")
    s = _f64(s).reshape(N, kb)
    zp = _decode_zero_points(zero_points, N, kb, bits)
    g = _groups(g_idx, K, kb, block_size)
    return (q - zp[:, g]) * s[:, g]


def _check_A(A, K) -> np.ndarray:
    a = np.asarray(A)
    if a.ndim < 2:
        raise ValueError(f"A must have rank >= 2 ([..., M, K]), got shape {a.shape}")
    if a.shape[-1] != K:
        raise ValueError(f"A's last dim must equal K={K}, got shape {a.shape}")
    return _f64(a)


def _check_bias(bias, N):
    if bias is None:
        return None
    b = np.asarray(bias)
    if b.shape != (N,):
        raise ValueError(f"bias must have shape ({N},), got {b.shape}")
    return _f64(b)


def _operands(A, B, scales, zero_points, g_idx, bias, K, N, bits, block_size):
    """Checked float64 operands of one problem: (A as M x K, W as N x K, bias or None, A's leading shape)."""
    K, N, bits, block_size = _check_common(K, N, bits, block_size)
    a = _check_A(A, K)
    b = _check_bias(bias, N)
    w = dequantize_ref(B, scales, zero_points, g_idx, K=K, N=N, bits=bits, block_size=block_size)
    return a.reshape(-1, K), w, b, a.shape[:-1]


def matmul_nbits_ref(
    A,
    B,
    scales,
    zero_points=None,
    g_idx=None,
    bias=None,
    *,
    K: int,
    N: int,
    bits: int,
    block_size: int,
    return_scale: bool = False,
):
    """float64 ``Y = A @ W.T (+ bias)`` of shape ``A.shape[:-1] + (N,)``; A must have rank >= 2.

    With ``return_scale=True``: ``(Y, rounding_scale(...))`` from one dequantization of B."""
    a, w, b, lead = _operands(A, B, scales, zero_points, g_idx, bias, K, N, bits, block_size)
    y = a @ w.T
    if b is not None:
        y = y + b
    y = y.reshape(lead + (N,))
    return (y, _rounding_scale_of(a, w, b, lead, N)) if return_scale else y


def naive_matmul_nbits(
    A,
    B,
    scales,
    zero_points=None,
    g_idx=None,
    bias=None,
    *,
    K: int,
    N: int,
    bits: int,
    block_size: int,
) -> np.ndarray:
    """Deliberately naive pure-Python loops (tiny shapes only) to cross-check the oracle.

    Re-decodes every byte itself, one element at a time, from the flat byte arrays.
    """
    a = np.asarray(A)
    if a.ndim < 2:
        raise ValueError(f"A must have rank >= 2, got shape {a.shape}")
    lead = a.shape[:-1]
    rows = [[float(v) for v in r] for r in _f64(a).reshape(-1, K)]
    kb = (K + block_size - 1) // block_size
    blob = block_size * bits // 8
    b_bytes = [int(x) for x in np.asarray(B).reshape(-1)]
    sc = [float(x) for x in _f64(scales).reshape(-1)]
    mask = (1 << bits) - 1
    per = 8 // bits

    def code(n, k):
        blk, j = divmod(k, block_size)
        byte = b_bytes[n * kb * blob + blk * blob + j // per]
        return (byte >> (bits * (j % per))) & mask

    zpa = None if zero_points is None else np.asarray(zero_points)
    if zpa is not None and zpa.dtype == np.uint8:
        zp_bytes = [int(x) for x in zpa.reshape(-1)]
        zb = (kb * bits + 7) // 8

        def zp_of(n, g):
            return float((zp_bytes[n * zb + g // per] >> (bits * (g % per))) & mask)

    elif zpa is not None:
        zp_vals = [float(x) for x in _f64(zpa).reshape(-1)]

        def zp_of(n, g):
            return zp_vals[n * kb + g]

    else:

        def zp_of(n, g):
            return float(quant_format(bits).default_zero_point)

    gl = None if g_idx is None else [int(x) for x in np.asarray(g_idx).reshape(-1)]
    bl = None if bias is None else [float(x) for x in _f64(bias).reshape(-1)]
    out = []
    for r in rows:
        yrow = []
        for n in range(N):
            acc = 0.0
            for k in range(K):
                g = gl[k] if gl is not None else k // block_size
                acc += r[k] * ((code(n, k) - zp_of(n, g)) * sc[n * kb + g])
            if bl is not None:
                acc += bl[n]
            yrow.append(acc)
        out.append(yrow)
    return np.array(out, dtype=np.float64).reshape(lead + (N,))


def rounding_scale(
    A,
    B,
    scales,
    zero_points=None,
    g_idx=None,
    bias=None,
    *,
    K: int,
    N: int,
    bits: int,
    block_size: int,
) -> np.ndarray:
    """float64 ``sqrt(A**2 @ (W**2).T + bias**2)``, shaped like Y: the root-sum-square of the terms
    each output sums, the natural size of its rounding errors (see the module docstring)."""
    return _rounding_scale_of(*_operands(A, B, scales, zero_points, g_idx, bias, K, N, bits, block_size), N)


def _rounding_scale_of(a, w, b, lead, N):
    with np.errstate(over="ignore", invalid="ignore"):
        s2 = np.square(a) @ np.square(w).T
        if b is not None:
            s2 = s2 + np.square(b)
    return np.sqrt(s2).reshape(lead + (N,))


def relative_error(actual, expected, scale=None) -> float:
    """``||a - e|| / max(||e||, ||scale||, tiny)`` in float64 (Frobenius norm).

    ``scale`` (optional, shaped like ``expected``): ``rounding_scale(...)`` of the problem, so that
    outputs whose terms cancel are judged against the size of their rounding errors.

    Returns NaN if ``actual`` is NaN where ``expected`` is not (and inf for shape mismatch is
    not attempted: shapes must match, else ValueError).
    """
    a = _f64(actual)
    e = _f64(expected)
    if a.shape != e.shape:
        raise ValueError(f"actual and expected must have the same shape, got {a.shape} and {e.shape}")
    if np.any(np.isnan(a) & ~np.isnan(e)):
        return float("nan")
    both_nan = np.isnan(a) & np.isnan(e)
    a = np.where(both_nan, 0.0, a)
    e = np.where(both_nan, 0.0, e)
    tiny = np.finfo(np.float64).tiny
    with np.errstate(invalid="ignore", over="ignore"):
        denom = max(np.linalg.norm(e.ravel()), tiny)
        if scale is not None:
            sc = _f64(scale)
            if sc.shape != e.shape:
                raise ValueError(f"scale must have the shape of expected {e.shape}, got {sc.shape}")
            denom = max(denom, float(np.linalg.norm(np.where(np.isfinite(sc), sc, 0.0).ravel())))
        return float(np.linalg.norm((a - e).ravel()) / denom)
