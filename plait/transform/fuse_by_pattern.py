"""FuseOpsByPattern: every match of a set of rules becomes a composite function.

    # before                                  # after FuseOpsByPattern(codegen="mydnn")
    a = conv2d(x, W)                          c = cls.mydnn_conv2d_relu(x)
    b = add(a, B)
    c = relu(b)                               @function(attrs={"composite": "mydnn.conv2d_relu",
                                                  "compiler": "mydnn", "private": True})
                                              def mydnn_conv2d_relu(x: ...) -> ...:
                                                  with dataflow():
                                                      a = conv2d(x, W)   # constants stay
                                                      b = add(a, B)
                                                      c = relu(b)
                                                      output(c)
                                                  return c

The rules are given (``FuseOpsByPattern(patterns=[...])``) or are those registered by
a codegen (``FuseOpsByPattern(codegen="mydnn")``, which also marks the composites
``compiler="mydnn"``).  Matches are found as :func:`~plait.transform.pattern.match_block`
finds them — every binding of a dataflow block, from the last, tried as a root against
the rules in order, non-overlapping — and only matches whose inner values are used
nowhere else are taken, so each composite has one result and outlining it never
creates a cycle.  A rule's ``check(match)`` may refuse a match.  Functions of external
codegens, primitive and composite functions are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..ir.expr import Binding, BindingBlock, DataflowBlock, Function, GlobalVar, SeqExpr
from ..ir.module import IRModule
from .codegens import get_codegen
from .context import PassContext
from .external import COMPILER_ATTR
from .fuse_ops import PRIMITIVE_ATTR, count_uses
from .outline import outline
from .pass_base import module_pass
from .pattern_match import scan_rules
from .pattern_rewrite import Rule, as_rules

COMPOSITE_ATTR = "composite"
"""Attribute naming the rule a composite function was made from."""


def is_composite(func: Any) -> bool:
    """True for a function made by FuseOpsByPattern."""
    return isinstance(func, Function) and COMPOSITE_ATTR in func.attrs


def _func_name(rule: str, used: set[str]) -> str:
    hint = re.sub(r"\W", "_", rule)
    name, k = hint, 1
    while name in used:
        name = f"{hint}_{k}"
        k += 1
    used.add(name)
    return name


class _Fuser:
    def __init__(self, rules: Sequence[Rule], codegen: str | None, used: set[str]) -> None:
        self.rules = rules
        self.codegen = codegen
        self.used = used
        self.new: dict[str, Function] = {}

    def block(self, block: BindingBlock, uses: dict) -> BindingBlock:
        if not isinstance(block, DataflowBlock):
            return block
        bindings = block.bindings
        matches, which = scan_rules(bindings, [(r.pattern, r.check) for r in self.rules],
                                    uses, True, None)
        if not matches:
            return block
        replace_at: dict[int, list[Binding]] = {}
        dropped: set[int] = set()
        for m, r in zip(matches, which):
            rule = self.rules[r]
            members = sorted(m.bindings)
            attrs: dict[str, Any] = {COMPOSITE_ATTR: rule.name, "private": True}
            if self.codegen is not None:
                attrs[COMPILER_ATTR] = self.codegen
            out = outline(bindings, members, uses, attrs)
            name = _func_name(rule.name, self.used)
            self.new[name] = out.func
            root = m.root_binding
            assert root is not None and out.outputs == [bindings[root].var]
            replace_at[root] = out.call_bindings(GlobalVar(name), True)
            dropped.update(i for i in members if i != root)
        new: list[Binding] = []
        for i, b in enumerate(bindings):
            if i in dropped:
                continue
            new.extend(replace_at.get(i, (b,)))
        return DataflowBlock(tuple(new))

    def function(self, func: Function) -> Function:
        if not isinstance(func.body, SeqExpr):
            return func
        uses = count_uses(func.body)
        blocks = tuple(self.block(b, uses) for b in func.body.blocks)
        if all(a is b for a, b in zip(blocks, func.body.blocks)):
            return func
        return replace(func, body=replace(func.body, blocks=blocks))


def fuse_by_pattern(mod: IRModule, rules: Iterable[Rule], codegen: str | None = None) -> IRModule:
    """``mod`` with every match of ``rules`` in its host functions outlined as a
    composite function (marked ``compiler=codegen`` when given)."""
    rules = as_rules(rules, "FuseOpsByPattern")
    fuser = _Fuser(rules, codegen, set(mod.functions))
    changed: dict[str, Function] = {}
    for name, f in mod.graph_functions():
        if COMPILER_ATTR in f.attrs or is_composite(f) or f.attrs.get(PRIMITIVE_ATTR):
            continue
        nf = fuser.function(f)
        if nf is not f:
            changed[name] = nf
    if not changed:
        return mod
    return mod.with_functions({**changed, **fuser.new})


@module_pass(name="FuseOpsByPattern", phases=("optimization",))
class FuseOpsByPattern:
    """Outline every match of a codegen's (or the given) patterns as a composite function."""

    def __init__(self, patterns: Iterable[Rule | tuple[Any, ...]] | None = None, *,
                 codegen: str | None = None) -> None:
        super().__init__()
        if patterns is None and codegen is None:
            raise ValueError("FuseOpsByPattern needs patterns=[...] or codegen='name' (whose "
                             "registered patterns it uses)")
        self.rules = (as_rules(patterns, "FuseOpsByPattern") if patterns is not None
                      else get_codegen(str(codegen), needed_by="FuseOpsByPattern").rules)
        self.codegen = codegen

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return fuse_by_pattern(mod, self.rules, self.codegen)


__all__ = ["COMPOSITE_ATTR", "FuseOpsByPattern", "fuse_by_pattern", "is_composite"]
