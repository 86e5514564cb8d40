"""Indexing: index (advanced indexing), index_select, gather."""

from __future__ import annotations

from ....ir.expr import Expr
from ..context import NodeContext, normalize_dim
from ..registry import converter


def _index_tensor(ctx: NodeContext, idx: Expr, size: int | str) -> Expr:
    """An index tensor as int64 with negative entries wrapped (bool masks refused)."""
    dt = ctx.dtype(idx)
    if dt == "bool" or dt == "uint8":
        ctx.unsupported("indexing with a boolean mask (the result's size depends on the data)")
    idx = ctx.cast(idx, "int64")
    if not isinstance(size, int):
        return idx
    neg = ctx.call("less", idx, ctx.scalar(0, "int64"))
    return ctx.call("where", neg, ctx.call("add", idx, ctx.scalar(size, "int64")), idx)


@converter("aten.index.Tensor")
def index(ctx: NodeContext) -> Expr:
    """take along one axis; several index tensors on adjacent axes index the merged axes
    (take of the linearized index); masks and non-adjacent index tensors are not
    supported"""
    x = ctx.x(0)
    shape = ctx.ty(x).shape
    assert shape is not None
    indices = ctx.arg("indices")
    given = [i for i, t in enumerate(indices) if t is not None]
    if not given:
        return x
    if given != list(range(given[0], given[-1] + 1)):
        ctx.unsupported("index tensors on non-adjacent axes")
    first = given[0]
    if len(given) == 1:
        idx = indices[first]
        if ctx.dtype(idx) in ("bool", "uint8"):
            ctx.unsupported("indexing with a boolean mask (the result's size depends on the "
                            "data)")
        return ctx.call("take", x, ctx.cast(idx, "int64"), axis=first)
    sizes = [shape[i] for i in given]
    if not all(isinstance(s, int) for s in sizes):
        ctx.unsupported("several index tensors over symbolic sizes")
    linear = None
    for axis, i in enumerate(given):
        idx = _index_tensor(ctx, indices[i], sizes[axis])
        linear = idx if linear is None else ctx.call(
            "add", ctx.call("multiply", linear, ctx.scalar(sizes[axis], "int64")), idx)
    total = 1
    for s in sizes:
        total *= int(s)  # type: ignore[arg-type]
    merged = tuple(shape[:first]) + (total,) + tuple(shape[given[-1] + 1:])
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
    """gather_elements along dim"""
    x = ctx.x(0)
    dim = normalize_dim(ctx.int_arg("dim"), max(ctx.rank(x), 1))
    return ctx.call("gather_elements", x, ctx.cast(ctx.x("index"), "int64"), axis=dim)
