"""Numpy semantics of the qnn ops, bit for bit those of onnxruntime's CPU kernels.

Every op of the dialect is defined here by the arithmetic onnxruntime (MLAS) performs, in
float32 where it computes in float32, in the same order, with its rounding (round half
to even, ``cvtps2dq``) and saturation.  Where onnxruntime uses a fused multiply-add the
reference uses :func:`fma_f32` (an exactly rounded one, emulated in float64); where it
uses a table of 256 values the reference builds the same table.  The facts each function
relies on are in its docstring; ``tests/dialects/qnn/test_reference_vs_onnxruntime.py``
checks every one of them against onnxruntime on single-op models.

Scales are float32; zero points have the quantized dtype (``uint8``, ``int8``,
``uint16``, ``int16``; ``int32`` for accumulators).  A scale or zero point is a scalar
(per tensor), a 1-D tensor along ``axis`` (per channel), or, with ``block_size``, a
tensor of the input's shape with ``axis`` divided into blocks.

This module depends on numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .nbits import ACT_INT8_LEVEL, dequantize_weights, matmul_int8_activations

QRANGES: dict[str, tuple[int, int]] = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
}
"""The integer types values are quantized to, and their ranges."""

EIGHT_BIT = ("uint8", "int8")

F32 = np.float32
_INT_MIN = np.int32(-(2**31))


def qrange(dtype: Any) -> tuple[int, int]:
    """The range of quantized dtype ``dtype``."""
    name = np.dtype(dtype).name
    if name not in QRANGES:
        raise ValueError(f"{name} is not a quantized type; the types are {', '.join(QRANGES)}")
    return QRANGES[name]


# ------------------------------------------------------------ float32 arithmetic


def fma_f32(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` rounded once to float32 (an FMA instruction), for float32 inputs.

    The product of two float32 numbers is exact in float64; the float64 sum may be a tie
    between two float32 numbers that the exact sum is not (double rounding), which the
    exact error of the float64 sum (TwoSum) resolves."""
    a64 = np.asarray(a, F32).astype(np.float64)
    b64 = np.asarray(b, F32).astype(np.float64)
    c64 = np.asarray(c, F32).astype(np.float64)
    p = a64 * b64
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    r = s.astype(F32)
    d = s - r.astype(np.float64)
    other = np.nextafter(r, np.where(d > 0, F32(np.inf), F32(-np.inf))).astype(F32)
    mid = (r.astype(np.float64) + other.astype(np.float64)) / 2
    tie = (d != 0) & (s == mid) & (err != 0)
    if np.any(tie):
        up = np.maximum(r, other)
        down = np.minimum(r, other)
        r = np.where(tie, np.where(err > 0, up, down), r).astype(F32)
    return np.asarray(r, F32)


def cvtps2dq(v: np.ndarray) -> np.ndarray:
    """float32 -> int32 as ``cvtps2dq`` does: round half to even; NaN and values out of
    the int32 range give INT_MIN."""
    v = np.asarray(v, F32)
    bad = ~(np.abs(v) < F32(2.0**31))
    with np.errstate(invalid="ignore"):
        r = np.rint(np.where(bad, F32(0), v)).astype(np.int64)
    return np.where(bad, np.int64(_INT_MIN), r)


def maxps(v: np.ndarray, lo: Any) -> np.ndarray:
    """``_mm_max_ps(v, lo)``: ``lo`` where ``v`` is NaN or below it."""
    return np.where(v > lo, v, F32(lo)).astype(F32)


def minps(v: np.ndarray, hi: Any) -> np.ndarray:
    """``_mm_min_ps(v, hi)``: ``hi`` where ``v`` is NaN or above it."""
    return np.where(v < hi, v, F32(hi)).astype(F32)


def saturate(v: np.ndarray, dtype: Any) -> np.ndarray:
    """Integers ``v`` clamped to the range of ``dtype`` and converted."""
    lo, hi = qrange(dtype)
    return np.clip(np.asarray(v, np.int64), lo, hi).astype(dtype)


# ------------------------------------------------------- quantization parameters


def param(p: Any, shape: Sequence[int], axis: int = 1, block_size: int = 0) -> np.ndarray:
    """Scale or zero point ``p`` shaped to broadcast against a tensor of ``shape``: a
    scalar (or one element) stays, a 1-D one runs along ``axis``, a blocked one (of the
    input's rank, ``axis`` divided into blocks of ``block_size``) is repeated."""
    p = np.asarray(p)
    rank = len(shape)
    if p.size == 1 and (p.ndim <= 1 or not block_size):
        return p.reshape(())
    ax = axis % rank if rank else 0
    if block_size:
        if p.ndim != rank:
            raise ValueError(f"a blocked scale must have the input's rank {rank}, got {p.shape}")
        rep = np.repeat(p, block_size, axis=ax)
        return np.take(rep, np.arange(shape[ax]), axis=ax)
    if p.ndim != 1:
        raise ValueError(f"a per-channel scale or zero point must be 1-D, got shape {p.shape}")
    if p.shape[0] != shape[ax]:
        raise ValueError(
            f"a per-channel scale or zero point has {p.shape[0]} values but axis {axis} of "
            f"the input {tuple(shape)} has {shape[ax]}"
        )
    dims = [1] * rank
    dims[ax] = -1
    return p.reshape(dims)


def _zp(z: Any, dtype: Any = np.int32) -> np.ndarray:
    return np.zeros((), dtype) if z is None else np.asarray(z)


# ------------------------------------------------------------------ the ops


def quantize(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, *, axis: int = 1,
    block_size: int = 0, out_dtype: str = "uint8",
) -> np.ndarray:  # fmt: skip
    """``QuantizeLinear`` as MLAS computes it: ``x / scale`` in float32 (a division, not
    a multiplication by the reciprocal), clamped to ``[qmin - zp, qmax - zp]`` with
    ``maxps``/``minps`` (NaN becomes ``qmin - zp``), rounded half to even, plus the zero
    point."""
    x = np.asarray(x)
    shape = x.shape
    s = param(np.asarray(scale, F32), shape, axis, block_size)
    z = param(_zp(zero_point, out_dtype), shape, axis, block_size).astype(np.int64)
    lo, hi = qrange(out_dtype)
    with np.errstate(all="ignore"):
        v = (x.astype(F32) / s).astype(F32)
    v = minps(maxps(v, (lo - z).astype(F32)), (hi - z).astype(F32))
    return saturate(np.rint(v).astype(np.int64) + z, out_dtype)


def dequantize(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None = None, *, axis: int = 1,
    block_size: int = 0, out_dtype: str = "float32",
) -> np.ndarray:  # fmt: skip
    """``DequantizeLinear``: ``float32(x - zero_point) * scale`` (the subtraction in
    integers, then one float32 multiplication)."""
    x = np.asarray(x)
    shape = x.shape
    s = param(np.asarray(scale, F32), shape, axis, block_size)
    z = param(_zp(zero_point, x.dtype), shape, axis, block_size).astype(np.int64)
    d = (x.astype(np.int64) - z).astype(F32)
    return (d * s).astype(out_dtype)


def requantize(
    x: np.ndarray, input_scale: np.ndarray, input_zero_point: np.ndarray | None,
    output_scale: np.ndarray, output_zero_point: np.ndarray | None = None, *, axis: int = -1,
    out_dtype: str = "uint8",
) -> np.ndarray:  # fmt: skip
    """MLAS's requantization of an accumulator (``MlasRequantizeOutput``, the output
    stage of QLinearConv, QLinearMatMul, QGemm): the multiplier ``input_scale /
    output_scale`` in float32, ``float32(x - input_zero_point) * multiplier``, clamped to
    ``[qmin - zp, qmax - zp]``, rounded half to even, plus the output zero point.  A
    per-channel scale runs along ``axis``."""
    x = np.asarray(x)
    shape = x.shape
    si = param(np.asarray(input_scale, F32), shape, axis)
    so = param(np.asarray(output_scale, F32), shape, axis)
    m = (si / so).astype(F32)
    zi = param(_zp(input_zero_point, x.dtype), shape, axis).astype(np.int64)
    zo = param(_zp(output_zero_point, out_dtype), shape, axis).astype(np.int64)
    lo, hi = qrange(out_dtype)
    v = ((x.astype(np.int64) - zi).astype(np.int32).astype(F32) * m).astype(F32)
    v = minps(maxps(v, (lo - zo).astype(F32)), (hi - zo).astype(F32))
    return saturate(np.rint(v).astype(np.int64) + zo, out_dtype)


def quantize_op(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, *, axis: int = 1,
                block_size: int = 0) -> np.ndarray:
    """``qnn.quantize``: :func:`quantize` to the dtype of ``zero_point``."""
    zp = np.asarray(zero_point)
    return quantize(x, scale, zp, axis=axis, block_size=block_size, out_dtype=zp.dtype.name)


def requantize_op(x: np.ndarray, input_scale: np.ndarray, input_zero_point: np.ndarray,
                  output_scale: np.ndarray, output_zero_point: np.ndarray, *,
                  axis: int = -1) -> np.ndarray:
    """``qnn.requantize``: :func:`requantize` to the dtype of ``output_zero_point``."""
    zo = np.asarray(output_zero_point)
    return requantize(x, input_scale, input_zero_point, output_scale, zo, axis=axis,
                      out_dtype=zo.dtype.name)


def _centered(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    return x.astype(np.int32) - z.astype(np.int32)


def conv2d(
    data: np.ndarray, weight: np.ndarray, data_zero_point: np.ndarray | None = None,
    weight_zero_point: np.ndarray | None = None, *, strides: Any = (1, 1),
    padding: Any = (0, 0, 0, 0), dilation: Any = (1, 1), groups: int = 1,
) -> np.ndarray:  # fmt: skip
    """``ConvInteger``: the int32 convolution of ``data - data_zero_point`` (the padding
    holds the zero point, so it contributes nothing) with ``weight - weight_zero_point``
    (per output channel, or one)."""
    from plait.runtime import numpy_ops as npo

    x = _centered(np.asarray(data), _zp(data_zero_point).reshape(()))
    w = np.asarray(weight)
    wz = _zp(weight_zero_point)
    wz = wz.reshape(-1, 1, 1, 1) if wz.size > 1 else wz.reshape(())
    wc = _centered(w, wz)
    y = npo.conv2d(x.astype(np.int64), wc.astype(np.int64), strides=strides, padding=padding,
                   dilation=dilation, groups=groups)
    return y.astype(np.int32)


def matmul(
    a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None = None,
    b_zero_point: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """``MatMulInteger``: the int32 product of ``a - a_zero_point`` and ``b -
    b_zero_point`` with numpy's batching; ``a_zero_point`` is a scalar or one per row
    (a 1-D tensor of ``M`` values, or broadcastable against ``a`` with last axis 1),
    ``b_zero_point`` a scalar or one per column."""
    a = np.asarray(a)
    b = np.asarray(b)
    az = _zp(a_zero_point)
    if az.ndim == 1 and az.size > 1:
        az = az.reshape(-1, 1)
    bz = _zp(b_zero_point)
    ac = _centered(a, az).astype(np.int64)
    bc = _centered(b, bz).astype(np.int64)
    return np.matmul(ac, bc).astype(np.int32)


# ------------------------------------------------------------- elementwise


def _scalar(p: Any, dtype: Any = F32) -> Any:
    a = np.asarray(p)
    if a.size != 1:
        raise ValueError(f"expected a per-tensor scale or zero point, got shape {a.shape}")
    return a.reshape(()).astype(dtype)[()]


def broadcast_case(sa: tuple[int, ...], sb: tuple[int, ...]) -> str:
    """How onnxruntime's broadcast loop feeds a binary QLinear kernel: ``"a"`` when A is
    one value per span of the output's innermost (non-unit) dimension, ``"b"`` when B
    is, ``"general"`` when both run along it."""
    if math.prod(sa) == 1:
        return "a"
    if math.prod(sb) == 1:
        return "b"
    out = np.broadcast_shapes(sa, sb)
    rank = len(out)
    fa = (1,) * (rank - len(sa)) + tuple(sa)
    fb = (1,) * (rank - len(sb)) + tuple(sb)
    for i in range(rank - 1, -1, -1):
        if out[i] == 1:
            continue
        if fa[i] == 1 and fb[i] != 1:
            return "a"
        if fb[i] == 1 and fa[i] != 1:
            return "b"
        return "general"
    return "general"


def _pack_8bit(v: np.ndarray, dtype: Any) -> np.ndarray:
    """int32 results stored as MLAS does: ``packs_epi32`` to int16, then ``packus`` or
    ``packs`` to 8 bits (both saturating)."""
    v16 = np.clip(v, -32768, 32767)
    return saturate(v16, dtype)


def add(
    a: np.ndarray, a_scale: Any, a_zero_point: Any, b: np.ndarray, b_scale: Any,
    b_zero_point: Any, y_scale: Any, y_zero_point: Any,
) -> np.ndarray:  # fmt: skip
    """``QLinearAdd`` (MLAS ``MlasQLinearAddKernelAvx2Helper``): with ``rA = sA / sC``,
    ``rB = sB / sC`` and ``fixed = zC - fma(rA, zA, rB * zB)`` in float32 (the compiler
    contracts the scalar expression ``zC - (rA * zA + rB * zB)``), the result is
    ``fma(a, rA, fma(b, rB, fixed))`` when both inputs run along the innermost span;
    when one of them is a single value per span it is folded into the fixed part first
    (``fma(v, r, fixed)``, the compiler contracts that too) and the other one is
    ``fma``-ed onto it.
    Rounded half to even, packed with saturation."""
    a = np.asarray(a)
    b = np.asarray(b)
    dtype = a.dtype
    sa, sb, sc = _scalar(a_scale), _scalar(b_scale), _scalar(y_scale)
    za = int(_scalar(_zp(a_zero_point, dtype), np.int64))
    zb = int(_scalar(_zp(b_zero_point, dtype), np.int64))
    zc = int(_scalar(_zp(y_zero_point, dtype), np.int64))
    ra, rb = F32(sa / sc), F32(sb / sc)
    fixed = F32(F32(zc) - fma_f32(ra, F32(za), F32(rb * F32(zb))))
    af, bf = a.astype(F32), b.astype(F32)
    case = broadcast_case(a.shape, b.shape)
    if case == "a":
        v = fma_f32(bf, rb, fma_f32(af, ra, fixed))
    elif case == "b":
        v = fma_f32(af, ra, fma_f32(bf, rb, fixed))
    else:
        v = fma_f32(af, ra, fma_f32(bf, rb, fixed))
    return _pack_8bit(cvtps2dq(v), dtype)


def mul(
    a: np.ndarray, a_scale: Any, a_zero_point: Any, b: np.ndarray, b_scale: Any,
    b_zero_point: Any, y_scale: Any, y_zero_point: Any,
) -> np.ndarray:  # fmt: skip
    """``QLinearMul`` (MLAS ``MlasQLinearMulKernel``, SSE2): the int32 product ``(a - zA)
    * (b - zB)`` converted to float32, times ``(sA * sB) / sC``, plus ``float32(zC)``
    (two roundings, no FMA), rounded half to even, packed with saturation."""
    a = np.asarray(a)
    b = np.asarray(b)
    dtype = a.dtype
    sa, sb, sc = _scalar(a_scale), _scalar(b_scale), _scalar(y_scale)
    za = int(_scalar(_zp(a_zero_point, dtype), np.int64))
    zb = int(_scalar(_zp(b_zero_point, dtype), np.int64))
    zc = int(_scalar(_zp(y_zero_point, dtype), np.int64))
    ratio = F32(F32(sa * sb) / sc)
    prod = (a.astype(np.int32) - za) * (b.astype(np.int32) - zb)
    v = ((prod.astype(F32) * ratio).astype(F32) + F32(zc)).astype(F32)
    return _pack_8bit(cvtps2dq(v), dtype)


# ------------------------------------------------------------- lookup tables


def table_inputs(dtype: Any) -> np.ndarray:
    """The 256 values of an 8-bit type in the order of their bit patterns (the index of
    a table: ``table[x.view(uint8)]``)."""
    return np.arange(256, dtype=np.uint8).view(np.dtype(dtype))


def lookup(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[x]`` for an 8-bit ``x`` (indexed by its bit pattern)."""
    x = np.asarray(x)
    return np.asarray(table)[x.view(np.uint8)]


def _dequantize_table(dtype: Any, scale: Any, zero_point: Any) -> np.ndarray:
    """``x_scale * (int(x) - int(x_zero_point))`` for the 256 values, as onnxruntime's
    table builder computes it (float32)."""
    v = table_inputs(dtype).astype(np.int32) - int(_scalar(_zp(zero_point, dtype), np.int64))
    return (F32(_scalar(scale)) * v.astype(F32)).astype(F32)


def mlas_logistic(x: np.ndarray) -> np.ndarray:
    """``MlasComputeLogistic`` (the FMA3 kernel): ``x`` clamped to [-18, 18], the
    rational approximation ``x * p(x^2) / q(x^2) + 0.5`` with every polynomial step an
    FMA, clamped below at 0."""
    c = {k: F32(v) for k, v in _LOGISTIC.items()}
    x = np.asarray(x, F32)
    v = np.where(x > c["lo"], x, c["lo"]).astype(F32)  # vmaxps(lower, x): NaN stays
    v = np.where(v < c["hi"], v, c["hi"]).astype(F32)
    v = np.where(np.isnan(x), x, v).astype(F32)
    x2 = (v * v).astype(F32)
    p = fma_f32(x2, c["a9"], c["a7"])
    for k in ("a5", "a3", "a1"):
        p = fma_f32(x2, p, c[k])
    q = fma_f32(x2, c["b10"], c["b8"])
    for k in ("b6", "b4", "b2", "b0"):
        q = fma_f32(x2, q, c[k])
    p = (v * p).astype(F32)
    r = ((p / q).astype(F32) + F32(0.5)).astype(F32)
    return np.where(np.isnan(r) | (r > 0), r, F32(0)).astype(F32)  # vmaxps(0, r)


_LOGISTIC = {
    "lo": -18.0, "hi": 18.0,
    "a9": 4.37031012579801e-11, "a7": 1.15627324459942e-07, "a5": 6.08574864600143e-05,
    "a3": 8.51377133304701e-03, "a1": 2.48287947061529e-01,
    "b10": 6.10247389755681e-13, "b8": 5.76102136993427e-09, "b6": 6.29106785017040e-06,
    "b4": 1.70198817374094e-03, "b2": 1.16817656904453e-01, "b0": 9.93151921023180e-01,
}  # fmt: skip
"""MLAS's logistic constants (Eigen's)."""


def _requantize_float_table(values: np.ndarray, y_scale: Any, y_zero_point: Any,
                            dtype: Any) -> np.ndarray:
    return quantize(values, np.asarray(_scalar(y_scale), F32),
                    np.asarray(_scalar(_zp(y_zero_point, dtype), np.int64)).astype(dtype),
                    out_dtype=np.dtype(dtype).name)


def sigmoid_table(dtype: Any, x_scale: Any, x_zero_point: Any, y_scale: Any,
                  y_zero_point: Any) -> np.ndarray:
    """``QLinearSigmoid``'s table: the 256 inputs dequantized, :func:`mlas_logistic`,
    quantized (MlasQuantizeLinear)."""
    d = _dequantize_table(dtype, x_scale, x_zero_point)
    return _requantize_float_table(mlas_logistic(d), y_scale, y_zero_point, dtype)


def leaky_relu_table(dtype: Any, x_scale: Any, x_zero_point: Any, y_scale: Any,
                     y_zero_point: Any, alpha: float) -> np.ndarray:
    """``QLinearLeakyRelu``'s table: ``v >= 0 ? v : alpha * v`` (float32) on the 256
    dequantized inputs, quantized."""
    d = _dequantize_table(dtype, x_scale, x_zero_point)
    f = np.where(d >= 0, d, (F32(alpha) * d).astype(F32)).astype(F32)
    return _requantize_float_table(f, y_scale, y_zero_point, dtype)


def cast_table(dtype: Any, x_scale: Any, x_zero_point: Any, y_scale: Any,
               y_zero_point: Any, out_dtype: Any = None) -> np.ndarray:
    """The table onnxruntime's QLinearConcat applies to an input whose scale or zero
    point differs from the output's: quantize(dequantize(x))."""
    d = _dequantize_table(dtype, x_scale, x_zero_point)
    return _requantize_float_table(d, y_scale, y_zero_point, out_dtype or dtype)


def sigmoid(x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any,
            y_zero_point: Any) -> np.ndarray:
    """``QLinearSigmoid``: a table lookup (:func:`sigmoid_table`)."""
    x = np.asarray(x)
    return lookup(x, sigmoid_table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point))


def leaky_relu(x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any,
               y_zero_point: Any, *, alpha: float = 0.01) -> np.ndarray:
    """``QLinearLeakyRelu``: a table lookup (:func:`leaky_relu_table`)."""
    x = np.asarray(x)
    table = leaky_relu_table(x.dtype, x_scale, x_zero_point, y_scale, y_zero_point, alpha)
    return lookup(x, table)


def concat(
    inputs: Sequence[np.ndarray], scales: Sequence[Any], zero_points: Sequence[Any],
    y_scale: Any, y_zero_point: Any, *, axis: int = 0,
) -> np.ndarray:  # fmt: skip
    """``QLinearConcat``: each input whose scale and zero point equal the output's is
    copied, the others go through :func:`cast_table`; then concatenated."""
    ys = F32(_scalar(y_scale))
    dtype = np.asarray(inputs[0]).dtype
    yz = int(_scalar(_zp(y_zero_point, dtype), np.int64))
    parts = []
    for x, s, z in zip(inputs, scales, zero_points):
        x = np.asarray(x)
        if F32(_scalar(s)) == ys and int(_scalar(_zp(z, dtype), np.int64)) == yz:
            parts.append(x)
        else:
            parts.append(lookup(x, cast_table(dtype, s, z, y_scale, y_zero_point)))
    return np.concatenate(parts, axis=axis)


# ----------------------------------------------------------------- softmax


def softmax_exp_table(x_scale: Any, reduce_len: int, signed: bool) -> np.ndarray:
    """``QLinearSoftmax``'s exponent table (float32): ``exp((i - 255 + shift) * x_scale)``
    in double for i = 0..255, with ``shift = max(0, log(FLT_MAX / reduce_len) - 5) /
    x_scale`` keeping the row sum finite; for int8 inputs entry ``i`` is stored at
    ``uint8(i - 128)``."""
    xs = float(F32(_scalar(x_scale)))
    shift = math.log(float(np.finfo(F32).max) / reduce_len)
    shift = max(0.0, shift - 5.0) / xs
    i = np.arange(256, dtype=np.float64)
    vals = np.exp((i - 255.0 + shift) * xs).astype(F32)
    table = np.zeros(256, F32)
    index = ((np.arange(256) - 128) % 256) if signed else np.arange(256)
    table[index] = vals
    return table


def softmax(x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any,
            y_zero_point: Any, *, axis: int = -1) -> np.ndarray:
    """``QLinearSoftmax`` (opset 13 semantics: along one axis): per row, the exponent
    table shifted so the row's maximum reads entry 255 (uint8) or 127 (int8 after the
    shift), the float32 sum of the row's entries taken in order, and each output
    ``nearbyint(entry * floor(1 / y_scale) / sum) + y_zero_point``, saturated.  The
    input zero point does not matter
    (softmax ignores a shift)."""
    x = np.asarray(x)
    signed = x.dtype == np.int8
    ax = axis % x.ndim
    xt = np.moveaxis(x, ax, -1)
    d = xt.shape[-1]
    table = softmax_exp_table(x_scale, d, signed)
    ys = F32(math.floor(F32(1.0) / F32(_scalar(y_scale))))
    yz = int(_scalar(_zp(y_zero_point, x.dtype), np.int64))
    rows = xt.reshape(-1, d)
    if signed:
        adj = 127 - rows.max(axis=1, keepdims=True).astype(np.int32)
        idx = ((adj + rows.astype(np.int32)) % 256).astype(np.int64)
    else:
        idx = (255 - rows.max(axis=1, keepdims=True).astype(np.int64)) + rows.astype(np.int64)
    vt = table[idx]
    vsum = np.cumsum(vt, axis=1, dtype=F32)[:, -1:]  # a sequential float32 sum
    with np.errstate(all="ignore"):
        q = np.rint(((vt * ys).astype(F32) / vsum).astype(F32)).astype(np.int64) + yz
    out = saturate(q, x.dtype)
    return np.moveaxis(out.reshape(xt.shape), -1, ax)


# ----------------------------------------------------------------- pooling


def _quantize_value(y: np.ndarray, y_scale: Any, y_zero_point: int, dtype: Any) -> np.ndarray:
    """QLinearAveragePool's ``nearbyintf(y / y_scale + y_zero_point)``, clamped (the
    zero point added in float32 before rounding)."""
    v = ((y / F32(y_scale)).astype(F32) + F32(y_zero_point)).astype(F32)
    return saturate(cvtps2dq(v), dtype)


def global_avg_pool2d(x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any,
                      y_zero_point: Any) -> np.ndarray:
    """``QLinearGlobalAveragePool`` (MLAS): the int32 sum of each channel's image minus
    ``zp * size``, requantized with the multiplier ``x_scale / (y_scale * size)`` (float32),
    as :func:`requantize`.  Channels first, output of spatial size 1."""
    x = np.asarray(x)
    n, c = x.shape[:2]
    size = int(math.prod(x.shape[2:]))
    xz = int(_scalar(_zp(x_zero_point, x.dtype), np.int64))
    acc = x.reshape(n, c, size).astype(np.int64).sum(axis=2) - xz * size
    scale = F32(F32(_scalar(x_scale)) / F32(F32(_scalar(y_scale)) * F32(size)))
    yz = _zp(y_zero_point, x.dtype)
    y = requantize(acc.astype(np.int32), np.asarray(scale), None, np.asarray(F32(1)), yz,
                   out_dtype=x.dtype.name)
    return y.reshape((n, c) + (1,) * (x.ndim - 2))


def avg_pool2d(
    x: np.ndarray, x_scale: Any, x_zero_point: Any, y_scale: Any, y_zero_point: Any, *,
    pool_size: Any = (1, 1), strides: Any = (1, 1), padding: Any = (0, 0, 0, 0),
    ceil_mode: bool = False, count_include_pad: bool = False,
) -> np.ndarray:  # fmt: skip
    """``QLinearAveragePool`` (NCHW): when the window is the whole image and there is no
    padding, :func:`global_avg_pool2d`; otherwise the input dequantized to float32,
    each window summed in float32 row by row (only the taps inside the input), divided
    by the count (the kernel size with ``count_include_pad``, else the taps inside the
    input), and quantized as ``nearbyintf(v / y_scale + y_zero_point)``."""
    from plait.runtime.numpy_ops import pool_out_size
    from plait.runtime.window import expand_ints, expand_padding

    x = np.asarray(x)
    kh, kw = expand_ints(pool_size, 2)
    sh, sw = expand_ints(strides, 2)
    pt, pl, pb, pr = expand_padding(padding, 2)
    n, c, h, w = x.shape
    if (kh, kw) == (h, w) and not any((pt, pl, pb, pr)):
        return global_avg_pool2d(x, x_scale, x_zero_point, y_scale, y_zero_point)
    oh = pool_out_size(h, kh, sh, pt, pb, 1, ceil_mode)
    ow = pool_out_size(w, kw, sw, pl, pr, 1, ceil_mode)
    xf = dequantize(x, x_scale, _zp(x_zero_point, x.dtype))
    yz = int(_scalar(_zp(y_zero_point, x.dtype), np.int64))
    out = np.empty((n, c, oh, ow), x.dtype)
    for i in range(oh):
        hs = i * sh - pt
        he = min(hs + kh, h)
        hs = max(hs, 0)
        for j in range(ow):
            ws = j * sw - pl
            we = min(ws + kw, w)
            ws = max(ws, 0)
            acc = np.zeros((n, c), F32)
            for r in range(hs, he):
                for q in range(ws, we):
                    acc = (acc + xf[:, :, r, q]).astype(F32)
            count = kh * kw if count_include_pad else (he - hs) * (we - ws)
            avg = (acc / F32(count)).astype(F32)
            out[:, :, i, j] = _quantize_value(avg, _scalar(y_scale), yz, x.dtype)
    return out


def max_pool2d(x: np.ndarray, **attrs: Any) -> np.ndarray:
    """Max pooling of quantized values: exact (the order of quantized values is that of
    the real values they stand for, the scale being positive); padding never wins."""
    from plait.runtime import numpy_ops as npo

    return npo.max_pool2d(np.asarray(x), **attrs)


# ----------------------------------------------------------- float islands


def layer_norm(
    x: np.ndarray, x_scale: Any, x_zero_point: Any, gamma: np.ndarray, beta: np.ndarray,
    y_scale: Any, y_zero_point: Any, *, axes: Sequence[int] = (-1,), epsilon: float = 1e-5,
) -> np.ndarray:  # fmt: skip
    """A layer normalization between quantized tensors, as onnxruntime runs
    ``DequantizeLinear -> LayerNormalization -> QuantizeLinear`` (it has no quantized
    kernel): dequantize, normalize in float32, quantize.  The float normalization is
    plait's; onnxruntime's may differ in the last bit, which moves an output by one
    step only where the value lies on a rounding boundary."""
    from plait.runtime import numpy_ops as npo

    x = np.asarray(x)
    xf = dequantize(x, x_scale, _zp(x_zero_point, x.dtype))
    yf = npo.layer_norm(xf, np.asarray(gamma, F32), np.asarray(beta, F32), axes=tuple(axes),
                        epsilon=epsilon)
    return quantize(yf, y_scale, _zp(y_zero_point, x.dtype), out_dtype=x.dtype.name)


def dynamic_quantize(x: np.ndarray, *, out_dtype: str = "uint8") -> tuple[np.ndarray, ...]:
    """``DynamicQuantizeLinear`` (onnxruntime's ``GetQuantizationParameter``): the range
    ``[min(x, 0), max(x, 0)]``, ``scale = (max - min) / (qmax - qmin)`` (1 when the range
    is empty), ``zero_point = round_half_even(clamp(qmin - min / scale))``, then
    :func:`quantize`.  Returns ``(y, scale, zero_point)``."""
    x = np.asarray(x, F32)
    lo_q, hi_q = qrange(out_dtype)
    mn = F32(min(F32(x.min()) if x.size else F32(0), F32(0)))
    mx = F32(max(F32(x.max()) if x.size else F32(0), F32(0)))
    scale = F32(1.0) if mx == mn else F32(F32(mx - mn) / F32(hi_q - lo_q))
    init = F32(F32(lo_q) - F32(mn / scale))
    zp = np.asarray(np.rint(min(max(init, F32(lo_q)), F32(hi_q))), np.int64).astype(out_dtype)
    y = quantize(x, np.asarray(scale), zp, out_dtype=out_dtype)
    return y, np.asarray(scale, F32), np.asarray(zp)


__all__ = [
    "EIGHT_BIT", "QRANGES", "add", "avg_pool2d", "cast_table", "concat", "conv2d",
    "cvtps2dq", "dequantize", "dynamic_quantize", "fma_f32", "global_avg_pool2d",
    "layer_norm", "leaky_relu", "leaky_relu_table", "lookup", "matmul", "max_pool2d",
    "mlas_logistic", "mul", "param", "qrange", "quantize", "quantize_op", "requantize",
    "requantize_op", "saturate",
    "sigmoid", "sigmoid_table", "softmax", "softmax_exp_table", "table_inputs",
]


# ----------------------------------------------------- weight-only quantization


def matmul_nbits(
    a: np.ndarray, b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray,
    bias: np.ndarray | None = None, *, K: int, N: int, bits: int = 4, block_size: int,
    accuracy_level: int = 0,
) -> np.ndarray:  # fmt: skip
    """``MatMulNBits``: ``a @ W.T (+ bias)``, ``W`` the ``N x K`` weight dequantized
    element by element, ``float32(q - z) * scale`` (:mod:`.nbits`), the product in
    float32; with ``accuracy_level`` 4 the activations quantized to int8 per block and
    each block's sum an exact integer (:func:`.nbits.matmul_int8_activations`)."""
    a = np.asarray(a, F32)
    if accuracy_level == ACT_INT8_LEVEL:
        y = matmul_int8_activations(a.reshape(-1, K), b, scales, zero_points, K, bits,
                                    block_size).reshape(a.shape[:-1] + (N,))
    else:
        w = dequantize_weights(b, scales, zero_points, K, bits, block_size)
        y = np.matmul(a, w.T)
    if bias is not None:
        y = y + np.asarray(bias, F32)
    return np.asarray(y, F32)
