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
            return None
        # a symbolic size: only the identities keep it
        if op in ("add", "sub") and b == 0:
            return a
        if op == "add" and a == 0:
            return b
        if op in ("mul", "div") and b == 1:
            return a
        if op == "mul" and a == 1:
            return b
        if op in ("max", "min") and a == b:
            return a
        if op == "max" and isinstance(b, int) and b <= 0:
            return a  # a size is never negative
        if op == "max" and isinstance(a, int) and a <= 0:
            return b
        return None

    return np.frompyfunc(f, 2, 1)


SYM_BINOPS = {name: _sym_binop(name) for name in ("add", "sub", "mul", "div", "max", "min", "mod")}
"""Elementwise arithmetic on symbolic arrays: exact on ints, identities on names, None
(unknown until run time) otherwise."""
