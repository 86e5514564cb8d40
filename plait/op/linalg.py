"""Linear algebra operators: matrix products, ``linear`` and convolutions."""

from __future__ import annotations

from ..ir import symbolic as sym
from ..ir.types import Dim, TensorType, Type
from ..runtime import numpy_ops as npo
from .define import op_definer
from .infer import (
    add_dim,
    attr_ints,
    attr_padding,
    broadcast_shapes,
    check_dtype_class,
    join_layout,
    mul_dim,
    same_dtype,
    shape_or_none,
    shape_str,
    split_layout,
    tensor_arg,
    window_out_dim,
)
from .registry import AttrSpec, InferContext, InferFn

define = op_definer(__name__)


def infer_matmul(ctx: InferContext) -> Type:
    """numpy ``matmul`` shapes: batched, broadcasting, 1-D operands promoted."""
    a, b = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
    dtype = same_dtype(ctx, [a, b])
    if a.shape is None or b.shape is None:
        return TensorType(None, dtype)
    if len(a.shape) == 0 or len(b.shape) == 0:
        ctx.fail("matmul does not take scalars (use multiply)", arg=0 if not a.shape else 1)
    sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
    sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
    k1, k2 = sa[-1], sb[-2]
    if isinstance(k1, int) and isinstance(k2, int) and k1 != k2:
        ctx.fail(
            f"matmul: the contracted dimensions differ: x has {k1} (shape {shape_str(a.shape)}), "
            f"y has {k2} (shape {shape_str(b.shape)})",
            arg=1,
        )
    batch = broadcast_shapes(ctx, [sa[:-2], sb[:-2]])
    assert batch is not None
    out = batch + ((sa[-2],) if len(a.shape) > 1 else ()) + ((sb[-1],) if len(b.shape) > 1 else ())
    return TensorType(out, dtype)


define(
    "matmul",
    inputs=("x", "y"),
    infer_type=infer_matmul,
    pattern="out_elemwise_fusable",
    reference=npo.matmul,
    doc="matrix product with numpy semantics (batched, broadcasting, 1-D promotion)",
)


def infer_linear(ctx: InferContext) -> Type:
    """``x (..., in)``, ``weight (out, in)``, optional ``bias (out,)`` -> ``(..., out)``."""
    x, w = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
    ts = [x, w]
    b = tensor_arg(ctx, 2) if len(ctx.types) > 2 else None
    if b is not None:
        ts.append(b)
    for i, t in enumerate(ts):
        check_dtype_class(ctx, i, t, "numeric")
    dtype = same_dtype(ctx, ts)
    if w.shape is not None and len(w.shape) != 2:
        ctx.fail(
            "linear: weight must be 2-D (out_features, in_features), got shape "
            f"{shape_str(w.shape)}",
            arg=1,
        )
    if x.shape is not None and len(x.shape) == 0:
        ctx.fail("linear: x must have at least one axis (the in_features), got a scalar", arg=0)
    if x.shape is not None and w.shape is not None:
        xin, win = x.shape[-1], w.shape[1]
        if isinstance(xin, int) and isinstance(win, int) and xin != win:
            ctx.fail(
                f"linear: x has {xin} features (shape {shape_str(x.shape)}) but weight expects "
                f"{win} (shape {shape_str(w.shape)}, which is (out_features, in_features))",
                arg=1,
            )
    if b is not None and b.shape is not None:
        if len(b.shape) != 1:
            ctx.fail(
                f"linear: bias must be 1-D (out_features,), got shape {shape_str(b.shape)}", arg=2
            )
        if w.shape is not None and isinstance(b.shape[0], int) and isinstance(w.shape[0], int):
            if b.shape[0] != w.shape[0]:
                ctx.fail(
                    f"linear: bias has {b.shape[0]} elements, weight has {w.shape[0]} out_features",
                    arg=2,
                )
    if x.shape is None or w.shape is None:
        return TensorType(None, dtype)
    return TensorType(x.shape[:-1] + (w.shape[0],), dtype)


define(
    "linear",
    inputs=("x", "weight", "bias?"),
    infer_type=infer_linear,
    pattern="out_elemwise_fusable",
    reference=npo.linear,
    doc="x @ weight.T + bias, weight of shape (out_features, in_features) like torch",
)

# ------------------------------------------------------------------ convolutions

_SPATIAL = {1: "W", 2: "HW"}
DATA_LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC")}
KERNEL_LAYOUTS = {1: ("OIW", "WIO"), 2: ("OIHW", "HWIO")}


def _check_rank(ctx: InferContext, i: int, t: TensorType, nd: int, layout: str) -> None:
    assert t.shape is not None
    if len(t.shape) != nd + 2:
        ctx.fail(
            f"{ctx.op.name}: {ctx.op.input_name(i)} must have rank {nd + 2} (layout {layout}), "
            f"got shape {shape_str(t.shape)}",
            arg=i,
        )


def _check_out_dims(ctx: InferContext, outs: list[Dim | None], what: str) -> None:
    for i, o in enumerate(outs):
        if o is not None and sym.bounds(o)[1] < 1:
            ctx.fail(f"{ctx.op.name}: {what} along spatial axis {i} (output size {o})")


def infer_conv(nd: int) -> InferFn:
    """Type inference of an ``nd``-dimensional convolution."""

    def infer(ctx: InferContext) -> Type:
        """Batch kept, channels from the weight, window output sizes on spatial axes."""
        x, w = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
        check_dtype_class(ctx, 0, x, "numeric")
        dtype = same_dtype(ctx, [x, w])
        strides = attr_ints(ctx, "strides", nd, minimum=1)
        dilation = attr_ints(ctx, "dilation", nd, minimum=1)
        pad = attr_padding(ctx, "padding", nd)
        groups = ctx.attrs["groups"]
        if groups < 1:
            ctx.fail(f"{ctx.op.name}: groups must be >= 1, got {groups}")
        dl, kl = ctx.attrs["data_layout"], ctx.attrs["kernel_layout"]
        if x.shape is None or w.shape is None:
            return TensorType(None, dtype)
        _check_rank(ctx, 0, x, nd, dl)
        _check_rank(ctx, 1, w, nd, kl)
        n, c, sp = split_layout(x.shape, dl)
        o, i, ks = split_layout(w.shape, kl, "O", "I")
        if isinstance(c, int) and c % groups:
            ctx.fail(
                f"{ctx.op.name}: data has {c} channels, not divisible by groups={groups}", arg=0
            )
        if isinstance(o, int) and o % groups:
            ctx.fail(
                f"{ctx.op.name}: weight has {o} output channels (shape {shape_str(w.shape)}, "
                f"layout {kl}), not divisible by groups={groups}",
                arg=1,
            )
        if isinstance(c, int) and isinstance(i, int) and c != i * groups:
            ctx.fail(
                f"{ctx.op.name}: data has {c} channels (shape {shape_str(x.shape)}, layout {dl}) "
                f"but weight (shape {shape_str(w.shape)}, layout {kl}) expects {i} input "
                f"channels per group x {groups} groups = {i * groups}",
                arg=1,
            )
        if not all(isinstance(k, int) for k in ks):
            return TensorType(None, dtype)
        outs = [
            window_out_dim(sp[a], ks[a], strides[a], pad[a], pad[a + nd], dilation[a])  # type: ignore[arg-type]
            for a in range(nd)
        ]
        _check_out_dims(ctx, outs, "the dilated kernel is larger than the padded input")
        return TensorType(shape_or_none(join_layout(n, o, outs, dl)), dtype)

    return infer


def _conv_attrs(nd: int) -> dict[str, AttrSpec]:
    what = "(left, right)" if nd == 1 else "(top, left, bottom, right)"
    return {
        "strides": AttrSpec("int_or_ints", default=(1,) * nd, doc="step per spatial axis"),
        "padding": AttrSpec(
            "int_or_ints", default=(0,) * (2 * nd), doc=f"zero padding {what}, or one per axis"
        ),
        "dilation": AttrSpec("int_or_ints", default=(1,) * nd, doc="kernel dilation per axis"),
        "groups": AttrSpec("int", default=1, doc="channel groups (channels for depthwise)"),
        "data_layout": AttrSpec("str", default=DATA_LAYOUTS[nd][0], choices=DATA_LAYOUTS[nd]),
        "kernel_layout": AttrSpec("str", default=KERNEL_LAYOUTS[nd][0], choices=KERNEL_LAYOUTS[nd]),
    }


for _nd in (1, 2):
    define(
        f"conv{_nd}d",
        inputs=("data", "weight"),
        attrs=_conv_attrs(_nd),
        infer_type=infer_conv(_nd),
        pattern="out_elemwise_fusable",
        reference=npo.IMPLS[f"conv{_nd}d"],
        doc=f"{_nd}-D convolution (cross-correlation, like torch), grouped and dilated",
    )


def infer_conv_transpose(nd: int) -> InferFn:
    """Type inference of an ``nd``-dimensional transposed convolution (weight
    ``(in_channels, out_channels / groups, *kernel)``)."""

    def infer(ctx: InferContext) -> Type:
        """Spatial sizes (S - 1) * stride - padding + dilation * (K - 1) + output_padding
        + 1; channels weight.shape[1] * groups."""
        x, w = tensor_arg(ctx, 0), tensor_arg(ctx, 1)
        check_dtype_class(ctx, 0, x, "numeric")
        dtype = same_dtype(ctx, [x, w])
        strides = attr_ints(ctx, "strides", nd, minimum=1)
        dilation = attr_ints(ctx, "dilation", nd, minimum=1)
        out_pad = attr_ints(ctx, "output_padding", nd, minimum=0)
        pad = attr_padding(ctx, "padding", nd)
        groups = ctx.attrs["groups"]
        if groups < 1:
            ctx.fail(f"{ctx.op.name}: groups must be >= 1, got {groups}")
        for a in range(nd):
            if out_pad[a] >= max(strides[a], dilation[a]):
                ctx.fail(
                    f"{ctx.op.name}: output_padding {out_pad} must be smaller than the stride "
                    f"or the dilation along each axis (strides {strides}, dilation {dilation})"
                )
        dl = ctx.attrs["data_layout"]
        if x.shape is None or w.shape is None:
            return TensorType(None, dtype)
        _check_rank(ctx, 0, x, nd, dl)
        _check_rank(ctx, 1, w, nd, "IO" + _SPATIAL[nd])
        n, c, sp = split_layout(x.shape, dl)
        wi, wo, ks = w.shape[0], w.shape[1], list(w.shape[2:])
        if isinstance(c, int) and c % groups:
            ctx.fail(
                f"{ctx.op.name}: data has {c} channels, not divisible by groups={groups}", arg=0
            )
        if isinstance(c, int) and isinstance(wi, int) and c != wi:
            ctx.fail(
                f"{ctx.op.name}: data has {c} channels (shape {shape_str(x.shape)}, layout {dl}) "
                f"but weight has {wi} input channels (shape {shape_str(w.shape)}, layout "
                f"IO{_SPATIAL[nd]})",
                arg=1,
            )
        if not all(isinstance(k, int) for k in ks):
            return TensorType(None, dtype)
        outs: list[Dim | None] = []
        for a in range(nd):
            grow = dilation[a] * (ks[a] - 1) + out_pad[a] + 1 - pad[a] - pad[a + nd]  # type: ignore[operator]
            outs.append(add_dim(mul_dim(add_dim(sp[a], -1), strides[a]), grow))
        _check_out_dims(ctx, outs, "the padding removes the whole output")
        o = mul_dim(wo, groups)
        return TensorType(shape_or_none(join_layout(n, o, outs, dl)), dtype)  # type: ignore[arg-type]

    return infer


def _conv_transpose_attrs(nd: int) -> dict[str, AttrSpec]:
    attrs = _conv_attrs(nd)
    del attrs["kernel_layout"]
    attrs["output_padding"] = AttrSpec(
        "int_or_ints", default=(0,) * nd, doc="extra size added at the end of each axis"
    )
    order = ("strides", "padding", "output_padding", "dilation", "groups", "data_layout")
    return {k: attrs[k] for k in order}


for _nd in (1, 2):
    define(
        f"conv_transpose{_nd}d",
        inputs=("data", "weight"),
        attrs=_conv_transpose_attrs(_nd),
        infer_type=infer_conv_transpose(_nd),
        pattern="out_elemwise_fusable",
        reference=npo.IMPLS[f"conv_transpose{_nd}d"],
        doc=f"{_nd}-D transposed convolution; weight (in, out / groups, *kernel) like torch",
    )
