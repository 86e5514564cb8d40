"""CanonicalizeBindings: remove trivial bindings.

* ``y = x`` (an alias of another variable) is removed and later uses of ``y`` read
  ``x`` — unless that would move a dataflow variable out of its block.
* ``t = (a, b); c = t[1]`` becomes ``c = b`` (and then the alias is removed).
* A variable bound to a constant is replaced by the constant where it is used.
"""

from __future__ import annotations

from ..ir.expr import (
    Binding,
    Call,
    Constant,
    DataflowVar,
    Expr,
    Function,
    Op,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.visitor import ExprMutator, vars_kept
from .pass_base import function_pass


class _Canonicalizer(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.tuple_values: dict[Var, Tuple] = {}

    def visit_function(self, func: Function) -> Function:
        self.tuple_values.clear()
        return super().visit_function(func)

    def rewrite_tuple_get_item(self, e: TupleGetItem) -> Expr:
        tup = e.tuple_value
        if isinstance(tup, Var) and tup in self.tuple_values:
            tup = self.tuple_values[tup]
        if isinstance(tup, Tuple):
            return tup.fields[e.index]
        return e

    def visit_binding(self, binding: Binding) -> None:
        value = binding.value
        if type(value) is Call and type(value.op) is Op and vars_kept(value.args, self.var_remap):
            self.builder.emit_binding(binding)  # no hook applies to a call: it stays
            return
        value = self.visit_expr(value)
        if isinstance(binding, VarBinding):
            var = binding.var
            if isinstance(value, Tuple):
                self.tuple_values[var] = value
            if isinstance(value, Constant) or (
                isinstance(value, Var)
                and (isinstance(var, DataflowVar) or not isinstance(value, DataflowVar))
                and value.ty == var.ty
            ):
                self.var_remap[var] = value
                if isinstance(value, Var) or isinstance(var, DataflowVar):
                    return
        self.emit_rewritten(binding, value)


def canonicalize_bindings(func: Function) -> Function:
    """``func`` with trivial bindings removed (see the module docstring)."""
    return _Canonicalizer().visit_function(func)


@function_pass(phases=("optimization",))
class CanonicalizeBindings:
    """Remove alias bindings, items of literal tuples, and inline bound constants."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return canonicalize_bindings(func)
