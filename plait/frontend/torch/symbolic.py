"""Symbolic sizes of an exported program and plait's symbolic dimensions.

PyTorch writes a dynamic size as a sympy expression over its shape symbols (``s0``,
``2*s0``, ``s0 - 1``, ``(s0 - 1)//2 + 1``, ``Max(1, s0)``).  A symbol of a user input
becomes a plait symbolic size (named after its ``torch.export.Dim`` when known, else
``<input>_<axis>``); an expression over such symbols becomes the plait size expression
(:mod:`plait.ir.symbolic`) with the same value (:func:`to_dim`).  Only an expression
plait cannot write (a symbol that comes from tensor data, true division, powers with a
symbolic exponent) gets a fresh name the first time a value of that size is bound (by a
``match_cast``, checked when the model runs) and keeps it for the whole import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...ir import symbolic as sym
from ...ir.types import Dim

_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]+")


def sanitize(name: str, fallback: str = "v") -> str:
    """``name`` as an identifier (other characters become ``_``)."""
    s = _NOT_IDENT.sub("_", name).strip("_") or fallback
    return "_" + s if s[0].isdigit() else s


class SymValue:
    """A symbolic integer of the program (a ``SymInt``'s expression) that is not a
    constant: the value of ``sym_size``, of ``operator.mul`` on sizes, ..."""

    __slots__ = ("expr",)

    def __init__(self, expr: Any) -> None:
        self.expr = expr

    def __repr__(self) -> str:
        return f"<SymValue {self.expr}>"


def sym_expr(v: Any) -> Any:
    """The sympy expression of a ``SymInt`` (an int for a static one)."""
    node = getattr(v, "node", None)
    if node is None:
        return int(v)
    expr = node.expr
    if getattr(expr, "is_Integer", False):
        return int(expr)
    return expr


def as_value(v: Any) -> Any:
    """A ``SymInt`` (``SymBool``, ``SymFloat``) as a Python number when it is static, else
    a :class:`SymValue`; a Python number as itself."""
    node = getattr(v, "node", None)
    if node is None:
        return v
    expr = node.expr
    if getattr(expr, "is_Integer", False):
        return int(expr)
    if getattr(expr, "is_Boolean", False) and expr in (True, False):
        return bool(expr)
    if getattr(expr, "is_Float", False):
        return float(expr)
    return SymValue(expr)


def upper_bound(v: Any) -> int | None:
    """An upper bound of a value range as an int, None when unbounded."""
    try:
        if not v.is_finite:
            return None
    except AttributeError:
        pass
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


_BINARY = {"FloorDiv": sym.floordiv, "CleanDiv": sym.floordiv, "PythonMod": sym.mod,
           "Mod": sym.mod, "Max": sym.maximum, "Min": sym.minimum}
_NARY = {"Add": sym.add, "Mul": sym.mul, "Max": sym.maximum, "Min": sym.minimum}


def to_dim(expr: Any, names: Mapping[Any, str]) -> Dim | None:
    """The plait size expression of sympy size ``expr``, its symbols named by ``names``;
    None when plait cannot write it (an unnamed symbol, an operation plait's sizes do
    not have).  Walks the expression iteratively."""
    done: dict[Any, Dim | None] = {}
    stack: list[tuple[Any, bool]] = [(expr, False)]
    while stack:
        e, expanded = stack.pop()
        if e in done:
            continue
        if not expanded:
            leaf = _leaf(e, names)
            if leaf is not _COMPOUND:
                done[e] = leaf  # type: ignore[assignment]
                continue
            stack.append((e, True))
            stack.extend((a, False) for a in e.args)
            continue
        done[e] = _combine(e, [done[a] for a in e.args])
    return done[expr]


_COMPOUND = object()


def _leaf(e: Any, names: Mapping[Any, str]) -> Any:
    if isinstance(e, int):
        return int(e)
    if getattr(e, "is_Integer", False):
        return int(e)
    if getattr(e, "is_Symbol", False):
        return names.get(e)
    if not getattr(e, "args", None):
        return None
    return _COMPOUND


def _combine(e: Any, args: list[Dim | None]) -> Dim | None:
    if any(a is None for a in args):
        return None
    fname = type(e).__name__
    try:
        if fname in _NARY:
            out = args[0]
            for a in args[1:]:
                out = _NARY[fname](out, a)  # type: ignore[arg-type]
            return out
        if fname in _BINARY and len(args) == 2:
            return _BINARY[fname](args[0], args[1])  # type: ignore[arg-type]
        if fname == "Pow" and len(args) == 2 and isinstance(args[1], int) and 0 <= args[1] <= 8:
            return sym.product([args[0]] * args[1])  # type: ignore[list-item]
    except sym.SymbolicError:
        return None
    return None
