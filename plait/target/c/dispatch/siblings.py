"""Sibling products: products of one input by several constant weights made one call.

A decoder layer multiplies the same normalized activations by three weights (q, k and v)
and, in its MLP, by two (gate and up).  At batch 1 each product is one pass over its
weights; three calls cost three dispatches to the threads (the small k and v products
of a grouped-query model ran on one thread each) and, with int8 activations, three
quantizations of the same row.  :func:`fuse_siblings` groups such calls of a dataflow
block (the members' inputs are one value, or reshapes of one value to one shape) and
lets the caller make each group one call whose weights are the members' concatenated
along N (at compile time) and whose outputs are the members' results, a tuple of
tensors the kernel writes apart (no copy, no slice); each member's binding becomes an
item of that tuple.

This is a hand-written matcher, not a pattern rule: a rule rewrites the bindings of one
match into one value, and a group is several independent bindings with one input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any

from plait.ir.builder import BlockBuilder
from plait.ir.expr import (
    Binding,
    Call,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    Op,
    SeqExpr,
    TupleGetItem,
    Var,
    VarBinding,
)

Key = Callable[[Call], Hashable | None]
"""A member's group key (its kind: sizes, formats; the input is added by
:func:`fuse_siblings`), or None when the call is not a member."""
Fuse = Callable[[list[Call]], Expr | None]
"""The one call of a group's members (in binding order), whose value is the tuple of
their results; None to leave them as they are."""


def input_identity(x: Expr, defs: dict[Var, Expr]) -> Hashable:
    """What makes two inputs the same value: the variable, or for a reshape the value
    it reshapes and the shape (each product of an exported layer reshapes the same
    activations on its own)."""
    value = defs.get(x) if isinstance(x, Var) else None
    if (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "reshape"
            and isinstance(value.args[0], Var)):
        return ("reshape", value.args[0], str(x.ty))
    return ("value", x)


def fuse_siblings(func: Function, key: Key, fuse: Fuse, max_members: int) -> Function:
    """``func`` with each group of at least two calls of one dataflow block that ``key``
    takes with the same key and the same input (their first argument,
    :func:`input_identity`) made one call by ``fuse`` (at most ``max_members`` to a
    call, in binding order), bound before the group's first member; each member's
    variable is bound to its item of the tuple.  The members' inputs that nothing reads
    any more are left to dead-code elimination."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs = {b.var: b.value for blk in func.body.blocks for b in blk.bindings
            if isinstance(b, VarBinding)}
    blocks = []
    changed = False
    for block in func.body.blocks:
        new = _fuse_block(block, defs, key, fuse, max_members) \
            if isinstance(block, DataflowBlock) else block
        changed |= new is not block
        blocks.append(new)
    if not changed:
        return func
    return replace(func, body=replace(func.body, blocks=tuple(blocks)))


def _fuse_block(block: DataflowBlock, defs: dict[Var, Expr], key: Key, fuse: Fuse,
                max_members: int) -> DataflowBlock:
    groups: dict[Any, list[int]] = {}
    for i, b in enumerate(block.bindings):
        v = b.value
        if not isinstance(b, VarBinding) or not isinstance(v, Call) or not v.args:
            continue
        k = key(v)
        if k is not None:
            groups.setdefault((k, input_identity(v.args[0], defs)), []).append(i)
    before: dict[int, list[Binding]] = {}
    items: dict[int, VarBinding] = {}
    for members in groups.values():
        for at in range(0, len(members) - 1, max_members):
            chunk = members[at: at + max_members]
            if len(chunk) < 2:
                continue
            olds = [block.bindings[i] for i in chunk]
            fused = fuse([b.value for b in olds])  # type: ignore[misc]
            if fused is None:
                continue
            bb = BlockBuilder()
            bb.begin_scope(True)
            fused = bb.normalize(fused)    # (its type: the tuple of the members')
            var = DataflowVar(f"{olds[0].var.name_hint}_siblings", fused.ty)
            before[chunk[0]] = [*bb.end_scope(), VarBinding(var, fused)]
            for j, (i, b) in enumerate(zip(chunk, olds)):
                items[i] = VarBinding(b.var, TupleGetItem(var, j, ty=b.var.ty,
                                                          span=b.value.span))
    if not items:
        return block
    out = []
    for i, b in enumerate(block.bindings):
        out.extend(before.get(i, ()))
        out.append(items.get(i, b))
    return DataflowBlock(tuple(out))


__all__ = ["Fuse", "Key", "fuse_siblings", "input_identity"]
