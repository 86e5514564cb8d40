"""DeadCodeElimination: remove bindings whose values are never used.

A binding is removed when its variable is not used later (nor returned) and its
value has no side effect: a call of a pure op, a tuple, a tuple item, a constant or
a variable.  Calls of functions, extern functions and impure ops are kept.  Works
backwards over each function in one sweep, iteratively.
"""

from __future__ import annotations

from ..ir.expr import (
    BindingBlock,
    Call,
    Constant,
    Expr,
    Function,
    If,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)
from ..ir.visitor import used_vars, vars_kept
from .pass_base import function_pass

_NO_REMAP: dict = {}


def is_pure(value: Expr) -> bool:
    """True when binding ``value`` has no effect beyond its result (so an unused
    binding of it can go)."""
    if isinstance(value, Call):
        op = value.op
        if isinstance(op, Op):
            return op.is_registered and op.definition.pure
        return False
    return isinstance(
        value, Tuple | TupleGetItem | Constant | Var | PrimValue | ShapeExpr | StringImm
    )




def _dce_seq(seq: SeqExpr, live: set[Var]) -> SeqExpr:
    live.update(used_vars(seq.body))
    new_blocks: list[BindingBlock] = []
    changed = False
    for block in reversed(seq.blocks):
        kept = []
        for b in reversed(block.bindings):
            if b.var not in live and is_pure(b.value):
                changed = True
                continue
            value = b.value
            if type(value) is Call and type(value.op) is Op and vars_kept(value.args, _NO_REMAP):
                live.update(value.args)  # (used_vars of the common binding)
                kept.append(b)
                continue
            if isinstance(value, If):
                then_b = _dce_seq(_seq(value.then_branch), live)
                else_b = _dce_seq(_seq(value.else_branch), live)
                live.update(used_vars(value.cond))
                if then_b is not value.then_branch or else_b is not value.else_branch:
                    from dataclasses import replace

                    b = replace(b, value=replace(value, then_branch=then_b, else_branch=else_b))
                    changed = True
            else:
                live.update(used_vars(value))
            kept.append(b)
        if len(kept) != len(block.bindings):
            changed = True
        if kept:
            new_blocks.append(type(block)(tuple(reversed(kept))))
    if not changed:
        return seq
    return SeqExpr(tuple(reversed(new_blocks)), seq.body, ty=seq.ty, span=seq.span)


def _seq(e: Expr) -> SeqExpr:
    return e if isinstance(e, SeqExpr) else SeqExpr((), e, ty=e.ty)


def dead_code_elimination(func: Function) -> Function:
    """``func`` without unused pure bindings."""
    if not isinstance(func.body, SeqExpr):
        return func
    body = _dce_seq(func.body, set())
    if body is func.body:
        return func
    return Function(func.params, body, func.ret_ty, func.pure, attrs=func.attrs, span=func.span)


@function_pass(phases=("optimization", "lowering"))
class DeadCodeElimination:
    """Remove bindings whose values are unused and free of side effects."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return dead_code_elimination(func)
