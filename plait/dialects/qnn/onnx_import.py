"""ONNX converters of the quantized ops (the ``onnx`` frontend of the qnn dialect).

The dialect names this module in its registration (``frontends={"onnx": ...}``) and the
ONNX frontend imports it before converting a model, so the frontend names no dialect and
the dialect loads its converters only with the frontend (and ``onnx``).

Every quantized form onnxruntime's quantization tools write becomes qnn ops:
``QuantizeLinear``/``DequantizeLinear`` (all opsets: per tensor, per axis, blocked;
also in the ``com.microsoft`` domain), ``QLinearConv``, ``QLinearMatMul``,
``MatMulInteger``, ``ConvInteger``, ``DynamicQuantizeLinear`` and the ``com.microsoft``
ops ``QGemm``, ``QLinearAdd``, ``QLinearMul``, ``QLinearConcat``,
``QLinearGlobalAveragePool``, ``QLinearAveragePool``, ``QLinearSigmoid``,
``QLinearLeakyRelu``, ``QLinearSoftmax``, ``DynamicQuantizeMatMul``,
``MatMulIntegerToFloat``, ``QAttention`` and ``MatMulNBits`` (weight-only int4/int8,
:mod:`.onnx_nbits`).  A product and its requantization are a
``qnn.conv2d``/``qnn.matmul`` (int32), an int32 ``add`` of the bias and a
``qnn.requantize`` whose input scale is the float32 product of the input scales, as
onnxruntime computes it.  ``DequantizeLinear`` is kept even on constants (quantized
weights), for ``qnn.Canonicalize`` to fold into the op that reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.frontend.onnx.context import NodeContext
from plait.frontend.onnx.converters.common import (
    cast,
    norm_axis,
    onnx_dtype,
    reshape,
    shape_of,
)
from plait.frontend.onnx.converters.nn import AUTO_PAD, spatial_rank, window_attrs
from plait.frontend.onnx.registry import converter
from plait.ir.expr import Expr

from .reference import QRANGES

MS = "com.microsoft"
_EIGHT_BIT = ("uint8", "int8")


def _zero_point(ctx: NodeContext, i: int, dtype: str) -> Expr:
    """Input ``i`` (a zero point) or a zero of ``dtype`` when it is omitted."""
    if ctx.has(i):
        if ctx.dtype(i) != dtype:
            ctx.fail(f"input {i} (a zero point) has dtype {ctx.dtype(i)}, expected {dtype}")
        return ctx.x(i)
    return ctx.constant(0, dtype)


def _scale(ctx: NodeContext, i: int) -> Expr:
    """Input ``i`` (a scale) as float32."""
    return cast(ctx, ctx.x(i), "float32")


def _quantized(ctx: NodeContext, i: int, dtypes: tuple[str, ...] = _EIGHT_BIT) -> str:
    d = ctx.dtype(i)
    if d not in dtypes:
        ctx.unsupported(f"quantized input {i} of dtype {d} (plait takes {', '.join(dtypes)})")
    return d


def _quant_dtype(ctx: NodeContext, zp_index: int) -> str:
    """The dtype QuantizeLinear quantizes to: its zero point's, else ``output_dtype``,
    else uint8."""
    if ctx.has(zp_index):
        d = ctx.dtype(zp_index)
    elif ctx.has_attr("output_dtype") and ctx.attr_int("output_dtype"):
        d = onnx_dtype(ctx, ctx.attr_int("output_dtype"), "output_dtype")
    else:
        d = "uint8"
    if d not in QRANGES or d == "int32":
        ctx.unsupported(f"quantizing to {d}")
    return d


def _axis_attrs(ctx: NodeContext) -> dict[str, int]:
    """``axis`` (checked only when the scale is per axis or blocked: a per-tensor scale
    ignores it) and ``block_size``."""
    block = ctx.attr_int("block_size", 0)
    scale_shape = ctx.shape(1)
    per_tensor = not block and (len(scale_shape) == 0 or tuple(scale_shape) == (1,))
    rank = ctx.rank(0)
    axis = ctx.attr_int("axis", 1)
    if per_tensor:
        axis = 0
    else:
        axis = norm_axis(ctx, axis, max(rank, 1))
    return {"axis": axis, "block_size": block}


def _param_1d(ctx: NodeContext, e: Expr) -> Expr:
    """A per-tensor parameter given as a 1-element 1-D tensor, as a scalar."""
    shape = shape_of(ctx, e)
    if len(shape) == 1 and shape[0] == 1:
        return reshape(ctx, e, [])
    return e


@converter("QuantizeLinear", since=10)
@converter("QuantizeLinear", domain=MS)
def convert_quantize_linear(ctx: NodeContext) -> Expr:
    """``qnn.quantize`` (per tensor, per axis, blocked; to the zero point's dtype)."""
    dtype = _quant_dtype(ctx, 2)
    attrs = _axis_attrs(ctx)
    s, z = _scale(ctx, 1), _zero_point(ctx, 2, dtype)
    if not attrs["block_size"]:
        s, z = _param_1d(ctx, s), _param_1d(ctx, z)
    return ctx.call("qnn.quantize", cast(ctx, ctx.x(0), "float32"), s, z, **attrs)


@converter("DequantizeLinear", since=10)
@converter("DequantizeLinear", domain=MS)
def convert_dequantize_linear(ctx: NodeContext) -> Expr:
    """``qnn.dequantize``, kept on constants (for qnn.Canonicalize)."""
    dtype = _quantized(ctx, 0, tuple(QRANGES))
    attrs = _axis_attrs(ctx)
    s, z = _scale(ctx, 1), _zero_point(ctx, 2, dtype)
    if not attrs["block_size"]:
        s, z = _param_1d(ctx, s), _param_1d(ctx, z)
    y = ctx.call_kept("qnn.dequantize", ctx.x(0), s, z, **attrs)
    out = ctx.dtype(1)
    if ctx.has_attr("output_dtype") and ctx.attr_int("output_dtype"):
        out = onnx_dtype(ctx, ctx.attr_int("output_dtype"), "output_dtype")
    return cast(ctx, y, out)


@converter("DynamicQuantizeLinear", since=11)
def convert_dynamic_quantize_linear(ctx: NodeContext) -> list[Expr]:
    """``qnn.dynamic_quantize``: (y, scale, zero_point)."""
    t = ctx.call("qnn.dynamic_quantize", cast(ctx, ctx.x(0), "float32"))
    return [ctx.item(t, i) for i in range(3)]


# ------------------------------------------------------------------- products


def _input_scale(ctx: NodeContext, *scales: Expr) -> Expr:
    """The float32 product of scales, in onnxruntime's order (folded on constants)."""
    out = scales[0]
    for s in scales[1:]:
        out = ctx.call("multiply", out, s)
    return out


def _requantize(ctx: NodeContext, acc: Expr, in_scale: Expr, ys: int, yz: int,
                axis: int) -> Expr:
    dtype = ctx.dtype(yz) if ctx.has(yz) else "uint8"
    zo = _param_1d(ctx, _zero_point(ctx, yz, dtype))
    return ctx.call("qnn.requantize", acc, in_scale, ctx.constant(0, "int32"),
                    _param_1d(ctx, _scale(ctx, ys)), zo, axis=axis)


def _conv_to_2d(ctx: NodeContext, x: Expr, w: Expr, nd: int) -> tuple[Expr, Expr]:
    """A 1-D convolution's data and weight with a spatial axis of size 1 in front."""
    if nd == 2:
        return x, w
    xs, ws = shape_of(ctx, x), shape_of(ctx, w)
    return (reshape(ctx, x, [xs[0], xs[1], 1, xs[2]]),
            reshape(ctx, w, [ws[0], ws[1], 1, ws[2]]))


def _conv(ctx: NodeContext, x: Expr, w: Expr, zx: Expr, zw: Expr, wi: int) -> Expr:
    """``qnn.conv2d`` of a ConvInteger/QLinearConv node (1-D as 2-D); weight ``wi``."""
    nd = spatial_rank(ctx, "quantized convolution")
    wshape = ctx.shape(wi)
    kernel = ctx.attr_ints("kernel_shape", None) or [int(k) for k in wshape[2:]]  # type: ignore[arg-type]
    _, strides, dilations, pads = window_attrs(ctx, nd, kernel)
    if nd == 1:
        strides, dilations = [1, *strides], [1, *dilations]
        pads = [0, pads[0], 0, pads[1]]
    x2, w2 = _conv_to_2d(ctx, x, w, nd)
    zw_shape = shape_of(ctx, zw)
    if len(zw_shape) == 1 and zw_shape[0] == 1:
        zw = reshape(ctx, zw, [])
    acc = ctx.call("qnn.conv2d", x2, w2, _param_1d(ctx, zx), zw, strides=tuple(strides),
                   padding=tuple(pads), dilation=tuple(dilations),
                   groups=ctx.attr_int("group", 1))
    if nd == 1:
        s = shape_of(ctx, acc)
        acc = reshape(ctx, acc, [s[0], s[1], s[3]])
    return acc


@converter("ConvInteger", since=10, attr_choices={"auto_pad": AUTO_PAD})
def convert_conv_integer(ctx: NodeContext) -> Expr:
    """``qnn.conv2d`` (int32)."""
    dx, dw = _quantized(ctx, 0), _quantized(ctx, 1)
    return _conv(ctx, ctx.x(0), ctx.x(1), _zero_point(ctx, 2, dx), _zero_point(ctx, 3, dw), 1)


@converter("QLinearConv", since=10, attr_choices={"auto_pad": AUTO_PAD})
def convert_qlinear_conv(ctx: NodeContext) -> Expr:
    """``qnn.conv2d``, plus the int32 bias, then ``qnn.requantize`` with the input scale
    ``x_scale * w_scale`` (per output channel)."""
    dx, dw = _quantized(ctx, 0), _quantized(ctx, 3)
    acc = _conv(ctx, ctx.x(0), ctx.x(3), _zero_point(ctx, 2, dx), _zero_point(ctx, 5, dw), 3)
    nd = len(shape_of(ctx, acc)) - 2
    if ctx.has(8):
        acc = ctx.call("add", acc, reshape(ctx, cast(ctx, ctx.x(8), "int32"), [-1] + [1] * nd))
    ws = _param_1d(ctx, _scale(ctx, 4))
    return _requantize(ctx, acc, _input_scale(ctx, _param_1d(ctx, _scale(ctx, 1)), ws), 6, 7, 1)


def _matmul(ctx: NodeContext, a: Expr, b: Expr, za: Expr, zb: Expr) -> Expr:
    zb_shape = shape_of(ctx, zb)
    if len(zb_shape) > 1:
        if any(d != 1 for d in zb_shape[:-1]):
            ctx.unsupported("a zero point of b that is not per tensor or per column")
        zb = reshape(ctx, zb, [zb_shape[-1]])
    za_shape = shape_of(ctx, za)
    if len(za_shape) > 1:
        if any(d != 1 for d in za_shape[:-2]) or za_shape[-1] != 1:
            ctx.unsupported("a zero point of a that is not per tensor or per row")
        za = reshape(ctx, za, [za_shape[-2]])
    return ctx.call("qnn.matmul", a, b, _param_1d(ctx, za), _param_1d(ctx, zb))


@converter("MatMulInteger", since=10)
def convert_matmul_integer(ctx: NodeContext) -> Expr:
    """``qnn.matmul`` (int32)."""
    da, db = _quantized(ctx, 0), _quantized(ctx, 1)
    return _matmul(ctx, ctx.x(0), ctx.x(1), _zero_point(ctx, 2, da), _zero_point(ctx, 3, db))


@converter("QLinearMatMul", since=10)
def convert_qlinear_matmul(ctx: NodeContext) -> Expr:
    """``qnn.matmul`` then ``qnn.requantize`` (b's scale per column or per tensor)."""
    da, db = _quantized(ctx, 0), _quantized(ctx, 3)
    acc = _matmul(ctx, ctx.x(0), ctx.x(3), _zero_point(ctx, 2, da), _zero_point(ctx, 5, db))
    bs = _scale(ctx, 4)
    if len(shape_of(ctx, bs)) > 1:
        bs = reshape(ctx, bs, [shape_of(ctx, bs)[-1]])
    in_scale = _input_scale(ctx, _param_1d(ctx, _scale(ctx, 1)), _param_1d(ctx, bs))
    return _requantize(ctx, acc, in_scale, 6, 7, -1)


def _float_output(ctx: NodeContext, acc: Expr, scale: Expr, bias: int | None) -> Expr:
    """``float32(acc) * scale`` (per column or per tensor), plus the float bias."""
    y = ctx.call("qnn.dequantize", acc, scale, ctx.constant(0, "int32"),
                 axis=len(shape_of(ctx, acc)) - 1)
    if bias is not None and ctx.has(bias):
        y = ctx.call("add", y, cast(ctx, ctx.x(bias), "float32"))
    return y


@converter("MatMulIntegerToFloat", domain=MS)
def convert_matmul_integer_to_float(ctx: NodeContext) -> Expr:
    """``qnn.matmul``, dequantized with ``a_scale * b_scale``, plus the bias."""
    da, db = _quantized(ctx, 0), _quantized(ctx, 1)
    acc = _matmul(ctx, ctx.x(0), ctx.x(1), _zero_point(ctx, 4, da), _zero_point(ctx, 5, db))
    scale = _input_scale(ctx, _param_1d(ctx, _scale(ctx, 2)), _param_1d(ctx, _scale(ctx, 3)))
    return _float_output(ctx, acc, scale, 6)


@converter("DynamicQuantizeMatMul", domain=MS)
def convert_dynamic_quantize_matmul(ctx: NodeContext) -> Expr:
    """``qnn.dynamic_quantize`` of A, ``qnn.matmul``, dequantized, plus the bias."""
    db = _quantized(ctx, 1)
    t = ctx.call("qnn.dynamic_quantize", cast(ctx, ctx.x(0), "float32"))
    q, s, z = (ctx.item(t, i) for i in range(3))
    acc = _matmul(ctx, q, ctx.x(1), z, _zero_point(ctx, 3, db))
    return _float_output(ctx, acc, _input_scale(ctx, s, _param_1d(ctx, _scale(ctx, 2))), 4)


@converter("QGemm", domain=MS)
def convert_qgemm(ctx: NodeContext) -> Expr:
    """``qnn.matmul`` of the (transposed) operands plus the int32 C, requantized with
    ``alpha * a_scale * b_scale`` (or dequantized when there is no y_scale)."""
    da, db = _quantized(ctx, 0), _quantized(ctx, 3)
    a, b = ctx.x(0), ctx.x(3)
    if ctx.attr_int("transA", 0):
        a = ctx.call("permute_dims", a, axes=(1, 0))
    if ctx.attr_int("transB", 0):
        b = ctx.call("permute_dims", b, axes=(1, 0))
    acc = _matmul(ctx, a, b, _zero_point(ctx, 2, da), _zero_point(ctx, 5, db))
    if ctx.has(6):
        acc = ctx.call("add", acc, cast(ctx, ctx.x(6), "int32"))
    alpha = ctx.attr_float("alpha", 1.0)
    scales = [_param_1d(ctx, _scale(ctx, 1)), _param_1d(ctx, _scale(ctx, 4))]
    if alpha != 1.0:
        scales.insert(0, ctx.constant(alpha, "float32"))
    in_scale = _input_scale(ctx, *scales)
    if not ctx.has(7):
        return _float_output(ctx, acc, in_scale, None)
    return _requantize(ctx, acc, in_scale, 7, 8, -1)


# ---------------------------------------------------------------- elementwise


def _io(ctx: NodeContext, first: int, dtype: str) -> list[Expr]:
    """A (scale, zero point) pair of inputs as per-tensor parameters."""
    return [_param_1d(ctx, _scale(ctx, first)), _param_1d(ctx, _zero_point(ctx, first + 1, dtype))]


def _binary(op: str) -> Any:
    def convert(ctx: NodeContext) -> Expr:
        dtype = _quantized(ctx, 0)
        return ctx.call(op, ctx.x(0), *_io(ctx, 1, dtype), ctx.x(3), *_io(ctx, 4, dtype),
                        *_io(ctx, 6, dtype))

    convert.__doc__ = f"``{op}`` (onnxruntime's arithmetic)."
    return convert


converter("QLinearAdd", domain=MS)(_binary("qnn.add"))
converter("QLinearMul", domain=MS)(_binary("qnn.mul"))


def _unary(op: str, **attr_defaults: Any) -> Any:
    def convert(ctx: NodeContext) -> Expr:
        dtype = _quantized(ctx, 0)
        attrs = {k: ctx.attr_float(k, v) for k, v in attr_defaults.items()}
        return ctx.call(op, ctx.x(0), *_io(ctx, 1, dtype), *_io(ctx, 3, dtype), **attrs)

    convert.__doc__ = f"``{op}`` (a table of the 256 values)."
    return convert


converter("QLinearSigmoid", domain=MS)(_unary("qnn.sigmoid"))
converter("QLinearLeakyRelu", domain=MS)(_unary("qnn.leaky_relu", alpha=0.01))


@converter("QLinearSoftmax", domain=MS)
def convert_qlinear_softmax(ctx: NodeContext) -> Expr:
    """``qnn.softmax`` along ``axis`` (opset < 13: over the flattened axes from ``axis``)."""
    dtype = _quantized(ctx, 0)
    opset = ctx.attr_int("opset", 13)
    rank = ctx.rank(0)
    axis = norm_axis(ctx, ctx.attr_int("axis", -1 if opset >= 13 else 1), rank)
    x = ctx.x(0)
    params = [*_io(ctx, 1, dtype), *_io(ctx, 3, dtype)]
    if opset >= 13:
        return ctx.call("qnn.softmax", x, *params, axis=axis)
    shape = shape_of(ctx, x)
    rows = reshape(ctx, x, [-1, int(np.prod(shape[axis:]))])  # type: ignore[arg-type]
    y = ctx.call("qnn.softmax", rows, *params, axis=1)
    return reshape(ctx, y, list(shape))


@converter("QLinearConcat", domain=MS)
def convert_qlinear_concat(ctx: NodeContext) -> Expr:
    """``qnn.concat`` (inputs whose scale differs go through a table)."""
    dtype = ctx.dtype(1)
    n = ctx.n_inputs
    if n < 5 or (n - 2) % 3:
        ctx.fail(f"expects y_scale, y_zero_point and (x, scale, zero point) triples, got "
                 f"{n} inputs")
    triples = [range(i, i + 3) for i in range(2, n, 3)]
    from plait.ir.expr import Tuple

    xs = Tuple(tuple(ctx.x(i) for i, _, _ in triples))
    ss = Tuple(tuple(_param_1d(ctx, _scale(ctx, j)) for _, j, _ in triples))
    zs = Tuple(tuple(_param_1d(ctx, _zero_point(ctx, k, dtype)) for _, _, k in triples))
    axis = norm_axis(ctx, ctx.attr_int("axis"), ctx.rank(2))
    return ctx.call("qnn.concat", xs, ss, zs, *_io(ctx, 0, dtype), axis=axis)


# -------------------------------------------------------------------- pooling


def _nchw(ctx: NodeContext, x: Expr) -> Expr:
    rank = len(shape_of(ctx, x))
    return ctx.call("permute_dims", x, axes=(0, rank - 1, *range(1, rank - 1)))


def _nhwc(ctx: NodeContext, y: Expr) -> Expr:
    rank = len(shape_of(ctx, y))
    return ctx.call("permute_dims", y, axes=(0, *range(2, rank), 1))


@converter("QLinearGlobalAveragePool", domain=MS)
def convert_qlinear_global_average_pool(ctx: NodeContext) -> Expr:
    """``qnn.global_avg_pool2d`` (1-D as 2-D; channels_last by a transpose)."""
    dtype = _quantized(ctx, 0)
    last = ctx.attr_int("channels_last", 0)
    x = _nchw(ctx, ctx.x(0)) if last else ctx.x(0)
    shape = shape_of(ctx, x)
    if len(shape) == 3:
        x = reshape(ctx, x, [shape[0], shape[1], 1, shape[2]])
    elif len(shape) != 4:
        ctx.unsupported(f"{len(shape) - 2}-D global average pooling")
    y = ctx.call("qnn.global_avg_pool2d", x, *_io(ctx, 1, dtype), *_io(ctx, 3, dtype))
    if len(shape) == 3:
        y = reshape(ctx, y, [shape[0], shape[1], 1])
    return _nhwc(ctx, y) if last else y


@converter("QLinearAveragePool", domain=MS, attr_choices={"auto_pad": AUTO_PAD})
def convert_qlinear_average_pool(ctx: NodeContext) -> Expr:
    """``qnn.avg_pool2d`` (1-D as 2-D; channels_last by a transpose)."""
    dtype = _quantized(ctx, 0)
    last = ctx.attr_int("channels_last", 0)
    x = _nchw(ctx, ctx.x(0)) if last else ctx.x(0)
    nd = len(shape_of(ctx, x)) - 2
    if nd not in (1, 2):
        ctx.unsupported(f"{nd}-D average pooling")
    kernel, strides, dilations, pads = window_attrs(ctx, nd)
    if any(d != 1 for d in dilations):
        ctx.unsupported("dilated quantized average pooling", "dilations")
    shape = shape_of(ctx, x)
    if nd == 1:
        x = reshape(ctx, x, [shape[0], shape[1], 1, shape[2]])
        kernel, strides, pads = [1, *kernel], [1, *strides], [0, pads[0], 0, pads[1]]
    y = ctx.call("qnn.avg_pool2d", x, *_io(ctx, 1, dtype), *_io(ctx, 3, dtype),
                 pool_size=tuple(kernel), strides=tuple(strides), padding=tuple(pads),
                 ceil_mode=bool(ctx.attr_int("ceil_mode", 0)),
                 count_include_pad=bool(ctx.attr_int("count_include_pad", 0)))
    if nd == 1:
        s = shape_of(ctx, y)
        y = reshape(ctx, y, [s[0], s[1], s[3]])
    return _nhwc(ctx, y) if last else y


# ------------------------------------------------------------------ attention


@converter("QAttention", domain=MS)
def convert_qattention(ctx: NodeContext) -> Expr:
    """The quantized QKV projection (``qnn.matmul`` dequantized with ``input_scale *
    weight_scale``, plus the bias), then float attention: per head ``softmax(Q K^T *
    scale + mask) V`` (mask: none, a (batch, sequence) key mask of 1/0, or causal)."""
    if ctx.has(8):
        ctx.unsupported("QAttention with past state")
    for a in ("do_rotary", "past_present_share_buffer"):
        if ctx.attr_int(a, 0):
            ctx.unsupported(f"QAttention with {a}", a)
    heads = ctx.attr_int("num_heads")
    dx, dw = _quantized(ctx, 0), _quantized(ctx, 1)
    x, w = ctx.x(0), ctx.x(1)
    b_, s_, _ = shape_of(ctx, x)
    hidden3 = shape_of(ctx, w)[1]
    if not isinstance(hidden3, int) or hidden3 % 3:
        ctx.fail(f"weight must have 3 * hidden columns, got {shape_of(ctx, w)}")
    hidden = hidden3 // 3
    if hidden % heads:
        ctx.fail(f"hidden size {hidden} is not divisible by num_heads={heads}", "num_heads")
    dh = hidden // heads
    acc = _matmul(ctx, x, w, _zero_point(ctx, 6, dx), _zero_point(ctx, 7, dw))
    scale = _input_scale(ctx, _param_1d(ctx, _scale(ctx, 3)), _param_1d(ctx, _scale(ctx, 4)))
    qkv = _float_output(ctx, acc, scale, 2)
    parts = []
    for i in range(3):
        p = ctx.call("strided_slice", qkv, axes=(2,), begin=(i * hidden,),
                     end=((i + 1) * hidden,))
        p = reshape(ctx, p, [b_, s_, heads, dh])
        parts.append(ctx.call("permute_dims", p, axes=(0, 2, 1, 3)))
    q, k, v = parts
    scores = ctx.call("matmul", q, ctx.call("permute_dims", k, axes=(0, 1, 3, 2)))
    factor = ctx.attr_float("scale", 0.0) or 1.0 / float(np.sqrt(dh))
    scores = ctx.call("multiply", scores, ctx.constant(factor, "float32"))
    filler = ctx.attr_float("mask_filter_value", -10000.0)
    if ctx.has(5):
        mask = ctx.x(5)
        if len(shape_of(ctx, mask)) != 2:
            ctx.unsupported("a mask_index that is not a (batch, sequence) 0/1 mask")
        keep = ctx.call("not_equal", mask, ctx.constant(0, ctx.dtype(5)))
        keep = reshape(ctx, keep, [b_, 1, 1, shape_of(ctx, mask)[1]])
        scores = ctx.call("where", keep, scores, ctx.constant(filler, "float32"))
    if ctx.attr_int("unidirectional", 0):
        if not isinstance(s_, int):
            ctx.unsupported("a causal QAttention with a symbolic sequence length")
        causal = np.tril(np.ones((s_, s_), bool))
        scores = ctx.call("where", ctx.constant(causal), scores, ctx.constant(filler, "float32"))
    probs = ctx.call("softmax", scores, axis=-1)
    out = ctx.call("permute_dims", ctx.call("matmul", probs, v), axes=(0, 2, 1, 3))
    return reshape(ctx, out, [b_, s_, hidden])


# onnxruntime's weight-only MatMulNBits has a module of its own
from . import onnx_nbits  # noqa: E402,F401

__all__ = ["MS"]
