"""Neural-network operators: softmax, normalizations, pooling and resizing."""

from __future__ import annotations

from ..ir.types import Dim, TensorType, Type
from ..runtime import numpy_ops as npo
from .define import op_definer
from .infer import (
    attr_ints,
    attr_padding,
    check_dtype_class,
    join_layout,
    normalize_axes,
    normalize_axis,
    same_dtype,
    shape_or_none,
    shape_str,
    split_layout,
    tensor_arg,
    window_out_dim,
)
from .registry import AttrSpec, InferContext, InferFn

define = op_definer(__name__)

# ----------------------------------------------------------------------- softmax


def infer_softmax(ctx: InferContext) -> Type:
    """The type of x, which must be floating point with ``axis`` in range."""
    x = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, x, "float")
    if x.shape is not None:
        if not x.shape:
            ctx.fail(f"{ctx.op.name}: x must have at least one axis, got a scalar", arg=0)
        normalize_axis(ctx, ctx.attrs["axis"], len(x.shape))
    return x


for _name, _doc in (
    ("softmax", "exp(x) / sum(exp(x)) along an axis"),
    ("log_softmax", "x - log(sum(exp(x))) along an axis"),
):
    define(
        _name,
        inputs=("x",),
        attrs={"axis": AttrSpec("int", default=-1)},
        infer_type=infer_softmax,
        pattern="opaque",
        reference=npo.IMPLS[_name],
        doc=_doc,
    )

# ---------------------------------------------------------------- normalizations


def _param_shape(
    ctx: InferContext, i: int, t: TensorType, want: tuple[Dim, ...], what: str
) -> None:
    """Fail unless parameter ``i`` has shape ``want`` (symbolic sizes match anything)."""
    if t.shape is None:
        return
    if len(t.shape) != len(want) or any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(t.shape, want)
    ):
        ctx.fail(
            f"{ctx.op.name}: {ctx.op.input_name(i)} must have shape {want} ({what}), "
            f"got {shape_str(t.shape)}",
            arg=i,
        )


def _norm_args(ctx: InferContext) -> tuple[TensorType, list[TensorType], str | None]:
    ts = [tensor_arg(ctx, i) for i in range(len(ctx.types))]
    check_dtype_class(ctx, 0, ts[0], "float")
    dtype = same_dtype(ctx, ts)
    if ctx.attrs["epsilon"] < 0:
        ctx.fail(f"{ctx.op.name}: epsilon must not be negative, got {ctx.attrs['epsilon']}")
    return ts[0], ts[1:], dtype


def infer_layer_norm(ctx: InferContext) -> Type:
    """The type of x; gamma and beta have the shape of x on ``axes``."""
    x, params, dtype = _norm_args(ctx)
    if x.shape is None:
        return TensorType(None, dtype)
    axes = normalize_axes(ctx, ctx.attrs["axes"], len(x.shape))
    if not axes:
        ctx.fail("layer_norm: axes must not be empty")
    want = tuple(x.shape[a] for a in axes)
    for i, p in enumerate(params, start=1):
        _param_shape(ctx, i, p, want, f"the sizes of x {shape_str(x.shape)} on axes {axes}")
    return TensorType(x.shape, dtype)


define(
    "layer_norm",
    inputs=("x", "gamma", "beta"),
    attrs={
        "axes": AttrSpec("ints", default=(-1,), doc="the normalized axes"),
        "epsilon": AttrSpec("float", default=1e-5, doc="added to the variance"),
    },
    infer_type=infer_layer_norm,
    pattern="opaque",
    reference=npo.layer_norm,
    doc="(x - mean) / sqrt(var + epsilon) * gamma + beta, statistics over axes",
)


def _channel_params(ctx: InferContext, x: TensorType, params: list[TensorType], axis: int) -> None:
    assert x.shape is not None
    c = x.shape[axis]
    for i, p in enumerate(params, start=1):
        _param_shape(ctx, i, p, (c,), f"one per channel of x {shape_str(x.shape)} on axis {axis}")


def infer_batch_norm(ctx: InferContext) -> Type:
    """The type of x; the four parameters are 1-D, one value per channel."""
    x, params, dtype = _norm_args(ctx)
    if x.shape is not None:
        _channel_params(ctx, x, params, normalize_axis(ctx, ctx.attrs["axis"], len(x.shape)))
    return TensorType(x.shape, dtype)


define(
    "batch_norm",
    inputs=("x", "gamma", "beta", "moving_mean", "moving_var"),
    attrs={
        "axis": AttrSpec("int", default=1, doc="the channel axis"),
        "epsilon": AttrSpec("float", default=1e-5, doc="added to the variance"),
    },
    infer_type=infer_batch_norm,
    pattern="broadcast",
    reference=npo.batch_norm,
    doc="inference batch normalization: (x - moving_mean) / sqrt(moving_var + epsilon) * "
    "gamma + beta",
)


def infer_group_norm(ctx: InferContext) -> Type:
    """The type of x; gamma and beta are per channel; the channels split into groups."""
    x, params, dtype = _norm_args(ctx)
    g = ctx.attrs["num_groups"]
    if g < 1:
        ctx.fail(f"group_norm: num_groups must be >= 1, got {g}")
    if x.shape is not None:
        if len(x.shape) < 2:
            ctx.fail(
                "group_norm: x must have a batch and a channel axis, got shape "
                f"{shape_str(x.shape)}",
                arg=0,
            )
        axis = normalize_axis(ctx, ctx.attrs["channel_axis"], len(x.shape), "channel_axis")
        if axis == 0:
            ctx.fail("group_norm: channel_axis cannot be the batch axis 0")
        c = x.shape[axis]
        if isinstance(c, int) and c % g:
            ctx.fail(
                f"group_norm: {c} channels (shape {shape_str(x.shape)}) do not split into "
                f"{g} groups",
                arg=0,
            )
        _channel_params(ctx, x, params, axis)
    return TensorType(x.shape, dtype)


define(
    "group_norm",
    inputs=("x", "gamma", "beta"),
    attrs={
        "num_groups": AttrSpec("int", doc="number of channel groups"),
        "channel_axis": AttrSpec("int", default=1),
        "epsilon": AttrSpec("float", default=1e-5, doc="added to the variance"),
    },
    infer_type=infer_group_norm,
    pattern="opaque",
    reference=npo.group_norm,
    doc="normalize each group of channels of each sample, then per-channel gamma, beta",
)


def infer_instance_norm(ctx: InferContext) -> Type:
    """The type of x (batch axis 0, a channel axis, at least one spatial axis)."""
    x, params, dtype = _norm_args(ctx)
    if x.shape is not None:
        if len(x.shape) < 3:
            ctx.fail(
                "instance_norm: x needs a batch, a channel and a spatial axis, got shape "
                f"{shape_str(x.shape)}",
                arg=0,
            )
        axis = normalize_axis(ctx, ctx.attrs["channel_axis"], len(x.shape), "channel_axis")
        if axis == 0:
            ctx.fail("instance_norm: channel_axis cannot be the batch axis 0")
        _channel_params(ctx, x, params, axis)
    return TensorType(x.shape, dtype)


define(
    "instance_norm",
    inputs=("x", "gamma", "beta"),
    attrs={
        "channel_axis": AttrSpec("int", default=1),
        "epsilon": AttrSpec("float", default=1e-5, doc="added to the variance"),
    },
    infer_type=infer_instance_norm,
    pattern="opaque",
    reference=npo.instance_norm,
    doc="normalize each channel of each sample over the spatial axes, then gamma, beta",
)

# ----------------------------------------------------------------------- pooling

_LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC")}


def _layout_x(ctx: InferContext, nd: int, cls: str) -> TensorType:
    x = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, x, cls)
    if x.shape is not None and len(x.shape) != nd + 2:
        ctx.fail(
            f"{ctx.op.name}: x must have rank {nd + 2} (layout {ctx.attrs['layout']}), got "
            f"shape {shape_str(x.shape)}",
            arg=0,
        )
    return x


def infer_pool(nd: int, cls: str) -> InferFn:
    """Type inference of ``nd``-dimensional max/avg pooling over dtypes ``cls``."""

    def infer(ctx: InferContext) -> Type:
        """The window output size along each spatial axis (torch's ceil_mode rule)."""
        x = _layout_x(ctx, nd, cls)
        k = attr_ints(ctx, "pool_size", nd, minimum=1)
        s = attr_ints(ctx, "strides", nd, minimum=1)
        d = attr_ints(ctx, "dilation", nd, minimum=1)
        p = attr_padding(ctx, "padding", nd)
        for a in range(nd):
            if p[a] >= d[a] * (k[a] - 1) + 1 or p[a + nd] >= d[a] * (k[a] - 1) + 1:
                ctx.fail(
                    f"{ctx.op.name}: padding {p} must be smaller than the (dilated) window "
                    f"{k} on each side, or a window would hold only padding"
                )
        if x.shape is None:
            return x
        layout = ctx.attrs["layout"]
        n, c, sp = split_layout(x.shape, layout)
        outs = [
            window_out_dim(sp[a], k[a], s[a], p[a], p[a + nd], d[a], ctx.attrs["ceil_mode"])
            for a in range(nd)
        ]
        for a, o in enumerate(outs):
            if isinstance(o, int) and o < 1:
                ctx.fail(
                    f"{ctx.op.name}: the window {k} is larger than the padded input (shape "
                    f"{shape_str(x.shape)}, padding {p}) along spatial axis {a}",
                    arg=0,
                )
        return TensorType(shape_or_none(join_layout(n, c, outs, layout)), x.dtype)

    return infer


def _pool_attrs(nd: int, avg: bool) -> dict[str, AttrSpec]:
    what = "(left, right)" if nd == 1 else "(top, left, bottom, right)"
    attrs = {
        "pool_size": AttrSpec("int_or_ints", default=(1,) * nd, doc="window size per axis"),
        "strides": AttrSpec("int_or_ints", default=(1,) * nd, doc="step per axis"),
        "padding": AttrSpec("int_or_ints", default=(0,) * (2 * nd), doc=f"padding {what}"),
        "dilation": AttrSpec("int_or_ints", default=(1,) * nd, doc="window dilation per axis"),
        "ceil_mode": AttrSpec("bool", default=False, doc="round the output size up"),
    }
    if avg:
        attrs["count_include_pad"] = AttrSpec(
            "bool", default=False, doc="divide by the window size including padding"
        )
    attrs["layout"] = AttrSpec("str", default=_LAYOUTS[nd][0], choices=_LAYOUTS[nd])
    return attrs


for _nd in (1, 2):
    define(
        f"max_pool{_nd}d",
        inputs=("x",),
        attrs=_pool_attrs(_nd, avg=False),
        infer_type=infer_pool(_nd, "numeric"),
        pattern="out_elemwise_fusable",
        reference=npo.IMPLS[f"max_pool{_nd}d"],
        doc=f"{_nd}-D max pooling (padding never wins)",
    )
    define(
        f"avg_pool{_nd}d",
        inputs=("x",),
        attrs=_pool_attrs(_nd, avg=True),
        infer_type=infer_pool(_nd, "float"),
        pattern="out_elemwise_fusable",
        reference=npo.IMPLS[f"avg_pool{_nd}d"],
        doc=f"{_nd}-D average pooling",
    )


def infer_adaptive_avg_pool2d(ctx: InferContext) -> Type:
    """x with the spatial sizes replaced by ``output_size`` (kept when None)."""
    x = _layout_x(ctx, 2, "float")
    out = None if ctx.attrs["output_size"] is None else attr_ints(ctx, "output_size", 2, minimum=1)
    if x.shape is None or out is None:
        return x
    n, c, _ = split_layout(x.shape, ctx.attrs["layout"])
    return TensorType(tuple(join_layout(n, c, list(out), ctx.attrs["layout"])), x.dtype)  # type: ignore[arg-type]


define(
    "adaptive_avg_pool2d",
    inputs=("x",),
    attrs={
        "output_size": AttrSpec("int_or_ints", default=None, doc="(H, W); None keeps the input's"),
        "layout": AttrSpec("str", default="NCHW", choices=_LAYOUTS[2]),
    },
    infer_type=infer_adaptive_avg_pool2d,
    pattern="opaque",
    reference=npo.adaptive_avg_pool2d,
    doc="average pooling into a fixed output size (torch's bins)",
)


def infer_global_avg_pool2d(ctx: InferContext) -> Type:
    """x with both spatial sizes 1."""
    x = _layout_x(ctx, 2, "float")
    if x.shape is None:
        return x
    n, c, _ = split_layout(x.shape, ctx.attrs["layout"])
    return TensorType(tuple(join_layout(n, c, [1, 1], ctx.attrs["layout"])), x.dtype)  # type: ignore[arg-type]


define(
    "global_avg_pool2d",
    inputs=("x",),
    attrs={"layout": AttrSpec("str", default="NCHW", choices=_LAYOUTS[2])},
    infer_type=infer_global_avg_pool2d,
    pattern="reduce",
    reference=npo.global_avg_pool2d,
    doc="mean over the spatial axes, kept as size 1",
)

# ---------------------------------------------------------------------- resizing


def infer_resize2d(ctx: InferContext) -> Type:
    """x with the spatial sizes replaced by ``size`` (ints or symbolic sizes, such as
    ``h * 2`` for an upsampling of a dynamic image)."""
    x = _layout_x(ctx, 2, "numeric")
    v = ctx.attrs["size"]
    size = (v, v) if isinstance(v, int) else tuple(v) * 2 if len(v) == 1 else tuple(v)
    if len(size) != 2:
        ctx.fail(f"resize2d: attribute 'size' must have 1 or 2 values, got {v}")
    if any(type(d) is int and d < 1 for d in size):
        ctx.fail(f"resize2d: attribute 'size' must be >= 1, got {v}")
    if x.shape is None:
        return x
    n, c, _ = split_layout(x.shape, ctx.attrs["layout"])
    for d in split_layout(x.shape, ctx.attrs["layout"])[2]:
        if d == 0:
            ctx.fail(f"resize2d: cannot resize an empty input (shape {shape_str(x.shape)})", arg=0)
    return TensorType(tuple(join_layout(n, c, list(size), ctx.attrs["layout"])), x.dtype)  # type: ignore[arg-type]


define(
    "resize2d",
    inputs=("x",),
    attrs={
        "size": AttrSpec("int_or_dims", doc="output (H, W); symbolic sizes allowed"),
        "layout": AttrSpec("str", default="NCHW", choices=_LAYOUTS[2]),
        "method": AttrSpec("str", default="linear", choices=("nearest", "linear", "cubic")),
        "coordinate_transformation_mode": AttrSpec(
            "str",
            default="half_pixel",
            choices=(
                "half_pixel",
                "pytorch_half_pixel",
                "align_corners",
                "asymmetric",
                "tf_half_pixel_for_nn",
            ),
            doc="how an output index maps to an input coordinate (ONNX Resize)",
        ),  # fmt: skip
        "rounding_method": AttrSpec(
            "str",
            default="round",
            choices=("round", "round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
            doc="nearest: coordinate to index (round = half away from zero)",
        ),
        "cubic_alpha": AttrSpec("float", default=-0.75, doc="cubic: the kernel's a"),
        "cubic_exclude": AttrSpec(
            "bool", default=False, doc="cubic: drop taps outside the input and renormalize"
        ),
    },
    infer_type=infer_resize2d,
    pattern="injective",
    reference=npo.resize2d,
    doc="resize the spatial axes by nearest, linear or cubic interpolation (ONNX Resize)",
)
