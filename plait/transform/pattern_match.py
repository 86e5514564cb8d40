"""Matching patterns on a binding block seen as a dataflow graph.

:func:`match_at` enumerates the matches of a pattern rooted at one expression, in
preference order (alternatives in order; ``optional``/``repeat`` steps greedily, the
base tried at the deepest position first); :func:`match_block` scans a block from the
last binding to the first and keeps the non-overlapping matches.  A :class:`Match`
maps patterns to what they matched.  The language itself is
:mod:`plait.transform.pattern`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..ir.expr import Binding, Call, Constant, Expr, Op, Tuple, Var, VarBinding
from ..ir.types import TensorType
from .pattern import (
    AltPattern,
    CallPattern,
    ChainPattern,
    ConstPattern,
    HolePattern,
    Pattern,
    PatternError,
    TuplePattern,
    WildcardPattern,
    check_root,
    root_ops,
)

_Entry = tuple[Pattern, Expr, "Call | None", "int | None"]
"""(pattern, matched expression, the call when an op pattern matched, binding index)."""


class _Env:
    """A persistent list of match entries (a cons list: sharing makes backtracking
    free)."""

    __slots__ = ("entry", "parent")

    def __init__(self, entry: _Entry | None, parent: _Env | None) -> None:
        self.entry = entry
        self.parent = parent

    def add(self, entry: _Entry) -> _Env:
        return _Env(entry, self)

    def entries(self) -> list[_Entry]:
        out = []
        e: _Env | None = self
        while e is not None:
            if e.entry is not None:
                out.append(e.entry)
            e = e.parent
        out.reverse()
        return out

    def last_hole(self, key: object) -> Expr:
        """What the hole with ``key`` matched last."""
        e: _Env | None = self
        while e is not None:
            en = e.entry
            if en is not None and type(en[0]) is HolePattern and en[0].key is key:
                return en[1]
            e = e.parent
        raise KeyError(key)


_EMPTY = _Env(None, None)


class BlockGraph:
    """A binding block as a dataflow graph: where each variable is bound
    (``index``) and how often each variable is used in the whole function (``uses``,
    every occurrence counted; see :func:`plait.transform.fuse_ops.count_uses`)."""

    def __init__(self, bindings: Sequence[Binding], uses: dict[Var, int],
                 definitions: dict[Var, Expr] | None = None) -> None:
        self.bindings = bindings
        self.uses = uses
        self.index: dict[Var, int] = {
            b.var: i for i, b in enumerate(bindings) if type(b) is VarBinding
        }
        self.definitions = definitions
        """The values of the function's variables, all blocks (when the caller gives
        them): for rewrites that look further back than the block."""
        self.failed: set[tuple[int, Expr]] = set()
        """(id of a chain pattern, expression) pairs known to have no match."""

    def value_of(self, e: Expr) -> tuple[Expr, int | None]:
        """``e``'s value when ``e`` is a variable bound in the block (and its binding
        index), else ``e`` itself."""
        if isinstance(e, Var):
            i = self.index.get(e)
            if i is not None:
                return self.bindings[i].value, i
        return e, None


def _check(p: Pattern, e: Expr, value: Expr, g: BlockGraph) -> bool:
    for c in p.constraints:
        k = c.kind
        if k == "single_use":
            if not isinstance(e, Var) or g.uses.get(e, 0) != 1:
                return False
            continue
        if k == "where":
            try:
                if not c.value(value):
                    return False
            except Exception:
                return False
            continue
        ty = e.ty
        if k == "type":
            if ty != c.value:
                return False
            continue
        if not isinstance(ty, TensorType):
            return False
        if k == "dtype":
            if ty.dtype not in c.value:
                return False
        elif k == "rank":
            if ty.shape is None or len(ty.shape) not in c.value:
                return False
        elif k == "shape":
            if ty.shape is None or len(ty.shape) != len(c.value):
                return False
            if any(w is not None and w != d for w, d in zip(c.value, ty.shape)):
                return False
    return True


def _attrs_ok(p: CallPattern, call: Call) -> bool:
    attrs = call.attrs
    for key, want in p.attrs:
        if key not in attrs:
            return False
        have = attrs[key]
        if callable(want):
            try:
                if not want(have):
                    return False
            except Exception:
                return False
        elif have != want:
            return False
    return True


def _match(p: Pattern, e: Expr, env: _Env, g: BlockGraph) -> Iterator[_Env]:
    """Every way ``p`` matches ``e`` (extending ``env``), in preference order."""
    t = type(p)
    if t is CallPattern:
        value, idx = g.value_of(e)
        if not isinstance(value, Call) or not isinstance(value.op, Op):
            return
        if value.op.name not in p.ops or not _attrs_ok(p, value):  # type: ignore[attr-defined]
            return
        if not _check(p, e, value, g):
            return
        env = env.add((p, e, value, idx))
        if p.args is None:
            yield env
            return
        if len(p.args) != len(value.args):
            return
        yield from _match_seq(p.args, value.args, 0, env, g)
        if p.either_order:  # type: ignore[attr-defined]
            yield from _match_seq(p.args, value.args[::-1], 0, env, g)
    elif t is WildcardPattern:
        if _check(p, e, e, g):
            yield env.add((p, e, None, None))
    elif t is ConstPattern:
        value, idx = g.value_of(e)
        if isinstance(value, Constant) and _check(p, e, value, g):
            yield env.add((p, e, None, idx))
    elif t is AltPattern:
        if not p.constraints or _check(p, e, g.value_of(e)[0], g):
            if p.name is not None or p.constraints:
                env = env.add((p, e, None, None))
            for alt in p.alternatives:  # type: ignore[attr-defined]
                yield from _match(alt, e, env, g)
    elif t is TuplePattern:
        value, idx = g.value_of(e)
        if isinstance(value, Tuple) and len(value.fields) == len(p.fields) and _check(
                p, e, value, g):
            yield from _match_seq(p.fields, value.fields, 0,  # type: ignore[attr-defined]
                                  env.add((p, e, None, idx)), g)
    elif t is HolePattern:
        if _check(p, e, g.value_of(e)[0], g):
            yield env.add((p, e, None, None))
    elif t is ChainPattern:
        yield from _match_chain(p, e, env, g)  # type: ignore[arg-type]
    else:  # pragma: no cover - every pattern class is handled above
        raise PatternError(f"unknown pattern class {t.__name__}")


def _match_seq(pats: Sequence[Pattern], exprs: Sequence[Expr], i: int, env: _Env,
               g: BlockGraph) -> Iterator[_Env]:
    if i == len(pats):
        yield env
        return
    for env2 in _match(pats[i], exprs[i], env, g):
        yield from _match_seq(pats, exprs, i + 1, env2, g)


def _match_chain(p: ChainPattern, e: Expr, env: _Env, g: BlockGraph) -> Iterator[_Env]:
    """Depth first over the steps (each step's matches in preference order, so the
    longest chain comes first), the base tried at each position once every deeper
    chain from it is exhausted.  Iterative: a chain of any length is a loop.  A
    position from which nothing matched is remembered, so scanning every binding of a
    long chain as a root stays linear."""
    if p.constraints and not _check(p, e, g.value_of(e)[0], g):
        return
    if p.name is not None or p.constraints:
        env = env.add((p, e, None, None))
    pid, key, step, base, limit = id(p), p.hole.key, p.step, p.base, p.max
    if (pid, e) in g.failed:
        return
    yielded = 0
    # frames: [position, env, iterator over the step's matches there, depth, yields so far]
    stack: list[list[Any]] = [[e, env, _match(step, e, env, g), 0, 0]]
    while stack:
        frame = stack[-1]
        pos, penv, it, depth = frame[0], frame[1], frame[2], frame[3]
        nxt = next(it, None) if limit is None or depth < limit else None
        if nxt is not None:
            h = nxt.last_hole(key)
            if h is pos or (pid, h) in g.failed:
                continue
            stack.append([h, nxt, _match(step, h, nxt, g), depth + 1, yielded])
            continue
        stack.pop()
        for got in _match(base, pos, penv, g):
            yielded += 1
            yield got
        if yielded == frame[4] and limit is None:
            g.failed.add((pid, pos))


# ------------------------------------------------------------------ matches


@dataclass
class Match:
    """One match of a pattern: the root expression, the bindings it covers (indices
    into the block, sorted) and what each pattern matched."""

    pattern: Pattern
    root: Expr
    bindings: tuple[int, ...]
    entries: list[_Entry]
    graph: BlockGraph

    def _find(self, key: Pattern | str) -> list[_Entry]:
        if isinstance(key, str):
            return [en for en in self.entries if en[0].name == key]
        return [en for en in self.entries if en[0] is key]

    def __contains__(self, key: Pattern | str) -> bool:
        return bool(self._find(key))

    def __getitem__(self, key: Pattern | str) -> Expr:
        """The expression the pattern (or the pattern named ``key``) matched first
        (outermost); ``KeyError`` when it matched nothing (an optional part not
        taken: use :meth:`get`)."""
        found = self._find(key)
        if not found:
            raise KeyError(f"pattern {key} matched nothing in this match (an optional part "
                           "not taken? use match.get(pattern))")
        return found[0][1]

    def get(self, key: Pattern | str, default: Any = None) -> Any:
        """Like ``m[key]`` but ``default`` when the pattern matched nothing."""
        found = self._find(key)
        return found[0][1] if found else default

    def all(self, key: Pattern | str) -> list[Expr]:
        """Every expression the pattern matched, outermost first (a repeated step
        matches once per step)."""
        return [en[1] for en in self._find(key)]

    def call(self, key: Pattern | str) -> Call:
        """The call an op pattern matched (the value of the variable ``m[key]``)."""
        for en in self._find(key):
            if en[2] is not None:
                return en[2]
        raise KeyError(f"pattern {key} matched no call in this match")

    def calls(self, key: Pattern | str) -> list[Call]:
        """Every call the op pattern matched, outermost first."""
        return [en[2] for en in self._find(key) if en[2] is not None]

    def binding_of(self, key: Pattern | str) -> int | None:
        """The index of the binding an op pattern matched (None when it matched a
        nested call)."""
        for en in self._find(key):
            if en[3] is not None:
                return en[3]
        return None

    def definition(self, e: Expr) -> Expr | None:
        """The value bound to variable ``e`` in the block, or anywhere in the function
        when the matcher was given the function's definitions; None otherwise."""
        if not isinstance(e, Var):
            return None
        i = self.graph.index.get(e)
        if i is not None:
            return self.graph.bindings[i].value
        defs = self.graph.definitions
        return None if defs is None else defs.get(e)

    @property
    def root_binding(self) -> int | None:
        """The index of the binding of the root (None when the root is not a bound
        variable)."""
        return self.graph.index.get(self.root) if isinstance(self.root, Var) else None

    def inputs(self) -> list[Var]:
        """The variables the matched bindings read from outside the match, in order
        of first use."""
        inside = {self.graph.bindings[i].var for i in self.bindings}
        out: list[Var] = []
        seen: set[Var] = set()
        for i in self.bindings:
            for v in _value_vars(self.graph.bindings[i].value):
                if v not in inside and v not in seen:
                    seen.add(v)
                    out.append(v)
        return out

    def is_contained(self) -> bool:
        """True when the values of the matched bindings, but the root's, are used
        only inside the match (so the match can become one call with one result)."""
        root = self.root_binding
        inner = {self.graph.bindings[i].var: 0 for i in self.bindings if i != root}
        if not inner:
            return True
        for i in self.bindings:
            for v in _value_vars(self.graph.bindings[i].value):
                if v in inner:
                    inner[v] += 1
        return all(self.graph.uses.get(v, 0) == n for v, n in inner.items())


def _value_vars(value: Expr) -> list[Var]:
    """The variables a binding's value reads, one per occurrence."""
    from .fuse_ops import value_uses

    return value_uses(value)


def match_at(pattern: Pattern, expr: Expr, graph: BlockGraph) -> Iterator[Match]:
    """Every match of ``pattern`` rooted at ``expr`` (a variable bound in ``graph``'s
    block, or any expression), in preference order."""
    for env in _match(pattern, expr, _EMPTY, graph):
        entries = env.entries()
        idxs = sorted({en[3] for en in entries if en[3] is not None})
        yield Match(pattern, expr, tuple(idxs), entries, graph)


def match_block(
    bindings: Sequence[Binding],
    pattern: Pattern,
    uses: dict[Var, int],
    *,
    check: Callable[[Match], bool] | None = None,
    contained: bool = False,
    taken: set[int] | None = None,
) -> list[Match]:
    """The non-overlapping matches of ``pattern`` in a block: every binding, from the
    last to the first, is tried as a root; the first match (in preference order) whose
    bindings are free and for which ``check`` holds (and, with ``contained``, whose
    inner values are used only inside it) claims its bindings.  ``taken`` (updated)
    holds bindings already claimed."""
    return scan_rules(bindings, [(pattern, check)], uses, contained, taken)[0]


def scan_rules(
    bindings: Sequence[Binding],
    rules: Sequence[tuple[Pattern, Callable[[Match], Any] | None]],
    uses: dict[Var, int],
    contained: bool,
    taken: set[int] | None,
    accept: Callable[[int, Match], bool] | None = None,
    definitions: dict[Var, Expr] | None = None,
) -> tuple[list[Match], list[int]]:
    """Matches of several patterns (tried in order at each root); returns the matches
    and, for each, the index of its rule.  ``accept(rule, match)`` may refuse a match
    after the check (then the next candidate is tried)."""
    roots: set[str] = set()
    for p, _ in rules:
        check_root(p)
        roots |= root_ops(p)
    g = BlockGraph(bindings, uses, definitions)
    taken = set() if taken is None else taken
    found: list[Match] = []
    which: list[int] = []
    for i in range(len(bindings) - 1, -1, -1):
        if i in taken:
            continue
        b = bindings[i]
        if type(b) is not VarBinding:
            continue
        value = b.value
        if not isinstance(value, Call):
            continue
        op = value.op
        if not isinstance(op, Op) or op.name not in roots:
            continue  # no rule's match ends in a call of this op (or of no op)
        done = False
        for r, (p, check) in enumerate(rules):
            for m in match_at(p, b.var, g):
                if taken.intersection(m.bindings) or i not in m.bindings:
                    continue
                if contained and not m.is_contained():
                    continue
                if check is not None and not check(m):
                    continue
                if accept is not None and not accept(r, m):
                    continue
                taken.update(m.bindings)
                found.append(m)
                which.append(r)
                done = True
                break
            if done:
                break
    return found, which


__all__ = ["BlockGraph", "Match", "match_at", "match_block", "scan_rules"]
