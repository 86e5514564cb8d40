"""``GridSample``: sampling an image at the (run-time) grid coordinates, as elementwise
arithmetic on the coordinates and one ``gather_elements`` per interpolation tap (2-D
and 3-D; nearest, linear and cubic; zeros, border and reflection padding)."""

from __future__ import annotations

import itertools
import math

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter
from .common import FLOATS, cast, reshape, scalar, select

_CUBIC_A = -0.75


def _reflect(ctx: NodeContext, x: Expr, lo: float, hi: float, dt: str) -> Expr:
    """Reflect ``x`` by the borders until it lies in [lo, hi] (ONNX's rule)."""
    rng = hi - lo

    def s(v: float) -> Expr:
        return scalar(ctx, v, dt)

    def fold(dx: Expr, near: float, far: float, sign: float) -> Expr:
        n = ctx.call("trunc", ctx.call("divide", dx, s(rng)))
        r = ctx.call("subtract", dx, ctx.call("multiply", n, s(rng)))
        even = ctx.call("equal", ctx.call("mod", n, s(2.0), fmod=True), s(0.0))
        a = ctx.call("add", s(near), ctx.call("multiply", s(sign), r))
        b = ctx.call("subtract", s(far), ctx.call("multiply", s(sign), r))
        return ctx.call("where", even, a, b)

    below = fold(ctx.call("subtract", s(lo), x), lo, hi, 1.0)
    above = fold(ctx.call("subtract", x, s(hi)), hi, lo, -1.0)
    y = ctx.call("where", ctx.call("less", x, s(lo)), below, x)
    return ctx.call("where", ctx.call("greater", x, s(hi)), above, y)


def _cubic(ctx: NodeContext, r: Expr, dt: str) -> list[Expr]:
    """Keys' cubic weights of the taps at -1, 0, 1, 2 for the fraction ``r``."""
    a = _CUBIC_A

    def s(v: float) -> Expr:
        return scalar(ctx, v, dt)

    def near(t: Expr) -> Expr:  # ((a + 2) t - (a + 3)) t t + 1
        inner = ctx.call("subtract", ctx.call("multiply", s(a + 2), t), s(a + 3))
        return ctx.call("add", ctx.call("multiply", ctx.call("multiply", inner, t), t), s(1.0))

    def far(t: Expr) -> Expr:  # ((a t - 5a) t + 8a) t - 4a
        inner = ctx.call("subtract", ctx.call("multiply", s(a), t), s(5 * a))
        inner = ctx.call("add", ctx.call("multiply", inner, t), s(8 * a))
        return ctx.call("subtract", ctx.call("multiply", inner, t), s(4 * a))

    one_m = ctx.call("subtract", s(1.0), r)
    return [
        far(ctx.call("add", r, s(1.0))),
        near(r),
        near(one_m),
        far(ctx.call("add", one_m, s(1.0))),
    ]


@converter(
    "GridSample", since=16,
    attr_choices={
        "mode": ("bilinear", "nearest", "bicubic", "linear", "cubic"),
        "padding_mode": ("zeros", "border", "reflection"),
    },
)  # fmt: skip
def convert_grid_sample(ctx: NodeContext) -> Expr:
    """Per spatial axis: unnormalize the grid coordinate, round (nearest), fold it into
    range (border / reflection); then per tap, the pixel index (clamped, reflected, or
    masked for zeros padding) and its weight; the taps are gathered and summed."""
    xshape = ctx.static_shape(0)
    nd = len(xshape) - 2
    if nd not in (2, 3):
        ctx.unsupported(f"{nd}-D grid sampling")
    n, c = xshape[:2]
    dims = list(xshape[2:])
    gshape = ctx.static_shape(1)
    out_sp = list(gshape[1:-1])
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(
        ctx.attr_str("mode", "bilinear"), ctx.attr_str("mode", "bilinear")
    )
    pad = ctx.attr_str("padding_mode", "zeros")
    align = bool(ctx.attr_int("align_corners", 0))
    dt = ctx.dtype(0) if ctx.dtype(0) in FLOATS else "float32"
    grid = cast(ctx, ctx.x(1), dt)

    def s(v: float) -> Expr:
        return scalar(ctx, v, dt)

    taps_per_axis: list[list[tuple[Expr, Expr | None, Expr | None]]] = []
    for i, size in enumerate(dims):
        g = select(ctx, grid, nd - 1 - i, nd + 1)  # the grid lists x (width) first
        if align:
            x = ctx.call("multiply", ctx.call("add", g, s(1.0)), s((size - 1) / 2))
            lo, hi = 0.0, float(size - 1)
        else:
            x = ctx.call(
                "divide",
                ctx.call(
                    "subtract", ctx.call("multiply", ctx.call("add", g, s(1.0)), s(size)), s(1.0)
                ),
                s(2.0),
            )
            lo, hi = -0.5, size - 0.5
        if mode == "nearest":
            x = ctx.call("round", x)
        if pad == "border":
            out = ctx.call("logical_or", ctx.call("less", x, s(lo)), ctx.call("greater", x, s(hi)))
            x = ctx.call("where", out, ctx.call("clip", x, min=0.0, max=float(size - 1)), x)
        elif pad == "reflection":
            x = _reflect(ctx, x, lo, hi, dt)
        if mode == "nearest":
            offsets, weights = [0], None
            base = x
        else:
            base = ctx.call("floor", x)
            r = ctx.call("subtract", x, base)
            if mode == "linear":
                offsets, weights = [0, 1], [ctx.call("subtract", s(1.0), r), r]
            else:
                offsets, weights = [-1, 0, 1, 2], _cubic(ctx, r, dt)
        axis_taps = []
        for k, o in enumerate(offsets):
            pos = base if o == 0 else ctx.call("add", base, s(float(o)))
            valid = None
            if pad == "zeros":
                valid = ctx.call(
                    "logical_and",
                    ctx.call("greater_equal", pos, s(0.0)),
                    ctx.call("less", pos, s(float(size))),
                )
            elif pad == "reflection" and mode != "nearest":
                pos = ctx.call("trunc", _reflect(ctx, pos, lo, hi, dt))
            idx = cast(ctx, ctx.call("clip", pos, min=0.0, max=float(size - 1)), "int64")
            axis_taps.append((idx, weights[k] if weights is not None else None, valid))
        taps_per_axis.append(axis_taps)

    flat_x = reshape(ctx, ctx.x(0), [n, c, math.prod(dims)])
    count = math.prod(out_sp)
    total: Expr | None = None
    strides = [math.prod(dims[i + 1 :]) for i in range(nd)]
    for combo in itertools.product(*taps_per_axis):
        flat = None
        weight = None
        valid = None
        for (idx, w, ok), stride in zip(combo, strides):
            term = idx if stride == 1 else ctx.call("multiply", idx, scalar(ctx, stride, "int64"))
            flat = term if flat is None else ctx.call("add", flat, term)
            if w is not None:
                weight = w if weight is None else ctx.call("multiply", weight, w)
            if ok is not None:
                valid = ok if valid is None else ctx.call("logical_and", valid, ok)
        assert flat is not None
        idx = ctx.call("broadcast_to", reshape(ctx, flat, [n, 1, count]), shape=(n, c, count))
        vals = ctx.call("gather_elements", flat_x, idx, axis=2)
        vals = cast(ctx, vals, dt)
        factor = weight
        if valid is not None:
            mask = cast(ctx, valid, dt)
            factor = mask if factor is None else ctx.call("multiply", factor, mask)
        if factor is not None:
            vals = ctx.call("multiply", vals, reshape(ctx, factor, [n, 1, count]))
        total = vals if total is None else ctx.call("add", total, vals)
    assert total is not None
    y = reshape(ctx, total, [n, c, *out_sp])
    return cast(ctx, y, ctx.dtype(0))
