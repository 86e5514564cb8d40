"""Indexing: index (advanced indexing), index_select, gather."""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext, normalize_dim
from ..registry import converter


def _size(ctx: NodeContext, x: Expr, axis: int) -> Expr:
    """The size of ``x``'s axis as a 0-d int64 tensor (a constant when static)."""
    d = ctx.ty(x).shape[axis]  # type: ignore[index]
    if isinstance(d, int):
        return ctx.scalar(d, "int64")
    return ctx.call("take", ctx.call("shape_of", x), ctx.scalar(axis, "int64"), axis=0)


def _wrapped(ctx: NodeContext, idx: Expr, size: Expr) -> Expr:
    """An index tensor as int64 with negative entries counted from the end."""
    idx = ctx.cast(idx, "int64")
    neg = ctx.call("less", idx, ctx.scalar(0, "int64"))
    return ctx.call("where", neg, ctx.call("add", idx, size), idx)


@converter("aten.index.Tensor")
def index(ctx: NodeContext) -> Expr:
    """take along one axis; several index tensors index their axes merged into one (take
    of the linearized, broadcast index; non-adjacent ones first moved to the front, as
    torch places their result); boolean masks are not supported"""
    x = ctx.x(0)
    shape = ctx.ty(x).shape
    assert shape is not None
    indices = ctx.arg("indices")
    given = [i for i, t in enumerate(indices) if t is not None]
    if not given:
        return x
    for i in given:
        if ctx.dtype(indices[i]) in ("bool", "uint8"):
            ctx.unsupported("indexing with a boolean mask (the result's size depends on the "
                            "data)")
    if len(given) == 1:
        return ctx.call("take", x, ctx.cast(indices[given[0]], "int64"), axis=given[0])
    tensors = [indices[i] for i in given]
    if given != list(range(given[0], given[-1] + 1)):
        rest = [a for a in range(len(shape)) if a not in given]
        x = ctx.call("permute_dims", x, axes=tuple(given + rest))
        shape = ctx.ty(x).shape
        assert shape is not None
        given = list(range(len(given)))
    first, last = given[0], given[-1]
    linear = None
    for axis, t in zip(given, tensors):
        idx = _wrapped(ctx, t, _size(ctx, x, axis))
        linear = idx if linear is None else ctx.call(
            "add", ctx.call("multiply", linear, _size(ctx, x, axis)), idx)
    sizes = [shape[i] for i in given]
    if all(isinstance(s, int) for s in sizes):
        total: int | str = 1
        for s in sizes:
            total *= int(s)  # type: ignore[operator]
    else:
        total = -1
    merged = tuple(shape[:first]) + (total,) + tuple(shape[last + 1:])
    flat = ctx.call("reshape", x, shape=merged)
    return ctx.call("take", flat, linear, axis=first)


@converter("aten.index_select.default")
def index_select(ctx: NodeContext) -> Expr:
    """take along dim"""
    x = ctx.x(0)
    dim = normalize_dim(ctx.int_arg("dim"), max(ctx.rank(x), 1))
    idx = ctx.cast(ctx.x("index"), "int64")
    if ctx.rank(x) == 0:
        return ctx.call("reshape", x, shape=tuple(ctx.out_shape()))  # type: ignore[arg-type]
    if ctx.rank(idx) == 0:
        idx = ctx.call("reshape", idx, shape=(1,))
    return ctx.call("take", x, idx, axis=dim)


@converter("aten.gather.default")
def gather(ctx: NodeContext) -> Expr:
    """gather_elements along dim (empty and 0-d cases directly)"""
    x = ctx.x(0)
    idx = ctx.cast(ctx.x("index"), "int64")
    shape = ctx.out_shape()
    if any(d == 0 for d in shape):  # an empty index: an empty result
        return ctx.atom(np.zeros(tuple(shape), dtype=ctx.out_dtype()))  # type: ignore[arg-type]
    if ctx.rank(x) == 0:  # a 0-d input: every index is 0
        return ctx.call("broadcast_to", x, shape=tuple(shape))  # type: ignore[arg-type]
    dim = normalize_dim(ctx.int_arg("dim"), ctx.rank(x))
    return ctx.call("gather_elements", x, idx, axis=dim)
