"""Range-aware simplification of integer index expressions.

Reshapes, slices and transposes composed by fusion index their input through a
flattened offset that is split again with ``//`` and ``%`` (``(i1 * 64 + i3) // 256``,
``i1 - i1 // 64 * 64``).  With the ranges of the loop variables known, most of these
divisions are exact or vanish: :func:`simplify_index` writes an int64 index as an
affine sum ``c0 + c1*t1 + ...`` of variables and irreducible terms, and rewrites
``a // c`` and ``a % c`` (``c > 0``; truncating ``/`` too when ``a >= 0``) as
``q`` and ``r`` when ``a = c*q + r`` with ``r`` provably in ``[0, c)``.  The result
computes the same value at every point of the ranges; anything it cannot decide is
left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .ir import Add, BufferLoad, Div, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub, Var
from .rewrite import rewrite_expr

Range = tuple[int, int | None]
"""Inclusive lower bound and inclusive upper bound (None: unbounded above)."""

_Affine = tuple[dict[int, int], dict[int, PrimExpr], int]


class _Ctx:
    def __init__(self, ranges: Mapping[Var, Range]) -> None:
        self.ranges = {id(v): r for v, r in ranges.items()}
        self.atom_ranges: dict[int, Range | None] = {}

    def key_range(self, node: PrimExpr) -> Range | None:
        if isinstance(node, Var):
            return self.ranges.get(id(node))
        return self.atom_ranges.get(id(node))

    # ------------------------------------------------------------ affine forms
    def affine(self, e: PrimExpr) -> _Affine:
        """``e`` as (coefficients by key id, nodes by key id, constant)."""
        rule = _AFFINE.get(type(e))
        got = None if rule is None else rule(self, e)
        return self.atom(e) if got is None else got

    def atom(self, e: PrimExpr) -> _Affine:
        """``e`` as an opaque term (with its range, when known)."""
        if not isinstance(e, Var):
            self.atom_ranges.setdefault(id(e), self.atom_range(e))
        return {id(e): 1}, {id(e): e}, 0

    def _imm(self, e: IntImm) -> _Affine:
        return {}, {}, int(e.value)

    def _sum(self, e: Add | Sub) -> _Affine:
        ca, na, ka = self.affine(e.a)
        cb, nb, kb = self.affine(e.b)
        sign = 1 if type(e) is Add else -1
        coefs = dict(ca)
        for k, c in cb.items():
            coefs[k] = coefs.get(k, 0) + sign * c
        return ({k: c for k, c in coefs.items() if c}, {**na, **nb}, ka + sign * kb)

    def _product(self, e: Mul) -> _Affine | None:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, IntImm):
                c, n, k = self.affine(x)
                m = int(y.value)
                return ({key: v * m for key, v in c.items() if v * m}, n, k * m)
        return None

    def _division(self, e: FloorDiv | FloorMod | Div) -> _Affine | None:
        return self.divmod(e) if _const(e.b) is not None else None

    def atom_range(self, e: PrimExpr) -> Range | None:
        if isinstance(e, FloorDiv | FloorMod | Div) and _const(e.b) is not None:
            c = _const(e.b)
            r = self.range_of(self.affine(e.a))
            if r is None or r[0] < 0:
                return (0, c - 1) if isinstance(e, FloorMod) else None
            if isinstance(e, FloorMod):
                return (0, c - 1 if r[1] is None else min(c - 1, r[1]))
            return (r[0] // c, None if r[1] is None else r[1] // c)
        return None

    def range_of(self, a: _Affine) -> Range | None:
        coefs, nodes, k = a
        lo, hi = k, k
        for key, c in coefs.items():
            r = self.key_range(nodes[key])
            if r is None:
                return None
            a0, a1 = r
            if c > 0:
                lo += c * a0
                hi = None if hi is None or a1 is None else hi + c * a1
            else:
                if a1 is None:
                    return None
                lo += c * a1
                hi = None if hi is None else hi + c * a0
        return lo, hi

    def divmod(self, e: FloorDiv | FloorMod | Div) -> _Affine | None:
        c = _const(e.b)
        assert c is not None
        num = self.affine(e.a)
        coefs, nodes, k = num
        if isinstance(e, Div):  # truncation equals floor only for a >= 0
            r = self.range_of(num)
            if r is None or r[0] < 0:
                return None
        q_coefs = {key: v // c for key, v in coefs.items() if v % c == 0}
        r_coefs = {key: v for key, v in coefs.items() if v % c != 0}
        rem = (r_coefs, nodes, k % c)
        rr = self.range_of(rem)
        if rr is None or rr[0] < 0 or rr[1] is None or rr[1] >= c:
            return None
        if isinstance(e, FloorMod):
            return rem
        return ({kk: v for kk, v in q_coefs.items() if v}, nodes, k // c)


_AFFINE: dict[type, Callable[..., _Affine | None]] = {
    IntImm: _Ctx._imm, Add: _Ctx._sum, Sub: _Ctx._sum, Mul: _Ctx._product,
    FloorDiv: _Ctx._division, FloorMod: _Ctx._division, Div: _Ctx._division,
}
"""The affine form of each node type that has one (None: none here); any other node is
an atom (:meth:`_Ctx.atom`)."""


def _const(e: PrimExpr) -> int | None:
    """The value of ``e`` when it is a positive int64 constant (products and sums of
    constants included), else None."""
    if isinstance(e, IntImm):
        v = int(e.value)
    elif isinstance(e, Mul | Add | Sub):
        a, b = _const(e.a), _const(e.b)
        if a is None or b is None:
            return None
        v = a * b if isinstance(e, Mul) else a + b if isinstance(e, Add) else a - b
    else:
        return None
    return v if v > 0 and e.dtype == "int64" else None


def _build(a: _Affine, order: list[int]) -> PrimExpr:
    coefs, nodes, k = a
    out: PrimExpr | None = None
    for key in order:
        c = coefs.get(key, 0)
        if not c:
            continue
        node = nodes[key]
        term = node if abs(c) == 1 else Mul(node, IntImm(abs(c)))
        if out is None:
            out = term if c > 0 else Sub(IntImm(0), term)
        else:
            out = Add(out, term) if c > 0 else Sub(out, term)
    if out is None:
        return IntImm(k)
    if k > 0:
        out = Add(out, IntImm(k))
    elif k < 0:
        out = Sub(out, IntImm(-k))
    return out


def simplify_index(e: PrimExpr, ranges: Mapping[Var, Range]) -> PrimExpr:
    """``e`` (an int64 index) simplified with the variables' ``ranges``; variables
    without a range are only known to be integers."""
    if e.dtype != "int64" or isinstance(e, Var | IntImm):
        return e
    ctx = _Ctx(ranges)
    a = ctx.affine(e)
    order: list[int] = []
    seen: set[int] = set()

    def first_use(x: PrimExpr) -> PrimExpr:  # keys in order of appearance in e
        if id(x) in a[1] and id(x) not in seen:
            seen.add(id(x))
            order.append(id(x))
        return x

    rewrite_expr(e, first_use)
    order += [key for key in a[0] if key not in seen]
    return _build(a, order)


def simplify_loads(e: PrimExpr, ranges: Mapping[Var, Range]) -> PrimExpr:
    """``e`` with the indices of its buffer loads simplified (:func:`simplify_index`)."""

    def post(x: PrimExpr) -> PrimExpr:
        if isinstance(x, BufferLoad):
            idx = tuple(simplify_index(i, ranges) for i in x.indices)
            if any(a is not b for a, b in zip(idx, x.indices)):
                return BufferLoad(x.buffer, idx)
        return x

    return rewrite_expr(e, post)


def divisors_used(e: PrimExpr, var: Var) -> set[int]:
    """The constant divisors ``c`` of the ``//``, ``%`` and ``/`` nodes of ``e`` whose
    dividend involves ``var``."""
    out: set[int] = set()

    def uses(x: PrimExpr) -> bool:
        found = False

        def look(y: PrimExpr) -> PrimExpr:
            nonlocal found
            if y is var:
                found = True
            return y

        rewrite_expr(x, look)
        return found

    def post(x: PrimExpr) -> PrimExpr:
        c = _const(x.b) if isinstance(x, FloorDiv | FloorMod | Div) else None
        if c is not None and c > 1 and uses(x.a):
            out.add(c)
        return x

    rewrite_expr(e, post)
    return out
