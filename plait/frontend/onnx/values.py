"""What the importer knows about each ONNX value.

A :class:`Value` is one of:

* a run-time value: ``expr`` is the IR expression (a variable or a constant);
* a constant known at import time: ``const`` holds the array (and ``expr`` the
  :class:`~plait.ir.Constant` once it is used);
* a *symbolic* integer tensor computed from shapes (``Shape``, then ``Gather``,
  ``Concat``, ...): ``sym`` is an object array whose entries are ints, names of
  symbolic dimensions, or ``None`` (a size only known at run time).  A symbolic value is
  turned into run-time computations only if something uses it as data; a ``Reshape``
  or ``Expand`` reads the sizes directly, so shape subgraphs fold away;
* a sequence known at import time (``seq``: a list of values).

``deps`` names the graph inputs whose *data* the value is computed from, so an error
about a value that had to be known at compile time can say which inputs to freeze.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ir import symbolic as sym
from ...ir.expr import Constant, Expr
from ...ir.types import TensorType, Type

EMPTY: frozenset[str] = frozenset()


class Value:
    """The importer's knowledge about one ONNX value (see the module docstring)."""

    __slots__ = ("expr", "ty", "const", "sym", "seq", "lazy", "deps", "level", "is_none")

    def __init__(
        self,
        expr: Expr | None = None,
        *,
        ty: Type | None = None,
        const: np.ndarray | None = None,
        sym: np.ndarray | None = None,
        seq: list[Value] | None = None,
        deps: frozenset[str] = EMPTY,
        is_none: bool = False,
    ) -> None:
        self.expr = expr
        self.const = const
        self.sym = sym
        self.seq = seq
        self.lazy: Any = None
        self.deps = deps
        self.level: int | None = None
        self.is_none = is_none
        if ty is None:
            if expr is not None:
                ty = expr.ty
            elif const is not None:
                ty = TensorType(tuple(const.shape), const.dtype.name)
        self.ty = ty

    @staticmethod
    def of_const(array: np.ndarray, deps: frozenset[str] = EMPTY) -> Value:
        """A constant known at import time."""
        array = np.asarray(array)
        return Value(Constant(array), const=array, deps=deps)

    @staticmethod
    def of_expr(expr: Expr, deps: frozenset[str] = EMPTY) -> Value:
        """A run-time value (a constant expression is recognized as such)."""
        if isinstance(expr, Constant):
            return Value(expr, const=np.asarray(expr.data), deps=deps)
        return Value(expr, deps=deps)

    @property
    def is_tensor_known(self) -> bool:
        return self.const is not None or self.sym is not None

    def __repr__(self) -> str:
        kind = (
            "const" if self.const is not None else "sym" if self.sym is not None
            else "seq" if self.seq is not None else "none" if self.is_none else "expr"
        )  # fmt: skip
        return f"<Value {kind} {self.ty}>"


def sym_array(entries: Any) -> np.ndarray:
    """An object array of ints, dimension names and Nones (plain ints for numpy ints)."""
    arr = np.asarray(entries, dtype=object)
    flat = arr.reshape(-1)
    for i, e in enumerate(flat):
        if isinstance(e, np.integer | bool | np.bool_):
            flat[i] = int(e)
    return arr


def sym_is_static(arr: np.ndarray) -> bool:
    """True if every entry of a symbolic array is an int."""
    return all(isinstance(e, int) for e in arr.reshape(-1))


def _sym_binop(op: str) -> Any:
    def f(a: Any, b: Any) -> Any:
        if a is None or b is None:
            return None
        if isinstance(a, int) and isinstance(b, int):
            if op == "add":
                return a + b
            if op == "sub":
                return a - b
            if op == "mul":
                return a * b
            if op == "div":
                if b == 0:
                    return None
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            if op == "max":
                return max(a, b)
            if op == "min":
                return min(a, b)
            if op == "mod":
                return None if b == 0 else a % b
            if op in _COMPARE:
                return int(_COMPARE[op](a, b))
            return None
        # a symbolic size (a name or an expression over names, each >= 0)
        if op == "add":
            return sym.add(a, b)
        if op == "sub":
            return sym.sub(a, b)
        if op == "mul":
            return sym.mul(a, b)
        if op == "max":
            return sym.maximum(a, b)
        if op == "min":
            return sym.minimum(a, b)
        if op in ("div", "mod"):
            # ONNX integer Mod follows the divisor's sign (Python's %), and Div truncates:
            # the floor division when the dividend is >= 0 (sizes are); a dividend that
            # may be negative (``frames - 1`` in a convolution's output length) is
            # ``max(a, 0) // b - max(-a, 0) // b``, exact for every value
            if not sym.prove_ge(b, 1):
                return a if op == "div" and b == 1 else None
            if op == "mod":
                return sym.mod(a, b)
            if sym.prove_ge(a, 0):
                return sym.floordiv(a, b)
            return sym.sub(sym.floordiv(sym.maximum(a, 0), b),
                           sym.floordiv(sym.maximum(sym.neg(a), 0), b))
        if op in _COMPARE:
            return _compare(op, a, b)
        return None

    return np.frompyfunc(f, 2, 1)


_COMPARE = {"equal": lambda a, b: a == b, "less": lambda a, b: a < b,
            "greater": lambda a, b: a > b, "less_equal": lambda a, b: a <= b,
            "greater_equal": lambda a, b: a >= b}


def _compare(op: str, a: Any, b: Any) -> int | None:
    """1 or 0 where the comparison of sizes is proved (``seq == -1`` is false: a size is
    never negative), None where it depends on the sizes' values."""
    if op == "equal":
        return 1 if sym.prove_eq(a, b) else 0 if sym.prove_ne(a, b) else None
    if op in ("less", "greater_equal"):
        lt = 1 if sym.prove_ge(sym.sub(b, a), 1) else 0 if sym.prove_ge(a, b) else None
        return lt if op == "less" or lt is None else 1 - lt
    gt = 1 if sym.prove_ge(sym.sub(a, b), 1) else 0 if sym.prove_ge(b, a) else None
    return gt if op == "greater" or gt is None else 1 - gt


SYM_BINOPS = {name: _sym_binop(name) for name in ("add", "sub", "mul", "div", "max", "min",
                                                  "mod", *_COMPARE)}
"""Elementwise arithmetic and comparisons on symbolic arrays: exact on ints, size
expressions (:mod:`plait.ir.symbolic`) on symbolic sizes, comparisons as 1/0 where
proved; None (unknown until run time) otherwise."""
