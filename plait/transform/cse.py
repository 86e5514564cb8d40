"""EliminateCommonSubexpr: reuse the first of several identical pure computations.

Within each dataflow block, a binding whose value is a pure op call (same op, same
argument variables or equal constants, same attributes) identical to an earlier one
reuses the earlier variable.  An output variable that becomes a copy stays as the
alias ``gv = lv`` (CanonicalizeBindings handles aliases).
"""

from __future__ import annotations

from typing import Any

from ..ir.expr import (
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    Op,
    Tuple,
    VarBinding,
)
from ..ir.structural import structural_hash
from ..ir.visitor import ExprMutator
from .debug_counter import allow_rewrite
from .pass_base import function_pass


def _arg_key(e: Expr) -> Any:
    if isinstance(e, Constant):
        return ("const", structural_hash(e))
    if isinstance(e, Tuple):
        return ("tuple", tuple(_arg_key(f) for f in e.fields))
    return ("id", id(e))


class _CSE(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[Any, Expr] | None = None

    def visit_block(self, block: BindingBlock) -> BindingBlock:
        outer = self.seen
        self.seen = {} if isinstance(block, DataflowBlock) else None
        try:
            return super().visit_block(block)
        finally:
            self.seen = outer

    def visit_binding(self, binding: Binding) -> None:
        value = self.visit_expr(binding.value)
        if (
            self.seen is not None
            and isinstance(binding, VarBinding)
            and isinstance(value, Call)
            and isinstance(value.op, Op)
            and value.op.is_registered
            and value.op.definition.pure
        ):
            key = (value.op.name, tuple(_arg_key(a) for a in value.args), value.attrs)
            first = self.seen.get(key)
            if first is not None and allow_rewrite(
                    lambda: f"reuse {getattr(first, 'name_hint', first)!r} for binding "
                    f"{binding.var.name_hint!r} ({value.op.name})"):  # type: ignore[union-attr]
                if isinstance(binding.var, DataflowVar):
                    self.var_remap[binding.var] = first
                    return
                self.emit_rewritten(binding, first)
                return
            self.emit_rewritten(binding, value)
            if first is None:
                self.seen[key] = self.var_remap.get(binding.var, binding.var)
            return
        self.emit_rewritten(binding, value)


def eliminate_common_subexpr(func: Function) -> Function:
    """``func`` with repeated pure computations in dataflow blocks shared."""
    return _CSE().visit_function(func)


@function_pass(phases=("optimization",))
class EliminateCommonSubexpr:
    """Share repeated pure computations within each dataflow block."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return eliminate_common_subexpr(func)
