"""Weight-only quantization: the packed layout of ``qnn.matmul_nbits`` and its quantizer.

The layout is onnxruntime's ``MatMulNBits`` (``com.microsoft``), so its models import
as they are and a weight quantized here runs in onnxruntime unchanged
(docs/dialects.md, "Weight-only quantization"):

* the weight ``W`` is ``N x K`` (``y = a @ W.T``), quantized in blocks of
  ``block_size`` consecutive values along K; ``k_blocks = ceil(K / block_size)``;
* ``B``: uint8 ``(N, k_blocks, blob)``, ``blob = block_size * bits / 8``; the values of a
  block in K order, packed low bits first (4 bits: value ``2j`` in the low nibble of
  byte ``j``, ``2j + 1`` in the high nibble); when K is not a multiple of
  ``block_size`` the last block is padded (the padding is never read as a weight);
* ``scales``: float32 ``(N, k_blocks)``;
* ``zero_points``: uint8 ``(N, ceil(k_blocks * bits / 8))``, packed along the blocks the
  same way (4 bits: block ``2j`` low nibble); onnxruntime's default when a model omits
  them is ``2^(bits - 1)``;
* ``W[n, k] = float32(q[n, k] - z[n, k // block_size]) * scales[n, k // block_size]``.

:func:`quantize_blockwise` is onnxruntime's quantizer (``MlasQuantizeBlockwise``, what
``matmul_nbits_quantizer`` calls), bit for bit: per block, asymmetric
``scale = (max(hi, 0) - min(lo, 0)) / (2^bits - 1)``, ``z = roundf(-min(lo, 0) /
scale)`` clamped; symmetric ``scale = m / -2^(bits-1)`` with ``m`` the value of largest
magnitude, ``z = 2^(bits-1)``; then ``q = clamp(roundf(w * (1 / scale) + z), 0,
2^bits - 1)``, where ``roundf`` rounds half away from zero and a zero scale gives
``1 / scale = 0``.  Only the present values of a short last block count.

With ``accuracy_level=4`` (onnxruntime's "int8 compute") the activations are quantized
too (:func:`quantize_activations`): per row of ``a`` and block of ``block_size`` values
along K (the weight's blocks), ``amax = max |a|``, ``sa = amax / 127`` and ``qa =
rint(a * (127 / amax))`` (half to even; 0 when ``amax`` is 0), int8 in [-127, 127].
Each block's sum ``sum_k qa[m, k] * (q[n, k] - z[n, b])`` is an exact integer, and
``y[m, n] = sum_b (sa[m, b] * scales[n, b]) * isum[m, n, b]`` in float32
(:func:`matmul_int8_activations`).
"""

from __future__ import annotations

import numpy as np

BITS = (4, 8)
"""The widths of quantized weights."""

F32 = np.float32


def check_bits(bits: int) -> None:
    """Refuse a width other than 4 or 8."""
    if bits not in BITS:
        raise ValueError(f"bits={bits!r}: weight-only quantization takes 4 or 8 bits")


def k_blocks(k: int, block_size: int) -> int:
    """The blocks along K: ``ceil(K / block_size)``."""
    return -(-k // block_size)


def blob_size(block_size: int, bits: int) -> int:
    """The bytes of one packed block."""
    return block_size * bits // 8


def zp_cols(blocks: int, bits: int) -> int:
    """The bytes of one row of packed zero points."""
    return -(-blocks * bits // 8)


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Unsigned ``bits``-bit values (last axis even for 4 bits) packed low first along
    the last axis into uint8."""
    q = np.asarray(q).astype(np.uint8)
    if bits == 8:
        return q
    if q.shape[-1] % 2:
        q = np.concatenate([q, np.zeros(q.shape[:-1] + (1,), np.uint8)], axis=-1)
    return (q[..., 0::2] & 15) | ((q[..., 1::2] & 15) << 4)


def unpack(p: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of :func:`pack`: uint8 ``p`` unpacked along its last axis (twice as
    long for 4 bits)."""
    p = np.asarray(p, np.uint8)
    if bits == 8:
        return p
    return np.stack([p & 15, p >> 4], axis=-1).reshape(p.shape[:-1] + (2 * p.shape[-1],))


def unpack_weights(b: np.ndarray, zero_points: np.ndarray, k: int, bits: int,
                   block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q, z)``: the ``N x K`` quantized values of ``b`` (int32) and the ``N x
    k_blocks`` zero points (int32)."""
    b = np.asarray(b, np.uint8)
    n, blocks = b.shape[0], b.shape[1]
    q = unpack(b, bits).reshape(n, blocks * block_size)[:, :k].astype(np.int32)
    z = unpack(np.asarray(zero_points, np.uint8).reshape(n, -1), bits)[:, :blocks]
    return q, z.astype(np.int32)


def dequantize_weights(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, k: int,
                       bits: int, block_size: int) -> np.ndarray:
    """The float32 ``N x K`` weight: ``float32(q - z) * scale`` per element."""
    q, z = unpack_weights(b, zero_points, k, bits, block_size)
    n, blocks = z.shape
    s = np.asarray(scales, F32).reshape(n, blocks)
    zz = np.repeat(z, block_size, axis=1)[:, :k]
    ss = np.repeat(s, block_size, axis=1)[:, :k]
    return (q - zz).astype(F32) * ss


def roundf(x: np.ndarray) -> np.ndarray:
    """C's ``roundf``: to nearest, halves away from zero (exact: the fraction is taken
    apart, never ``x + 0.5``)."""
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0).astype(x.dtype)


def default_zero_points(n: int, blocks: int, bits: int) -> np.ndarray:
    """onnxruntime's zero points of a model that omits them: ``2^(bits-1)``, packed."""
    return pack(np.full((n, blocks), 1 << (bits - 1), np.uint8), bits)


def quantize_blockwise(w_nk: np.ndarray, bits: int, block_size: int, symmetric: bool = False
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(b, scales, zero_points)`` of the float32 ``N x K`` weight ``w_nk`` in the
    layout above, quantized as onnxruntime's ``MlasQuantizeBlockwise`` does (module
    doc).  The padding of a short last block holds zeros."""
    check_bits(bits)
    w = np.asarray(w_nk, F32)
    if w.ndim != 2:
        raise ValueError(f"quantize_blockwise: the weight must be N x K, got shape {w.shape}")
    n, k = w.shape
    if block_size < 1 or (block_size * bits) % 8:
        raise ValueError(f"block_size={block_size}: a block must fill whole bytes "
                         f"(a multiple of {8 // bits} for {bits} bits)")
    blocks = k_blocks(k, block_size)
    qmax = (1 << bits) - 1
    mid = 1 << (bits - 1)
    padded = np.zeros((n, blocks * block_size), F32)
    padded[:, :k] = w
    if k % block_size:   # a short last block: its padding must not change min/max
        padded[:, k:] = w[:, blocks * block_size - block_size:k][:, :1]
    blk = padded.reshape(n, blocks, block_size)
    lo, hi = blk.min(axis=2), blk.max(axis=2)
    if symmetric:
        m = np.where(np.abs(hi) > np.abs(lo), hi, lo)
        scale = (m / F32(-mid)).astype(F32)
        zf = np.full((n, blocks), mid, F32)
    else:
        lo, hi = np.minimum(lo, F32(0)), np.maximum(hi, F32(0))
        scale = ((hi - lo) / F32(qmax)).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore"):
            zfp = np.where(scale != 0, F32(0) - lo / scale, lo).astype(F32)
        zf = np.clip(roundf(zfp), 0, qmax).astype(F32)
    with np.errstate(divide="ignore"):
        recip = np.where(scale != 0, F32(1) / scale, F32(0)).astype(F32)
    v = (blk * recip[:, :, None]).astype(F32) + zf[:, :, None]
    q = np.clip(roundf(v.astype(F32)), 0, qmax).astype(np.uint8).reshape(n, -1)
    q[:, k:] = 0
    b = pack(q, bits).reshape(n, blocks, blob_size(block_size, bits))
    z = pack(zf.astype(np.uint8), bits)
    return np.ascontiguousarray(b), np.ascontiguousarray(scale), np.ascontiguousarray(z)


ACT_INT8_LEVEL = 4
"""The ``accuracy_level`` (onnxruntime's ``MatMulNBits`` attribute) at which the
activations are quantized to int8 per block; every other level computes in float32."""


def quantize_activations(a: np.ndarray, k: int, block_size: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``(qa, sa)``: the float32 rows ``a (M, K)`` quantized to int8 per block of
    ``block_size`` along K (module doc): ``qa`` int32 ``(M, k_blocks * block_size)`` (the
    padding of a short last block 0), ``sa`` float32 ``(M, k_blocks)``."""
    a = np.asarray(a, F32).reshape(-1, k)
    blocks = k_blocks(k, block_size)
    padded = np.zeros((a.shape[0], blocks * block_size), F32)
    padded[:, :k] = a
    blk = padded.reshape(a.shape[0], blocks, block_size)
    amax = np.abs(blk).max(axis=2)
    sa = (amax / F32(127)).astype(F32)
    with np.errstate(divide="ignore"):
        recip = np.where(amax != 0, F32(127) / amax, F32(0)).astype(F32)
    q = np.clip(np.rint((blk * recip[:, :, None]).astype(F32)), -127, 127)
    return q.astype(np.int32).reshape(a.shape[0], -1), sa


def matmul_int8_activations(a: np.ndarray, b: np.ndarray, scales: np.ndarray,
                            zero_points: np.ndarray, k: int, bits: int, block_size: int
                            ) -> np.ndarray:
    """``a (M, K) @ W.T`` with the activations quantized to int8 per block (module doc):
    exact integer block sums, scaled per block and summed in float32 (M x N)."""
    qa, sa = quantize_activations(a, k, block_size)
    q, z = unpack_weights(b, zero_points, k, bits, block_size)
    n, blocks = z.shape
    qp = np.zeros((n, blocks * block_size), np.int64)
    qp[:, :k] = q
    wq = qp.reshape(n, blocks, block_size) - z[:, :, None]
    isum = np.einsum("mbk,nbk->mnb", qa.reshape(qa.shape[0], blocks, block_size)
                     .astype(np.int64), wq)
    sc = sa[:, None, :] * np.asarray(scales, F32).reshape(n, blocks)[None, :, :]
    out = np.zeros((qa.shape[0], n), F32)
    for j in range(blocks):   # float32 sums, block by block
        out += isum[:, :, j].astype(F32) * sc[:, :, j].astype(F32)
    return out


__all__ = ["ACT_INT8_LEVEL", "BITS", "blob_size", "check_bits", "default_zero_points",
           "dequantize_weights",
           "k_blocks", "matmul_int8_activations", "pack", "quantize_activations",
           "quantize_blockwise", "roundf", "unpack", "unpack_weights",
           "zp_cols"]
