"""Reductions: ``ReduceSum`` and friends, ``ArgMax``/``ArgMin``, ``CumSum``/``CumProd``."""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr, Tuple
from ..context import NodeContext
from ..registry import converter
from .common import FLOATS, cast, norm_axes, norm_axis, scalar

# ONNX op: (plait op or None for a decomposition, opset from which axes is an input)
_REDUCE = {
    "ReduceSum": ("sum", 13),
    "ReduceMean": ("mean", 18),
    "ReduceMax": ("max", 18),
    "ReduceMin": ("min", 18),
    "ReduceProd": ("prod", 18),
    "ReduceL1": (None, 18),
    "ReduceL2": (None, 18),
    "ReduceLogSum": (None, 18),
    "ReduceLogSumExp": (None, 18),
    "ReduceSumSquare": (None, 18),
}


def _empty_value(op_type: str, dtype: str) -> float | int | bool:
    """The result of reducing an empty set."""
    kind = np.dtype(dtype).kind
    if op_type in ("ReduceSum", "ReduceL1", "ReduceL2", "ReduceSumSquare"):
        return 0
    if op_type == "ReduceProd":
        return 1
    if op_type == "ReduceMean":
        return float("nan")
    if op_type in ("ReduceLogSum", "ReduceLogSumExp"):
        return float("-inf")
    if op_type == "ReduceMax":
        if kind == "f":
            return float("-inf")
        return False if kind == "b" else int(np.iinfo(dtype).min)
    if kind == "f":
        return float("inf")
    return True if kind == "b" else int(np.iinfo(dtype).max)


def _reduce(op_type: str, op: str | None, axes_input_since: int):
    def convert(ctx: NodeContext) -> Expr:
        shape = ctx.shape(0)
        r = len(shape)
        keepdims = bool(ctx.attr_int("keepdims", 1))
        if ctx.opset >= axes_input_since:
            axes = ctx.const_ints(1, "the axes") if ctx.has(1) else []
        else:
            axes = ctx.attr_ints("axes", []) or []
        if not axes:
            if ctx.attr_int("noop_with_empty_axes", 0):
                return ctx.x(0)
            axes = list(range(r))
        axes = sorted(norm_axes(ctx, axes, r))
        dtype = ctx.dtype(0)
        if any(shape[a] == 0 for a in axes):
            if not all(isinstance(d, int) for d in shape):
                ctx.fail(f"reducing an empty axis of the symbolic shape {shape}")
            out = (
                [1 if i in axes else d for i, d in enumerate(shape)]
                if keepdims
                else [d for i, d in enumerate(shape) if i not in axes]
            )
            value = _empty_value(op_type, dtype)
            return ctx.constant(np.full(out, value).astype(dtype))
        x = ctx.x(0)
        ax = tuple(axes)
        if op is not None:
            if op == "mean" and dtype not in FLOATS:
                return cast(
                    ctx,
                    ctx.call("mean", cast(ctx, x, "float64"), axis=ax, keepdims=keepdims),
                    dtype,
                )
            return ctx.call(op, x, axis=ax, keepdims=keepdims)
        if op_type == "ReduceL1":
            return ctx.call("sum", ctx.call("abs", x), axis=ax, keepdims=keepdims)
        if op_type == "ReduceSumSquare":
            return ctx.call("sum", ctx.call("multiply", x, x), axis=ax, keepdims=keepdims)
        work = x if dtype in FLOATS else cast(ctx, x, "float64")
        if op_type == "ReduceL2":
            y = ctx.call("l2_norm", work, axis=ax, keepdims=keepdims)
        elif op_type == "ReduceLogSum":
            y = ctx.call("log", ctx.call("sum", work, axis=ax, keepdims=keepdims))
        else:  # ReduceLogSumExp, stabilized by the maximum
            m = ctx.call("max", work, axis=ax, keepdims=True)
            finite = ctx.call(
                "where",
                ctx.call("isfinite", m),
                m,
                scalar(ctx, 0, ctx.type_of(work).dtype or "float32"),
            )
            e = ctx.call("exp", ctx.call("subtract", work, finite))
            y = ctx.call("add", ctx.call("log", ctx.call("sum", e, axis=ax, keepdims=True)), finite)
            if not keepdims:
                y = ctx.call("squeeze", y, axis=ax)
        return cast(ctx, y, dtype)

    convert.__doc__ = (
        f"``{op}`` over the axes" if op else f"a decomposition of {op_type}"
    ) + " (empty reductions give the identity value)"
    convert.__name__ = f"convert_{op_type}"
    return convert


for _name, (_op, _since) in _REDUCE.items():
    converter(_name, since=1)(_reduce(_name, _op, _since))


def _arg(op: str):
    def convert(ctx: NodeContext) -> Expr:
        r = ctx.rank(0)
        axis = norm_axis(ctx, ctx.attr_int("axis", 0), r)
        return ctx.call(
            op, ctx.x(0), axis=axis, keepdims=bool(ctx.attr_int("keepdims", 1)),
            select_last_index=bool(ctx.attr_int("select_last_index", 0)),
        )  # fmt: skip

    convert.__doc__ = f"``{op}``"
    convert.__name__ = f"convert_{op}"
    return convert


converter("ArgMax", since=1)(_arg("argmax"))
converter("ArgMin", since=1)(_arg("argmin"))


@converter("CumSum", since=11)
def convert_cumsum(ctx: NodeContext) -> Expr:
    """``cumsum``; the axis must be known at import time."""
    r = ctx.rank(0)
    axis = norm_axis(ctx, int(ctx.const(1, "the axis").reshape(-1)[0]), r)
    return ctx.call(
        "cumsum", ctx.x(0), axis=axis, exclusive=bool(ctx.attr_int("exclusive", 0)),
        reverse=bool(ctx.attr_int("reverse", 0)),
    )  # fmt: skip


CUMPROD_LIMIT = 256
"""The longest axis ``CumProd`` is unrolled over."""


@converter("CumProd", since=26)
def convert_cumprod(ctx: NodeContext) -> Expr:
    """Products of growing slices, concatenated (the axis must be static and short)."""
    shape = ctx.shape(0)
    r = len(shape)
    axis = norm_axis(ctx, int(ctx.const(1, "the axis").reshape(-1)[0]), r)
    n = shape[axis]
    if not isinstance(n, int) or n > CUMPROD_LIMIT:
        ctx.fail(f"the axis size must be static and at most {CUMPROD_LIMIT}, got {n}")
    exclusive, reverse = bool(ctx.attr_int("exclusive", 0)), bool(ctx.attr_int("reverse", 0))
    x = ctx.x(0)
    if n == 0:
        return x
    pieces = []
    for i in range(n):
        if reverse:
            lo, hi = (i + 1, n) if exclusive else (i, n)
        else:
            lo, hi = (0, i) if exclusive else (0, i + 1)
        if lo >= hi:
            pieces.append(ctx.call(
                "ones_like", ctx.call("strided_slice", x, axes=(axis,), begin=(i,), end=(i + 1,))
            ))  # fmt: skip
            continue
        part = ctx.call("strided_slice", x, axes=(axis,), begin=(lo,), end=(hi,))
        pieces.append(ctx.call("prod", part, axis=axis, keepdims=True))
    if len(pieces) == 1:
        return pieces[0]
    return ctx.call("concat", Tuple(tuple(pieces)), axis=axis)
