"""Simplification of kernel IR: constant folding and algebraic identities.

Rules as data: constant folding by operator tables (``_FOLD_ANY``, ``_FOLD_FLOAT``,
``_FOLD_INT``), identities by a table per binary operator (``_IDENTITIES``), intrinsic
rewrites by name (``_CALLS``), and one type table per walk for expressions and
statements (``_SIMPLIFY``, ``_SIMPLIFY_STMT``):

* constant folding of arithmetic, comparisons, logic, min/max, casts and selects
  (with the exact dtype semantics: integer division truncates like C, ``//`` and ``%``
  floor like numpy, float32 arithmetic is done in float32);
* identities: ``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``, ``x // 1`` → ``x``;
  ``x * 0``, ``x % 1``, ``x - x`` → ``0`` (integers only where floats differ);
  ``True and x`` → ``x`` and the like; a select of a constant condition;
  a cast to the value's own dtype;
* constants gathered on the right of integer sums and products:
  ``(x + 1) + 2`` → ``x + 3``, ``(x - 1) + 1`` → ``x``, ``2 * x`` → ``x * 2``,
  ``(x * 2) * 3`` → ``x * 6``, ``(x * c) // c`` → ``x`` and ``(x * c) % c`` → ``0``
  for ``c > 0``; ``x + -3`` → ``x - 3``;
* ``pow(x, 2.0)`` → ``x * x`` and ``pow(x, 3.0)`` → ``x * x * x``;
* statements: a loop of extent 0 disappears, a loop of extent 1 becomes its body with the
  variable replaced by 0, an ``if`` with a constant condition becomes its branch, a
  ``let`` of a constant or a variable is substituted into its body.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .dispatch import TypeTable
from .ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    Allocate,
    And,
    BinaryOp,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Kernel,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Seq,
    Stmt,
    Sub,
    Var,
    const,
    is_float_dtype,
    is_int_dtype,
    seq,
)
from .rewrite import replace_body, rewrite_expr, rewrite_stmt, substitute

Imm = IntImm | FloatImm


def _is_const(e: PrimExpr, value: float | None = None) -> bool:
    if not isinstance(e, Imm):
        return False
    return value is None or e.value == value


def _fits(value: int, dtype: str) -> bool:
    info = np.iinfo(dtype)
    return info.min <= value <= info.max


def _make(value: int | float | bool, dtype: str) -> PrimExpr | None:
    """A constant of ``dtype``, or None when ``value`` does not fit it."""
    if dtype == "bool":
        return IntImm(bool(value), "bool")
    if is_float_dtype(dtype):
        return FloatImm(float(value), dtype)
    if isinstance(value, float):
        if not np.isfinite(value):
            return None
        value = int(value)
    return IntImm(value, dtype) if _fits(int(value), dtype) else None


# ---------------------------------------------------------------- constant folding

def _truth(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any, str], PrimExpr | None]:
    return lambda x, y, dt: IntImm(bool(fn(x, y)), "bool")


def _c_div(x: int, y: int) -> int:
    """Integer division truncating toward zero, as C does."""
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y > 0) else -q


_FOLD_ANY: dict[type, Callable[[Any, Any, str], PrimExpr | None]] = {
    EQ: _truth(operator.eq), NE: _truth(operator.ne), LT: _truth(operator.lt),
    LE: _truth(operator.le), GT: _truth(operator.gt), GE: _truth(operator.ge),
    And: _truth(lambda x, y: x and y), Or: _truth(lambda x, y: x or y),
    Min: lambda x, y, dt: _make(min(x, y), dt), Max: lambda x, y, dt: _make(max(x, y), dt),
}
"""Folding of two constants of any dtype."""

_FOLD_FLOAT: dict[type, Callable[[Any, Any], Any]] = {
    Add: operator.add, Sub: operator.sub, Mul: operator.mul, Div: operator.truediv,
}
"""Float arithmetic, done in the operands' dtype (float32 rounds as float32)."""

_FOLD_INT: dict[type, Callable[[int, int], int]] = {
    Add: operator.add, Sub: operator.sub, Mul: operator.mul, Div: _c_div,
    FloorDiv: operator.floordiv, FloorMod: operator.mod,
}
"""Integer arithmetic: ``/`` truncates like C, ``//`` and ``%`` floor like numpy."""

_DIVISIONS = frozenset({Div, FloorDiv, FloorMod})
"""Not folded by a zero divisor (the run-time behaviour is the target's)."""


def _fold_binary(e: BinaryOp) -> PrimExpr | None:
    a, b = e.a, e.b
    if not (isinstance(a, Imm) and isinstance(b, Imm)) or a.dtype != b.dtype:
        return None
    dt, x, y, cls = a.dtype, a.value, b.value, type(e)
    any_dtype = _FOLD_ANY.get(cls)
    if any_dtype is not None:
        return any_dtype(x, y, dt)
    if dt == "bool":
        return None
    if is_float_dtype(dt):
        fn = _FOLD_FLOAT.get(cls)
        if fn is None or (cls in _DIVISIONS and y == 0):
            return None
        with np.errstate(all="ignore"):
            t = np.dtype(dt).type
            return _make(float(fn(t(x), t(y))), dt)
    fn_int = _FOLD_INT.get(cls)
    if fn_int is None or (cls in _DIVISIONS and y == 0):
        return None
    return _make(fn_int(x, y), dt)


# ---------------------------------------------------------------- identities

def _int_const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) and is_int_dtype(e.dtype) else None


def _logic(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    """``True and x`` -> ``x``, ``False and x`` -> ``False`` (either side); dually ``or``."""
    for x, y in ((a, b), (b, a)):
        if _is_const(x):
            if type(e) is And:
                return y if x.value else IntImm(False, "bool")
            return IntImm(True, "bool") if x.value else y
    return e


def _constant_right(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str
                    ) -> tuple[BinaryOp, PrimExpr, PrimExpr]:
    """An integer sum or product with its constant operand on the right."""
    if is_int_dtype(dt) and _is_const(a) and not _is_const(b):
        return type(e)(b, a), b, a
    return e, a, b


def _add(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    is_int = is_int_dtype(dt)
    e, a, b = _constant_right(e, a, b, dt)
    cb = _int_const(b)
    if is_int and _is_const(b, 0):
        return a
    if cb is not None:
        if isinstance(a, Add) and _int_const(a.b) is not None:
            return _simplify_binary(Add(a.a, IntImm(a.b.value + cb, dt)))
        if isinstance(a, Sub) and _int_const(a.b) is not None:
            return _simplify_binary(Add(a.a, IntImm(cb - a.b.value, dt)))
        if cb < 0 and _fits(-cb, dt):
            return Sub(a, IntImm(-cb, dt))
    return e


def _sub(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    if _is_const(b, 0):
        return a
    if not is_int_dtype(dt):
        return e
    if a is b:
        return IntImm(0, dt)
    cb = _int_const(b)
    if cb is not None:
        if isinstance(a, Add | Sub) and _int_const(a.b) is not None:
            sign = 1 if isinstance(a, Add) else -1
            return _simplify_binary(Add(a.a, IntImm(sign * a.b.value - cb, dt)))
        if cb < 0 and _fits(-cb, dt):
            return Add(a, IntImm(-cb, dt))
    return e


def _mul(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    is_int = is_int_dtype(dt)
    e, a, b = _constant_right(e, a, b, dt)
    if _is_const(b, 1):
        return a
    if is_float_dtype(dt) and _is_const(a, 1):
        return b
    if is_int and _is_const(b, 0):
        return IntImm(0, dt)
    cb = _int_const(b)
    if cb is not None and isinstance(a, Mul) and _int_const(a.b) is not None:
        return _simplify_binary(Mul(a.a, IntImm(a.b.value * cb, dt)))
    return e


def _div(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    is_int = is_int_dtype(dt)
    if _is_const(b, 1) and (is_int or type(e) is Div):
        return a
    cb = _int_const(b)
    if type(e) is FloorDiv and cb is not None and cb > 0 and isinstance(a, Mul) \
            and _int_const(a.b) == cb:
        return a.a
    return e


def _mod(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    if not is_int_dtype(dt):
        return e
    cb = _int_const(b)
    if _is_const(b, 1) or cb is not None and cb > 0 and isinstance(a, Mul) \
            and _int_const(a.b) is not None and a.b.value % cb == 0:
        return IntImm(0, dt)
    return e


def _min_max(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    return a if a is b else e


def _no_identity(e: BinaryOp, a: PrimExpr, b: PrimExpr, dt: str) -> PrimExpr:
    return e


_IDENTITIES: dict[type, Callable[[BinaryOp, PrimExpr, PrimExpr, str], PrimExpr]] = {
    Add: _add, Sub: _sub, Mul: _mul, Div: _div, FloorDiv: _div, FloorMod: _mod,
    Min: _min_max, Max: _min_max, And: _logic, Or: _logic,
    EQ: _no_identity, NE: _no_identity, LT: _no_identity, LE: _no_identity,
    GT: _no_identity, GE: _no_identity,
}
"""The algebraic identities of each binary operator (after constant folding)."""


def _simplify_binary(e: BinaryOp) -> PrimExpr:
    folded = _fold_binary(e)
    if folded is not None:
        return folded
    a, b = e.a, e.b
    if a.dtype != b.dtype:
        return e  # ill-typed: leave it for the verifier to report
    return _IDENTITIES.get(type(e), _no_identity)(e, a, b, a.dtype)


def _cast_const(v: Imm, dtype: str) -> PrimExpr | None:
    x = v.value
    if dtype == "bool":
        return IntImm(bool(x), "bool")
    if is_float_dtype(dtype):
        with np.errstate(all="ignore"):
            return FloatImm(float(np.dtype(dtype).type(x)), dtype)
    if isinstance(v, FloatImm):
        if not np.isfinite(x):
            return None
        x = int(x)  # C truncates toward zero
    return _make(int(x), dtype)


def _not(e: Not) -> PrimExpr:
    if _is_const(e.a):
        return IntImm(not e.a.value, "bool")
    if isinstance(e.a, Not):
        return e.a.a
    return e


def _select(e: Select) -> PrimExpr:
    if _is_const(e.cond):
        return e.true_value if e.cond.value else e.false_value
    if e.true_value is e.false_value:
        return e.true_value
    return e


def _pow(e: Call) -> PrimExpr:
    """A square or a cube by multiplications: pow is an opaque libm call that keeps the
    loop scalar (RMSNorm's square, GPT-2's tanh GELU's cube); x * x is pow(x, 2)
    exactly, x * x * x rounds twice (within an ulp of the cube)."""
    if not isinstance(e.args[1], FloatImm):
        return e
    a, k = e.args[0], e.args[1].value
    if k == 2.0:
        return Mul(a, a)
    if k == 3.0:
        return Mul(Mul(a, a), a)
    return e


_CALLS: dict[str, Callable[[Call], PrimExpr]] = {"pow": _pow}
"""Rewrites of intrinsic calls, by intrinsic name."""


def _call(e: Call) -> PrimExpr:
    rule = _CALLS.get(e.name)
    return e if rule is None else rule(e)


def _cast(e: Cast) -> PrimExpr:
    if e.value.dtype == e.dtype:
        return e.value
    if isinstance(e.value, Imm):
        folded = _cast_const(e.value, e.dtype)
        if folded is not None:
            return folded
    return e


def _keep(e: Any) -> Any:
    return e


_SIMPLIFY: TypeTable[Callable[[Any], PrimExpr]] = TypeTable("kernel simplifier", PrimExpr, {
    BinaryOp: _simplify_binary, Not: _not, Select: _select, Call: _call, Cast: _cast,
    (Var, IntImm, FloatImm, BufferLoad): _keep,
}, fallback=_keep)  # a node of another kind (the compute DSL's Reduce) stays as it is


def simplify_node(e: PrimExpr) -> PrimExpr:
    """Simplify one node whose children are already simplified."""
    return _SIMPLIFY[type(e)](e)


def simplify_expr(e: PrimExpr) -> PrimExpr:
    """``e`` simplified (see the module docstring)."""
    return rewrite_expr(e, simplify_node)


def _for(s: For) -> Stmt:
    if _is_const(s.extent) and s.extent.value <= 0:
        return Seq(())
    if _is_const(s.extent, 1):
        return simplify_stmt(substitute(s.body, {s.var: const(0, s.var.dtype)}))
    return s


def _if(s: IfThenElse) -> Stmt:
    if _is_const(s.cond):
        if s.cond.value:
            return s.then_body
        return s.else_body if s.else_body is not None else Seq(())
    return s


def _let(s: Let) -> Stmt:
    if isinstance(s.value, Imm | Var):
        return simplify_stmt(substitute(s.body, {s.var: s.value}))
    return s


def _allocate(s: Allocate) -> Stmt:
    if isinstance(s.body, Seq) and not s.body.stmts:
        return s.body
    return s


def _seq(s: Seq) -> Stmt:
    return seq(*s.stmts) if len(s.stmts) == 1 else s


_SIMPLIFY_STMT: TypeTable[Callable[[Any], Stmt]] = TypeTable(
    "kernel statement simplifier", Stmt, {
        For: _for, IfThenElse: _if, Let: _let, Allocate: _allocate, Seq: _seq,
        (BufferStore, Evaluate): _keep,
    }, fallback=_keep)


def _simplify_stmt_node(s: Stmt) -> Stmt:
    return _SIMPLIFY_STMT[type(s)](s)


def simplify_stmt(s: Stmt) -> Stmt:
    """``s`` with every expression simplified and trivial statements removed."""
    return rewrite_stmt(s, simplify_node, _simplify_stmt_node)


def simplify_kernel(k: Kernel) -> Kernel:
    """``k`` with a simplified body."""
    return replace_body(k, simplify_stmt(k.body))
