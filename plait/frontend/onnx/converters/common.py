"""Helpers shared by the converters: casts, axes, reshapes with symbolic sizes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ....ir.expr import Expr
from ....ir.symbolic import SymExpr
from ....ir.types import TensorType
from ....op.infer import infer_op_type
from ..context import NodeContext
from ..dtypes import onnx_type_name, to_dtype

FLOATS = ("float16", "float32", "float64")


def onnx_dtype(ctx: NodeContext, elem_type: int, attribute: str = "to") -> str:
    """The plait dtype of an ONNX element type, or an error naming the attribute."""
    d = to_dtype(int(elem_type))
    if d is None:
        ctx.fail(
            f"element type {onnx_type_name(int(elem_type))} is not supported by plait", attribute
        )
    return d


def cast(ctx: NodeContext, x: Any, dtype: str) -> Expr:
    """``x`` converted to ``dtype`` (no call if it already has it)."""
    e = ctx.atom(x)
    t = e.ty
    if isinstance(t, TensorType) and t.dtype == dtype:
        return e
    return ctx.call("cast", e, dtype=dtype)


def dtype_of(ctx: NodeContext, e: Expr) -> str:
    t = ctx.type_of(e)
    if t.dtype is None:
        ctx.fail("an intermediate value has an unknown dtype")
    return t.dtype


def shape_of(ctx: NodeContext, e: Expr) -> tuple[int | str, ...]:
    t = ctx.type_of(e)
    if t.shape is None:
        ctx.fail("an intermediate value has an unknown rank; give the inputs a shape")
    return t.shape


def norm_axis(ctx: NodeContext, axis: int, rank: int, attribute: str = "axis") -> int:
    """``axis`` in ``[0, rank)``, or an error naming the attribute."""
    if not -rank <= axis < max(rank, 1):
        ctx.fail(f"axis {axis} is out of range for a tensor of rank {rank}", attribute)
    return axis % rank if rank else 0


def norm_axes(
    ctx: NodeContext, axes: Sequence[int], rank: int, attribute: str = "axes"
) -> list[int]:
    out = [norm_axis(ctx, int(a), rank, attribute) for a in axes]
    if len(set(out)) != len(out):
        ctx.fail(f"repeated axis in {list(axes)}", attribute)
    return out


def scalar(ctx: NodeContext, value: Any, dtype: str) -> Expr:
    """A 0-d constant."""
    with np.errstate(all="ignore"):
        return ctx.constant(np.asarray(value).astype(dtype))


def reshape(ctx: NodeContext, x: Any, dims: Sequence[int | str]) -> Expr:
    """Reshape to ``dims`` (ints and symbolic names).  With symbolic names and no -1,
    one name is written as -1 when type inference recovers it (the numpy runtime needs
    at most one size it cannot read from the attributes)."""
    e = ctx.atom(x)
    dims = list(dims)
    t = ctx.type_of(e)
    if t.shape is not None and tuple(dims) == tuple(t.shape):
        return e
    if t.shape is not None:
        try:
            got = infer_op_type("reshape", t, shape=tuple(dims))
        except Exception:
            got = None
        if isinstance(got, TensorType) and got.shape == t.shape:
            return e
    if -1 not in dims and any(isinstance(d, str) for d in dims) and t.shape is not None:
        for i, d in enumerate(dims):
            if not isinstance(d, str):
                continue
            cand = dims[:i] + [-1] + dims[i + 1 :]
            try:
                got = infer_op_type("reshape", t, shape=tuple(cand))
            except Exception:
                continue
            if isinstance(got, TensorType) and got.shape == tuple(dims):
                dims = cand
                break
    y = ctx.call("reshape", e, shape=tuple(dims))
    yt = ctx.type_of(y)
    if yt.shape is None and -1 in dims:
        # the size at -1 is not a quotient type inference can prove: keep the rank with
        # a fresh symbolic size, checked at run time by a match_cast (which binds plain
        # names only, so a size expression of the target gets a fresh name too)
        hint = ctx.node.output[0] if ctx.node.output else "reshape"
        known = tuple(
            ctx.importer.fresh_dim(f"{hint}_d{i}") if d == -1 or type(d) is SymExpr else d
            for i, d in enumerate(dims)
        )
        y = ctx.match_cast(y, TensorType(known, yt.dtype))
    return y


def prod_dims(dims: Sequence[int | str]) -> int | None:
    """The product of static dims, None if any is symbolic."""
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)  # type: ignore[arg-type]
    return None


def move_axis_last(ctx: NodeContext, x: Expr, axis: int, rank: int) -> Expr:
    if axis == rank - 1:
        return x
    perm = [i for i in range(rank) if i != axis] + [axis]
    return ctx.call("permute_dims", x, axes=tuple(perm))


def move_last_to(ctx: NodeContext, x: Expr, axis: int, rank: int) -> Expr:
    if axis == rank - 1:
        return x
    perm = list(range(rank - 1))
    perm.insert(axis, rank - 1)
    return ctx.call("permute_dims", x, axes=tuple(perm))


def fold_binary(ctx: NodeContext, op: str, xs: Sequence[Expr]) -> Expr:
    """``op(op(x0, x1), x2) ...`` over the given expressions."""
    acc = xs[0]
    for x in xs[1:]:
        acc = ctx.call(op, acc, x)
    return acc


def unsqueeze_to(ctx: NodeContext, x: Expr, rank: int, axis: int) -> Expr:
    """A 1-D ``x`` reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    shape = shape_of(ctx, x)
    if len(shape) != 1:
        ctx.fail(f"expected a 1-D tensor, got shape {shape}")
    if rank == 1:
        return x
    return ctx.call("expand_dims", x, axis=tuple(i for i in range(rank) if i != axis))


def select(ctx: NodeContext, x: Any, i: int, axis: int) -> Expr:
    """``x[..., i, ...]`` along ``axis`` (the axis removed), as a slice and a squeeze."""
    from ....op.index import TO_END

    end = TO_END if i == -1 else i + 1
    part = ctx.call("strided_slice", ctx.atom(x), axes=(axis,), begin=(i,), end=(end,))
    return ctx.call("squeeze", part, axis=axis)
