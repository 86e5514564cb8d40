"""Quantization ops as plain arithmetic: ``QuantizeLinear``, ``DequantizeLinear``,
``DynamicQuantizeLinear``, ``QLinearMatMul``, ``QLinearConv`` (8- and 16-bit integer
types; float8 and 4-bit types are not supported).  A quantized-ops dialect can later
keep them as ops of their own."""

from __future__ import annotations

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter
from .common import cast, dtype_of, norm_axis, reshape, scalar, shape_of
from .nn import _spatial, _window_attrs

_RANGES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
}


def _per_axis(ctx: NodeContext, v: Expr, shape_x: tuple, axis: int, block: int) -> Expr:
    """A scale or zero point shaped to broadcast against the input: a scalar stays, a
    1-D one runs along ``axis``, a blocked one is repeated ``block`` times."""
    shape = shape_of(ctx, v)
    if len(shape) == 0:
        return v
    if len(shape) == 1 and shape[0] == 1:
        return ctx.call("reshape", v, shape=())
    rank = len(shape_x)
    axis = norm_axis(ctx, axis, rank)
    size = shape_x[axis]
    if block:
        v = ctx.call("repeat", v, repeats=block, axis=axis)
        got = shape_of(ctx, v)[axis]
        if isinstance(size, int) and isinstance(got, int) and got > size:
            v = ctx.call("strided_slice", v, axes=(axis,), begin=(0,), end=(size,))
        return v
    if len(shape) != 1:
        ctx.fail(f"a scale or zero point must be a scalar or 1-D, got shape {shape}")
    dims = [1] * rank
    dims[axis] = -1
    return reshape(ctx, v, dims)


def _quant_dtype(ctx: NodeContext, zp_index: int) -> str:
    if ctx.has(zp_index):
        d = ctx.dtype(zp_index)
    elif ctx.has_attr("output_dtype") and ctx.attr_int("output_dtype"):
        from .common import onnx_dtype

        d = onnx_dtype(ctx, ctx.attr_int("output_dtype"), "output_dtype")
    else:
        d = "uint8"
    if d not in _RANGES:
        ctx.unsupported(f"quantizing to {d}")
    return d


@converter("QuantizeLinear", since=10)
def convert_quantize_linear(ctx: NodeContext) -> Expr:
    """``clip(round(x / scale) + zero_point)`` cast to the quantized type."""
    shape = ctx.shape(0)
    axis = ctx.attr_int("axis", 1)
    block = ctx.attr_int("block_size", 0)
    qdtype = _quant_dtype(ctx, 2)
    x = ctx.x(0)
    scale = _per_axis(ctx, ctx.x(1), shape, axis, block)
    sdt = dtype_of(ctx, scale)
    work = cast(ctx, x, sdt) if ctx.dtype(0) != sdt else x
    y = ctx.call("round", ctx.call("divide", work, scale))
    y = cast(ctx, y, "float64")
    if ctx.has(2):
        zp = _per_axis(ctx, cast(ctx, ctx.x(2), "float64"), shape, axis, block)
        y = ctx.call("add", y, zp)
    lo, hi = _RANGES[qdtype]
    return cast(ctx, ctx.call("clip", y, min=float(lo), max=float(hi)), qdtype)


@converter("DequantizeLinear", since=10)
def convert_dequantize_linear(ctx: NodeContext) -> Expr:
    """``(x - zero_point) * scale``."""
    if ctx.dtype(0) not in _RANGES:
        ctx.unsupported(f"dequantizing {ctx.dtype(0)}")
    shape = ctx.shape(0)
    axis = ctx.attr_int("axis", 1)
    block = ctx.attr_int("block_size", 0)
    x = cast(ctx, ctx.x(0), "float32")
    if ctx.has(2):
        zp = _per_axis(ctx, cast(ctx, ctx.x(2), "float32"), shape, axis, block)
        x = ctx.call("subtract", x, zp)
    scale = _per_axis(ctx, ctx.x(1), shape, axis, block)
    out = dtype_of(ctx, scale)
    if ctx.has_attr("output_dtype") and ctx.attr_int("output_dtype"):
        from .common import onnx_dtype

        out = onnx_dtype(ctx, ctx.attr_int("output_dtype"), "output_dtype")
    y = ctx.call("multiply", x, cast(ctx, scale, "float32"))
    return cast(ctx, y, out)


@converter("DynamicQuantizeLinear", since=11)
def convert_dynamic_quantize_linear(ctx: NodeContext) -> list[Expr]:
    """uint8 quantization with the scale and zero point from the input's range."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    zero = scalar(ctx, 0, dt)
    hi = ctx.call("maximum", ctx.call("max", x), zero)
    lo = ctx.call("minimum", ctx.call("min", x), zero)
    span = ctx.call("subtract", hi, lo)
    span = ctx.call("where", ctx.call("equal", span, zero), scalar(ctx, 1, dt), span)
    y_scale = ctx.call("divide", span, scalar(ctx, 255, dt))
    zp0 = ctx.call("subtract", zero, ctx.call("divide", lo, y_scale))
    zp = ctx.call("round", ctx.call("clip", zp0, min=0.0, max=255.0))
    q = ctx.call("add", ctx.call("round", ctx.call("divide", x, y_scale)), zp)
    q = cast(ctx, ctx.call("clip", q, min=0.0, max=255.0), "uint8")
    return [q, y_scale, cast(ctx, zp, "uint8")]


def _requantize(ctx: NodeContext, acc: Expr, scale: Expr, zp_index: int, fallback: str) -> Expr:
    y = ctx.call("multiply", cast(ctx, acc, "float64"), cast(ctx, scale, "float64"))
    if ctx.has(zp_index):
        y = ctx.call("add", y, cast(ctx, ctx.x(zp_index), "float64"))
        qdtype = ctx.dtype(zp_index)
    else:
        qdtype = fallback
    if qdtype not in _RANGES:
        ctx.unsupported(f"quantizing to {qdtype}")
    lo, hi = _RANGES[qdtype]
    y = ctx.call("round", ctx.call("clip", ctx.call("round", y), min=float(lo), max=float(hi)))
    return cast(ctx, y, qdtype)


@converter("QLinearMatMul", since=10)
def convert_qlinear_matmul(ctx: NodeContext) -> Expr:
    """An int32 ``matmul`` of the zero-point-corrected inputs, requantized."""
    a = cast(ctx, ctx.x(0), "int32")
    if ctx.has(2):
        a = ctx.call("subtract", a, cast(ctx, ctx.x(2), "int32"))
    b = cast(ctx, ctx.x(3), "int32")
    if ctx.has(5):
        b = ctx.call("subtract", b, cast(ctx, ctx.x(5), "int32"))
    acc = ctx.call("matmul", a, b)
    sdt = ctx.dtype(1)
    scale = ctx.call(
        "divide", ctx.call("multiply", ctx.x(1), cast(ctx, ctx.x(4), sdt)), cast(ctx, ctx.x(6), sdt)
    )
    return _requantize(ctx, acc, scale, 7, ctx.dtype(0))


@converter("QLinearConv", since=10)
def convert_qlinear_conv(ctx: NodeContext) -> Expr:
    """An int32 convolution of the zero-point-corrected inputs plus the bias,
    requantized (per-channel weight scales supported)."""
    nd = _spatial(ctx, "convolution")
    wshape = ctx.shape(3)
    kernel = ctx.attr_ints("kernel_shape", None) or [int(k) for k in wshape[2:]]  # type: ignore[arg-type]
    _, strides, dilations, pads = _window_attrs(ctx, nd, kernel)
    x = ctx.call("subtract", cast(ctx, ctx.x(0), "int32"), cast(ctx, ctx.x(2), "int32"))
    w = cast(ctx, ctx.x(3), "int32")
    zw = cast(ctx, ctx.x(5), "int32")
    if len(shape_of(ctx, zw)) == 1 and shape_of(ctx, zw)[0] != 1:
        zw = reshape(ctx, zw, [-1] + [1] * (nd + 1))
    w = ctx.call("subtract", w, zw)
    acc = ctx.call(
        f"conv{nd}d", x, w, strides=tuple(strides), padding=tuple(pads),
        dilation=tuple(dilations), groups=ctx.attr_int("group", 1),
    )  # fmt: skip
    if ctx.has(8):
        acc = ctx.call("add", acc, reshape(ctx, cast(ctx, ctx.x(8), "int32"), [-1] + [1] * nd))
    w_scale = ctx.x(4)
    if len(shape_of(ctx, w_scale)) == 1 and shape_of(ctx, w_scale)[0] != 1:
        w_scale = reshape(ctx, w_scale, [-1] + [1] * nd)
    sdt = ctx.dtype(1)
    scale = ctx.call(
        "divide", ctx.call("multiply", ctx.x(1), cast(ctx, w_scale, sdt)), cast(ctx, ctx.x(6), sdt)
    )
    return _requantize(ctx, acc, scale, 7, ctx.dtype(0))
