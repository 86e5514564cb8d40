"""FoldConstant: evaluate op calls whose inputs are all constants.

A call of a pure registered op with a numpy reference implementation, whose
arguments are constants (or tuples of constants), is replaced by a constant holding
its value, as long as the result has at most ``max_size`` elements (the pass context
config ``transform.fold_constant.max_size``).  Variables bound to constants are
substituted where they are used, so chains of constant computations fold in one pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.expr import (
    Binding,
    Call,
    Constant,
    Expr,
    Function,
    Op,
    Tuple,
    VarBinding,
)
from ..ir.types import TensorType, TupleType
from ..ir.visitor import ExprMutator, vars_kept
from .context import register_config
from .debug_counter import allow_rewrite
from .pass_base import function_pass

DEFAULT_MAX_SIZE = 1 << 22


def _constant_value(e: Expr) -> Any:
    """The numpy value of a constant (or a tuple of constants), else None."""
    if isinstance(e, Constant):
        return e.data
    if isinstance(e, Tuple):
        vals = [_constant_value(f) for f in e.fields]
        if any(v is None for v in vals):
            return None
        return tuple(vals)
    return None


def _result_size(ty: Any) -> int | None:
    if isinstance(ty, TensorType):
        if not ty.is_static:
            return None
        return int(np.prod(ty.shape, dtype=np.int64))
    if isinstance(ty, TupleType):
        sizes = [_result_size(f) for f in ty.fields]
        return None if any(s is None for s in sizes) else sum(sizes)  # type: ignore[misc]
    return None


class _Folder(ExprMutator):
    def __init__(self, max_size: int) -> None:
        super().__init__()
        self.max_size = max_size
        self.binding: str | None = None

    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if not isinstance(op, Op) or not op.is_registered:
            return call
        opdef = op.definition
        if not opdef.pure or opdef.reference is None:
            return call
        args = [_constant_value(a) for a in call.args]
        if any(a is None for a in args):
            return call
        typed = self.builder.normalize(call)
        size = _result_size(typed.ty)
        if size is None or size > self.max_size:
            return call
        if not allow_rewrite(lambda: f"fold {op.name} at binding {self.binding!r}"):
            return call
        result = opdef.reference(*args, **dict(typed.attrs))
        return _to_expr(result, typed.ty)

    def visit_binding(self, binding: Binding) -> None:
        value = binding.value
        if type(value) is Call and type(value.op) is Op and value.args:
            # Fast path: an op on variables that hold no constant is no constant
            # computation, and there is nothing to substitute: the binding stays
            if vars_kept(value.args, self.var_remap):
                self.builder.emit_binding(binding)
                return
        self.binding = binding.var.name_hint  # names the debug counter's sites
        value = self.visit_expr(binding.value)
        if isinstance(binding, VarBinding) and _constant_value(value) is not None:
            self.var_remap[binding.var] = value
        self.emit_rewritten(binding, value)


def _to_expr(value: Any, ty: Any) -> Expr:
    if isinstance(value, tuple):
        assert isinstance(ty, TupleType)
        return Tuple(tuple(_to_expr(v, t) for v, t in zip(value, ty.fields)), ty=ty)
    arr = np.asarray(value)
    if isinstance(ty, TensorType) and ty.dtype is not None and arr.dtype.name != ty.dtype:
        arr = arr.astype(ty.dtype)
    if isinstance(ty, TensorType) and ty.shape is not None and arr.shape != ty.shape:
        arr = arr.reshape(ty.shape)
    return Constant(np.array(arr, order="C"))  # ascontiguousarray would make a scalar 1-D


def fold_constant(func: Function, max_size: int = DEFAULT_MAX_SIZE) -> Function:
    """``func`` with constant op calls evaluated (see the module docstring)."""
    return _Folder(max_size).visit_function(func)


register_config(
    "transform.fold_constant.max_size",
    int,
    DEFAULT_MAX_SIZE,
    "largest result (in elements) FoldConstant will compute at compile time",
)


@function_pass(phases=("optimization",))
class FoldConstant:
    """Evaluate op calls whose arguments are all constants (up to a size cap)."""

    def __init__(self, max_size: int | None = None, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.max_size = max_size

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        cap = self.max_size
        if cap is None:
            cap = ctx.get_config("transform.fold_constant.max_size")
        return fold_constant(func, cap)
