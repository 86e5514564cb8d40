"""Symbolic sizes of an exported program and plait's symbolic dimensions.

PyTorch writes a dynamic size as a sympy expression over its shape symbols (``s0``,
``2*s0``, ``s0 - 1``).  A symbol of a user input becomes a plait symbolic size (named
after its ``torch.export.Dim`` when known, else ``<input>_<axis>``); a compound
expression gets a fresh name the first time a value of that size is bound (by a
``match_cast``, checked when the model runs) and keeps it for the whole import.
"""

from __future__ import annotations

import re
from typing import Any

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
