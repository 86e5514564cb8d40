"""Rewrites by pattern: a :class:`Rule` is a pattern and a small function.

    x = wildcard()
    relu_of_neg = Rule("relu_of_neg", is_op("relu")(is_op("negative")(x).single_use()),
                       lambda m: make_call("minimum", m[x], const(0.0, "float32")))
    mod = rewrite_module(mod, [relu_of_neg])

:func:`rewrite_function` tries, in each binding block, every binding from the last
to the first as the root of a match; at each root the rules are tried in order, and
each rule's matches in preference order (alternatives in order, optional and repeated
steps taken greedily).  A match counts when its bindings are not claimed by an
earlier match, its rule's ``check`` holds and the ``rewrite`` function returns an
expression (None declines: the next candidate is tried, and the root may still be
covered by a shorter match from a later root).  The root binding then binds the
rewrite's value (normalized: nested calls become bindings emitted just before it, in
the block's kind), keeping its variable, so uses after it are unchanged; bindings of
the block that the rewrites leave unused (the other bindings of the match, and values
only they read, such as a view the new value reads through) are removed when pure.
A rewrite may look at any variable's value in the function with ``m.definition(v)``.
Every match a rewrite accepts is a site of the debug counter
(:mod:`plait.transform.debug_counter`): a declined site keeps its bindings.

:func:`rewrite_pass` makes a registered function pass from rules; ``qnn.Canonicalize``
and the ``c`` target's dispatch rules are written this way.  See ``docs/patterns.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..ir.builder import BlockBuilder, types_compatible
from ..ir.expr import (
    Binding,
    BindingBlock,
    DataflowBlock,
    Expr,
    Function,
    If,
    SeqExpr,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.walk import calls_any, iter_bindings
from .dead_code import is_pure
from .debug_counter import allow_rewrite
from .fuse_ops import count_uses, value_uses
from .pattern import Pattern, PatternError, check_root, root_ops
from .pattern_match import Match, scan_rules

RewriteFn = Callable[[Match], "Expr | None"]
"""``fn(match) -> replacement value or None`` (None declines the match)."""


@dataclass(frozen=True)
class Rule:
    """A named pattern, an optional ``check(match) -> bool`` and a ``rewrite(match)
    -> Expr | None``.  Partitioning uses rules without a rewrite (the match becomes a
    composite function named after the rule)."""

    name: str
    pattern: Pattern
    rewrite: RewriteFn | None = None
    check: Callable[[Match], bool] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PatternError(f"a rule needs a non-empty name, got {self.name!r}")
        if not isinstance(self.pattern, Pattern):
            raise PatternError(f"rule {self.name!r}: its pattern is {self.pattern!r}, not a "
                               "Pattern (build one with is_op, wildcard, is_const ...)")
        try:
            check_root(self.pattern)
        except PatternError as e:
            raise PatternError(f"rule {self.name!r}: {e}") from None
        for what in ("rewrite", "check"):
            fn = getattr(self, what)
            if fn is not None and not callable(fn):
                raise PatternError(f"rule {self.name!r}: {what} must be a function of the "
                                   f"match, got {fn!r}")

    def __str__(self) -> str:
        return f"{self.name}: {self.pattern}"


def as_rules(rules: Iterable[Rule | tuple[Any, ...]], where: str) -> tuple[Rule, ...]:
    """``rules`` as :class:`Rule` s; a tuple ``(name, pattern[, check])`` is a rule
    without a rewrite.  Duplicated names are an error naming ``where``."""
    out: list[Rule] = []
    for r in rules:
        if isinstance(r, Rule):
            out.append(r)
        elif isinstance(r, tuple) and len(r) in (2, 3) and isinstance(r[0], str):
            out.append(Rule(r[0], r[1], None, r[2] if len(r) == 3 else None))
        else:
            raise PatternError(f"{where}: {r!r} is not a Rule or a (name, pattern[, check]) "
                               "tuple")
    names = [r.name for r in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PatternError(f"{where}: rule name(s) {', '.join(map(repr, dup))} appear twice")
    return tuple(out)


class _BlockRewriter:
    """Rewrites the blocks of one function, keeping the use counts current."""

    def __init__(self, rules: Sequence[Rule], uses: dict[Var, int], mod: IRModule | None,
                 function: str | None, definitions: dict[Var, Expr]) -> None:
        self.rules = rules
        self.uses = uses
        self.definitions = definitions
        self.bb = BlockBuilder(mod)
        self.function = function
        self.changed = False

    def block(self, block: BindingBlock) -> BindingBlock:
        bindings = block.bindings
        results: dict[int, Expr] = {}

        def accept(r: int, m: Match) -> bool:
            rule = self.rules[r]
            if rule.rewrite is None:
                raise PatternError(f"rule {rule.name!r} has no rewrite function; give one "
                                   "to rewrite with it")
            new = rule.rewrite(m)
            if new is None:
                return False
            if not isinstance(new, Expr):
                raise PatternError(f"rule {rule.name!r} returned {new!r}, not an expression "
                                   "(or None to decline)")
            if not allow_rewrite(lambda: f"rule {rule.name!r} at binding "
                                 f"{bindings[m.root_binding].var.name_hint!r}"):  # type: ignore[index]
                return False
            results[m.root_binding] = new  # type: ignore[index]
            return True

        rules = [(r.pattern, r.check) for r in self.rules]
        matches, which = scan_rules(bindings, rules, self.uses, False, None, accept,
                                    self.definitions)
        if not matches:
            return block
        self.changed = True
        dataflow = isinstance(block, DataflowBlock)
        uses = self.uses
        freed: list[Var] = []     # variables whose last use a rewrite took away

        def drop_uses(value: Expr) -> None:
            for v in value_uses(value):
                n = uses.get(v, 0) - 1
                uses[v] = n
                if n == 0:
                    freed.append(v)

        new_values: dict[int, list[Binding]] = {}
        for m, r in zip(matches, which):
            i = m.root_binding
            assert i is not None
            old = bindings[i]
            new_values[i] = self._emit(old, results[i], self.rules[r].name, dataflow)
            for b in new_values[i]:
                for v in value_uses(b.value):
                    uses[v] = uses.get(v, 0) + 1
            drop_uses(old.value)
        # bindings of this block that the rewrites left unused go too (the inner
        # bindings of the matches, and values only they read), when pure
        index = {b.var: i for i, b in enumerate(bindings)}
        dropped: set[int] = set()
        while freed:
            v = freed.pop()
            i = index.get(v)
            if i is None or i in dropped or i in new_values or uses.get(v, 0) != 0:
                continue
            if not is_pure(bindings[i].value):
                continue
            dropped.add(i)
            drop_uses(bindings[i].value)
        out: list[Binding] = []
        for i, b in enumerate(bindings):
            if i in dropped:
                continue
            out.extend(new_values.get(i, (b,)))
        return type(block)(tuple(out))

    def _emit(self, old: Binding, value: Expr, rule: str, dataflow: bool) -> list[Binding]:
        bb = self.bb
        bb.begin_scope(dataflow)
        prev = bb.current_binding
        bb.current_binding = old.var.name_hint
        try:
            value = bb.normalize(value)
        except Exception as e:
            bb.end_scope()
            raise PatternError(f"rule {rule!r}, rewriting binding {old.var.name_hint!r}"
                               f"{self._where()}: its result does not type-check: {e}") from e
        finally:
            bb.current_binding = prev
        emitted = bb.end_scope()
        if not types_compatible(old.var.ty, value.ty):
            raise PatternError(
                f"rule {rule!r} rewrote binding {old.var.name_hint!r}{self._where()} of type "
                f"{old.var.ty} into a value of type {value.ty}; a rewrite must keep the type")
        return [*emitted, replace(old, value=value)]

    def _where(self) -> str:
        return f" in function {self.function!r}" if self.function else ""

    def seq(self, seq: SeqExpr) -> SeqExpr:
        blocks = []
        changed = False
        for block in seq.blocks:
            new = self.block(block)
            bindings = list(new.bindings)
            for k, b in enumerate(bindings):
                if isinstance(b, VarBinding) and isinstance(b.value, If):
                    e = b.value
                    then_b = self.seq(e.then_branch) if isinstance(
                        e.then_branch, SeqExpr) else e.then_branch
                    else_b = self.seq(e.else_branch) if isinstance(
                        e.else_branch, SeqExpr) else e.else_branch
                    if then_b is not e.then_branch or else_b is not e.else_branch:
                        bindings[k] = replace(b, value=replace(e, then_branch=then_b,
                                                               else_branch=else_b))
            if any(x is not y for x, y in zip(bindings, new.bindings)):
                new = type(new)(tuple(bindings))
            changed |= new is not block
            blocks.append(new)
        return replace(seq, blocks=tuple(blocks)) if changed else seq


def rewrite_function(func: Function, rules: Sequence[Rule], mod: IRModule | None = None, *,
                     name: str | None = None, max_rounds: int = 1) -> Function:
    """``func`` rewritten by ``rules`` (see the module docstring), up to
    ``max_rounds`` times while something changes.  ``mod`` gives the types of the
    module's functions to rewrites that call them; ``name`` is used in errors."""
    if not isinstance(func.body, SeqExpr):
        return func
    roots: set[str] = set()
    for r in rules:
        check_root(r.pattern)
        roots |= root_ops(r.pattern)
    if not calls_any(func, roots):
        return func  # no binding is the root of a match: nothing to rewrite
    for _ in range(max_rounds):
        defs = {b.var: b.value for b, _ in iter_bindings(func) if isinstance(b, VarBinding)}
        rw = _BlockRewriter(rules, count_uses(func.body), mod, name, defs)
        body = rw.seq(func.body)
        if body is func.body:
            break
        func = replace(func, body=body)
    return func


def rewrite_module(mod: IRModule, rules: Iterable[Rule], *,
                   skip: Callable[[Function], bool] | None = None,
                   max_rounds: int = 1) -> IRModule:
    """``mod`` with every graph function rewritten by ``rules``; functions for which
    ``skip`` is true (default: those of external codegens) are left alone."""
    rules = as_rules(rules, "rewrite_module")
    if skip is None:
        def skip(f: Function) -> bool:
            return bool(f.attrs.get("compiler"))
    changed: dict[str, Function] = {}
    for fname, f in mod.graph_functions():
        if skip(f):
            continue
        nf = rewrite_function(f, rules, mod, name=fname, max_rounds=max_rounds)
        if nf is not f:
            changed[fname] = nf
    return mod.with_functions(changed) if changed else mod


def rewrite_pass(name: str, rules: Iterable[Rule], *, phases: Any = ("optimization",),
                 doc: str | None = None, max_rounds: int = 1, register: bool = True) -> Any:
    """A function pass named ``name`` that rewrites every graph function by ``rules``
    (external functions are skipped unless the pass is enabled for their codegen, as
    for every function pass).  Registered by name unless ``register=False``."""
    from .pass_base import function_pass

    rules = as_rules(rules, f"rewrite_pass({name!r})")

    def run(func: Function, mod: IRModule, ctx: Any) -> Function:
        return rewrite_function(func, rules, mod, max_rounds=max_rounds)

    run.__name__ = run.__qualname__ = name.replace(".", "_")
    run.__module__ = _caller_module()
    text = doc or f"Rewrite by the pattern rules {', '.join(r.name for r in rules)}."
    return function_pass(run, name=name, phases=phases, doc=text, register=register)


def _caller_module() -> str:
    import sys

    return sys._getframe(2).f_globals.get("__name__", "__main__")


def functions_to_rewrite(mod: IRModule, skip: Any = None) -> list[tuple[str, Function]]:
    """The graph functions of ``mod`` (name, function) with a block body and for which
    ``skip`` is false (default: all but those of external codegens)."""
    if skip is None:
        def skip(f: Function) -> bool:
            return bool(f.attrs.get("compiler"))
    return [(name, f) for name, f in mod.graph_functions()
            if not skip(f) and isinstance(f.body, SeqExpr)]


__all__ = [
    "RewriteFn",
    "functions_to_rewrite",
    "Rule",
    "as_rules",
    "rewrite_function",
    "rewrite_module",
    "rewrite_pass",
]
