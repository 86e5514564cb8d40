"""ToNonDataflow: turn dataflow blocks into ordinary binding blocks.

Every :class:`DataflowVar` becomes a :class:`Var` of the same name and type, and
adjacent blocks are merged into one.  ExplicitMemory does the same in its own walk
(the default pipeline does not run this pass); this pass gives the module without
dataflow blocks in the lowering phase, for passes that want it so.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir.expr import (
    BindingBlock,
    Call,
    Constant,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    Var,
    VarBinding,
)
from ..ir.visitor import ExprMutator
from .pass_base import function_pass


class _ToNonDataflow(ExprMutator):
    def visit_block(self, block: BindingBlock) -> BindingBlock:
        self.builder.begin_scope(False)
        remap = self.var_remap
        emit = self.builder.emit_binding
        for b in block.bindings:
            value = _substitute_flat(b.value, remap)
            if value is None:
                value = self.visit_expr(b.value)
            var = b.var
            if isinstance(var, DataflowVar):
                new = Var(var.name_hint, var.ty, var.span)
                remap[var] = new
                var = new
            if var is b.var and value is b.value:
                emit(b)
            elif type(b) is VarBinding:
                emit(VarBinding(var, value))
            else:
                emit(replace(b, var=var, value=value))
        return BindingBlock(tuple(self.builder.end_scope()))

    def visit_seq(self, seq: SeqExpr) -> SeqExpr:
        return merge_blocks(super().visit_seq(seq))


def merge_blocks(seq: SeqExpr) -> SeqExpr:
    """``seq`` with its binding blocks (none of them a dataflow block) merged into one
    (``seq`` itself when it has at most one): ToNonDataflow's and ExplicitMemory's last
    step on every sequence."""
    if len(seq.blocks) <= 1:
        return seq
    merged = tuple([b for blk in seq.blocks for b in blk.bindings])
    blocks = (BindingBlock(merged),) if merged else ()
    return SeqExpr(blocks, seq.body, ty=seq.ty, span=seq.span)


_LEAVES = frozenset(
    {Var, DataflowVar, Constant, Op, GlobalVar, ExternFunc, ShapeExpr, PrimValue, StringImm}
)


def _substitute_flat(value: Expr, remap: dict) -> Expr | None:
    """``value`` with the variables of ``remap`` replaced, if it is a leaf or a call of
    a leaf on leaves and tuples of leaves (else None: the mutator's general walk).
    Every replacement is a Var of the same type as the DataflowVar it replaces, so
    the types of the call and of its tuples stay as they are."""
    t = type(value)
    if t is Var or t is DataflowVar:
        return remap.get(value, value)
    if t is not Call:
        return value if t in _LEAVES else None
    op = value.op
    if type(op) not in _LEAVES:
        return None
    new_op = remap.get(op, op) if isinstance(op, Var) else op
    changed = new_op is not op
    args = []
    for a in value.args:
        ta = type(a)
        if ta is Var or ta is DataflowVar:
            na = remap.get(a, a)
        elif ta is Tuple:
            fields = []
            fchanged = False
            for f in a.fields:
                tf = type(f)
                if tf is Var or tf is DataflowVar:
                    nf = remap.get(f, f)
                    fchanged |= nf is not f
                elif tf not in _LEAVES:
                    return None
                else:
                    nf = f
                fields.append(nf)
            na = Tuple(tuple(fields), a.ty, a.span) if fchanged else a
        elif ta in _LEAVES:
            na = a
        else:
            return None
        changed |= na is not a
        args.append(na)
    if not changed:
        return value
    if type(value) is Call:
        return Call(new_op, tuple(args), value.attrs, value.ty, value.span)
    return replace(value, op=new_op, args=tuple(args))


def to_non_dataflow(func: Function) -> Function:
    """``func`` with no dataflow blocks."""
    return _ToNonDataflow().visit_function(func)


@function_pass(phases=("lowering",))
class ToNonDataflow:
    """Turn dataflow blocks into ordinary blocks (ExplicitMemory does it too)."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return to_non_dataflow(func)
