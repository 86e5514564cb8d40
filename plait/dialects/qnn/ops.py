"""The qnn ops: quantized tensors as ordinary integer tensors, with their scales and zero
points as explicit operands.

Every scale is a float32 tensor and every zero point a tensor of the quantized dtype:
a scalar (per tensor), a 1-D tensor along the op's ``axis`` (per channel), or for
``quantize``/``dequantize`` a blocked tensor (``block_size``).  The dtype of a quantized
result is the dtype of its zero point.  The semantics of each op are those of
onnxruntime's kernel named in its doc, bit for bit (:mod:`.reference`).

Integer products (``qnn.conv2d``, ``qnn.matmul``) give the int32 accumulator; the
requantization to 8 bits is ``qnn.requantize`` (with the float32 multiplier
``input_scale / output_scale`` that onnxruntime computes), so a product, its bias and
its requantization are three calls a target may fuse into one kernel.
"""

from __future__ import annotations

from typing import Any

from plait.ir.types import TensorType, TupleType, Type
from plait.op.infer import (
    broadcast_shapes,
    check_dtype_class,
    infer_op_type,
    normalize_axis,
    shape_str,
    tensor_arg,
    tuple_arg,
)
from plait.op.registry import AttrSpec, InferContext, OpError, register_op

from . import nbits as NB
from . import reference as R

QUANTIZED = tuple(R.QRANGES)
"""The dtypes a value may be quantized to (zero points have them)."""

EIGHT_BIT = R.EIGHT_BIT


def _fail_type(ctx: InferContext, i: int, what: str, t: Type | None) -> None:
    ctx.fail(f"{ctx.op.name}: {ctx.op.input_name(i)} must be {what}, got {t}", arg=i)


def scale_arg(ctx: InferContext, i: int) -> TensorType:
    """Argument ``i``, a scale: a float32 tensor."""
    t = tensor_arg(ctx, i)
    if t.dtype is not None and t.dtype != "float32":
        _fail_type(ctx, i, "a float32 scale", t)
    return t


def zero_point_arg(ctx: InferContext, i: int, dtypes: tuple[str, ...] = QUANTIZED) -> TensorType:
    """Argument ``i``, a zero point: a tensor of a quantized dtype."""
    t = tensor_arg(ctx, i)
    if t.dtype is not None and t.dtype not in dtypes:
        _fail_type(ctx, i, f"a zero point of dtype {' or '.join(dtypes)}", t)
    return t


def check_param(ctx: InferContext, i: int, t: TensorType, x: TensorType, axis: int,
                block_size: int = 0) -> None:
    """A scale or zero point ``t`` (argument ``i``) of a tensor ``x`` is a scalar, one
    value, one per channel of ``axis``, or (with ``block_size``) blocks of ``axis``."""
    if t.shape is None or x.shape is None:
        return
    rank = len(x.shape)
    if len(t.shape) == 0 or (len(t.shape) == 1 and t.shape[0] == 1 and not block_size):
        return
    ax = normalize_axis(ctx, axis, rank) if rank else 0
    where = f"argument {ctx.op.input_name(i)} (shape {shape_str(t.shape)})"
    if block_size:
        if len(t.shape) != rank:
            ctx.fail(f"{ctx.op.name}: a blocked {where} must have the rank of x "
                     f"{shape_str(x.shape)}", arg=i)
        size = x.shape[ax]
        if isinstance(size, int) and isinstance(t.shape[ax], int):
            if t.shape[ax] != -(-size // block_size):
                ctx.fail(f"{ctx.op.name}: {where} must have ceil({size} / {block_size}) = "
                         f"{-(-size // block_size)} blocks along axis {axis}", arg=i)
        return
    if len(t.shape) != 1:
        ctx.fail(f"{ctx.op.name}: {where} must be a scalar or 1-D (one value per channel "
                 f"of axis {axis})", arg=i)
    size, n = x.shape[ax], t.shape[0]
    if isinstance(size, int) and isinstance(n, int) and size != n:
        ctx.fail(f"{ctx.op.name}: {where} has {n} values but axis {axis} of x "
                 f"{shape_str(x.shape)} has {size}", arg=i)


def _scalar_param(ctx: InferContext, i: int, t: TensorType) -> None:
    if t.shape is not None and not (len(t.shape) == 0 or t.shape == (1,)):
        ctx.fail(f"{ctx.op.name}: {ctx.op.input_name(i)} must be a scalar (per-tensor "
                 f"quantization), got shape {shape_str(t.shape)}", arg=i)


def _same(ctx: InferContext, i: int, t: TensorType, dtype: str | None, what: str) -> None:
    if dtype is not None and t.dtype is not None and t.dtype != dtype:
        ctx.fail(f"{ctx.op.name}: {ctx.op.input_name(i)} has dtype {t.dtype}, expected "
                 f"{dtype} ({what})", arg=i)


def define(name: str, **kwargs: Any) -> None:
    """Register ``qnn.<name>`` (the dialect's ops are never overridden silently)."""
    opdef = register_op(f"qnn.{name}", **kwargs)
    opdef.extra["module"] = __name__


_AXIS = AttrSpec("int", default=1, doc="the axis of per-channel scales and zero points")
_BLOCK = AttrSpec("int", default=0, doc="block size along axis (0: not blocked)")

# ---------------------------------------------------------- (de)quantization


def infer_quantize(ctx: InferContext) -> Type:
    """x's shape; the dtype of the zero point."""
    x = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, x, "float")
    s, z = scale_arg(ctx, 1), zero_point_arg(ctx, 2)
    for i, t in ((1, s), (2, z)):
        check_param(ctx, i, t, x, ctx.attrs["axis"], ctx.attrs["block_size"])
    return TensorType(x.shape, z.dtype)


define(
    "quantize",
    inputs=("x", "scale", "zero_point"),
    attrs={"axis": _AXIS, "block_size": _BLOCK},
    infer_type=infer_quantize,
    pattern="elemwise",
    reference=R.quantize_op,
    doc="saturate(round_half_even(x / scale) + zero_point) (QuantizeLinear)",
)


def infer_dequantize(ctx: InferContext) -> Type:
    """x's shape, float32."""
    x = tensor_arg(ctx, 0)
    s, z = scale_arg(ctx, 1), zero_point_arg(ctx, 2)
    _same(ctx, 2, z, x.dtype, "the zero point has the dtype of x")
    if x.dtype is not None and x.dtype not in QUANTIZED:
        _fail_type(ctx, 0, f"a quantized tensor ({', '.join(QUANTIZED)})", x)
    for i, t in ((1, s), (2, z)):
        check_param(ctx, i, t, x, ctx.attrs["axis"], ctx.attrs["block_size"])
    return TensorType(x.shape, "float32")


define(
    "dequantize",
    inputs=("x", "scale", "zero_point"),
    attrs={"axis": _AXIS, "block_size": _BLOCK},
    infer_type=infer_dequantize,
    pattern="elemwise",
    reference=R.dequantize,
    doc="float32(x - zero_point) * scale (DequantizeLinear)",
)


def infer_requantize(ctx: InferContext) -> Type:
    """x's shape; the dtype of the output zero point."""
    x = tensor_arg(ctx, 0)
    if x.dtype is not None and x.dtype not in QUANTIZED:
        _fail_type(ctx, 0, f"an integer tensor ({', '.join(QUANTIZED)})", x)
    si, zi = scale_arg(ctx, 1), zero_point_arg(ctx, 2)
    so, zo = scale_arg(ctx, 3), zero_point_arg(ctx, 4)
    _same(ctx, 2, zi, x.dtype, "the input zero point has the dtype of x")
    for i, t in ((1, si), (2, zi), (3, so), (4, zo)):
        check_param(ctx, i, t, x, ctx.attrs["axis"])
    return TensorType(x.shape, zo.dtype)


define(
    "requantize",
    inputs=("x", "input_scale", "input_zero_point", "output_scale", "output_zero_point"),
    attrs={"axis": AttrSpec("int", default=-1, doc="the axis of per-channel scales")},
    infer_type=infer_requantize,
    pattern="elemwise",
    reference=R.requantize_op,
    doc="saturate(round_half_even(float32(x - zi) * float32(si / so)) + zo) "
        "(MlasRequantizeOutput)",
)

# ------------------------------------------------------------------- products


def _as_int32(t: TensorType) -> TensorType:
    return TensorType(t.shape, "int32")


def infer_conv2d(ctx: InferContext) -> Type:
    """The shape of conv2d (NCHW data, OIHW weight), int32."""
    x, w = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
    for i, t in ((0, x), (1, w)):
        if t.dtype is not None and t.dtype not in EIGHT_BIT:
            _fail_type(ctx, i, "an 8-bit tensor (uint8 or int8)", t)
    zx, zw = zero_point_arg(ctx, 2, EIGHT_BIT), zero_point_arg(ctx, 3, EIGHT_BIT)
    _same(ctx, 2, zx, x.dtype, "the zero point of data")
    _same(ctx, 3, zw, w.dtype, "the zero point of weight")
    _scalar_param(ctx, 2, zx)
    check_param(ctx, 3, zw, w, 0)
    try:
        out = infer_op_type("conv2d", _as_int32(x), _as_int32(w), **dict(ctx.attrs))
    except OpError as e:
        ctx.fail(str(e).replace("conv2d", ctx.op.name, 1))
    return _as_int32(out)  # type: ignore[arg-type]


define(
    "conv2d",
    inputs=("data", "weight", "data_zero_point", "weight_zero_point"),
    attrs={
        "strides": AttrSpec("int_or_ints", default=(1, 1), doc="step per spatial axis"),
        "padding": AttrSpec("int_or_ints", default=(0, 0, 0, 0),
                            doc="padding (top, left, bottom, right), holding the zero point"),
        "dilation": AttrSpec("int_or_ints", default=(1, 1), doc="kernel dilation per axis"),
        "groups": AttrSpec("int", default=1, doc="channel groups (channels for depthwise)"),
    },
    infer_type=infer_conv2d,
    pattern="out_elemwise_fusable",
    reference=R.conv2d,
    doc="int32 convolution of (data - zd) with (weight - zw), NCHW/OIHW (ConvInteger)",
)


def infer_matmul(ctx: InferContext) -> Type:
    """numpy matmul shapes, int32."""
    a, b = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
    for i, t in ((0, a), (1, b)):
        if t.dtype is not None and t.dtype not in EIGHT_BIT:
            _fail_type(ctx, i, "an 8-bit tensor (uint8 or int8)", t)
    za, zb = zero_point_arg(ctx, 2, EIGHT_BIT), zero_point_arg(ctx, 3, EIGHT_BIT)
    _same(ctx, 2, za, a.dtype, "the zero point of a")
    _same(ctx, 3, zb, b.dtype, "the zero point of b")
    if a.shape is not None and len(a.shape) >= 2:
        check_param(ctx, 2, za, a, -2)
    if b.shape is not None and len(b.shape) >= 1:
        check_param(ctx, 3, zb, b, -1)
    try:
        out = infer_op_type("matmul", _as_int32(a), _as_int32(b))
    except OpError as e:
        ctx.fail(str(e).replace("matmul", ctx.op.name, 1))
    return _as_int32(out)  # type: ignore[arg-type]


define(
    "matmul",
    inputs=("a", "b", "a_zero_point", "b_zero_point"),
    infer_type=infer_matmul,
    pattern="out_elemwise_fusable",
    reference=R.matmul,
    doc="int32 (a - za) @ (b - zb), batched like numpy; za per row, zb per column "
        "(MatMulInteger)",
)

# ---------------------------------------------------------------- elementwise


def _io_params(ctx: InferContext, first: int, x: TensorType) -> None:
    """The scale and zero point at ``first``, ``first + 1`` of the 8-bit tensor ``x``
    (per tensor)."""
    s = scale_arg(ctx, first)
    z = zero_point_arg(ctx, first + 1, EIGHT_BIT)
    _same(ctx, first + 1, z, x.dtype, f"the zero point of {ctx.op.input_name(0)}")
    _scalar_param(ctx, first, s)
    _scalar_param(ctx, first + 1, z)


def _eight_bit(ctx: InferContext, i: int) -> TensorType:
    t = tensor_arg(ctx, i)
    if t.dtype is not None and t.dtype not in EIGHT_BIT:
        _fail_type(ctx, i, "an 8-bit tensor (uint8 or int8)", t)
    return t


def infer_binary(ctx: InferContext) -> Type:
    """The broadcast of a and b, of their (common) 8-bit dtype."""
    a, b = _eight_bit(ctx, 0), _eight_bit(ctx, 3)
    _same(ctx, 3, b, a.dtype, "the dtype of a")
    for first, t in ((1, a), (4, b), (6, a)):
        _io_params(ctx, first, t)
    return TensorType(broadcast_shapes(ctx, [a.shape, b.shape]), a.dtype)


for _name, _ref, _doc in (
    ("add", R.add, "(a + b) of quantized tensors, requantized (QLinearAdd)"),
    ("mul", R.mul, "(a * b) of quantized tensors, requantized (QLinearMul)"),
):
    define(
        _name,
        inputs=("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                "y_scale", "y_zero_point"),
        infer_type=infer_binary,
        pattern="broadcast",
        reference=_ref,
        doc=_doc,
    )


def infer_unary(ctx: InferContext) -> Type:
    """x's type (8-bit, per-tensor scales)."""
    x = _eight_bit(ctx, 0)
    _io_params(ctx, 1, x)
    _io_params(ctx, 3, x)
    return x


_UNARY_INPUTS = ("x", "x_scale", "x_zero_point", "y_scale", "y_zero_point")

define(
    "sigmoid",
    inputs=_UNARY_INPUTS,
    infer_type=infer_unary,
    pattern="elemwise",
    reference=R.sigmoid,
    doc="sigmoid of a quantized tensor through a 256-entry table (QLinearSigmoid)",
)
define(
    "leaky_relu",
    inputs=_UNARY_INPUTS,
    attrs={"alpha": AttrSpec("float", default=0.01, doc="slope below zero")},
    infer_type=infer_unary,
    pattern="elemwise",
    reference=R.leaky_relu,
    doc="leaky relu of a quantized tensor through a 256-entry table (QLinearLeakyRelu)",
)


def infer_softmax(ctx: InferContext) -> Type:
    """x's type; ``axis`` in range."""
    x = infer_unary(ctx)
    assert isinstance(x, TensorType)
    if x.shape is not None:
        normalize_axis(ctx, ctx.attrs["axis"], len(x.shape))
    return x


define(
    "softmax",
    inputs=_UNARY_INPUTS,
    attrs={"axis": AttrSpec("int", default=-1)},
    infer_type=infer_softmax,
    pattern="opaque",
    reference=R.softmax,
    doc="softmax of a quantized tensor along an axis, exponent table (QLinearSoftmax)",
)


def infer_layer_norm(ctx: InferContext) -> Type:
    """x's type; gamma and beta float32 of the normalized sizes."""
    x = _eight_bit(ctx, 0)
    _io_params(ctx, 1, x)
    _io_params(ctx, 5, x)
    g, b = tensor_arg(ctx, 3), tensor_arg(ctx, 4)
    try:
        infer_op_type("layer_norm", TensorType(x.shape, "float32"), g, b, **dict(ctx.attrs))
    except OpError as e:
        ctx.fail(str(e).replace("layer_norm", ctx.op.name, 1))
    return x


define(
    "layer_norm",
    inputs=("x", "x_scale", "x_zero_point", "gamma", "beta", "y_scale", "y_zero_point"),
    attrs={
        "axes": AttrSpec("ints", default=(-1,), doc="the normalized axes"),
        "epsilon": AttrSpec("float", default=1e-5, doc="added to the variance"),
    },
    infer_type=infer_layer_norm,
    pattern="opaque",
    reference=R.layer_norm,
    doc="layer normalization between quantized tensors (dequantize, float32, quantize)",
)


def infer_concat(ctx: InferContext) -> Type:
    """concat's shape; every input 8-bit of the output's dtype."""
    xs, ss, zs = tuple_arg(ctx, 0), tuple_arg(ctx, 1), tuple_arg(ctx, 2)
    n = len(xs.fields)
    if n == 0 or len(ss.fields) != n or len(zs.fields) != n:
        ctx.fail(f"{ctx.op.name}: needs one scale and one zero point per input, got "
                 f"{n} inputs, {len(ss.fields)} scales, {len(zs.fields)} zero points")
    s, z = scale_arg(ctx, 3), zero_point_arg(ctx, 4, EIGHT_BIT)
    for f in list(ss.fields) + [s]:
        if not isinstance(f, TensorType) or f.dtype not in (None, "float32"):
            ctx.fail(f"{ctx.op.name}: every scale must be a float32 tensor, got {f}")
    for f in list(xs.fields) + list(zs.fields):
        if not isinstance(f, TensorType) or f.dtype not in (None, z.dtype):
            ctx.fail(f"{ctx.op.name}: every input and zero point must have the output "
                     f"zero point's dtype {z.dtype}, got {f}")
    try:
        out = infer_op_type("concat", xs, **dict(ctx.attrs))
    except OpError as e:
        ctx.fail(str(e).replace("concat", ctx.op.name, 1))
    return out


define(
    "concat",
    inputs=("inputs", "scales", "zero_points", "y_scale", "y_zero_point"),
    attrs={"axis": AttrSpec("int", default=0)},
    infer_type=infer_concat,
    pattern="injective",
    reference=R.concat,
    doc="concatenation of quantized tensors requantized to one scale (QLinearConcat)",
)

# -------------------------------------------------------------------- pooling

_POOL = {
    "pool_size": AttrSpec("int_or_ints", default=(1, 1), doc="window size per axis"),
    "strides": AttrSpec("int_or_ints", default=(1, 1), doc="step per axis"),
    "padding": AttrSpec("int_or_ints", default=(0, 0, 0, 0),
                        doc="padding (top, left, bottom, right)"),
    "ceil_mode": AttrSpec("bool", default=False, doc="round the output size up"),
}


def infer_avg_pool2d(ctx: InferContext) -> Type:
    """avg_pool2d's shape (NCHW), x's dtype."""
    x = _eight_bit(ctx, 0)
    _io_params(ctx, 1, x)
    _io_params(ctx, 3, x)
    try:
        out = infer_op_type("max_pool2d", x, **{k: ctx.attrs[k] for k in _POOL})
    except OpError as e:
        ctx.fail(str(e).replace("max_pool2d", ctx.op.name, 1))
    return out


define(
    "avg_pool2d",
    inputs=_UNARY_INPUTS,
    attrs={**_POOL, "count_include_pad": AttrSpec(
        "bool", default=False, doc="divide by the window size including padding")},
    infer_type=infer_avg_pool2d,
    pattern="opaque",
    reference=R.avg_pool2d,
    doc="average pooling of a quantized tensor, NCHW (QLinearAveragePool)",
)


def infer_global_avg_pool2d(ctx: InferContext) -> Type:
    """x with both spatial sizes 1 (NCHW)."""
    x = _eight_bit(ctx, 0)
    _io_params(ctx, 1, x)
    _io_params(ctx, 3, x)
    if x.shape is None:
        return x
    if len(x.shape) != 4:
        ctx.fail(f"{ctx.op.name}: x must be NCHW (rank 4), got {shape_str(x.shape)}", arg=0)
    return TensorType(x.shape[:2] + (1, 1), x.dtype)


define(
    "global_avg_pool2d",
    inputs=_UNARY_INPUTS,
    infer_type=infer_global_avg_pool2d,
    pattern="opaque",
    reference=R.global_avg_pool2d,
    doc="mean over H and W of a quantized tensor (QLinearGlobalAveragePool)",
)


def infer_max_pool2d(ctx: InferContext) -> Type:
    """max_pool2d's type (NCHW) on an 8-bit tensor."""
    x = _eight_bit(ctx, 0)
    try:
        return infer_op_type("max_pool2d", x, **dict(ctx.attrs))
    except OpError as e:
        ctx.fail(str(e).replace("max_pool2d", ctx.op.name, 1))


define(
    "max_pool2d",
    inputs=("x",),
    attrs={**_POOL, "dilation": AttrSpec("int_or_ints", default=(1, 1),
                                         doc="window dilation per axis")},
    infer_type=infer_max_pool2d,
    pattern="out_elemwise_fusable",
    reference=R.max_pool2d,
    doc="max pooling of a quantized tensor (its scale and zero point unchanged)",
)

# ------------------------------------------------------------------ dynamic


def infer_dynamic_quantize(ctx: InferContext) -> Type:
    """(x's shape in uint8, a float32 scale, a uint8 zero point)."""
    x = tensor_arg(ctx, 0)
    if x.dtype is not None and x.dtype != "float32":
        _fail_type(ctx, 0, "a float32 tensor", x)
    return TupleType((TensorType(x.shape, "uint8"), TensorType((), "float32"),
                      TensorType((), "uint8")))


define(
    "dynamic_quantize",
    inputs=("x",),
    infer_type=infer_dynamic_quantize,
    pattern="opaque",
    reference=R.dynamic_quantize,
    doc="uint8 quantization with the scale and zero point of x's range "
        "(DynamicQuantizeLinear); a tuple (y, scale, zero_point)",
)

# ------------------------------------------------------ weight-only quantization


def _static(d: Any) -> int | None:
    return d if isinstance(d, int) else None


def infer_matmul_nbits(ctx: InferContext) -> Type:
    """``a (..., K)`` float32 times the packed ``N x K`` weight: ``(..., N)`` float32;
    ``b``, ``scales``, ``zero_points`` (and ``bias``) shaped as the layout says
    (:mod:`.nbits`)."""
    k, n, bits, bs = (int(ctx.attrs[x]) for x in ("K", "N", "bits", "block_size"))
    if bits not in NB.BITS:
        ctx.fail(f"{ctx.op.name}: bits={bits}, expected 4 or 8")
    if k < 1 or n < 1 or bs < 1 or (bs * bits) % 8:
        ctx.fail(f"{ctx.op.name}: K={k}, N={n}, block_size={bs} must be positive, "
                 f"block_size a multiple of {8 // bits} (whole bytes of {bits}-bit values)")
    blocks = NB.k_blocks(k, bs)
    a = tensor_arg(ctx, 0)
    if a.dtype is not None and a.dtype != "float32":
        _fail_type(ctx, 0, "a float32 tensor", a)
    want = {1: ((n, blocks, NB.blob_size(bs, bits)), "uint8"), 2: ((n, blocks), "float32"),
            3: ((n, NB.zp_cols(blocks, bits)), "uint8"), 4: ((n,), "float32")}
    for i in range(1, len(ctx.types)):
        t = tensor_arg(ctx, i)
        shape, dtype = want[i]
        if t.dtype is not None and t.dtype != dtype:
            _fail_type(ctx, i, f"a {dtype} tensor", t)
        if t.shape is not None and (len(t.shape) != len(shape) or any(
                _static(d) not in (None, w) for d, w in zip(t.shape, shape))):
            ctx.fail(f"{ctx.op.name}: {ctx.op.input_name(i)} must have shape "
                     f"{shape_str(shape)} (K={k}, N={n}, bits={bits}, block_size={bs}), got "
                     f"{shape_str(t.shape)}", arg=i)
    if a.shape is None:
        return TensorType(None, "float32")
    if len(a.shape) == 0 or _static(a.shape[-1]) not in (None, k):
        ctx.fail(f"{ctx.op.name}: a must end with K={k} features, got shape "
                 f"{shape_str(a.shape)}", arg=0)
    return TensorType(a.shape[:-1] + (n,), "float32")


define(
    "matmul_nbits",
    inputs=("a", "b", "scales", "zero_points", "bias?"),
    attrs={"K": AttrSpec("int", doc="the input features (the contracted size)"),
           "N": AttrSpec("int", doc="the output features"),
           "bits": AttrSpec("int", default=4, choices=NB.BITS, doc="4 or 8"),
           "block_size": AttrSpec("int", doc="the values along K sharing a scale and "
                                             "zero point"),
           "accuracy_level": AttrSpec("int", default=0, choices=(0, 1, 2, 3, 4),
                                      doc="onnxruntime's: 4 quantizes the activations to "
                                          "int8 per block (exact integer block sums); any "
                                          "other level computes in float32")},
    infer_type=infer_matmul_nbits,
    pattern="out_elemwise_fusable",
    reference=R.matmul_nbits,
    doc="a @ W.T + bias with W (N x K) quantized to 4 or 8 bits in blocks along K: "
        "float32(q - z) * scale (onnxruntime's MatMulNBits, its packed layout); "
        "accuracy_level 4: a quantized to int8 per block too",
)
