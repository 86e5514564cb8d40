"""Targets and target kinds.

A :class:`Target` is a value (a kind name plus attributes) stored in the module
attribute ``target``.  A target *kind* is registered once with the passes it
contributes to the extension points of the default pipeline (``dispatch``,
``lowering``, ``build`` ...), and may derive from another kind: a derived kind gets its
parent's hooks, with its own passes first.

    register_target_kind("mycpu", parent="c", dispatch=lambda target: [MyDispatch()])
    mod = mod.with_attrs(target=Target("mycpu"))

All state a target needs lives in the module: hooks are functions of the target
value that return passes; they keep nothing between calls.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.attrs import Attrs
from ..runtime.lazy_compiler import LoadingDict

EXTENSION_POINTS = ("ingestion", "optimization", "dispatch", "legalize", "lowering", "build",
                    "link")
"""The named slots of the default pipeline, in order (see docs/targets.md).  ``build``
comes before explicit memory and memory planning, ``link`` after them (the end of the
build stage): its passes see the final module, whose allocations are planned."""

HookFn = Callable[["Target"], list[Any]]


@dataclass
class TargetKind:
    """A registered kind of target: its parent, its hooks and attribute defaults."""

    name: str
    parent: str | None = None
    hooks: dict[str, HookFn] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    doc: str = ""

    def chain(self) -> list[TargetKind]:
        """This kind followed by its ancestors."""
        out, kind, seen = [], self, set()
        while kind is not None:
            if kind.name in seen:
                raise ValueError(f"target kind {self.name!r} has a cyclic parent chain")
            seen.add(kind.name)
            out.append(kind)
            kind = TARGET_KINDS.get(kind.parent) if kind.parent else None
        return out


TARGET_KINDS: dict[str, TargetKind] = LoadingDict()  # loads the compiler on a miss


def register_target_kind(
    name: str,
    parent: str | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    doc: str = "",
    override: bool = False,
    **hooks: HookFn | list[Any],
) -> TargetKind:
    """Register a target kind.  ``hooks`` maps extension point names (see
    :data:`EXTENSION_POINTS`) to a function ``target -> list of passes`` or a plain
    list of passes."""
    if name in TARGET_KINDS and not override:
        raise ValueError(f"target kind {name!r} is already registered (pass override=True)")
    if parent is not None and parent not in TARGET_KINDS:
        raise ValueError(
            f"target kind {name!r} derives from {parent!r}, which is not registered; "
            f"known kinds: {', '.join(sorted(TARGET_KINDS))}"
        )
    fns: dict[str, HookFn] = {}
    for point, hook in hooks.items():
        if point not in EXTENSION_POINTS:
            close = difflib.get_close_matches(point, EXTENSION_POINTS, n=2)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"target kind {name!r}: unknown extension point {point!r}{hint}; "
                f"the points are {', '.join(EXTENSION_POINTS)}"
            )
        fns[point] = hook if callable(hook) else (lambda _t, _h=list(hook): list(_h))
    kind = TargetKind(name, parent, fns, dict(defaults or {}), doc)
    TARGET_KINDS[name] = kind
    return kind


def get_target_kind(name: str) -> TargetKind:
    kind = TARGET_KINDS.get(name)
    if kind is None:
        close = difflib.get_close_matches(name, list(TARGET_KINDS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ValueError(
            f"unknown target kind {name!r}{hint} (registered: {', '.join(sorted(TARGET_KINDS))})"
        )
    return kind


class Target:
    """A compilation target: a registered kind and its attributes.  Immutable and
    hashable, so it can live in the module attributes."""

    __slots__ = ("kind", "attrs")

    def __init__(self, kind: str, **attrs: Any) -> None:
        k = get_target_kind(kind)
        merged: dict[str, Any] = {}
        for tk in reversed(k.chain()):
            merged.update(tk.defaults)
        for key, value in attrs.items():   # a switch takes True or False, nothing else
            default = merged.get(key)
            if isinstance(default, bool) and not isinstance(value, (bool, np.bool_)):
                raise ValueError(
                    f"Target({kind!r}): attribute {key!r} is a switch (True or False; "
                    f"default {default}), got {value!r}")
        merged.update(attrs)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "attrs", Attrs(merged))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Target is immutable")

    @staticmethod
    def from_any(value: Target | str) -> Target:
        """A target from a Target or a kind name."""
        if isinstance(value, Target):
            return value
        if isinstance(value, str):
            return Target(value)
        raise TypeError(f"expected a Target or a target kind name, got {value!r}")

    @property
    def kind_info(self) -> TargetKind:
        return get_target_kind(self.kind)

    def is_a(self, kind: str) -> bool:
        """True if this target's kind is ``kind`` or derives from it."""
        return any(k.name == kind for k in self.kind_info.chain())

    def hook_passes(self, point: str) -> list[Any]:
        """The passes this target contributes at extension point ``point``: the
        kind's own first, then each ancestor's."""
        out: list[Any] = []
        for k in self.kind_info.chain():
            hook = k.hooks.get(point)
            if hook is not None:
                out.extend(hook(self))
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and self.kind == other.kind and self.attrs == other.attrs

    def __hash__(self) -> int:
        return hash((self.kind, self.attrs))

    def __repr__(self) -> str:
        if not self.attrs:
            return f"Target({self.kind!r})"
        args = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"Target({self.kind!r}, {args})"


def _target_text(t: Target, printer: Any) -> str:
    args = [printer.value_text(t.kind)]
    kind = t.kind_info
    defaults: dict[str, Any] = {}
    for k in reversed(kind.chain()):
        defaults.update(k.defaults)
    for key, value in t.attrs.items():
        if key not in defaults or defaults[key] != value:
            args.append(f"{key}={printer.value_text(value)}")
    return "Target(" + ", ".join(args) + ")"


def _register_text_format() -> None:
    from ..ir.parser import register_value_constructor
    from ..ir.printer import register_value_printer

    register_value_printer(Target, _target_text)
    register_value_constructor("Target", Target)


_register_text_format()
