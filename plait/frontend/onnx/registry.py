"""The registry of ONNX op converters.

A converter turns one ONNX node into plait IR.  It is registered for an op type, a
domain and a range of opset versions of that domain (the versions of the *model's*
opset import, so a converter registered ``since=13`` handles every model whose default
domain opset is 13 or newer until the next registration of the same op)::

    @converter("Softmax", since=13)
    def softmax(ctx: NodeContext) -> Expr:
        return ctx.call("softmax", ctx.x(0), axis=ctx.attr_int("axis", -1))

``attr_choices`` lists the values an attribute may take; the importer checks them for
every node before anything is built, so a model with a bad or unsupported attribute
value is rejected with the node and the attribute named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_DOMAIN = ""
"""The default ONNX domain (``ai.onnx``) is stored as the empty string."""

ConvertFn = Callable[[Any], Any]
"""``fn(ctx: NodeContext) -> output or list of outputs``."""


def normalize_domain(domain: str) -> str:
    """``ai.onnx`` and ``""`` are the same domain."""
    return DEFAULT_DOMAIN if domain in ("", "ai.onnx") else domain


@dataclass(frozen=True)
class Converter:
    """A registered converter of ``op_type`` (of ``domain``) for opsets
    ``since`` ... ``until`` (inclusive; None: every newer opset)."""

    op_type: str
    domain: str
    since: int
    until: int | None
    fn: ConvertFn
    attr_choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    doc: str = ""
    module: str = ""

    def handles(self, version: int) -> bool:
        return self.since <= version and (self.until is None or version <= self.until)

    @property
    def qualified_name(self) -> str:
        return self.op_type if not self.domain else f"{self.domain}::{self.op_type}"


_CONVERTERS: dict[tuple[str, str], list[Converter]] = {}


def converter(
    op_types: str | Iterable[str],
    *,
    since: int = 1,
    until: int | None = None,
    domain: str = DEFAULT_DOMAIN,
    attr_choices: Mapping[str, Iterable[Any]] | None = None,
    doc: str = "",
) -> Callable[[ConvertFn], ConvertFn]:
    """Register the decorated function as the converter of ``op_types`` for the model
    opsets ``since``..``until`` of ``domain``.  ``doc`` is a one-line note for the
    generated documentation (how the op is expressed, what is not supported)."""
    names = [op_types] if isinstance(op_types, str) else list(op_types)
    dom = normalize_domain(domain)
    choices = {k: tuple(v) for k, v in (attr_choices or {}).items()}

    def deco(fn: ConvertFn) -> ConvertFn:
        for name in names:
            entries = _CONVERTERS.setdefault((dom, name), [])
            for e in entries:
                overlap = e.since <= (until if until is not None else 10**9) and (
                    since <= (e.until if e.until is not None else 10**9)
                )
                if overlap:
                    raise ValueError(
                        f"ONNX op {name!r} (domain {dom!r}) already has a converter for "
                        f"opsets {e.since}..{e.until or 'newest'} ({e.module}.{e.fn.__name__})"
                    )
            text = doc or " ".join((fn.__doc__ or "").split())
            entries.append(Converter(name, dom, since, until, fn, choices, text, fn.__module__))
            entries.sort(key=lambda c: c.since)
        return fn

    return deco


def find_converter(op_type: str, domain: str, version: int) -> Converter | None:
    """The converter of ``op_type`` for opset ``version`` of ``domain``, or None."""
    for c in _CONVERTERS.get((normalize_domain(domain), op_type), ()):
        if c.handles(version):
            return c
    return None


def has_converter(op_type: str, domain: str = DEFAULT_DOMAIN) -> bool:
    """True if ``op_type`` has a converter for some opset."""
    return (normalize_domain(domain), op_type) in _CONVERTERS


def list_converters() -> list[Converter]:
    """Every registered converter, sorted by domain, op type and opset."""
    out = [c for entries in _CONVERTERS.values() for c in entries]
    return sorted(out, key=lambda c: (c.domain, c.op_type, c.since))
