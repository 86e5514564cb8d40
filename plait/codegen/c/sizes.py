"""Symbolic sizes written as C: a dimension of the graph IR (an ``int``, a name, or a
:class:`~plait.ir.symbolic.SymExpr`) as an ``int64_t`` expression over C variables
holding the names' values at run time.

The native call wrappers of the ``c`` target (their descriptors' fields) and the single
entry points (workspace offsets, the sizes each call is given) use it when a model's
sizes are symbolic.  Floor division and modulo are the IR's (rounding toward minus
infinity), not C's: :data:`C_PRELUDE` defines them, and a file using :func:`c_dim`
starts with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.ir.symbolic import Dim, SymCall, SymExpr

__all__ = ["C_PRELUDE", "UnboundSize", "c_dim"]

C_PRELUDE = """\
#ifndef PLAIT_DIM_HELPERS
#define PLAIT_DIM_HELPERS
static inline int64_t plait_dim_fdiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return q - (((a % b) != 0) & ((a < 0) != (b < 0)));
}
static inline int64_t plait_dim_mod(int64_t a, int64_t b) { return a - plait_dim_fdiv(a, b) * b; }
static inline int64_t plait_dim_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t plait_dim_max(int64_t a, int64_t b) { return a > b ? a : b; }
#endif
"""
"""The helpers :func:`c_dim` writes calls of (each ``static inline``, defined once per
file)."""


class UnboundSize(Exception):
    """A dimension names a size that has no C variable here (the message is the name)."""


def c_dim(d: Dim, names: Mapping[Any, str]) -> str:
    """``d`` as a C ``int64_t`` expression.  ``names`` maps a symbolic size (a name, or a
    whole expression that has a variable of its own) to the C variable holding it; an
    expression without a variable is written from its names' variables.  Raises
    :class:`UnboundSize` for a name ``names`` lacks."""
    if type(d) is int:
        return f"INT64_C({d})" if d > 2**31 - 1 or d < -(2**31) else str(d)
    got = names.get(d)
    if got is not None:
        return got
    if type(d) is str:
        raise UnboundSize(d)
    assert isinstance(d, SymExpr)
    parts = []
    for mono, coeff in d.terms:
        factors = [_atom(a, names) for a in mono]
        if coeff != 1 or not factors:
            factors.append(f"INT64_C({coeff})")
        parts.append("*".join(factors))
    return "(" + " + ".join(parts) + ")"


def _atom(a: str | SymCall, names: Mapping[Any, str]) -> str:
    if type(a) is str:
        return c_dim(a, names)
    assert isinstance(a, SymCall)
    fn = {"floordiv": "fdiv"}.get(a.op, a.op)
    x, y = a.args
    return f"plait_dim_{fn}({c_dim(x, names)}, {c_dim(y, names)})"
