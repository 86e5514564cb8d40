"""Integer expressions over symbolic sizes: the dimensions of tensor types.

A dimension (:data:`Dim`) is an ``int`` (a static size), a ``str`` (a plain symbolic
size such as ``"n"``) or a :class:`SymExpr` (arithmetic on sizes: ``+ - *``, ``//``,
``%``, ``min``, ``max`` and integer constants).  Every function here returns the
**canonical form**, so two dimensions are equal as values exactly when their canonical
forms are: a constant is always an ``int``, a lone name is always a ``str`` (so modules
written before expressions existed keep their meaning), and anything else is an
interned :class:`SymExpr`.

The canonical form is a sum of monomials with integer coefficients, sorted, with
constants folded.  A monomial is a product of *atoms*: names, and the non-polynomial
operations ``floordiv``, ``mod``, ``min`` and ``max`` whose arguments are canonical.
Simplifications (all exact for every value a size can take, i.e. every name >= 0):

- ``(n * 12) // 12 -> n``; ``(n * 12 + 5) // 4 -> n * 3 + 1``; in general
  ``(c * q + r) // c -> q + r // c`` and ``r // c -> 0`` when ``0 <= r < c`` by bounds;
- ``(x // a) // b -> x // (a * b)``; ``x % c`` reduces coefficients modulo ``c``;
- ``min``/``max`` decided when the bounds of the difference have one sign.

Facts about ranges (:func:`bounds`, :func:`prove_ge`, ...) take a mapping of
``{name: (min, max or None)}``, e.g. a module's ``dim_ranges``; with none, a name is in
``[0, inf)``.  The canonical form never depends on ranges (a type means the same thing
in every module).

Why not sympy: building and comparing a typical size (``(n*12 + i)//4 + batch*heads``)
takes ~3 ms in sympy against ~70 us here uncached (~45x) and ~1.5 us cached (this layer
sits on the type-inference hot path); its ``floor`` forms are over the rationals and not
unique for integer division (``floor((h-3)/2) + 1`` and ``floor((h+1)/2) - 1`` are the
same size, but neither equal nor simplified to one form, and ``floor(floor(x/2)/3)``
stays nested); and it is a heavy import for the IR.  The model here is TVM's ``arith.Analyzer``
(canonical sums of products with floordiv/floormod atoms, bounds from ranges) at the
scale plait needs.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Union

from plait.errors import PlaitError

Atom = Union[str, "SymCall"]
Mono = tuple[Atom, ...]
Dim = Union[int, str, "SymExpr"]
"""A tensor dimension: a static size, a symbolic size's name, or an expression."""

Ranges = Mapping[str, tuple[int, "int | None"]]
INF = math.inf
MAX_DEPTH = 64
"""The deepest nesting of floordiv/mod/min/max an expression may have (a model with
more nested windows than this is refused with a clear error rather than recursing)."""


class SymbolicError(PlaitError, ValueError):
    """An invalid symbolic expression (division by zero, a bad name, an unknown op)."""


# ------------------------------------------------------------------------- nodes

class SymCall:
    """A non-polynomial atom: ``op(a, b)`` with ``op`` in floordiv, mod, min, max and
    canonical arguments.  Interned: build with :func:`_call`."""

    __slots__ = ("op", "args", "key", "depth", "_hash")

    def __init__(self, op: str, args: tuple[Dim, Dim], key: tuple, depth: int) -> None:
        self.op = op
        self.args = args
        self.key = key
        self.depth = depth
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is SymCall and self.key == other.key)

    def __reduce__(self) -> tuple:
        return (_call, (self.op, self.args))

    def __repr__(self) -> str:
        return f"SymCall({self.op}, {self.args!r})"


class SymExpr:
    """A canonical integer expression that is neither a constant nor a lone name.

    ``terms`` is a sorted tuple of ``(monomial, coefficient)``; a monomial is a sorted
    tuple of atoms (names and :class:`SymCall`), ``()`` for the constant term.  Build
    expressions with the functions of this module (:func:`add`, :func:`mul`...) or the
    operators (``e + 1``, ``e * "n"``...), never directly."""

    __slots__ = ("terms", "key", "depth", "_hash", "_text", "__weakref__")

    def __init__(self, terms: tuple[tuple[Mono, int], ...], key: tuple, depth: int) -> None:
        self.terms = terms
        self.key = key
        self.depth = depth
        self._hash = hash(key)
        self._text: str | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is SymExpr and self.key == other.key)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __reduce__(self) -> tuple:
        return (parse_dim, (str(self),))

    def __str__(self) -> str:
        if self._text is None:
            self._text = dim_text(self)
        return self._text

    def __repr__(self) -> str:
        return f"SymExpr({str(self)!r})"

    def __add__(self, o: Dim) -> Dim:
        return add(self, o)

    __radd__ = __add__

    def __sub__(self, o: Dim) -> Dim:
        return sub(self, o)

    def __rsub__(self, o: Dim) -> Dim:
        return sub(o, self)

    def __mul__(self, o: Dim) -> Dim:
        return mul(self, o)

    __rmul__ = __mul__

    def __floordiv__(self, o: Dim) -> Dim:
        return floordiv(self, o)

    def __rfloordiv__(self, o: Dim) -> Dim:
        return floordiv(o, self)

    def __mod__(self, o: Dim) -> Dim:
        return mod(self, o)

    def __rmod__(self, o: Dim) -> Dim:
        return mod(o, self)

    def __neg__(self) -> Dim:
        return mul(self, -1)


def is_dim(d: object) -> bool:
    """True for an ``int`` (not bool), an identifier ``str`` or a :class:`SymExpr`."""
    t = type(d)
    return t is int or t is SymExpr or (t is str and d.isidentifier())  # type: ignore[union-attr]


def is_static(d: Dim) -> bool:
    """True when ``d`` is a known size (an ``int``)."""
    return type(d) is int


def _dim_key(d: Dim) -> tuple:
    t = type(d)
    if t is int:
        return (0, d)
    if t is str:
        return (1, d)
    return d.key  # type: ignore[union-attr]


def _atom_key(a: Atom) -> tuple:
    return (1, a) if type(a) is str else a.key  # type: ignore[union-attr]


def _atom_depth(a: Atom) -> int:
    return 0 if type(a) is str else a.depth  # type: ignore[union-attr]


def _dim_depth(d: Dim) -> int:
    return d.depth if type(d) is SymExpr else 0  # type: ignore[union-attr]


_CALLS: dict[tuple, SymCall] = {}
_EXPRS: dict[tuple, SymExpr] = {}


def _call(op: str, args: tuple[Dim, Dim]) -> SymCall:
    key = (2, op, _dim_key(args[0]), _dim_key(args[1]))
    node = _CALLS.get(key)
    if node is None:
        depth = 1 + max(_dim_depth(args[0]), _dim_depth(args[1]))
        if depth > MAX_DEPTH:
            raise SymbolicError(
                f"a symbolic size nests {op} more than {MAX_DEPTH} levels deep "
                f"({dim_text(args[0])[:80]}...); give the model static sizes there")
        node = _CALLS[key] = SymCall(op, args, key, depth)
    return node


def _mono_key(m: Mono) -> tuple:
    return tuple(_atom_key(a) for a in m)


def _make(poly: dict[Mono, int]) -> Dim:
    """The canonical dim of a polynomial ``{monomial: coefficient}``."""
    items = [(m, c) for m, c in poly.items() if c]
    if not items:
        return 0
    if len(items) == 1:
        m, c = items[0]
        if not m:
            return c
        if c == 1 and len(m) == 1 and type(m[0]) is str:
            return m[0]
    items.sort(key=lambda mc: _mono_key(mc[0]))
    terms = tuple(items)
    key = (3, tuple((_mono_key(m), c) for m, c in terms))
    e = _EXPRS.get(key)
    if e is None:
        depth = max((_atom_depth(a) for m, _ in terms for a in m), default=0)
        e = _EXPRS[key] = SymExpr(terms, key, depth)
    return e


def _poly(d: Dim) -> dict[Mono, int]:
    t = type(d)
    if t is int:
        return {(): d} if d else {}  # type: ignore[dict-item]
    if t is str:
        return {(d,): 1}  # type: ignore[dict-item]
    if t is SymExpr:
        return dict(d.terms)  # type: ignore[union-attr]
    raise SymbolicError(f"not a dimension: {d!r} (an int, a size name or an expression)")


def _atom_dim(a: Atom) -> Dim:
    """An atom as a dim of its own."""
    return a if type(a) is str else _make({(a,): 1})  # type: ignore[dict-item]


def _check(d: Any) -> Dim:
    t = type(d)
    if t is int or t is SymExpr:
        return d
    if t is str:
        if not d.isidentifier():
            raise SymbolicError(f"a symbolic size is an identifier, got {d!r}")
        return d
    if isinstance(d, int) and not isinstance(d, bool):   # numpy integers
        return int(d)
    raise SymbolicError(f"not a dimension: {d!r} (an int, a size name or an expression)")


# -------------------------------------------------------------------- arithmetic


def add(a: Dim, b: Dim) -> Dim:
    """``a + b`` in canonical form."""
    if type(a) is int and type(b) is int:
        return a + b
    return _add(_check(a), _check(b))


@lru_cache(maxsize=1 << 16)
def _add(a: Dim, b: Dim) -> Dim:
    p = _poly(a)
    for m, c in _poly(b).items():
        p[m] = p.get(m, 0) + c
    return _make(p)


def sub(a: Dim, b: Dim) -> Dim:
    """``a - b`` in canonical form."""
    if type(a) is int and type(b) is int:
        return a - b
    return _add(_check(a), _scale(_check(b), -1))


def neg(a: Dim) -> Dim:
    """``-a``."""
    return -a if type(a) is int else _scale(_check(a), -1)


def _scale(a: Dim, k: int) -> Dim:
    if type(a) is int:
        return a * k
    return _make({m: c * k for m, c in _poly(a).items()})


def mul(a: Dim, b: Dim) -> Dim:
    """``a * b`` in canonical form (products distribute over sums)."""
    if type(a) is int and type(b) is int:
        return a * b
    return _mul(_check(a), _check(b))


@lru_cache(maxsize=1 << 16)
def _mul(a: Dim, b: Dim) -> Dim:
    if type(b) is int:
        return _scale(a, b)
    if type(a) is int:
        return _scale(b, a)
    out: dict[Mono, int] = {}
    pb = _poly(b).items()
    for ma, ca in _poly(a).items():
        for mb, cb in pb:
            m = ma + mb if not ma or not mb else _absorb(tuple(sorted(ma + mb, key=_atom_key)))
            out[m] = out.get(m, 0) + ca * cb
    return _make(out)


def _absorb(m: Mono) -> Mono:
    """The monomial ``m`` with the factors ``min(1, n)`` that change nothing removed:
    ``n * min(1, n)`` is ``n`` (both 0 when ``n`` is 0) and ``min(1, n) * min(1, n)`` is
    ``min(1, n)`` (0 or 1), for every size ``n >= 0``.  (A slice ``x[0:1]`` of a
    symbolic axis has ``min(1, n)`` elements; exporters flatten and broadcast it back to
    ``n``: Trilu's causal masks.)"""
    names = {a for a in m if type(a) is str}
    seen: set[SymCall] = set()
    out: list[Atom] = []
    for a in m:
        if type(a) is SymCall and a.op == "min" and 1 in (a.args[0], a.args[1]):
            other = a.args[1] if a.args[0] == 1 else a.args[0]
            if (type(other) is str and other in names) or a in seen:
                continue
            seen.add(a)   # type: ignore[arg-type]
        out.append(a)
    return m if len(out) == len(m) else tuple(out)


def product(dims: Iterable[Dim]) -> Dim:
    """The product of ``dims`` (1 for none)."""
    out: Dim = 1
    for d in dims:
        out = mul(out, d)
    return out


def total(dims: Iterable[Dim]) -> Dim:
    """The sum of ``dims`` (0 for none)."""
    out: Dim = 0
    for d in dims:
        out = add(out, d)
    return out


def _zero_divisor(a: Dim, op: str) -> SymbolicError:
    sym = "//" if op == "floordiv" else "%"
    return SymbolicError(f"division by zero in the size {dim_text(a)} {sym} 0")


def floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b`` (floor division, Python's) in canonical form."""
    if type(a) is int and type(b) is int:
        if b == 0:
            raise _zero_divisor(a, "floordiv")
        return a // b
    return _floordiv(_check(a), _check(b))


def mod(a: Dim, b: Dim) -> Dim:
    """``a % b`` (the sign of ``b``, Python's) in canonical form."""
    if type(a) is int and type(b) is int:
        if b == 0:
            raise _zero_divisor(a, "mod")
        return a % b
    return _mod(_check(a), _check(b))


def _split(p: dict[Mono, int], c: int) -> tuple[dict[Mono, int], dict[Mono, int]]:
    """``p = c * q + r`` with every coefficient of ``r`` in ``[0, c)``."""
    q = {m: k // c for m, k in p.items() if k // c}
    r = {m: k % c for m, k in p.items() if k % c}
    return q, r


def _nested_floordiv(p: dict[Mono, int]) -> tuple[Dim, int, int] | None:
    """``(x, k, c)`` when ``p`` is ``x // k + c`` with a constant ``k > 0``."""
    c = p.get((), 0)
    if len(p) != 1 + (c != 0):
        return None
    for m, coeff in p.items():
        if m:
            if coeff == 1 and len(m) == 1 and type(m[0]) is SymCall and m[0].op == "floordiv":
                x, k = m[0].args
                if type(k) is int and k > 0:
                    return x, k, c
            return None
    return None


@lru_cache(maxsize=1 << 16)
def _floordiv(a: Dim, b: Dim) -> Dim:
    if type(b) is int:
        if b == 0:
            raise _zero_divisor(a, "floordiv")
        if b < 0:
            return _floordiv(_scale(a, -1), -b)
        if b == 1:
            return a
        p = _poly(a)
        inner = _nested_floordiv(p)
        if inner is not None:   # (x // k + c) // b -> (x + c * k) // (k * b)
            x, k, c = inner
            return _floordiv(add(x, c * k), k * b)
        q, r = _split(p, b)
        if not r:
            return _make(q)
        g = math.gcd(b, *r.values())
        if g > 1:
            r = {m: k // g for m, k in r.items()}
            b //= g
        rest = _make(r)
        lo, hi = bounds(rest)
        if lo >= 0 and hi < b:
            return _make(q)
        if type(rest) is int:
            q[()] = q.get((), 0) + rest // b
            return _make(q)
        q2 = _poly(_atom_dim(_call("floordiv", (rest, b))))
        for m, k in q2.items():
            q[m] = q.get(m, 0) + k
        return _make(q)
    # a symbolic divisor
    if a == 0:
        return 0
    lo, _ = bounds(b)
    if lo >= 1:
        if a == b:
            return 1
        quotient = exact_div(a, b)
        if quotient is not None:
            return quotient
        la, ha = bounds(a)
        if la >= 0 and ha < lo:
            return 0
    return _atom_dim(_call("floordiv", (a, b)))


@lru_cache(maxsize=1 << 16)
def _mod(a: Dim, b: Dim) -> Dim:
    if type(b) is int:
        if b == 0:
            raise _zero_divisor(a, "mod")
        if b < 0:
            return _scale(_mod(_scale(a, -1), -b), -1)
        if b == 1:
            return 0
        _, r = _split(_poly(a), b)
        if not r:
            return 0
        g = math.gcd(b, *r.values())
        if g > 1:
            r = {m: k // g for m, k in r.items()}
        bg = b // g
        rest = _make(r)
        lo, hi = bounds(rest)
        if lo >= 0 and hi < bg:
            return _scale(rest, g)
        if type(rest) is int:
            return (rest % bg) * g
        if len(r) == 1:   # (x % k) % b' -> x % b' when b' divides k
            ((m, k),) = r.items()
            if k == 1 and len(m) == 1 and type(m[0]) is SymCall and m[0].op == "mod" \
                    and type(m[0].args[1]) is int and m[0].args[1] % bg == 0:
                return _scale(_mod(m[0].args[0], bg), g)
        return _scale(_atom_dim(_call("mod", (rest, bg))), g)
    if a == 0:
        return 0
    lo, _ = bounds(b)
    if lo >= 1:
        if a == b or exact_div(a, b) is not None:
            return 0
        la, ha = bounds(a)
        if la >= 0 and ha < lo:
            return a
    return _atom_dim(_call("mod", (a, b)))


def minimum(a: Dim, b: Dim) -> Dim:
    """``min(a, b)`` in canonical form."""
    if type(a) is int and type(b) is int:
        return a if a <= b else b
    return _minmax("min", _check(a), _check(b))


def maximum(a: Dim, b: Dim) -> Dim:
    """``max(a, b)`` in canonical form."""
    if type(a) is int and type(b) is int:
        return a if a >= b else b
    return _minmax("max", _check(a), _check(b))


@lru_cache(maxsize=1 << 16)
def _minmax(op: str, a: Dim, b: Dim) -> Dim:
    if a == b:
        return a
    lo, hi = bounds(sub(b, a))
    if lo >= 0:     # a <= b
        return a if op == "min" else b
    if hi <= 0:     # b <= a
        return b if op == "min" else a
    if _dim_key(b) < _dim_key(a):
        a, b = b, a
    return _atom_dim(_call(op, (a, b)))


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when ``b`` divides ``a`` as polynomials (``batch * heads * 64`` by
    ``heads * 8`` is ``batch * 8``), else None.  ``b`` must be nonzero."""
    if type(a) is int and type(b) is int:
        return a // b if b and a % b == 0 else None
    pb = _poly(_check(b))
    if len(pb) != 1:
        return 1 if a == b and a != 0 else None
    ((mb, cb),) = pb.items()
    if cb == 0:
        return None
    out: dict[Mono, int] = {}
    for m, c in _poly(_check(a)).items():
        if c % cb:
            return None
        rest = list(m)
        for atom in mb:
            try:
                rest.remove(atom)
            except ValueError:
                return None
        out[tuple(rest)] = c // cb
    return _make(out)


APPLY: dict[str, Callable[[Dim, Dim], Dim]] = {
    "add": add, "sub": sub, "mul": mul, "floordiv": floordiv, "mod": mod,
    "min": minimum, "max": maximum,
}
"""The binary operations by name."""


# ------------------------------------------------------------------------ bounds


def _imul(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b


def _interval_mul(x: tuple[float, float], y: tuple[float, float]) -> tuple[float, float]:
    ps = (_imul(x[0], y[0]), _imul(x[0], y[1]), _imul(x[1], y[0]), _imul(x[1], y[1]))
    return min(ps), max(ps)


def _fdiv(x: float, c: int) -> float:
    return x if x in (INF, -INF) else x // c


def _atom_bounds(a: Atom, ranges: Ranges | None) -> tuple[float, float]:
    if type(a) is str:
        if ranges is not None and a in ranges:
            lo, hi = ranges[a]
            return lo, INF if hi is None else hi
        return 0, INF
    x, y = a.args  # type: ignore[union-attr]
    bx, by = bounds(x, ranges), bounds(y, ranges)
    op = a.op  # type: ignore[union-attr]
    if op == "min":
        return min(bx[0], by[0]), min(bx[1], by[1])
    if op == "max":
        return max(bx[0], by[0]), max(bx[1], by[1])
    if op == "floordiv":
        if type(y) is int and y > 0:
            return _fdiv(bx[0], y), _fdiv(bx[1], y)
        if by[0] >= 1 and bx[0] >= 0:
            return (0 if by[1] == INF else bx[0] // by[1]), _fdiv(bx[1], int(by[0]))
        return -INF, INF
    # mod
    if by[0] >= 1:
        top = by[1] - 1
        if bx[0] >= 0:
            if bx[1] < by[0]:
                return bx
            return 0, min(top, bx[1])
        return 0, top
    return -INF, INF


def bounds(d: Dim, ranges: Ranges | None = None) -> tuple[float, float]:
    """Inclusive ``(lo, hi)`` bounds of ``d`` when each name lies in its range of
    ``ranges`` (``[0, inf)`` for a name without one); ints where finite, ``-inf`` or
    ``inf`` (floats) where unbounded.  Sound, not always tight."""
    if type(d) is int:
        return d, d
    if ranges is None:
        return _default_bounds(d)
    return _bounds(d, ranges)


@lru_cache(maxsize=1 << 16)
def _default_bounds(d: Dim) -> tuple[float, float]:
    return _bounds(d, None)


def _bounds(d: Dim, ranges: Ranges | None) -> tuple[float, float]:
    lo: float = 0
    hi: float = 0
    for m, c in _poly(_check(d)).items():
        iv: tuple[float, float] = (1, 1)
        for a in m:
            iv = _interval_mul(iv, _atom_bounds(a, ranges))
        t = (_imul(iv[0], c), _imul(iv[1], c)) if c > 0 else (_imul(iv[1], c), _imul(iv[0], c))
        lo += t[0]
        hi += t[1]
    return lo, hi


def prove_ge(a: Dim, b: Dim, ranges: Ranges | None = None) -> bool:
    """True when ``a >= b`` is proved for every size in ``ranges``."""
    return bounds(sub(a, b), ranges)[0] >= 0


def prove_eq(a: Dim, b: Dim, ranges: Ranges | None = None) -> bool:
    """True when ``a == b`` is proved (equal canonical forms, or bounds of the
    difference pinned at 0)."""
    if a == b:
        return True
    lo, hi = bounds(sub(a, b), ranges)
    return lo == 0 and hi == 0


def prove_ne(a: Dim, b: Dim, ranges: Ranges | None = None) -> bool:
    """True when ``a != b`` is proved (e.g. ``n + 1 != 1`` for ``n >= 1``)."""
    lo, hi = bounds(sub(a, b), ranges)
    return lo > 0 or hi < 0


def simplify(d: Dim, ranges: Ranges | None) -> Dim:
    """``d`` simplified further where the ranges of its names decide an atom: with
    ``n`` in ``[1, 64]``, ``max(0, n - 1)`` is ``n - 1`` and ``(n * 4) // n`` is 4.  The
    result is canonical and equal to ``d`` for every size in ``ranges`` (the canonical
    form alone never depends on ranges)."""
    if type(d) is not SymExpr or not ranges:
        return d
    out: Dim = 0
    for m, c in d.terms:  # type: ignore[union-attr]
        v: Dim = c
        for a in m:
            if type(a) is not str:
                x = simplify(a.args[0], ranges)  # type: ignore[union-attr]
                y = simplify(a.args[1], ranges)  # type: ignore[union-attr]
                a = _decide(a.op, x, y, ranges)  # type: ignore[union-attr, assignment]
            v = mul(v, a)
        out = add(out, v)
    return out


def _decide(op: str, x: Dim, y: Dim, ranges: Ranges) -> Dim:
    """``op(x, y)``, decided by the bounds of ``x`` and ``y`` in ``ranges`` where they
    settle it."""
    if op in ("min", "max"):
        if prove_ge(y, x, ranges):
            return x if op == "min" else y
        if prove_ge(x, y, ranges):
            return y if op == "min" else x
        return APPLY[op](x, y)
    if y == 0:   # the ranges make the divisor 0: the size is undefined there, keep it
        return _atom_dim(_call(op, (x, y)))
    lx, hx = bounds(x, ranges)
    ly, _ = bounds(y, ranges)
    if ly >= 1:
        if lx >= 0 and hx < ly:
            return 0 if op == "floordiv" else x
        quotient = exact_div(x, y)
        if quotient is not None:
            return quotient if op == "floordiv" else 0
    return APPLY[op](x, y)


# -------------------------------------------------------------------- inspection


def free_symbols(d: Dim) -> set[str]:
    """The names ``d`` uses."""
    out: set[str] = set()
    todo = [d]
    while todo:
        x = todo.pop()
        if type(x) is str:
            out.add(x)
        elif type(x) is SymExpr:
            for m, _ in x.terms:  # type: ignore[union-attr]
                for a in m:
                    if type(a) is str:
                        out.add(a)
                    else:
                        todo.extend(a.args)  # type: ignore[union-attr]
    return out


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The value of ``d`` with each name bound by ``env``; a missing name or a division
    by zero raises :class:`SymbolicError` naming it."""
    if type(d) is int:
        return d  # type: ignore[return-value]
    if type(d) is str:
        try:
            return int(env[d])  # type: ignore[index]
        except KeyError:
            raise SymbolicError(f"symbolic size {d!r} has no value") from None
    total_ = 0
    for m, c in d.terms:  # type: ignore[union-attr]
        v = c
        for a in m:
            if type(a) is str:
                v *= evaluate(a, env)
            else:
                x, y = evaluate(a.args[0], env), evaluate(a.args[1], env)  # type: ignore[union-attr]
                v *= _eval_call(a.op, x, y, d)  # type: ignore[union-attr]
        total_ += v
    return total_


def _eval_call(op: str, x: int, y: int, where: Dim) -> int:
    if op == "min":
        return min(x, y)
    if op == "max":
        return max(x, y)
    if y == 0:
        raise SymbolicError(f"division by zero evaluating the size {dim_text(where)}")
    return x // y if op == "floordiv" else x % y


def substitute(d: Dim, env: Mapping[str, Dim]) -> Dim:
    """``d`` with names replaced by the dims of ``env`` (others kept), canonical."""
    if type(d) is int:
        return d
    if type(d) is str:
        return env.get(d, d)  # type: ignore[arg-type, return-value]
    out: Dim = 0
    for m, c in d.terms:  # type: ignore[union-attr]
        v: Dim = c
        for a in m:
            if type(a) is str:
                v = mul(v, env.get(a, a))
            else:
                x = substitute(a.args[0], env)  # type: ignore[union-attr]
                y = substitute(a.args[1], env)  # type: ignore[union-attr]
                v = mul(v, APPLY[a.op](x, y))  # type: ignore[union-attr]
        out = add(out, v)
    return out


# ---------------------------------------------------------------------- printing

def _operand(d: Dim) -> str:
    """``d`` as an operand of ``//`` or ``%``: parenthesized unless a name, a
    non-negative int or a min/max call."""
    text = dim_text(d)
    if type(d) is str or (type(d) is int and d >= 0):  # type: ignore[operator]
        return text
    if type(d) is SymExpr and len(d.terms) == 1:  # type: ignore[union-attr]
        ((m, c),) = d.terms  # type: ignore[union-attr]
        if c == 1 and len(m) == 1 and type(m[0]) is SymCall and m[0].op in ("min", "max"):
            return text
    return f"({text})"


def _atom_text(a: Atom, alone: bool) -> str:
    if type(a) is str:
        return a
    x, y = a.args  # type: ignore[union-attr]
    op = a.op  # type: ignore[union-attr]
    if op in ("min", "max"):
        return f"{op}({dim_text(x)}, {dim_text(y)})"
    text = f"{_operand(x)} {'//' if op == 'floordiv' else '%'} {_operand(y)}"
    return text if alone else f"({text})"


def dim_text(d: Dim) -> str:
    """``d`` as written in the text format: ``seq * 12``, ``(h + 1) // 2 - 1``."""
    if type(d) is int or type(d) is str:
        return str(d)
    parts: list[str] = []
    # positive terms first, then negative ones, the constant last (``n - min(3, n)``)
    terms = [t for t in d.terms if t[0] and t[1] > 0] + [  # type: ignore[union-attr]
        t for t in d.terms if t[0] and t[1] < 0] + [  # type: ignore[union-attr]
        t for t in d.terms if not t[0]]  # type: ignore[union-attr]
    for m, c in terms:
        mag = abs(c)
        if not m:
            body = str(mag)
        else:
            # unary minus binds tighter than // and %: a leading -(x // 2) keeps parens
            alone = len(m) == 1 and mag == 1 and (c > 0 or bool(parts))
            body = " * ".join(_atom_text(a, alone) for a in m)
            if mag != 1:
                body += f" * {mag}"
        if not parts:
            parts.append(("-" + body) if c < 0 else body)
        else:
            parts.append((" - " if c < 0 else " + ") + body)
    return "".join(parts)


# ----------------------------------------------------------------------- parsing

_BINOPS: dict[type, str] = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
}


def from_ast(root: ast.AST, where: str = "a dimension") -> Dim:
    """The dim written by the Python expression ``root`` (names, ints, ``+ - * // %``,
    unary ``-``, ``min(...)``, ``max(...)``), canonical; anything else raises
    :class:`SymbolicError` naming the construct.  Iterative (post-order)."""
    vals: list[Dim] = []
    stack: list[tuple[ast.AST, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        t = type(node)
        if not done:
            if t is ast.Name:
                vals.append(_check(node.id))  # type: ignore[attr-defined]
            elif t is ast.Constant and type(node.value) is int:  # type: ignore[attr-defined]
                vals.append(node.value)  # type: ignore[attr-defined]
            elif t is ast.Constant and type(node.value) is str:  # type: ignore[attr-defined]
                vals.append(_check(node.value))  # type: ignore[attr-defined]
            elif t is ast.BinOp and type(node.op) in _BINOPS:  # type: ignore[attr-defined]
                stack += [(node, True), (node.right, False), (node.left, False)]  # type: ignore[attr-defined]
            elif t is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):  # type: ignore[attr-defined]
                stack += [(node, True), (node.operand, False)]  # type: ignore[attr-defined]
            elif (t is ast.Call and type(node.func) is ast.Name  # type: ignore[attr-defined]
                  and node.func.id in ("min", "max") and len(node.args) >= 2  # type: ignore[attr-defined]
                  and not node.keywords):  # type: ignore[attr-defined]
                stack.append((node, True))
                stack += [(x, False) for x in reversed(node.args)]  # type: ignore[attr-defined]
            else:
                raise SymbolicError(
                    f"{where}: {ast.unparse(node)!r} is not a size expression (write ints, "
                    "size names, + - * // %, min(...) and max(...))")
            continue
        if t is ast.BinOp:
            b, a = vals.pop(), vals.pop()
            vals.append(APPLY[_BINOPS[type(node.op)]](a, b))  # type: ignore[attr-defined]
        elif t is ast.UnaryOp:
            if type(node.op) is ast.USub:  # type: ignore[attr-defined]
                vals.append(neg(vals.pop()))
        else:
            n = len(node.args)  # type: ignore[attr-defined]
            args = vals[len(vals) - n:]
            del vals[len(vals) - n:]
            fn = minimum if node.func.id == "min" else maximum  # type: ignore[attr-defined]
            acc = args[0]
            for x in args[1:]:
                acc = fn(acc, x)
            vals.append(acc)
    return vals[0]


def parse_dim(text: str) -> Dim:
    """The dim written as ``text`` (``"batch * heads"``, ``"(h - 3) // 2 + 1"``)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise SymbolicError(f"cannot parse the size {text!r}: {e.msg}") from None
    return from_ast(tree.body, f"size {text!r}")


def as_dim(d: Any) -> Dim:
    """``d`` checked as a dim (numpy integers become ints)."""
    return _check(d)


__all__ = [
    "APPLY", "Dim", "SymCall", "SymExpr", "SymbolicError", "add", "as_dim", "bounds",
    "dim_text", "evaluate", "exact_div", "floordiv", "free_symbols", "from_ast", "is_dim",
    "is_static", "maximum", "minimum", "mod", "mul", "neg", "parse_dim", "product",
    "prove_eq", "prove_ge", "prove_ne", "simplify", "sub", "substitute", "total",
]
