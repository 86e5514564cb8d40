"""Simplification of kernel IR: constant folding and algebraic identities.

Rules, as data where possible:

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

import numpy as np

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
    Call,
    Cast,
    Div,
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

_CMP_FN = {
    EQ: lambda a, b: a == b, NE: lambda a, b: a != b, LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b, GT: lambda a, b: a > b, GE: lambda a, b: a >= b,
}


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


def _fold_binary(e: BinaryOp) -> PrimExpr | None:
    a, b = e.a, e.b
    if not (isinstance(a, Imm) and isinstance(b, Imm)) or a.dtype != b.dtype:
        return None
    dt = a.dtype
    x, y = a.value, b.value
    cls = type(e)
    if cls in _CMP_FN:
        return IntImm(bool(_CMP_FN[cls](x, y)), "bool")
    if cls is And:
        return IntImm(bool(x and y), "bool")
    if cls is Or:
        return IntImm(bool(x or y), "bool")
    if cls is Min:
        return _make(min(x, y), dt)
    if cls is Max:
        return _make(max(x, y), dt)
    if is_float_dtype(dt):
        with np.errstate(all="ignore"):
            fx, fy = np.dtype(dt).type(x), np.dtype(dt).type(y)
            if cls is Add:
                return _make(float(fx + fy), dt)
            if cls is Sub:
                return _make(float(fx - fy), dt)
            if cls is Mul:
                return _make(float(fx * fy), dt)
            if cls is Div and y != 0:
                return _make(float(fx / fy), dt)
        return None
    if dt == "bool":
        return None
    if cls is Add:
        return _make(x + y, dt)
    if cls is Sub:
        return _make(x - y, dt)
    if cls is Mul:
        return _make(x * y, dt)
    if y == 0:
        return None
    if cls is Div:
        q = abs(x) // abs(y)
        return _make(q if (x >= 0) == (y > 0) else -q, dt)
    if cls is FloorDiv:
        return _make(x // y, dt)
    if cls is FloorMod:
        return _make(x % y, dt)
    return None


def _int_const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) and is_int_dtype(e.dtype) else None


def _simplify_binary(e: BinaryOp) -> PrimExpr:
    folded = _fold_binary(e)
    if folded is not None:
        return folded
    a, b, cls = e.a, e.b, type(e)
    dt = a.dtype
    if a.dtype != b.dtype:
        return e  # ill-typed: leave it for the verifier to report
    is_int = is_int_dtype(dt)
    if cls is And or cls is Or:
        for x, y in ((a, b), (b, a)):
            if _is_const(x):
                if cls is And:
                    return y if x.value else IntImm(False, "bool")
                return IntImm(True, "bool") if x.value else y
        return e
    if is_int and cls in (Add, Mul) and _is_const(a) and not _is_const(b):
        a, b = b, a  # constants on the right
        e = cls(a, b)
    cb = _int_const(b)
    if cls is Add:
        if is_int and _is_const(b, 0):
            return a
        if is_int and cb is not None:
            if isinstance(a, Add) and _int_const(a.b) is not None:
                return _simplify_binary(Add(a.a, IntImm(a.b.value + cb, dt)))
            if isinstance(a, Sub) and _int_const(a.b) is not None:
                return _simplify_binary(Add(a.a, IntImm(cb - a.b.value, dt)))
            if cb < 0 and _fits(-cb, dt):
                return Sub(a, IntImm(-cb, dt))
        return e
    if cls is Sub:
        if _is_const(b, 0):
            return a
        if is_int and a is b:
            return IntImm(0, dt)
        if is_int and cb is not None:
            if isinstance(a, Add | Sub) and _int_const(a.b) is not None:
                sign = 1 if isinstance(a, Add) else -1
                return _simplify_binary(Add(a.a, IntImm(sign * a.b.value - cb, dt)))
            if cb < 0 and _fits(-cb, dt):
                return Add(a, IntImm(-cb, dt))
        return e
    if cls is Mul:
        if _is_const(b, 1):
            return a
        if is_float_dtype(dt) and _is_const(a, 1):
            return b
        if is_int and _is_const(b, 0):
            return IntImm(0, dt)
        if is_int and cb is not None and isinstance(a, Mul) and _int_const(a.b) is not None:
            return _simplify_binary(Mul(a.a, IntImm(a.b.value * cb, dt)))
        return e
    if cls is Div or cls is FloorDiv:
        if _is_const(b, 1) and (is_int or cls is Div):
            return a
        if cls is FloorDiv and is_int and cb is not None and cb > 0 and isinstance(a, Mul) \
                and _int_const(a.b) == cb:
            return a.a
        return e
    if cls is FloorMod:
        if is_int and (_is_const(b, 1) or cb is not None and cb > 0 and isinstance(a, Mul)
                       and _int_const(a.b) is not None and a.b.value % cb == 0):
            return IntImm(0, dt)
        return e
    if cls is Min or cls is Max:
        if a is b:
            return a
        return e
    return e


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


def simplify_node(e: PrimExpr) -> PrimExpr:
    """Simplify one node whose children are already simplified."""
    if isinstance(e, BinaryOp):
        return _simplify_binary(e)
    if isinstance(e, Not):
        if _is_const(e.a):
            return IntImm(not e.a.value, "bool")
        if isinstance(e.a, Not):
            return e.a.a
        return e
    if isinstance(e, Select):
        if _is_const(e.cond):
            return e.true_value if e.cond.value else e.false_value
        if e.true_value is e.false_value:
            return e.true_value
        return e
    if isinstance(e, Call) and e.name == "pow" and isinstance(e.args[1], FloatImm):
        # a square or a cube by multiplications: pow is an opaque libm call that keeps
        # the loop scalar (RMSNorm's square, GPT-2's tanh GELU's cube); x * x is
        # pow(x, 2) exactly, x * x * x rounds twice (within an ulp of the cube)
        a, k = e.args[0], e.args[1].value
        if k == 2.0:
            return Mul(a, a)
        if k == 3.0:
            return Mul(Mul(a, a), a)
        return e
    if isinstance(e, Cast):
        if e.value.dtype == e.dtype:
            return e.value
        if isinstance(e.value, Imm):
            folded = _cast_const(e.value, e.dtype)
            if folded is not None:
                return folded
        return e
    return e


def simplify_expr(e: PrimExpr) -> PrimExpr:
    """``e`` simplified (see the module docstring)."""
    return rewrite_expr(e, simplify_node)


def _simplify_stmt_node(s: Stmt) -> Stmt:
    if isinstance(s, For):
        if _is_const(s.extent) and s.extent.value <= 0:
            return Seq(())
        if _is_const(s.extent, 1):
            return simplify_stmt(substitute(s.body, {s.var: const(0, s.var.dtype)}))
        return s
    if isinstance(s, IfThenElse):
        if _is_const(s.cond):
            if s.cond.value:
                return s.then_body
            return s.else_body if s.else_body is not None else Seq(())
        return s
    if isinstance(s, Let):
        if isinstance(s.value, Imm | Var):
            return simplify_stmt(substitute(s.body, {s.var: s.value}))
        return s
    if isinstance(s, Allocate):
        if isinstance(s.body, Seq) and not s.body.stmts:
            return s.body
        return s
    if isinstance(s, Seq):
        return seq(*s.stmts) if len(s.stmts) == 1 else s
    return s


def simplify_stmt(s: Stmt) -> Stmt:
    """``s`` with every expression simplified and trivial statements removed."""
    return rewrite_stmt(s, simplify_node, _simplify_stmt_node)


def simplify_kernel(k: Kernel) -> Kernel:
    """``k`` with a simplified body."""
    return replace_body(k, simplify_stmt(k.body))
