"""Split an elementwise stage's loop nest at the bounds of a guarding ``select``.

A padded stage (``pad``, the padded input of a convolution, a padded activation) is
``out[i, j] = select(lo_i <= i < hi_i and lo_j <= j < hi_j, f(x[i - a, j - b]), v)``.
Written so, the C compiler if-converts the select inside the vectorized loop: on
AVX-512 GCC loads ``x`` with a merge mask, so the lanes outside the guard keep whatever
the register held before (often a subnormal bit pattern left by earlier code), computes
``f`` on them and blends.  ``f`` of a subnormal costs a floating-point assist on Intel
cores, per instruction and per vector: a SiLU followed by a pad ran tens of times
slower in its AVX-512 copy than in its AVX2 copy, whose loads do not merge.

:func:`split_guarded_store` writes the loop over the innermost index as up to three
loops — before the guard's interval (the else value), inside it (the then value, no
select), after it — and the conditions on outer indices as an ``if`` around them, so no
lane ever computes the guarded value outside its guard and the middle loop is a plain
contiguous loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .ir import (
    GE,
    GT,
    LE,
    LT,
    And,
    BufferStore,
    For,
    IfThenElse,
    IntImm,
    PrimExpr,
    Select,
    Stmt,
    Var,
    expr_children,
    seq,
)
from .rewrite import substitute
from .simplify import simplify_expr

Interval = tuple[Var, int | None, int | None]
"""A conjunct ``lo <= var < hi`` (None: unbounded on that side)."""


def _conjuncts(cond: PrimExpr) -> list[PrimExpr]:
    out, todo = [], [cond]
    while todo:
        c = todo.pop()
        if isinstance(c, And):
            todo.extend((c.b, c.a))
        else:
            out.append(c)
    return out


def _uses(e: PrimExpr, v: Var) -> bool:
    todo = [e]
    while todo:
        x = todo.pop()
        if x is v:
            return True
        todo.extend(expr_children(x))
    return False


def _offset(e: PrimExpr, v: Var) -> int | None:
    """``c`` when ``e`` is ``v + c`` (c an integer constant), else None."""
    rest = simplify_expr(substitute(e, vars={v: IntImm(0)}))
    if not isinstance(rest, IntImm):
        return None
    check = simplify_expr(substitute(e, vars={v: IntImm(1)}))
    if not isinstance(check, IntImm) or check.value != rest.value + 1:
        return None
    return rest.value


def _interval(c: PrimExpr, loop_vars: Sequence[Var]) -> Interval | None:
    """``c`` as ``lo <= v < hi`` for one of ``loop_vars`` (``v + k`` compared with an
    integer constant), else None."""
    if not isinstance(c, GE | GT | LE | LT):
        return None
    a, b, kind = c.a, c.b, type(c)
    if isinstance(a, IntImm) and not isinstance(b, IntImm):
        a, b = b, a
        kind = {GE: LE, GT: LT, LE: GE, LT: GT}[kind]
    if not isinstance(b, IntImm):
        return None
    used = [v for v in loop_vars if _uses(a, v)]
    if len(used) != 1:
        return None
    v = used[0]
    k = _offset(a, v)
    if k is None:
        return None
    bound = b.value - k          # the comparison is v <kind> bound
    if kind is GE:
        return v, bound, None
    if kind is GT:
        return v, bound + 1, None
    if kind is LT:
        return v, None, bound
    return v, None, bound + 1    # LE


def split_guarded_store(store: BufferStore, loop_vars: Sequence[Var], extent: int,
                        vectorize: Callable[[PrimExpr, Var], bool]) -> Stmt | None:
    """The loop over the last of ``loop_vars`` (``extent`` iterations) around ``store``,
    split at the bounds of the ``select`` that is ``store``'s whole value (see the module
    docstring); the outer loop variables' conditions become an ``if``.  ``vectorize(body,
    var)`` says whether a loop of ``body`` over ``var`` may be vectorized.  None when the
    value is not such a select (every conjunct of its condition a bound on one loop
    variable) or the innermost index is not guarded."""
    value = store.value
    if not isinstance(value, Select) or not loop_vars:
        return None
    inner = loop_vars[-1]
    lo, hi = 0, extent
    outer_conds: list[PrimExpr] = []
    for c in _conjuncts(value.cond):
        iv = _interval(c, loop_vars)
        if iv is None:
            return None
        v, clo, chi = iv
        if v is inner:
            lo = lo if clo is None else max(lo, clo)
            hi = hi if chi is None else min(hi, chi)
        else:
            outer_conds.append(c)
    if lo == 0 and hi == extent:
        return None
    lo, hi = min(max(lo, 0), extent), max(min(hi, extent), 0)
    hi = max(hi, lo)

    def loop(start: int, stop: int, val: PrimExpr) -> Stmt | None:
        if stop <= start:
            return None
        u = Var(inner.name_hint, "int64")
        shifted = u + IntImm(start) if start else u
        idx = tuple(simplify_expr(substitute(i, vars={inner: shifted})) for i in store.indices)
        body = BufferStore(store.buffer, idx, simplify_expr(substitute(val, vars={inner: shifted})))
        kind = "vectorized" if vectorize(body.value, u) else "serial"
        return For(u, IntImm(stop - start), body, kind)

    def whole(val: PrimExpr) -> Stmt:
        u = Var(inner.name_hint, "int64")
        body = BufferStore(store.buffer, tuple(substitute(i, vars={inner: u})
                                               for i in store.indices),
                           substitute(val, vars={inner: u}))
        return For(u, IntImm(extent), body, "vectorized" if vectorize(body.value, u)
                   else "serial")

    parts = [p for p in (loop(0, lo, value.false_value), loop(lo, hi, value.true_value),
                         loop(hi, extent, value.false_value)) if p is not None]
    guarded = seq(*parts)
    if not outer_conds:
        return guarded
    cond = outer_conds[0]
    for c in outer_conds[1:]:
        cond = And(cond, c)
    return IfThenElse(cond, guarded, whole(value.false_value))
