"""Host-side weight formats of ``com.microsoft::MatMulNBits`` (bits 2, 4, 8), byte-exact.

Pure NumPy (plus ``ml_dtypes`` for bfloat16). Importing this module does no I/O and reads no
environment variable.

Layouts (spec §2)
-----------------
* Logical weight ``W[n, k]`` (``Y = A @ W.T``), quantized block-wise along K.
  ``k_blocks = ceil(K / block_size)``, ``K_padded = k_blocks * block_size``.
* ``B``: uint8 ``[N, k_blocks, blob_size]``, ``blob_size = block_size * bits / 8``. Codes are
  packed **low bits first** along K: element ``j`` of a block lives in byte ``j // (8/bits)`` at
  shift ``bits * (j % (8/bits))`` (4-bit: low nibble = even k).
* ``scales``: ``(N, k_blocks)`` (or legacy flat ``(N*k_blocks,)``), dtype of A.
* ``zero_points``: either packed uint8 ``(N, zp_blob)`` with ``zp_blob = ceil(k_blocks*bits/8)``
  (same low-bits-first scheme along the block axis, each row padded to whole bytes) or flat
  ``(N*zp_blob,)``; or "typed": the scales' float dtype, ``(N, k_blocks)`` or flat, possibly
  fractional. Absent → ``2^(bits-1)``.
* Dequantization: ``w = (q - zp) * scale``.

Quantizer (``quantize``)
------------------------
Byte-identical to ONNX Runtime's ``quantize_matmul_{2,4,8}bits`` (MLAS
``BlockwiseQuantizer<T, block, bits, Columnwise=true>::quantizeAndTranspose``) as called by
``onnxruntime/quantization/matmul_nbits_quantizer.py`` (``DefaultWeightOnlyQuantizer``):

* symmetric: ``m`` = the block value with the largest ``|.|`` (ties → the minimum, i.e. the
  negative one), ``scale = T(-m / 2^(bits-1))`` (float32 division, then rounded to the scale
  dtype); zero point ``2^(bits-1)``; no zero points are returned.
* asymmetric: ``lo = min(min, 0)``, ``hi = max(max, 0)``, ``s = (hi - lo) / (2^bits - 1)`` in
  float32, ``zp = clamp(roundf(-lo / s), 0, 2^bits - 1)`` (``zp = 0`` if ``s == 0``),
  ``scale = T(s)``.
* codes: ``r = (scale != 0) ? 1.0f / float(scale) : 0``; ``q = clamp(roundf(w * r + zp), 0,
  2^bits - 1)`` — all float32, ``roundf`` = round half away from zero, using the scale *after*
  rounding to its dtype (fp16/bf16).
* Padding (K % block_size != 0): ORT's Python quantizer zero-pads W to K_padded but passes the
  *unpadded* K to MLAS, so MLAS never quantizes the pad. Pad bytes keep the zeros of the
  ``np.zeros`` output buffer, except that the last partially filled byte (2/4-bit, K not a
  multiple of 8/bits) gets the stale codes of the previous byte of the same MLAS thread block
  (0 if none). Packed zero points: the unused slots of the last byte of a row hold the default
  zero point ``2^(bits-1)`` (MLAS initialises its pack buffer with it), not zero.
  ``quantize(..., pad_code=c)`` instead fills every padded element with code ``c``. Kernels
  never use padded elements, so either choice gives the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:  # bfloat16 support is optional at import time
    import ml_dtypes as _ml_dtypes

    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    _ml_dtypes = None
    _BF16 = None

__all__ = [
    "SUPPORTED_BITS",
    "SUPPORTED_BLOCK_SIZES",
    "QuantFormat",
    "FORMATS",
    "quant_format",
    "k_blocks",
    "blob_size",
    "zp_blob_size",
    "default_zero_point",
    "pack_codes",
    "unpack_codes",
    "pack_zero_points",
    "unpack_zero_points",
    "zero_points_as_float",
    "quantize",
    "dequantize_host",
    "float_dtype_name",
]

SUPPORTED_BITS = (2, 4, 8)
#: Block sizes ORT's CPU kernel accepts; the schema allows any power of two >= 16.
SUPPORTED_BLOCK_SIZES = (16, 32, 64, 128, 256)


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _as_int(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def _check_bits(bits) -> int:
    bits = _as_int(bits, "bits")
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits should be 2, 4 or 8, got {bits}")
    return bits


def _check_block_size(block_size) -> int:
    block_size = _as_int(block_size, "block_size")
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of 2, and >= 16. Got {block_size}")
    return block_size


def _check_dim(value, name: str, *, allow_zero: bool = True) -> int:
    value = _as_int(value, name)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def float_dtype_name(dtype) -> str:
    """Return ``"float32"``, ``"float16"`` or ``"bfloat16"`` for a supported float dtype.

    Raises TypeError for anything else.
    """
    dt = np.dtype(dtype)
    if dt == np.float32:
        return "float32"
    if dt == np.float16:
        return "float16"
    if _BF16 is not None and dt == _BF16:
        return "bfloat16"
    raise TypeError(f"expected a float32, float16 or bfloat16 dtype, got {dt}")


def _is_float_dtype(dtype) -> bool:
    try:
        float_dtype_name(dtype)
    except TypeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# sizes
# --------------------------------------------------------------------------------------------


def k_blocks(K: int, block_size: int) -> int:
    """Number of quantization blocks along K: ``ceil(K / block_size)``."""
    K = _check_dim(K, "K")
    block_size = _check_block_size(block_size)
    return -(-K // block_size)


def blob_size(block_size: int, bits: int) -> int:
    """Bytes per block of B: ``block_size * bits / 8``."""
    return _check_block_size(block_size) * _check_bits(bits) // 8


def zp_blob_size(k_blocks: int, bits: int) -> int:
    """Bytes per row of packed zero points: ``ceil(k_blocks * bits / 8)``."""
    kb = _check_dim(k_blocks, "k_blocks")
    return (kb * _check_bits(bits) + 7) // 8


def default_zero_point(bits: int) -> int:
    """Zero point used when none is given: ``2^(bits-1)`` (2, 8, 128)."""
    return quant_format(bits).default_zero_point


class BlockGeometry:
    """Derived sizes of a node with attributes ``K``, ``bits`` and ``block_size`` (mixed into
    ``schema.Attributes`` and ``weights.Weights``, which both carry those three fields)."""

    @property
    def k_blocks(self) -> int:
        """``ceil(K / block_size)``."""
        return -(-self.K // self.block_size)

    @property
    def K_padded(self) -> int:
        return self.k_blocks * self.block_size

    @property
    def blob_size(self) -> int:
        """Bytes per block of B: ``block_size * bits / 8``."""
        return self.block_size * self.bits // 8

    @property
    def zp_row(self) -> int:
        """Bytes per row of packed zero points: ``ceil(k_blocks * bits / 8)``."""
        return -(-self.k_blocks * self.bits // 8)


@dataclass(frozen=True)
class QuantFormat:
    """One bit width of the operator: how its codes sit in a byte and what a kernel needs to decode them.

    Every consumer (the packers, the oracle, each kernel family's code generator) reads these fields
    instead of branching on ``bits``; a family that lays codes out its own way keys its layout
    tables by ``QuantFormat``. Adding a bit width means adding its entry to ``FORMATS``.
    """

    bits: int

    def __post_init__(self) -> None:
        _check_bits(self.bits)

    @property
    def codes_per_byte(self) -> int:
        """Codes packed into one byte, low bits first (``8 / bits``)."""
        return 8 // self.bits

    @property
    def codes_per_word(self) -> int:
        """Codes in one 32-bit word (``32 / bits``)."""
        return 32 // self.bits

    @property
    def max_code(self) -> int:
        """The largest code, ``2^bits - 1``."""
        return (1 << self.bits) - 1

    @property
    def code_mask(self) -> int:
        """Mask of one code in the low bits of a byte (``max_code``)."""
        return self.max_code

    @property
    def default_zero_point(self) -> int:
        """Zero point used when the zero_points input is absent: ``2^(bits-1)`` (2, 8, 128)."""
        return 1 << (self.bits - 1)

    @property
    def pair_mask(self) -> int:
        """A code in the low bits of both 16-bit halves of a word (``0x000F000F`` for 4-bit), the mask of
        the magic-number decode that turns two codes into two half-precision values at once."""
        return self.max_code * 0x10001


#: One ``QuantFormat`` per supported bit width.
FORMATS = {b: QuantFormat(b) for b in SUPPORTED_BITS}


def quant_format(bits) -> QuantFormat:
    """The ``QuantFormat`` of ``bits`` (2, 4 or 8); raises ValueError naming the value otherwise."""
    return FORMATS[_check_bits(bits)]


# --------------------------------------------------------------------------------------------
# bit packing (shared by B and zero points: pack along the last axis, low bits first)
# --------------------------------------------------------------------------------------------


def _pack_last_axis(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack uint8 codes (..., L) with L % (8/bits) == 0 into bytes (..., L*bits/8)."""
    cpb = 8 // bits
    if cpb == 1:
        return np.ascontiguousarray(codes, dtype=np.uint8)
    grouped = codes.astype(np.uint8).reshape(codes.shape[:-1] + (codes.shape[-1] // cpb, cpb))
    out = np.zeros(grouped.shape[:-1], dtype=np.uint8)
    for i in range(cpb):
        out |= (grouped[..., i] << np.uint8(bits * i)).astype(np.uint8)
    return out


def _unpack_last_axis(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of ``_pack_last_axis``: bytes (..., L) -> codes (..., L*8/bits)."""
    cpb = 8 // bits
    if cpb == 1:
        return np.array(packed, dtype=np.uint8, copy=True)
    mask = np.uint8((1 << bits) - 1)
    parts = [(packed >> np.uint8(bits * i)) & mask for i in range(cpb)]
    return np.stack(parts, axis=-1).reshape(packed.shape[:-1] + (packed.shape[-1] * cpb,))


def _integer_codes(q, name: str, bits: int, ndim: int) -> np.ndarray:
    arr = np.asarray(q)
    if not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    hi = (1 << bits) - 1
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > hi):
        raise ValueError(
            f"{name} values must be in [0, {hi}] for bits={bits}, got range "
            f"[{int(arr.min())}, {int(arr.max())}]"
        )
    return arr.astype(np.uint8)


def pack_codes(q, bits: int, block_size: int, *, pad_code: int | None = None) -> np.ndarray:
    """Pack integer codes ``q`` (N, K) into ORT's B layout ``uint8 [N, k_blocks, blob_size]``.

    Codes must lie in ``[0, 2^bits)``. If ``K % block_size != 0`` the last block is padded with
    ``pad_code`` (default ``default_zero_point(bits)``, so padded elements dequantize to 0 under
    the default zero point).
    """
    bits = _check_bits(bits)
    block_size = _check_block_size(block_size)
    codes = _integer_codes(q, "q", bits, 2)
    N, K = codes.shape
    if pad_code is None:
        pad_code = default_zero_point(bits)
    pad_code = _as_int(pad_code, "pad_code")
    if not 0 <= pad_code < (1 << bits):
        raise ValueError(f"pad_code must be in [0, {(1 << bits) - 1}] for bits={bits}, got {pad_code}")
    kb = -(-K // block_size)
    K_padded = kb * block_size
    full = np.full((N, K_padded), pad_code, dtype=np.uint8)
    full[:, :K] = codes
    return _pack_last_axis(full, bits).reshape(N, kb, block_size * bits // 8)


def unpack_codes(B, K: int | None, bits: int, block_size: int) -> np.ndarray:
    """Unpack ORT's B ``uint8 [N, k_blocks, blob_size]`` into codes ``uint8 (N, K)``.

    Padding columns are dropped; ``K=None`` returns all ``K_padded = k_blocks*block_size``
    columns. Raises if B's shape does not match ``(N, ceil(K/block_size), blob_size)``.
    """
    bits = _check_bits(bits)
    block_size = _check_block_size(block_size)
    arr = np.asarray(B)
    if arr.dtype != np.uint8:
        raise TypeError(f"B must be uint8, got dtype {arr.dtype}")
    if arr.ndim != 3:
        raise ValueError(f"B must be 3-D [N, k_blocks, blob_size], got shape {arr.shape}")
    N, kb, blob = arr.shape
    expected_blob = block_size * bits // 8
    if blob != expected_blob:
        raise ValueError(
            f"B's last dim must be blob_size = block_size*bits/8 = {expected_blob}, got {blob}"
        )
    if K is not None:
        K = _check_dim(K, "K")
        if -(-K // block_size) != kb:
            raise ValueError(
                f"B must have k_blocks = ceil(K/block_size) = {-(-K // block_size)} blocks for "
                f"K={K}, block_size={block_size}, got {kb}"
            )
    codes = _unpack_last_axis(arr.reshape(N, kb * blob), bits)
    return codes if K is None else np.ascontiguousarray(codes[:, :K])


def pack_zero_points(zp, bits: int, *, pad_code: int = 0) -> np.ndarray:
    """Pack integer zero points (N, k_blocks) into ``uint8 [N, ceil(k_blocks*bits/8)]``.

    Low bits first along the block axis; each row is padded to whole bytes with ``pad_code``
    (default 0; ORT's quantizer effectively uses ``2^(bits-1)``).
    """
    bits = _check_bits(bits)
    codes = _integer_codes(zp, "zp", bits, 2)
    pad_code = _as_int(pad_code, "pad_code")
    if not 0 <= pad_code < (1 << bits):
        raise ValueError(f"pad_code must be in [0, {(1 << bits) - 1}] for bits={bits}, got {pad_code}")
    N, kb = codes.shape
    cpb = 8 // bits
    width = -(-kb // cpb) * cpb
    full = np.full((N, width), pad_code, dtype=np.uint8)
    full[:, :kb] = codes
    return _pack_last_axis(full, bits)


def unpack_zero_points(zp_packed, k_blocks: int, bits: int, *, N: int | None = None) -> np.ndarray:
    """Unpack packed uint8 zero points into ``uint8 (N, k_blocks)``.

    Accepts ``(N, zp_blob)`` or the legacy flat ``(N*zp_blob,)`` form (N taken from the ``N=``
    keyword, or inferred from the length when omitted).
    """
    bits = _check_bits(bits)
    kb = _check_dim(k_blocks, "k_blocks")
    arr = np.asarray(zp_packed)
    if arr.dtype != np.uint8:
        raise TypeError(f"zero_points must be uint8 to be unpacked, got dtype {arr.dtype}")
    zb = (kb * bits + 7) // 8
    if N is not None:
        N = _check_dim(N, "N")
    if arr.ndim == 1:
        if N is None:
            if zb == 0 or arr.size % zb:
                raise ValueError(
                    f"flat zero_points of length {arr.size} is not a multiple of "
                    f"zp_blob = ceil(k_blocks*bits/8) = {zb}; pass N="
                )
            N = arr.size // zb
        if arr.size != N * zb:
            raise ValueError(
                f"flat zero_points must have N*zp_blob = {N}*{zb} = {N * zb} elements, got {arr.size}"
            )
        arr = arr.reshape(N, zb)
    elif arr.ndim == 2:
        if arr.shape[1] != zb or (N is not None and arr.shape[0] != N):
            exp_n = "N" if N is None else N
            raise ValueError(
                f"zero_points must have shape ({exp_n}, {zb}) (zp_blob = ceil(k_blocks*bits/8)), "
                f"got {arr.shape}"
            )
    else:
        raise ValueError(f"zero_points must be 1-D or 2-D, got shape {arr.shape}")
    return np.ascontiguousarray(_unpack_last_axis(arr, bits)[:, :kb])


def zero_points_as_float(zero_points, N: int, k_blocks: int, bits: int) -> np.ndarray:
    """Zero points as float64 ``(N, k_blocks)`` for any accepted form.

    ``None`` → the default ``2^(bits-1)``; uint8 → unpacked (2-D or flat); a float dtype
    (float32/float16/bfloat16, "typed") → reshaped from ``(N, k_blocks)`` or ``(N*k_blocks,)``.
    """
    bits = _check_bits(bits)
    N = _check_dim(N, "N")
    kb = _check_dim(k_blocks, "k_blocks")
    if zero_points is None:
        return np.full((N, kb), float(default_zero_point(bits)), dtype=np.float64)
    arr = np.asarray(zero_points)
    if arr.dtype == np.uint8:
        return unpack_zero_points(arr, kb, bits, N=N).astype(np.float64)
    if not _is_float_dtype(arr.dtype):
        raise TypeError(
            f"zero_points must be uint8 (packed) or float32/float16/bfloat16 (typed), got dtype {arr.dtype}"
        )
    if arr.shape not in ((N, kb), (N * kb,)):
        raise ValueError(
            f"typed zero_points must have shape ({N}, {kb}) or ({N * kb},), got {arr.shape}"
        )
    return arr.astype(np.float64).reshape(N, kb)


def _scales_2d(scales, N: int, kb: int) -> np.ndarray:
    arr = np.asarray(scales)
    if not _is_float_dtype(arr.dtype):
        raise TypeError(f"scales must be float32, float16 or bfloat16, got dtype {arr.dtype}")
    if arr.shape not in ((N, kb), (N * kb,)):
        raise ValueError(f"scales must have shape ({N}, {kb}) or ({N * kb},), got {arr.shape}")
    return arr.reshape(N, kb)


def _group_index(g_idx, K: int, kb: int, block_size: int) -> np.ndarray:
    """Block index per k (length K) from g_idx (K or K_padded entries) or the natural k // bs."""
    if g_idx is None:
        return np.arange(K) // block_size
    g = np.asarray(g_idx)
    if not np.issubdtype(g.dtype, np.integer):
        raise TypeError(f"g_idx must be an integer (int32) array, got dtype {g.dtype}")
    if g.ndim != 1 or g.shape[0] not in (K, kb * block_size):
        raise ValueError(
            f"g_idx must be 1-D with K={K} or k_blocks*block_size={kb * block_size} entries, "
            f"got shape {g.shape}"
        )
    g = g[:K].astype(np.int64)
    bad = np.nonzero((g < 0) | (g >= kb))[0]
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"group_index value at index {i} is {int(g[i])}, which is out of valid range [0, {kb})"
        )
    return g


# --------------------------------------------------------------------------------------------
# quantizer (MLAS-exact)
# --------------------------------------------------------------------------------------------


def _roundf(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: round half away from zero (float32 input, exact via float64)."""
    x64 = x.astype(np.float64)
    return np.copysign(np.floor(np.abs(x64) + 0.5), x64)


def quantize(
    W,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = True,
    *,
    pad_code: int | None = None,
):
    """Quantize the logical weight ``W`` (N, K) the way ONNX Runtime does, byte for byte.

    Returns ``(B, scales, zero_points)``: ``B`` uint8 ``[N, k_blocks, blob_size]``, ``scales``
    ``(N, k_blocks)`` in W's dtype, and packed uint8 zero points ``(N, zp_blob)`` for
    ``symmetric=False`` (``None`` when symmetric). W may be float32, float16 or bfloat16 (bf16 is
    quantized in float32 with scales rounded to bf16, mirroring MLAS's fp16 path).

    ``pad_code=None`` reproduces ORT's bytes for the padded tail of the last block (see the
    module docstring); an int fills all padded elements with that code instead.
    """
    bits = _check_bits(bits)
    block_size = _check_block_size(block_size)
    if not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(f"symmetric must be a bool, got {type(symmetric).__name__}")
    arr = np.asarray(W)
    name = float_dtype_name(arr.dtype) if _is_float_dtype(arr.dtype) else None
    if name is None:
        raise TypeError(f"W must be float32, float16 or bfloat16, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"W must be 2-D (N, K), got shape {arr.shape}")
    if pad_code is not None:
        pad_code = _as_int(pad_code, "pad_code")
        if not 0 <= pad_code < (1 << bits):
            raise ValueError(
                f"pad_code must be in [0, {(1 << bits) - 1}] for bits={bits}, got {pad_code}"
            )
    out_dtype = arr.dtype
    N, K = arr.shape
    kb = -(-K // block_size)
    Kp = kb * block_size
    cpb = 8 // bits
    qmax = (1 << bits) - 1
    mid = 1 << (bits - 1)
    f32 = np.float32

    w = arr.astype(f32)  # fp16 / bf16 -> float32 is exact
    # block statistics over the valid elements only (MLAS never reads the pad)
    padded = np.zeros((N, Kp), dtype=f32)
    padded[:, :K] = w
    valid = np.zeros((N, Kp), dtype=bool)
    valid[:, :K] = True
    blocks = padded.reshape(N, kb, block_size)
    vmask = valid.reshape(N, kb, block_size)
    big = np.finfo(f32).max
    bmin = np.where(vmask, blocks, f32(big)).min(axis=2).astype(f32)
    bmax = np.where(vmask, blocks, f32(-big)).max(axis=2).astype(f32)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if symmetric:
            m = np.where(np.abs(bmax) > np.abs(bmin), bmax, bmin).astype(f32)
            scale_f = (-m / f32(mid)).astype(f32)
            zp_codes = np.full((N, kb), mid, dtype=np.int64)
        else:
            lo = np.minimum(bmin, f32(0))
            hi = np.maximum(bmax, f32(0))
            scale_f = ((hi - lo) / f32(qmax)).astype(f32)
            zfp = np.where(scale_f != 0, f32(0) - lo / scale_f, lo).astype(f32)
            zp_codes = np.where(
                zfp < 0, 0, np.where(zfp > f32(qmax), qmax, _roundf(zfp))
            ).astype(np.int64)
        scales = scale_f.astype(out_dtype)  # ScaleT(scale_f): round to the scale dtype
        s32 = scales.astype(f32)
        recip = np.where(s32 != 0, f32(1) / np.where(s32 != 0, s32, f32(1)), f32(0)).astype(f32)

        r_full = np.repeat(recip, block_size, axis=1)[:, :K]
        zp_full = np.repeat(zp_codes, block_size, axis=1)[:, :K].astype(f32)
        t = (w * r_full).astype(f32) + zp_full  # float32 multiply, float32 add (no FMA)
        q = np.clip(_roundf(t.astype(f32)), 0, qmax).astype(np.uint8)

    codes = np.zeros((N, Kp), dtype=np.uint8)
    codes[:, :K] = q
    if pad_code is not None:
        codes[:, K:] = pad_code
    elif K % cpb:
        # MLAS: last partially filled byte keeps stale codes of the previous byte of the same
        # thread block (block_size*cpb rows), or 0 at the start of a thread block.
        i0 = (K // cpb) * cpb
        tb_start = (i0 // (block_size * cpb)) * (block_size * cpb)
        for l in range(K - i0, cpb):
            if i0 > tb_start:
                codes[:, i0 + l] = codes[:, i0 - cpb + l]
    B = _pack_last_axis(codes, bits).reshape(N, kb, block_size * bits // 8)

    if symmetric:
        return B, scales, None
    # MLAS fills the unused zero-point slots of a row's last byte with kMid
    zps = pack_zero_points(zp_codes.astype(np.uint8), bits, pad_code=mid)
    return B, scales, zps


# --------------------------------------------------------------------------------------------
# host dequantization (NumPy path of numba_nbits.dequantize)
# --------------------------------------------------------------------------------------------


def dequantize_host(
    B,
    scales,
    zero_points=None,
    g_idx=None,
    *,
    K: int,
    N: int,
    bits: int,
    block_size: int,
    dtype=None,
) -> np.ndarray:
    """Dequantize to ``W`` (N, K): ``(q - zp[n, g]) * scale[n, g]``, ``g = g_idx[k]`` or ``k // bs``.

    Computed in float32 and rounded once to ``dtype`` (default: the scales' dtype).
    """
    bits = _check_bits(bits)
    block_size = _check_block_size(block_size)
    K = _check_dim(K, "K")
    N = _check_dim(N, "N")
    kb = -(-K // block_size)
    s = _scales_2d(scales, N, kb)
    out_dtype = s.dtype if dtype is None else np.dtype(dtype)
    float_dtype_name(out_dtype)  # validates
    codes = unpack_codes(B, K, bits, block_size)
    if codes.shape[0] != N:
        raise ValueError(f"B must have N={N} rows, got {codes.shape[0]}")
    zp = zero_points_as_float(zero_points, N, kb, bits).astype(np.float32)
    g = _group_index(g_idx, K, kb, block_size)
    s32 = s.astype(np.float32)
    w = (codes.astype(np.float32) - zp[:, g]) * s32[:, g]
    return w.astype(out_dtype)
