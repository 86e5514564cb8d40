"""LambdaLift: nested functions become functions of the module (ingestion -> optimization).

A binding ``f = <function>`` inside a function ``main`` is removed and the function is
added to the module as ``main_f`` (a fresh name).  Variables it captures from the
enclosing scope (its free variables) become extra parameters, appended after its own
in order of first use, and every call site passes them::

    def main(x, y):                         def main(x, y):
        def f(a):                               z = cls.main_f(x, y)    # y captured
            b = add(a, y)                       ...
            return b                        def main_f(a, y):
        z = f(x)                                b = add(a, y)
                                                return b

Functions nested in nested functions are lifted innermost first, so captures thread
through.  A nested function that captures nothing may also be used as a value (it is
replaced by its ``GlobalVar``); one that captures variables may only be called: plait
has no closure values, and the error says which binding uses it otherwise.  A lifted
function inherits the ``compiler`` attribute of the function it came from.

LambdaLift requires :class:`~plait.transform.normalize.Normalize` (it relies on nested
functions being bound to variables) and makes the ingestion -> optimization
transition; the module is then checked against the optimization invariants.
"""

from __future__ import annotations

from plait.errors import PlaitError

from ..ir.expr import (
    Binding,
    Call,
    Expr,
    Function,
    GlobalVar,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.visitor import ExprMutator, ExprVisitor
from ..ir.walk import iter_bindings, scan_flat
from .context import PassContext
from .pass_base import module_pass


class LambdaLiftError(PlaitError, ValueError):
    """A nested function cannot be lifted (a closure used as a value)."""


class _Uses(ExprVisitor):
    """Counts, per variable, all uses and the uses as a callee."""

    def __init__(self) -> None:
        self.uses: dict[int, int] = {}
        self.callee: dict[int, int] = {}
        self.where: dict[int, str] = {}
        self._binding = "the result"

    def visit_binding(self, b: Binding) -> None:
        self._binding = b.var.name_hint

    def visit_var(self, v: Var) -> None:
        self.uses[id(v)] = self.uses.get(id(v), 0) + 1

    def visit_call(self, c: Call) -> None:
        if isinstance(c.op, Var):
            self.callee[id(c.op)] = self.callee.get(id(c.op), 0) + 1
        for a in c.args:
            if isinstance(a, Var):
                self.where.setdefault(id(a), self._binding)

    def visit_tuple(self, t: Expr) -> None:
        for f in t.fields:  # type: ignore[attr-defined]
            if isinstance(f, Var):
                self.where.setdefault(id(f), self._binding)


class _FreeVars(ExprVisitor):
    """The variables a function uses but does not define, in order of first use."""

    def __init__(self) -> None:
        self.defined: set[int] = set()
        self.used: dict[int, Var] = {}

    def visit_var_def(self, v: Var) -> None:
        self.defined.add(id(v))

    def visit_var(self, v: Var) -> None:
        self.used.setdefault(id(v), v)

    def free(self) -> list[Var]:
        return [v for i, v in self.used.items() if i not in self.defined]


class _Substitute(ExprMutator):
    def __init__(self, mapping: dict[Var, Expr]) -> None:
        super().__init__()
        self.var_remap.update(mapping)


class _Lifter(ExprMutator):
    def __init__(self, mod: IRModule, fname: str, taken: set[str],
                 lifted: dict[str, Function], uses: _Uses) -> None:
        super().__init__(mod)
        self.fname = fname
        self.taken = taken
        self.lifted = lifted
        self.uses = uses
        self.compiler = mod[fname].attrs.get("compiler")
        self.closures: dict[Var, tuple[GlobalVar, tuple[Var, ...]]] = {}

    def visit_binding(self, binding: Binding) -> None:
        if isinstance(binding, VarBinding) and isinstance(binding.value, Function):
            self.lift(binding.var, binding.value)
            return
        super().visit_binding(binding)

    def _fresh(self, hint: str) -> str:
        base = f"{self.fname}_{hint}"
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def lift(self, var: Var, lam: Function) -> None:
        inner = self.visit_function(lam)
        fv = _FreeVars()
        fv.visit(inner)
        free = [self.var_remap.get(v, v) for v in fv.free()]
        free_vars: list[Var] = [v for v in free if isinstance(v, Var)]
        escapes = self.uses.uses.get(id(var), 0) > self.uses.callee.get(id(var), 0)
        if free_vars and escapes:
            where = self.uses.where.get(id(var), "a binding")
            raise LambdaLiftError(
                f"nested function {var.name_hint!r} captures "
                f"{', '.join(repr(v.name_hint) for v in free_vars)} and is used as a value "
                f"(in binding {where!r}), not only called; plait has no closure values: "
                "pass the captured values as parameters, or only call the function"
            )
        params = tuple(Var(v.name_hint, v.ty) for v in free_vars)
        body = inner.body
        if params:
            body = _Substitute(dict(zip(free_vars, params))).visit_body(body)
        attrs = inner.attrs
        if self.compiler is not None and "compiler" not in attrs:
            attrs = attrs.set(compiler=self.compiler)
        func = Function(inner.params + params, body, inner.ret_ty, inner.pure,
                        attrs=attrs, span=inner.span)
        name = self._fresh(var.name_hint)
        self.lifted[name] = func
        gv = GlobalVar(name, ty=func.ty)
        self.builder.global_types[name] = func.ty  # type: ignore[assignment]
        if free_vars:
            self.closures[var] = (gv, tuple(free_vars))
        else:
            self.var_remap[var] = gv

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        entry = self.closures.get(op) if isinstance(op, Var) else None
        if entry is None:
            return call
        gv, captured = entry
        args = call.args + tuple(self.var_remap.get(v, v) for v in captured)
        return Call(gv, args, call.attrs, ty=call.ty, span=call.span)

    def rewrite_function(self, func: Function) -> Expr:
        raise LambdaLiftError(
            "a function nested inside an expression (not bound to a variable); "
            "run Normalize before LambdaLift"
        )


def _has_nested(func: Function) -> bool:
    if scan_flat(func) is False:
        return False  # (nothing nested: one loop, no walk)
    return any(isinstance(b.value, Function) for b, _ in iter_bindings(func, False))


def lambda_lift(mod: IRModule) -> IRModule:
    """``mod`` with every nested function lifted (see the module docstring); the
    phase is left as it is."""
    taken = set(mod.functions)
    changed: dict[str, Function] = {}
    for name, func in mod.graph_functions():
        if not _has_nested(func):
            continue
        uses = _Uses()
        uses.visit(func)
        lifted: dict[str, Function] = {}
        new = _Lifter(mod, name, taken, lifted, uses).visit_function(func)
        changed[name] = new
        changed.update(lifted)
    return mod.with_functions(changed) if changed else mod


@module_pass(phases=("ingestion",), transition="optimization", requires=("Normalize",))
class LambdaLift:
    """Lift nested functions to the module, captures becoming parameters."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return lambda_lift(mod)


__all__ = ["LambdaLift", "LambdaLiftError", "lambda_lift"]
