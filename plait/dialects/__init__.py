"""Dialects: families of ops with their own passes, plugged into the default pipeline.

A dialect registers the passes it contributes at the extension points of the default
pipeline (``ingestion`` canonicalization, ``legalize`` ...).  ``build()`` and the
pass manager never name a dialect: they ask this registry.

    register_dialect("qnn", ingestion=lambda target: [qnn.Canonicalize()],
                     legalize=lambda target: [qnn.Legalize()])
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DIALECT_POINTS = ("ingestion", "optimization", "legalize", "lowering")

HookFn = Callable[[Any], list[Any]]


@dataclass
class Dialect:
    """A registered dialect: its name and the passes it contributes per point."""

    name: str
    hooks: dict[str, HookFn] = field(default_factory=dict)
    doc: str = ""

    def hook_passes(self, point: str, target: Any) -> list[Any]:
        hook = self.hooks.get(point)
        return list(hook(target)) if hook is not None else []


DIALECTS: dict[str, Dialect] = {}


def register_dialect(
    name: str, *, doc: str = "", override: bool = False, **hooks: HookFn
) -> Dialect:
    """Register a dialect and the passes it contributes (``point=fn(target) -> passes``)."""
    if name in DIALECTS and not override:
        raise ValueError(f"dialect {name!r} is already registered (pass override=True)")
    for point in hooks:
        if point not in DIALECT_POINTS:
            close = difflib.get_close_matches(point, DIALECT_POINTS, n=2)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ValueError(
                f"dialect {name!r}: unknown extension point {point!r}{hint}; "
                f"dialects contribute to {', '.join(DIALECT_POINTS)}"
            )
    d = Dialect(name, dict(hooks), doc)
    DIALECTS[name] = d
    return d


def dialect_passes(point: str, target: Any) -> list[Any]:
    """The passes every registered dialect contributes at ``point``, by dialect name."""
    out: list[Any] = []
    for name in sorted(DIALECTS):
        out.extend(DIALECTS[name].hook_passes(point, target))
    return out
