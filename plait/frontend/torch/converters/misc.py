"""Copies, dtype conversions and the run-time assertions PyTorch inserts."""

from __future__ import annotations

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter


@converter("aten._to_copy.default")
def to_copy(ctx: NodeContext) -> Expr:
    """cast to the result dtype (device and memory format are ignored)"""
    return ctx.cast(ctx.x(0), ctx.out_dtype())


@converter(["aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
            "aten.detach.default", "aten.contiguous.default", "aten.alias_copy.default",
            "aten.detach_copy.default"])
def clone(ctx: NodeContext) -> Expr:
    """the operand itself (values are immutable)"""
    return ctx.x(0)


@converter("aten.copy.default")
def copy(ctx: NodeContext) -> Expr:
    """src cast to self's dtype and broadcast to self's shape"""
    src = ctx.cast(ctx.x("src"), ctx.out_dtype())
    shape = ctx.ty(ctx.x("self")).shape
    if ctx.ty(src).shape == shape:
        return src
    return ctx.call("broadcast_to", src, shape=shape)


@converter(["aten._assert_scalar.default", "aten._assert_tensor_metadata.default",
            "aten.sym_constrain_range_for_size.default", "aten.sym_constrain_range.default"])
def assertion(ctx: NodeContext) -> None:
    """dropped: checks of sizes, whose ranges are the module's dim_ranges (checked by the
    VM)"""
    return None
