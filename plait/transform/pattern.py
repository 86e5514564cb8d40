"""The pattern language: shapes of the dataflow graph written as data.

A pattern describes an expression and the bindings that compute it::

    x, w = wildcard(), is_const()
    conv = is_op("conv2d", groups=1)(x, w).has_dtype("float32")
    block = conv.optional(lambda y: is_op("add")(y, is_const())).optional(is_op("relu"))
    print(block)   # conv2d(_, const)[groups=1, dtype float32] >> add(^, const)? >> relu(^)?

The building blocks (every one is an immutable :class:`Pattern`):

* :func:`wildcard` — any expression (``_``);
* :func:`is_const` — a constant tensor, optionally with a predicate on its data;
* :func:`is_op` — a call of a registered op (``is_op("add", "subtract")`` for either),
  with attribute values it must have (``groups=1``, or a predicate such as
  ``axis=lambda a: a in (-1, 3)``); called with argument patterns it constrains the
  arguments, uncalled it takes any;
* :func:`is_tuple` — a tuple whose fields match the given patterns;
* ``a | b`` — alternatives, tried in order;
* ``is_op("add")(a, b).commutative()`` — the two arguments in either order (prints
  as ``add(a, b)~``);
* ``p.optional(step)`` and ``p.repeat(step)`` — an optional step, or any number of
  steps, applied to the value ``p`` matches: ``step`` is a function from a pattern to
  a pattern (``is_op("relu")``, ``lambda y: is_op("add")(y, is_const())``), the place
  of its argument prints as ``^``;
* constraints, each returning a new pattern: ``has_dtype``, ``has_shape`` (``None``
  for any size), ``has_rank``, ``has_type``, ``has_attr``, ``where(predicate)`` and
  ``single_use()`` (the value has exactly one use in its function).

Matching (:func:`match_at`, :func:`match_block`) works on one binding block seen as a
dataflow graph: an op pattern matched against a variable bound in the block matches
the variable's call, and that binding becomes part of the match.  Variables from
elsewhere (parameters, other blocks) and constants match only leaf patterns.  The
same pattern object may occur more than once (``optional`` shares its base); every
occurrence matches on its own.

A :class:`Match` maps patterns to what they matched (``m[p]``, ``m.call(p)``,
``m.all(p)``) and lists the bindings it covers.  Rewrites over matches are
:mod:`plait.transform.pattern_rewrite`; see ``docs/patterns.md``.

Everything is iterative in the length of the graph: a chain matched by ``repeat`` is
walked with a loop, and matching recurses only on the nesting of the pattern itself.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from plait.errors import PlaitError

from ..ir.attrs import freeze_value
from ..ir.expr import Constant, Op
from ..ir.types import Type


class PatternError(PlaitError, ValueError):
    """A malformed pattern or rule; the message names the pattern and the fix."""


# ------------------------------------------------------------------ constraints


@dataclass(frozen=True)
class Constraint:
    """One condition on the matched expression: ``kind`` (``dtype``, ``shape``,
    ``rank``, ``type``, ``attr``, ``where``, ``single_use``) and its ``value``."""

    kind: str
    value: Any = None

    def __str__(self) -> str:
        k, v = self.kind, self.value
        if k == "dtype":
            return "dtype " + "|".join(v)
        if k == "shape":
            return "shape (" + ", ".join("?" if d is None else str(d) for d in v) + ")"
        if k == "rank":
            return "rank " + "|".join(map(str, v))
        if k == "type":
            return f"type {v}"
        if k == "attr":
            key, want = v
            return f"{key}={_value_text(want)}"
        if k == "where":
            return f"where {getattr(v, '__name__', 'predicate')}"
        return k


def _value_text(v: Any) -> str:
    if callable(v):
        return getattr(v, "__name__", "predicate")
    return repr(v)


# ------------------------------------------------------------------ patterns


@dataclass(frozen=True, eq=False)
class Pattern:
    """Base of patterns: constraints and an optional capture name.  Patterns compare
    by identity (they are keys of a :class:`Match`)."""

    constraints: tuple[Constraint, ...] = field(default=(), kw_only=True)
    name: str | None = field(default=None, kw_only=True)

    # -------------------------------------------------------------- combinators
    def __or__(self, other: Pattern) -> Pattern:
        if not isinstance(other, Pattern):
            raise PatternError(f"cannot combine pattern {self} with {other!r} using |: "
                               "both sides must be patterns")
        left = self.alternatives if isinstance(self, AltPattern) and not self.constraints \
            and self.name is None else (self,)
        right = other.alternatives if isinstance(other, AltPattern) and not other.constraints \
            and other.name is None else (other,)
        return AltPattern(left + right)

    def optional(self, step: Callable[[Pattern], Pattern]) -> Pattern:
        """This pattern, or ``step`` applied to it (tried first): ``conv.optional(
        is_op("relu"))`` matches ``relu(conv(...))`` and ``conv(...)``."""
        return _chain(self, step, 1, "optional")

    def repeat(self, step: Callable[[Pattern], Pattern], max: int | None = None) -> Pattern:
        """This pattern followed by any number (up to ``max``) of ``step`` s, taken
        greedily: ``s.repeat(lambda y: is_op("multiply")(y, is_const()))``."""
        if max is not None and (not isinstance(max, int) or max < 1):
            raise PatternError(f"repeat(max={max!r}): max must be a positive int or None")
        return _chain(self, step, max, "repeat")

    # -------------------------------------------------------------- constraints
    def _with(self, *cs: Constraint) -> Pattern:
        return replace(self, constraints=self.constraints + cs)

    def has_dtype(self, *dtypes: str) -> Pattern:
        """The value is a tensor of one of ``dtypes``."""
        from ..ir.types import check_dtype

        if not dtypes:
            raise PatternError(f"{self}.has_dtype(): give at least one dtype")
        try:
            names = tuple(check_dtype(d) for d in dtypes)
        except TypeError as e:
            raise PatternError(f"{self}.has_dtype: {e}") from None
        return self._with(Constraint("dtype", names))

    def has_shape(self, shape: Sequence[int | str | None]) -> Pattern:
        """The value is a tensor of this shape; ``None`` entries match any size."""
        if not isinstance(shape, Sequence) or isinstance(shape, str):
            raise PatternError(f"{self}.has_shape({shape!r}): give a tuple of sizes")
        return self._with(Constraint("shape", tuple(shape)))

    def has_rank(self, *ranks: int) -> Pattern:
        """The value is a tensor of one of these ranks."""
        if not ranks or not all(isinstance(r, int) and r >= 0 for r in ranks):
            raise PatternError(f"{self}.has_rank{ranks!r}: ranks are ints >= 0")
        return self._with(Constraint("rank", tuple(ranks)))

    def has_type(self, ty: Type) -> Pattern:
        """The value has exactly type ``ty``."""
        if not isinstance(ty, Type):
            raise PatternError(f"{self}.has_type({ty!r}): give a graph IR type")
        return self._with(Constraint("type", ty))

    def has_attr(self, **attrs: Any) -> Pattern:
        """The matched call has these attribute values (or values for which the
        given predicates are true)."""
        raise PatternError(f"{self}.has_attr: only op patterns (is_op) have attributes")

    def where(self, predicate: Callable[[Any], bool]) -> Pattern:
        """``predicate(value)`` is true: for an op pattern ``value`` is the matched
        call, for a constant pattern the constant, else the expression."""
        if not callable(predicate):
            raise PatternError(f"{self}.where({predicate!r}): give a function")
        return self._with(Constraint("where", predicate))

    def single_use(self) -> Pattern:
        """The matched value (a variable) is used exactly once in its function."""
        return self._with(Constraint("single_use"))

    def named(self, name: str) -> Pattern:
        """This pattern with a capture name: ``m["name"]`` then gives its match."""
        if not isinstance(name, str) or not name:
            raise PatternError(f"named({name!r}): a capture name is a non-empty string")
        return replace(self, name=name)

    # -------------------------------------------------------------- text
    def _core(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        text = self._core()
        if self.constraints:
            text += "[" + ", ".join(map(str, self.constraints)) + "]"
        if self.name:
            text += f" as {self.name}"
        return text

    def __repr__(self) -> str:
        return f"<Pattern {self}>"


@dataclass(frozen=True, eq=False)
class WildcardPattern(Pattern):
    """Any expression."""

    def _core(self) -> str:
        return "_"


@dataclass(frozen=True, eq=False)
class ConstPattern(Pattern):
    """A constant tensor."""

    def _core(self) -> str:
        return "const"


@dataclass(frozen=True, eq=False)
class CallPattern(Pattern):
    """A call of one of ``ops`` with arguments matching ``args`` (None: any)."""

    ops: tuple[str, ...] = ()
    args: tuple[Pattern, ...] | None = None
    attrs: tuple[tuple[str, Any], ...] = ()
    either_order: bool = False
    """Set by :meth:`commutative`: the two arguments match in the given order or
    swapped (given order first)."""

    def __call__(self, *args: Pattern | Any) -> CallPattern:
        """This op pattern with argument patterns."""
        if self.args is not None:
            raise PatternError(f"{self} already has its arguments")
        pats = []
        for i, a in enumerate(args):
            if not isinstance(a, Pattern):
                raise PatternError(
                    f"argument {i} of pattern {'|'.join(self.ops)}(...) is {a!r}, not a "
                    "pattern; use wildcard(), is_const() or is_op(...)")
            pats.append(a)
        for name in self.ops:
            _check_arity(name, len(pats))
        return replace(self, args=tuple(pats))

    def has_attr(self, **attrs: Any) -> Pattern:
        for name in self.ops:
            _check_attr_names(name, attrs)
        frozen = tuple((k, v if callable(v) else freeze_value(v)) for k, v in attrs.items())
        return replace(self, attrs=self.attrs + frozen)

    def commutative(self) -> CallPattern:
        """This two-argument pattern with its arguments in either order (the given
        order tried first): ``is_op("add")(y, is_const()).commutative()`` matches
        ``add(y, c)`` and ``add(c, y)``.  It stays one pattern, so ``m[p]`` and
        ``m.call(p)`` find the call whichever order matched, and the argument
        patterns bind what they matched.  Only for ops whose result does not depend
        on the order (``add``, ``multiply``, ``maximum``, ...): the pattern cannot
        tell."""
        if self.args is None or len(self.args) != 2:
            raise PatternError(f"{self}.commutative(): give exactly two argument patterns first")
        return replace(self, either_order=True)

    def _core(self) -> str:
        head = "|".join(self.ops)
        if self.args is not None:
            head += "(" + ", ".join(map(str, self.args)) + ")"
        if self.either_order:
            head += "~"
        if self.attrs:
            head += "{" + ", ".join(f"{k}={_value_text(v)}" for k, v in self.attrs) + "}"
        return head


@dataclass(frozen=True, eq=False)
class TuplePattern(Pattern):
    """A tuple with fields matching ``fields``."""

    fields: tuple[Pattern, ...] = ()

    def _core(self) -> str:
        return "(" + ", ".join(map(str, self.fields)) + ("," if len(self.fields) == 1 else "") + ")"


@dataclass(frozen=True, eq=False)
class AltPattern(Pattern):
    """The first of ``alternatives`` that matches (each tried in turn)."""

    alternatives: tuple[Pattern, ...] = ()

    def _core(self) -> str:
        return "(" + " | ".join(map(str, self.alternatives)) + ")"


@dataclass(frozen=True, eq=False)
class HolePattern(Pattern):
    """The place of the previous value inside the step of a chain (prints as ``^``).
    Constraints on it (``y.single_use()``) make copies that share its ``key``."""

    key: object = field(default_factory=object)

    def _core(self) -> str:
        return "^"


@dataclass(frozen=True, eq=False)
class ChainPattern(Pattern):
    """``base`` followed by up to ``max`` applications of ``step`` (None: any number),
    ``hole`` marking where the previous value goes in ``step``."""

    base: Pattern = None  # type: ignore[assignment]
    step: Pattern = None  # type: ignore[assignment]
    hole: HolePattern = None  # type: ignore[assignment]
    max: int | None = None

    def _core(self) -> str:
        mark = "?" if self.max == 1 else "*" if self.max is None else f"{{0,{self.max}}}"
        return f"{self.base} >> {self.step}{mark}"


def _chain(base: Pattern, step: Callable[[Pattern], Pattern], max: int | None,
           what: str) -> Pattern:
    if not callable(step):
        raise PatternError(f"{base}.{what}({step!r}): give a function from a pattern to a "
                           "pattern, such as is_op('relu') or lambda y: is_op('add')(y, _)")
    hole = HolePattern()
    try:
        template = step(hole)
    except PatternError:
        raise
    except Exception as e:
        raise PatternError(f"{base}.{what}: the step function failed on its argument: "
                           f"{type(e).__name__}: {e}") from None
    if not isinstance(template, Pattern):
        raise PatternError(f"{base}.{what}: the step function returned {template!r}, not a "
                           "pattern")
    if template is hole or not _contains_hole(template, hole):
        raise PatternError(
            f"{base}.{what}: the step must use its argument inside an op pattern (as in "
            f"lambda y: is_op('relu')(y)); it returned {template}")
    return ChainPattern(base=base, step=template, hole=hole, max=max)


def _contains_hole(p: Pattern, hole: HolePattern) -> bool:
    stack = [p]
    while stack:
        q = stack.pop()
        if isinstance(q, HolePattern) and q.key is hole.key:
            return True
        stack.extend(_children(q))
    return False


def _children(p: Pattern) -> list[Pattern]:
    if isinstance(p, CallPattern):
        return list(p.args or ())
    if isinstance(p, TuplePattern):
        return list(p.fields)
    if isinstance(p, AltPattern):
        return list(p.alternatives)
    if isinstance(p, ChainPattern):
        return [p.base, p.step]
    return []


# ------------------------------------------------------------------ constructors


def wildcard() -> Pattern:
    """A pattern matching any expression."""
    return WildcardPattern()


def is_const(predicate: Callable[[np.ndarray], bool] | None = None, *,
             dtype: str | None = None, scalar: bool = False) -> Pattern:
    """A constant tensor; ``predicate(data)`` must hold if given; ``scalar``: one
    element; ``dtype``: its dtype."""
    p: Pattern = ConstPattern()
    if dtype is not None:
        p = p.has_dtype(dtype)
    if scalar:
        p = p._with(Constraint("where", _is_scalar_const))
    if predicate is not None:
        if not callable(predicate):
            raise PatternError(f"is_const({predicate!r}): the predicate must be a function "
                               "of the constant's numpy array")
        p = p._with(Constraint("where", _data_predicate(predicate)))
    return p


def _is_scalar_const(c: Constant) -> bool:
    return int(c.data.size) == 1


def _data_predicate(fn: Callable[[np.ndarray], bool]) -> Callable[[Constant], bool]:
    def on_data(c: Constant) -> bool:
        return bool(fn(c.data))

    on_data.__name__ = getattr(fn, "__name__", "predicate")
    return on_data


def is_op(*names: str, **attrs: Any) -> CallPattern:
    """A call of one of the registered ops ``names`` with the attribute values
    ``attrs`` (a value, or a predicate of the value).  Call the result with argument
    patterns to constrain the arguments: ``is_op("add")(wildcard(), is_const())``."""
    if not names or not all(isinstance(n, str) for n in names):
        raise PatternError(f"is_op{names!r}: give one or more op names")
    for n in names:
        _op_def(n)
    p = CallPattern(ops=tuple(names))
    return p.has_attr(**attrs) if attrs else p  # type: ignore[return-value]


def is_tuple(*fields: Pattern) -> Pattern:
    """A tuple value whose fields match ``fields``."""
    for i, f in enumerate(fields):
        if not isinstance(f, Pattern):
            raise PatternError(f"field {i} of is_tuple(...) is {f!r}, not a pattern")
    return TuplePattern(fields=tuple(fields))


def _op_def(name: str) -> Any:
    d = Op.definitions.get(name)
    if d is None:
        close = difflib.get_close_matches(name, list(Op.definitions), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise PatternError(f"is_op({name!r}): no op {name!r} is registered{hint}")
    return d


def _check_arity(name: str, n: int) -> None:
    d = _op_def(name)
    lo, hi = d.min_inputs, d.max_inputs
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise PatternError(f"pattern {name}(...) has {n} argument patterns; op {name!r} takes "
                           f"{want} ({', '.join(d.inputs)})")


def _check_attr_names(name: str, attrs: dict[str, Any]) -> None:
    d = _op_def(name)
    for key in attrs:
        if key not in d.attrs:
            close = difflib.get_close_matches(key, list(d.attrs), n=2)
            hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
            known = ", ".join(d.attrs) or "none"
            raise PatternError(f"pattern of op {name!r}: it has no attribute {key!r}{hint}; "
                               f"its attributes are {known}")


def check_root(p: Pattern) -> None:
    """Raise a :class:`PatternError` unless ``p`` ends in an op pattern (every
    alternative and chain end): a rule's match must end in a binding."""
    stack = [p]
    while stack:
        q = stack.pop()
        if isinstance(q, AltPattern):
            stack.extend(q.alternatives)
        elif isinstance(q, ChainPattern):
            stack.append(q.base)
            stack.append(q.step)
        elif not isinstance(q, CallPattern):
            raise PatternError(
                f"the root of a rule's pattern must be an op pattern (is_op(...)), so the "
                f"match ends in a binding; got {q} in {p}")


def root_ops(p: Pattern) -> frozenset[str]:
    """The ops a match of ``p`` (a rule's pattern: see :func:`check_root`) can end in:
    a binding whose value calls another op is the root of no match."""
    out: set[str] = set()
    stack = [p]
    while stack:
        q = stack.pop()
        if isinstance(q, AltPattern):
            stack.extend(q.alternatives)
        elif isinstance(q, ChainPattern):
            stack.append(q.base)
            stack.append(q.step)
        elif isinstance(q, CallPattern):
            out.update(q.ops)
    return frozenset(out)


def patterns_in(p: Pattern) -> Iterable[Pattern]:
    """Every pattern node inside ``p`` (itself included), each once."""
    seen: set[int] = set()
    stack = [p]
    while stack:
        q = stack.pop()
        if id(q) in seen:
            continue
        seen.add(id(q))
        yield q
        stack.extend(_children(q))



# the matcher (re-exported here: the language and its matching are one API)
from .pattern_match import BlockGraph, Match, match_at, match_block  # noqa: E402

__all__ = [
    "AltPattern",
    "BlockGraph",
    "CallPattern",
    "ChainPattern",
    "ConstPattern",
    "Constraint",
    "HolePattern",
    "Match",
    "Pattern",
    "PatternError",
    "TuplePattern",
    "WildcardPattern",
    "check_root",
    "is_const",
    "is_op",
    "is_tuple",
    "match_at",
    "match_block",
    "patterns_in",
    "wildcard",
]
