"""Tensors made from sizes and values: full, full_like, scalar_tensor, arange, ..."""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext
from ..dtypes import is_float
from ..registry import converter
from ..symbolic import SymValue


def _fill(ctx: NodeContext, v: object, dtype: str) -> Expr | float:
    if isinstance(v, SymValue):
        return ctx.cast(ctx.importer.sym_tensor(v.expr, ctx.span), dtype)
    return v  # type: ignore[return-value]


def _full(ctx: NodeContext, shape: list, value: object, dtype: str) -> Expr:
    v = _fill(ctx, value, dtype)
    if any(d is None for d in shape):
        ctx.fail(f"the shape {tuple(ctx.out_val().shape)} has sizes computed from symbolic "
                 "sizes")
    if isinstance(v, Expr):
        return ctx.call("broadcast_to", v, shape=tuple(shape))
    if all(isinstance(d, int) for d in shape) and math.prod(shape) <= 4096:
        return ctx.atom(np.full(tuple(shape), v, dtype=dtype))
    return ctx.call("broadcast_to", ctx.scalar(v, dtype), shape=tuple(shape))


@converter(["aten.full.default", "aten.new_full.default"])
def full(ctx: NodeContext) -> Expr:
    """a constant (small static shapes) or broadcast_to of a scalar"""
    return _full(ctx, ctx.out_shape(), ctx.arg("fill_value"), ctx.out_dtype())


@converter(["aten.zeros.default", "aten.ones.default", "aten.empty.memory_format",
            "aten.new_zeros.default", "aten.new_ones.default", "aten.new_empty.default",
            "aten.empty_strided.default", "aten.empty_permuted.default"])
def zeros(ctx: NodeContext) -> Expr:
    """full of 0 (1 for ones; empty tensors are zeros)"""
    value = 1 if "ones" in ctx.op else 0
    return _full(ctx, ctx.out_shape(), value, ctx.out_dtype())


@converter(["aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default",
            "aten.empty_like.default"])
def full_like(ctx: NodeContext) -> Expr:
    """full_like (zeros for empty_like)"""
    out = ctx.out_dtype()
    x = ctx.x(0)
    if ctx.op == "aten.full_like.default":
        value = ctx.arg("fill_value")
    else:
        value = 1 if "ones" in ctx.op else 0
    v = _fill(ctx, value, out)
    if isinstance(v, Expr):
        return ctx.call("broadcast_to", v, shape=tuple(ctx.ty(x).shape or ()))
    return ctx.call("full_like", x, fill_value=v, dtype=out)


@converter("aten.scalar_tensor.default")
def scalar_tensor(ctx: NodeContext) -> Expr:
    """a 0-d constant"""
    out = ctx.out_dtype()
    v = _fill(ctx, ctx.arg(0), out)
    return v if isinstance(v, Expr) else ctx.scalar(v, out)


@converter(["aten.arange.start_step", "aten.arange.default", "aten.arange.start"])
def arange(ctx: NodeContext) -> Expr:
    """arange; a symbolic length as cumsum of ones"""
    out = ctx.out_dtype()
    if ctx.op == "aten.arange.default":
        start, end, step = 0, ctx.arg("end"), 1
    else:
        start, end = ctx.arg("start"), ctx.arg("end")
        step = ctx.arg("step", 1) if ctx.op == "aten.arange.start_step" else 1
    if any(isinstance(v, SymValue) for v in (start, end, step)):
        (n,) = ctx.out_shape()
        if n is None or isinstance(start, SymValue) or isinstance(step, SymValue):
            ctx.unsupported("arange with a symbolic start or step")
        acc = "float64" if is_float(out) else "int64"
        ones = ctx.call("broadcast_to", ctx.scalar(1, acc), shape=(n,))
        idx = ctx.call("subtract", ctx.call("cumsum", ones, axis=0), ctx.scalar(1, acc))
        y = ctx.call("add", ctx.call("multiply", idx, ctx.scalar(step, acc)),
                     ctx.scalar(start, acc))
        return ctx.cast(y, out)
    (n,) = ctx.out_shape()
    values = np.asarray(start, dtype=np.float64) + np.arange(n) * np.asarray(step, np.float64)
    if not is_float(out):
        values = np.asarray(start) + np.arange(n, dtype=np.int64) * np.asarray(step)
    return ctx.atom(np.asarray(values).astype(out))
