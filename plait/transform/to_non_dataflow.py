"""ToNonDataflow: turn dataflow blocks into ordinary binding blocks.

Every :class:`DataflowVar` becomes a :class:`Var` of the same name and type, and
adjacent blocks are merged into one.  The first step of the build phase.
"""

from __future__ import annotations

from ..ir.expr import (
    BindingBlock,
    DataflowBlock,
    DataflowVar,
    Function,
    SeqExpr,
    Var,
)
from ..ir.visitor import ExprMutator
from .pass_base import function_pass


class _ToNonDataflow(ExprMutator):
    def visit_block(self, block: BindingBlock) -> BindingBlock:
        self.builder.begin_scope(False)
        for b in block.bindings:
            value = self.visit_expr(b.value)
            var = b.var
            if isinstance(var, DataflowVar):
                new = Var(var.name_hint, var.ty, span=var.span)
                self.var_remap[var] = new
                var = new
            if var is b.var and value is b.value:
                self.builder.emit_binding(b)
            else:
                from dataclasses import replace

                self.builder.emit_binding(replace(b, var=var, value=value))
        return BindingBlock(tuple(self.builder.end_scope()))

    def visit_seq(self, seq: SeqExpr) -> SeqExpr:
        out = super().visit_seq(seq)
        if len(out.blocks) <= 1 and not any(isinstance(b, DataflowBlock) for b in out.blocks):
            return out
        merged = tuple(b for blk in out.blocks for b in blk.bindings)
        blocks = (BindingBlock(merged),) if merged else ()
        return SeqExpr(blocks, out.body, ty=out.ty, span=out.span)


def to_non_dataflow(func: Function) -> Function:
    """``func`` with no dataflow blocks."""
    return _ToNonDataflow().visit_function(func)


@function_pass(phases=("lowering",))
class ToNonDataflow:
    """Turn dataflow blocks into ordinary blocks (first step of the build)."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return to_non_dataflow(func)
