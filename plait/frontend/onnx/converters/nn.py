"""Neural-network ops: convolutions, pooling, normalizations, softmax, ``Gemm`` and
``MatMul`` (and their integer variants)."""

from __future__ import annotations

import math

import numpy as np

from ....ir import symbolic
from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter
from .common import FLOATS, cast, dtype_of, norm_axis, reshape, scalar, select, shape_of

AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def spatial_rank(ctx: NodeContext, what: str, allowed: tuple[int, ...] = (1, 2)) -> int:
    """The number of spatial axes of input 0 (channels-first), one of ``allowed``, or
    an unsupported-case error naming ``what``."""
    r = ctx.rank(0)
    nd = r - 2
    if nd not in allowed:
        ctx.unsupported(f"{nd}-D {what} (plait has {' and '.join(f'{k}-D' for k in allowed)})")
    return nd


def _pads(
    ctx: NodeContext, nd: int, kernel: list[int], strides: list[int], dilations: list[int],
    sizes: tuple,
) -> list[int]:  # fmt: skip
    """The explicit pads (begins then ends) from ``pads`` or ``auto_pad``."""
    auto = ctx.attr_str("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * (2 * nd)
    if auto == "NOTSET":
        pads = ctx.attr_ints("pads", [0] * (2 * nd))
        if len(pads) != 2 * nd:  # type: ignore[arg-type]
            ctx.fail(f"needs {2 * nd} values (the begins, then the ends), got {pads}", "pads")
        if any(p < 0 for p in pads):  # type: ignore[union-attr]
            ctx.fail(f"negative pads {pads} are not supported", "pads")
        return list(pads)  # type: ignore[arg-type]
    begins, ends = [], []
    for i in range(nd):
        eff = dilations[i] * (kernel[i] - 1) + 1
        size = sizes[i]
        if isinstance(size, int):
            out = -(-size // strides[i])
            total = max((out - 1) * strides[i] + eff - size, 0)
        elif strides[i] == 1:
            total = eff - 1
        else:
            ctx.fail(f"auto_pad {auto} with stride {strides[i]} needs a static size, got {size}")
        small = total // 2
        begins.append(small if auto == "SAME_UPPER" else total - small)
        ends.append(total - small if auto == "SAME_UPPER" else small)
    return begins + ends


def window_attrs(ctx: NodeContext, nd: int, kernel: list[int] | None = None) -> tuple:
    """``(kernel, strides, dilations, pads)`` of a convolution or pooling node with
    ``nd`` spatial axes (``auto_pad`` resolved; pads are the begins then the ends)."""
    if kernel is None:
        kernel = ctx.attr_ints("kernel_shape")
    assert kernel is not None
    if len(kernel) != nd:
        ctx.fail(f"needs {nd} values, got {kernel}", "kernel_shape")
    strides = ctx.attr_ints("strides", [1] * nd)
    dilations = ctx.attr_ints("dilations", [1] * nd)
    sizes = ctx.shape(0)[2:]
    pads = _pads(ctx, nd, kernel, strides, dilations, sizes)  # type: ignore[arg-type]
    return kernel, strides, dilations, pads


# ------------------------------------------------------------------- convolution


@converter("Conv", since=1, attr_choices={"auto_pad": AUTO_PAD})
def convert_conv(ctx: NodeContext) -> Expr:
    """``conv1d``/``conv2d`` plus the bias; a 3-D convolution is a sum over the depth
    taps of 2-D convolutions."""
    nd = spatial_rank(ctx, "convolution", (1, 2, 3))
    wshape = ctx.shape(1)
    kernel = ctx.attr_ints("kernel_shape", None) or [int(k) for k in wshape[2:]]  # type: ignore[arg-type]
    _, strides, dilations, pads = window_attrs(ctx, nd, kernel)
    groups = ctx.attr_int("group", 1)
    if nd == 3:
        y = _conv3d(ctx, ctx.x(0), ctx.x(1), strides, pads, dilations, groups)
    else:
        y = ctx.call(
            f"conv{nd}d", ctx.x(0), ctx.x(1), strides=tuple(strides), padding=tuple(pads),
            dilation=tuple(dilations), groups=groups,
        )  # fmt: skip
    if ctx.has(2):
        y = ctx.call("add", y, reshape(ctx, ctx.x(2), [-1] + [1] * nd))
    return y


@converter("ConvTranspose", since=1, attr_choices={"auto_pad": AUTO_PAD})
def convert_conv_transpose(ctx: NodeContext) -> Expr:
    """``conv_transpose1d``/``conv_transpose2d`` plus the bias; ``output_shape`` and
    ``auto_pad`` are turned into explicit pads.  The batch and the spatial sizes may be
    symbolic (the output sizes are size expressions); a fixed ``output_shape`` of a
    symbolic input size needs pads that depend on it, which is refused."""
    nd = spatial_rank(ctx, "transposed convolution")
    xs = ctx.shape(0)[2:]
    wshape = ctx.static_shape(1)
    kernel = ctx.attr_ints("kernel_shape", None) or list(wshape[2:])
    strides = ctx.attr_ints("strides", [1] * nd)
    dilations = ctx.attr_ints("dilations", [1] * nd)
    out_pad = ctx.attr_ints("output_padding", [0] * nd)
    assert strides is not None and dilations is not None and out_pad is not None
    auto = ctx.attr_str("auto_pad", "NOTSET")
    out_shape = ctx.attr_ints("output_shape", None)
    if out_shape is not None and len(out_shape) > nd:
        out_shape = out_shape[-nd:]
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        if out_shape is None:
            out_shape = [symbolic.mul(xs[i], strides[i]) for i in range(nd)]
        grown = [
            symbolic.add(symbolic.sub(symbolic.mul(strides[i], xs[i]), out_shape[i]),
                         out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - strides[i])
            for i in range(nd)
        ]   # stride * (x - 1) + out_pad + (kernel - 1) * dilation + 1 - output_shape
        if not all(isinstance(t, int) for t in grown):
            ctx.fail(f"the output_shape {out_shape} of an input of "
                     f"symbolic spatial sizes {ctx.shape(0)} needs pads that depend on "
                     "them; fix the input shapes with from_onnx(..., shapes={...})")
        total: list[int] = grown  # type: ignore[assignment]
        if auto == "SAME_UPPER":
            begins, ends = [t // 2 for t in total], [t - t // 2 for t in total]
        else:
            begins, ends = [t - t // 2 for t in total], [t // 2 for t in total]
        pads = begins + ends
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = ctx.attr_ints("pads", [0] * (2 * nd))  # type: ignore[assignment]
    extra = [0] * nd
    for i in range(nd):  # negative padding (a larger output): grow with output_padding
        for j in (i, i + nd):
            if pads[j] < 0:
                extra[i] += -pads[j]
                pads[j] = 0
    x = ctx.x(0)
    y = ctx.call(
        f"conv_transpose{nd}d", x, ctx.x(1), strides=tuple(strides), padding=tuple(pads),
        output_padding=tuple(o + e for o, e in zip(out_pad, extra)), dilation=tuple(dilations),
        groups=ctx.attr_int("group", 1),
    )  # fmt: skip
    if ctx.has(2):
        y = ctx.call("add", y, reshape(ctx, ctx.x(2), [-1] + [1] * nd))
    return y


def _conv3d(
    ctx: NodeContext, x: Expr, w: Expr, strides: list[int], pads: list[int],
    dilations: list[int], groups: int,
) -> Expr:  # fmt: skip
    """A 3-D convolution as the sum over the kernel's depth taps of 2-D convolutions of
    depth slices (the depth folded into the batch)."""
    n, c, d, h, wd = shape_of(ctx, x)
    o, _, kd, _, _ = shape_of(ctx, w)
    if not all(isinstance(v, int) for v in (c, d, h, wd, kd)):
        ctx.fail("a 3-D convolution needs static channel, depth and kernel sizes")
    xp = x
    if pads[0] or pads[3]:
        width = [0, 0, 0, 0, pads[0], pads[3], 0, 0, 0, 0]
        xp = ctx.call("pad", x, pad_width=tuple(width))
    dp = d + pads[0] + pads[3]  # type: ignore[operator]
    dout = (dp - dilations[0] * (kd - 1) - 1) // strides[0] + 1  # type: ignore[operator]
    if dout < 1:
        ctx.fail("the kernel is deeper than the padded input")
    total = None
    for t in range(kd):  # type: ignore[arg-type]
        start = t * dilations[0]
        sl = ctx.call(
            "strided_slice", xp, axes=(2,), begin=(start,),
            end=(start + (dout - 1) * strides[0] + 1,), strides=(strides[0],),
        )  # fmt: skip
        sl = ctx.call("permute_dims", sl, axes=(0, 2, 1, 3, 4))
        sl = reshape(ctx, sl, [-1, c, h, wd])
        wt = select(ctx, w, t, 2)
        y = ctx.call(
            "conv2d", sl, wt, strides=tuple(strides[1:]),
            padding=(pads[1], pads[2], pads[4], pads[5]), dilation=tuple(dilations[1:]),
            groups=groups,
        )  # fmt: skip
        total = y if total is None else ctx.call("add", total, y)
    assert total is not None
    _, _, ho, wo = shape_of(ctx, total)
    y = reshape(ctx, total, [n, dout, o, ho, wo])
    return ctx.call("permute_dims", y, axes=(0, 2, 1, 3, 4))


# ----------------------------------------------------------------------- pooling


def _pool(
    ctx: NodeContext, op: str, x: Expr, nd: int, kernel: list[int], strides: list[int],
    pads: list[int], dilations: list[int], **extra: bool,
) -> Expr:  # fmt: skip
    """``max_pool``/``avg_pool`` of 1 or 2 spatial axes; 3 spatial axes are pooled as
    two separable passes (the height and width, then the depth)."""
    if nd < 3:
        return ctx.call(
            f"{op}{nd}d", x, pool_size=tuple(kernel), strides=tuple(strides),
            padding=tuple(pads), dilation=tuple(dilations), **extra,
        )  # fmt: skip
    n, c, d, h, w = shape_of(ctx, x)
    if not all(isinstance(v, int) for v in (c, d)):
        ctx.fail("3-D pooling needs static channel and depth sizes")
    a = reshape(ctx, x, [n, c * d, h, w])  # type: ignore[operator]
    a = ctx.call(
        f"{op}2d", a, pool_size=tuple(kernel[1:]), strides=tuple(strides[1:]),
        padding=(pads[1], pads[2], pads[4], pads[5]), dilation=tuple(dilations[1:]), **extra,
    )  # fmt: skip
    _, _, ho, wo = shape_of(ctx, a)
    if not (isinstance(ho, int) and isinstance(wo, int)):
        ctx.fail("3-D pooling needs static spatial sizes")
    b = reshape(ctx, a, [n, c, d, ho * wo])
    b = ctx.call(
        f"{op}2d", b, pool_size=(kernel[0], 1), strides=(strides[0], 1),
        padding=(pads[0], 0, pads[3], 0), dilation=(dilations[0], 1), **extra,
    )  # fmt: skip
    do = shape_of(ctx, b)[2]
    return reshape(ctx, b, [n, c, do, ho, wo])


@converter("MaxPool", since=1, attr_choices={"auto_pad": AUTO_PAD, "storage_order": (0, 1)})
def convert_max_pool(ctx: NodeContext) -> Expr:
    """``max_pool1d``/``max_pool2d`` (the ``Indices`` output is not supported)."""
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        ctx.unsupported("the Indices output")
    nd = spatial_rank(ctx, "max pooling", (1, 2, 3))
    kernel, strides, dilations, pads = window_attrs(ctx, nd)
    return _pool(
        ctx, "max_pool", ctx.x(0), nd, kernel, strides, pads, dilations,
        ceil_mode=bool(ctx.attr_int("ceil_mode", 0)),
    )  # fmt: skip


@converter("AveragePool", since=1, attr_choices={"auto_pad": AUTO_PAD})
def convert_avg_pool(ctx: NodeContext) -> Expr:
    """``avg_pool1d``/``avg_pool2d``."""
    nd = spatial_rank(ctx, "average pooling", (1, 2, 3))
    kernel, strides, dilations, pads = window_attrs(ctx, nd)
    return _pool(
        ctx, "avg_pool", ctx.x(0), nd, kernel, strides, pads, dilations,
        ceil_mode=bool(ctx.attr_int("ceil_mode", 0)),
        count_include_pad=bool(ctx.attr_int("count_include_pad", 0)),
    )  # fmt: skip


@converter("LpPool", since=11, attr_choices={"auto_pad": AUTO_PAD})
def convert_lp_pool(ctx: NodeContext) -> Expr:
    """``(sum |x|^p over the window)^(1/p)`` through an average pool."""
    nd = spatial_rank(ctx, "Lp pooling", (1, 2, 3))
    kernel, strides, dilations, pads = window_attrs(ctx, nd)
    p = ctx.attr_int("p", 2)
    dt = ctx.dtype(0)
    x = ctx.x(0)
    powed = ctx.call("power", ctx.call("abs", x), scalar(ctx, p, dt))
    avg = _pool(
        ctx, "avg_pool", powed, nd, kernel, strides, pads, dilations,
        ceil_mode=bool(ctx.attr_int("ceil_mode", 0)), count_include_pad=True,
    )  # fmt: skip
    total = ctx.call("multiply", avg, scalar(ctx, math.prod(kernel), dt))
    return ctx.call("power", total, scalar(ctx, 1.0 / p, dt))


@converter("GlobalAveragePool", since=1)
def convert_global_avg_pool(ctx: NodeContext) -> Expr:
    """``global_avg_pool2d`` (a mean over the spatial axes for other ranks)."""
    r = ctx.rank(0)
    if r == 4:
        return ctx.call("global_avg_pool2d", ctx.x(0))
    return ctx.call("mean", ctx.x(0), axis=tuple(range(2, r)), keepdims=True)


@converter("GlobalMaxPool", since=1)
def convert_global_max_pool(ctx: NodeContext) -> Expr:
    """``max`` over the spatial axes."""
    return ctx.call("max", ctx.x(0), axis=tuple(range(2, ctx.rank(0))), keepdims=True)


@converter("GlobalLpPool", since=2)
def convert_global_lp_pool(ctx: NodeContext) -> Expr:
    """``(sum |x|^p)^(1/p)`` over the spatial axes."""
    p = ctx.attr_int("p", 2)
    dt = ctx.dtype(0)
    powed = ctx.call("power", ctx.call("abs", ctx.x(0)), scalar(ctx, p, dt))
    s = ctx.call("sum", powed, axis=tuple(range(2, ctx.rank(0))), keepdims=True)
    return ctx.call("power", s, scalar(ctx, 1.0 / p, dt))


@converter("MaxUnpool", since=9)
def convert_max_unpool(ctx: NodeContext) -> Expr:
    """``scatter_elements`` of the values into a zero tensor at the flat indices."""
    xs = ctx.static_shape(0)
    nd = len(xs) - 2
    kernel = ctx.attr_ints("kernel_shape")
    strides = ctx.attr_ints("strides", [1] * nd)
    pads = ctx.attr_ints("pads", [0] * (2 * nd))
    assert kernel is not None and strides is not None and pads is not None
    inferred = list(xs[:2]) + [
        (xs[i + 2] - 1) * strides[i] - pads[i] - pads[i + nd] + kernel[i] for i in range(nd)
    ]
    out = [int(v) for v in ctx.const(2, "the output shape").reshape(-1)] if ctx.has(2) else inferred
    if len(out) != len(inferred) or any(o < i for o, i in zip(out, inferred)):
        ctx.fail(f"the output shape {out} is smaller than the unpooled shape {inferred}")
    zeros = ctx.constant(np.zeros(math.prod(inferred), dtype=ctx.dtype(0)))
    idx = reshape(ctx, cast(ctx, ctx.x(1), "int64"), [-1])
    vals = reshape(ctx, ctx.x(0), [-1])
    flat = ctx.call("scatter_elements", zeros, idx, vals, axis=0)
    y = reshape(ctx, flat, inferred)
    if out != inferred:  # the extra output cells (at the end of each axis) stay zero
        width = [v for o, i in zip(out, inferred) for v in (0, o - i)]
        y = ctx.call("pad", y, pad_width=tuple(width))
    return y


# ---------------------------------------------------------------- normalizations


@converter("BatchNormalization", since=7)
def convert_batch_norm(ctx: NodeContext) -> list[Expr | None]:
    """``batch_norm`` with the running statistics; training mode normalizes with the
    batch statistics and returns the updated running ones."""
    dt = ctx.dtype(0)
    x = ctx.x(0)
    params = [cast(ctx, ctx.x(i), dt) for i in range(1, 5)]
    eps = ctx.attr_float("epsilon", 1e-5)
    training = ctx.opset >= 14 and bool(ctx.attr_int("training_mode", 0))
    if not training:
        if len([o for o in ctx.node.output if o]) > 1:
            ctx.unsupported("the outputs of training (give training_mode=1)")
        return [ctx.call("batch_norm", x, *params, epsilon=eps)]
    r = ctx.rank(0)
    axes = tuple(i for i in range(r) if i != 1)
    mom = ctx.attr_float("momentum", 0.9)
    mean = ctx.call("mean", x, axis=axes)
    var = ctx.call("variance", x, axis=axes)
    y = ctx.call("batch_norm", x, params[0], params[1], mean, var, epsilon=eps)
    m, one_m = scalar(ctx, mom, dt), scalar(ctx, 1 - mom, dt)
    run_mean = ctx.call(
        "add", ctx.call("multiply", params[2], m), ctx.call("multiply", mean, one_m)
    )
    run_var = ctx.call("add", ctx.call("multiply", params[3], m), ctx.call("multiply", var, one_m))
    return [y, run_mean, run_var]


@converter("InstanceNormalization", since=6)
def convert_instance_norm(ctx: NodeContext) -> Expr:
    """``instance_norm``."""
    return ctx.call(
        "instance_norm", ctx.x(0), ctx.x(1), ctx.x(2), epsilon=ctx.attr_float("epsilon", 1e-5)
    )


@converter("LayerNormalization", since=17)
def convert_layer_norm(ctx: NodeContext) -> list[Expr]:
    """``layer_norm`` over the axes from ``axis`` on (the Mean and InvStdDev outputs are
    computed separately when requested)."""
    shape = ctx.shape(0)
    r = len(shape)
    axis = norm_axis(ctx, ctx.attr_int("axis", -1), r)
    axes = tuple(range(axis, r))
    eps = ctx.attr_float("epsilon", 1e-5)
    dt = ctx.dtype(0)
    stash = {1: "float32", 11: "float64"}.get(ctx.attr_int("stash_type", 1), "float32")
    norm_shape = list(shape[axis:])
    x = ctx.x(0)
    work = x if dt in ("float32", "float64") else cast(ctx, x, stash)
    wdt = dtype_of(ctx, work)

    def param(i: int, fill: float) -> Expr:
        if not ctx.has(i):
            if not all(isinstance(d, int) for d in norm_shape):
                ctx.fail(f"a missing bias needs static normalized sizes, got {norm_shape}")
            return ctx.constant(np.full(norm_shape, fill, dtype=wdt))
        p = cast(ctx, ctx.x(i), wdt)
        if tuple(shape_of(ctx, p)) != tuple(norm_shape):
            p = ctx.call("broadcast_to", p, shape=tuple(norm_shape))
        return p

    y = ctx.call("layer_norm", work, param(1, 1.0), param(2, 0.0), axes=axes, epsilon=eps)
    outs: list[Expr] = [cast(ctx, y, dt)]
    if any(ctx.node.output[1:]):
        mean = ctx.call("mean", work, axis=axes, keepdims=True)
        var = ctx.call("variance", work, axis=axes, keepdims=True)
        inv = ctx.call("rsqrt", ctx.call("add", var, scalar(ctx, eps, wdt)))
        outs += [cast(ctx, mean, stash), cast(ctx, inv, stash)]
    return outs


@converter("GroupNormalization", since=18)
def convert_group_norm(ctx: NodeContext) -> Expr:
    """``group_norm`` (opset 18's per-group scale and bias are repeated per channel)."""
    shape = ctx.shape(0)
    g = ctx.attr_int("num_groups")
    eps = ctx.attr_float("epsilon", 1e-5)
    dt = ctx.dtype(0)
    c = shape[1]
    scale, bias = cast(ctx, ctx.x(1), dt), cast(ctx, ctx.x(2), dt)
    if ctx.opset < 21 or shape_of(ctx, scale)[0] != c:
        if not isinstance(c, int) or c % g:
            ctx.fail(f"{c} channels do not split into {g} groups")
        scale = ctx.call("repeat", scale, repeats=c // g, axis=0)
        bias = ctx.call("repeat", bias, repeats=c // g, axis=0)
    return ctx.call("group_norm", ctx.x(0), scale, bias, num_groups=g, epsilon=eps)


@converter("LRN", since=1)
def convert_lrn(ctx: NodeContext) -> Expr:
    """``x / (bias + alpha / size * window sum of x^2) ^ beta`` over channels."""
    shape = ctx.shape(0)
    size = ctx.attr_int("size")
    alpha, beta = ctx.attr_float("alpha", 1e-4), ctx.attr_float("beta", 0.75)
    bias = ctx.attr_float("bias", 1.0)
    c = shape[1]
    if not isinstance(c, int):
        ctx.fail(f"the channels must be static, got {c}")
    dt = ctx.dtype(0)
    x = ctx.x(0)
    sq = ctx.call("multiply", x, x)
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    width = [0] * (2 * len(shape))
    width[2], width[3] = before, after
    padded = ctx.call("pad", sq, pad_width=tuple(width))
    total = None
    for k in range(size):
        part = ctx.call("strided_slice", padded, axes=(1,), begin=(k,), end=(k + c,))
        total = part if total is None else ctx.call("add", total, part)
    denom = ctx.call(
        "add", scalar(ctx, bias, dt), ctx.call("multiply", scalar(ctx, alpha / size, dt), total)
    )
    return ctx.call("divide", x, ctx.call("power", denom, scalar(ctx, beta, dt)))


@converter("LpNormalization", since=1)
def convert_lp_normalization(ctx: NodeContext) -> Expr:
    """``x / norm`` along the axis (0 where the norm is 0)."""
    axis = norm_axis(ctx, ctx.attr_int("axis", -1), ctx.rank(0))
    p = ctx.attr_int("p", 2)
    x = ctx.x(0)
    dt = ctx.dtype(0)
    if p == 1:
        norm = ctx.call("sum", ctx.call("abs", x), axis=axis, keepdims=True)
    elif p == 2:
        norm = ctx.call(
            "sqrt", ctx.call("sum", ctx.call("multiply", x, x), axis=axis, keepdims=True)
        )
    else:
        ctx.fail(f"p must be 1 or 2, got {p}", "p")
    zero = scalar(ctx, 0, dt)
    is_zero = ctx.call("equal", norm, zero)
    safe = ctx.call("where", is_zero, scalar(ctx, 1, dt), norm)
    return ctx.call("where", is_zero, zero, ctx.call("divide", x, safe))


# ----------------------------------------------------------------------- softmax


def _softmax(op: str, onnx_op: str):
    def convert(ctx: NodeContext) -> Expr:
        shape = ctx.shape(0)
        r = len(shape)
        default = -1 if ctx.opset >= 13 else 1
        axis = norm_axis(ctx, ctx.attr_int("axis", default), r)
        x = ctx.x(0)
        if ctx.opset >= 13 or axis == r - 1:
            if op == "hardmax":
                return _hardmax(ctx, x, axis)
            return ctx.call(op, x, axis=axis)
        # before opset 13: the axes from `axis` on are flattened into one
        flat = ctx.call("flatten", x, start_dim=axis, end_dim=-1)
        y = _hardmax(ctx, flat, axis) if op == "hardmax" else ctx.call(op, flat, axis=axis)
        return reshape(ctx, y, list(shape))

    convert.__doc__ = f"``{op}`` (before opset 13, over the flattened trailing axes)"
    convert.__name__ = f"convert_{op}"
    return convert


def _hardmax(ctx: NodeContext, x: Expr, axis: int) -> Expr:
    shape = shape_of(ctx, x)
    depth = shape[axis]
    if not isinstance(depth, int):
        ctx.fail(f"the axis size must be static, got {depth}")
    idx = ctx.call("argmax", x, axis=axis, keepdims=False)
    return ctx.call("one_hot", idx, depth=depth, axis=axis, dtype=dtype_of(ctx, x))


converter("Softmax", since=1)(_softmax("softmax", "Softmax"))
converter("LogSoftmax", since=1)(_softmax("log_softmax", "LogSoftmax"))
converter("Hardmax", since=1)(_softmax("hardmax", "Hardmax"))


# ---------------------------------------------------------------- matrix products


@converter("MatMul", since=1)
def convert_matmul(ctx: NodeContext) -> Expr:
    """``matmul``."""
    return ctx.call("matmul", ctx.x(0), ctx.x(1))


@converter("Gemm", since=7)
def convert_gemm(ctx: NodeContext) -> Expr:
    """``linear`` (transB) or ``matmul``, scaled by alpha, plus beta * C."""
    a, b = ctx.x(0), ctx.x(1)
    dt = ctx.dtype(0)
    ta, tb = ctx.attr_int("transA", 0), ctx.attr_int("transB", 0)
    alpha, beta = ctx.attr_float("alpha", 1.0), ctx.attr_float("beta", 1.0)
    if ta:
        a = ctx.call("permute_dims", a, axes=(1, 0))
    if tb and alpha == 1.0 and beta == 1.0 and ctx.has(2) and len(ctx.shape(2)) == 1:
        n = ctx.shape(1)[0]
        if ctx.shape(2)[0] == n and ctx.dtype(2) == dt:
            return ctx.call("linear", a, b, ctx.x(2))  # x @ W.T + bias, like torch.nn.Linear
    if tb and dt in FLOATS + ("int32", "int64"):
        y = ctx.call("linear", a, b)
    else:
        y = ctx.call("matmul", a, ctx.call("permute_dims", b, axes=(1, 0)) if tb else b)
    if alpha != 1.0:
        y = ctx.call("multiply", y, scalar(ctx, alpha, dt))
    if ctx.has(2) and beta != 0.0:
        c = ctx.x(2)
        if beta != 1.0:
            c = ctx.call("multiply", c, scalar(ctx, beta, dt))
        y = ctx.call("add", y, c)
    return y
