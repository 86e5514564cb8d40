"""Reductions."""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext
from ..dtypes import is_float
from ..registry import converter


def _axes(ctx: NodeContext, x: Expr, key: str = "dim") -> tuple[int, ...] | None:
    """The reduced axes (None: all); an empty list reduces every axis, like torch."""
    v = ctx.arg(key, None) if key in ctx._names else None
    if v is None:
        return None
    v = [v] if isinstance(v, int) else ctx.ints(key)
    if not v:
        return None
    r = max(ctx.rank(x), 1)
    return tuple(sorted({d % r for d in v}))


def _reduce(ctx: NodeContext, op: str) -> Expr:
    out = ctx.out_dtype()
    x = ctx.cast(ctx.x(0), out)
    if ctx.rank(x) == 0:
        return x
    keep = bool(ctx.arg("keepdim", False)) if "keepdim" in ctx._names else False
    return ctx.call(op, x, axis=_axes(ctx, x), keepdims=keep)


@converter(["aten.sum.dim_IntList", "aten.sum.default"])
def sum_(ctx: NodeContext) -> Expr:
    """sum (in the result dtype: int64 for integer and bool inputs)"""
    return _reduce(ctx, "sum")


@converter(["aten.mean.dim", "aten.mean.default"])
def mean(ctx: NodeContext) -> Expr:
    """mean"""
    return _reduce(ctx, "mean")


@converter(["aten.prod.dim_int", "aten.prod.default"])
def prod(ctx: NodeContext) -> Expr:
    """prod"""
    return _reduce(ctx, "prod")


@converter(["aten.amax.default", "aten.amin.default"])
def amax(ctx: NodeContext) -> Expr:
    """max / min over dims (bool as uint8)"""
    x = ctx.x(0)
    op = "max" if ctx.op == "aten.amax.default" else "min"
    if ctx.rank(x) == 0:
        return x
    boolean = ctx.dtype(x) == "bool"
    if boolean:
        x = ctx.cast(x, "uint8")
    y = ctx.call(op, x, axis=_axes(ctx, x), keepdims=bool(ctx.arg("keepdim", False)))
    return ctx.cast(y, "bool") if boolean else y


@converter(["aten.any.default", "aten.any.dim", "aten.any.dims", "aten.all.default",
            "aten.all.dim", "aten.all.dims"])
def any_all(ctx: NodeContext) -> Expr:
    """any / all: max / min of the operand tested for nonzero"""
    x = ctx.cast(ctx.cast(ctx.x(0), "bool"), "uint8")
    op = "max" if ctx.op.startswith("aten.any") else "min"
    if ctx.rank(x) == 0:
        return ctx.cast(x, ctx.out_dtype())
    keep = bool(ctx.arg("keepdim", False)) if "keepdim" in ctx._names else False
    y = ctx.call(op, x, axis=_axes(ctx, x), keepdims=keep)
    return ctx.cast(y, ctx.out_dtype())


@converter(["aten.argmax.default", "aten.argmin.default"])
def argmax(ctx: NodeContext) -> Expr:
    """argmax / argmin (the first index of the extreme value, like torch)"""
    x = ctx.x(0)
    op = "argmax" if ctx.op == "aten.argmax.default" else "argmin"
    dim = ctx.arg("dim", None)
    keep = bool(ctx.arg("keepdim", False))
    if ctx.dtype(x) == "bool":
        x = ctx.cast(x, "uint8")
    if dim is None:
        y = ctx.call(op, ctx.call("reshape", x, shape=(-1,)), axis=0, keepdims=False)
        if keep:
            y = ctx.call("reshape", y, shape=(1,) * ctx.rank(x))
        return y
    if ctx.rank(x) == 0:
        return ctx.atom(np.asarray(0, dtype="int64"))
    return ctx.call(op, x, axis=int(dim), keepdims=keep)


@converter(["aten.max.dim", "aten.min.dim"])
def max_dim(ctx: NodeContext) -> list:
    """(max, argmax) / (min, argmin) along dim"""
    x = ctx.x(0)
    dim, keep = ctx.int_arg("dim"), bool(ctx.arg("keepdim", False))
    big = ctx.op == "aten.max.dim"
    if ctx.rank(x) == 0:
        return [x, ctx.atom(np.asarray(0, dtype="int64"))]
    xi = ctx.cast(x, "uint8") if ctx.dtype(x) == "bool" else x
    values = ctx.call("max" if big else "min", xi, axis=(dim % ctx.rank(x),), keepdims=keep)
    indices = ctx.call("argmax" if big else "argmin", xi, axis=dim, keepdims=keep)
    return [ctx.cast(values, ctx.dtype(x)), indices]


@converter(["aten.max.default", "aten.min.default"])
def max_all(ctx: NodeContext) -> Expr:
    """max / min of every element"""
    x = ctx.x(0)
    boolean = ctx.dtype(x) == "bool"
    xi = ctx.cast(x, "uint8") if boolean else x
    if ctx.rank(x) == 0:
        return x
    y = ctx.call("max" if ctx.op == "aten.max.default" else "min", xi)
    return ctx.cast(y, "bool") if boolean else y


@converter("aten.var.correction")
def var(ctx: NodeContext) -> Expr:
    """variance * n / (n - correction)"""
    x = ctx.x(0)
    if not is_float(ctx.dtype(x)):
        ctx.unsupported("the variance of an integer tensor")
    axes = _axes(ctx, x)
    keep = bool(ctx.arg("keepdim", False))
    corr = ctx.arg("correction", None)
    corr = 1 if corr is None else corr
    y = ctx.call("variance", x, axis=axes, keepdims=keep)
    if corr == 0:
        return y
    shape = ctx.ty(x).shape
    assert shape is not None
    sizes = [shape[a] for a in (axes if axes is not None else range(len(shape)))]
    if not all(isinstance(s, int) for s in sizes):
        ctx.unsupported("a corrected variance over symbolic sizes")
    n = 1
    for s in sizes:
        n *= int(s)  # type: ignore[arg-type]
    factor = n / (n - corr) if n - corr > 0 else float("nan") if n - corr == 0 else float("inf")
    return ctx.call("multiply", y, ctx.scalar(factor, ctx.dtype(x)))


@converter("aten.cumsum.default")
def cumsum(ctx: NodeContext) -> Expr:
    """cumsum (in the result dtype)"""
    x = ctx.cast(ctx.x(0), ctx.out_dtype())
    if ctx.rank(x) == 0:
        return x
    return ctx.call("cumsum", x, axis=ctx.int_arg("dim") % ctx.rank(x))
