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
from ..ir.visitor import ExprMutator, vars_kept
from .debug_counter import allow_rewrite
from .pass_base import function_pass


def _arg_key(e: Expr) -> Any:
    if isinstance(e, Constant):
        return ("const", structural_hash(e))
    if isinstance(e, Tuple):
        return ("tuple", tuple(_arg_key(f) for f in e.fields))
    return id(e)  # (an int: never equal to the tuple keys above)


class _CSE(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[Any, Expr] | None = None
        self._pure_ops: dict[Op, bool] = {}

    def visit_block(self, block: BindingBlock) -> BindingBlock:
        outer = self.seen
        self.seen = {} if isinstance(block, DataflowBlock) else None
        try:
            return super().visit_block(block)
        finally:
            self.seen = outer

    def _pure(self, op: Op) -> bool:
        pure = self._pure_ops.get(op)
        if pure is None:
            pure = self._pure_ops[op] = op.is_registered and op.definition.pure
        return pure

    def visit_binding(self, binding: Binding) -> None:
        value = binding.value
        remap = self.var_remap
        if type(value) is Call and type(value.op) is Op and type(binding) is VarBinding:
            # Fast path: an op on variables with nothing to substitute (the value stays
            # as it is), keyed by the variables' identities as _arg_key keys them
            args = value.args
            if vars_kept(args, remap):
                if self.seen is None or not self._pure(value.op):
                    self.builder.emit_binding(binding)
                    return
                key = (value.op.name, tuple(map(id, args)), value.attrs)
                var = remap.get(binding.var, binding.var)
                if self.seen.setdefault(key, var) is var:  # (a first: kept; one hashing)
                    self.builder.emit_binding(binding)
                    return
        value = self.visit_expr(value)
        if (
            self.seen is not None
            and isinstance(binding, VarBinding)
            and isinstance(value, Call)
            and isinstance(value.op, Op)
            and self._pure(value.op)
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
