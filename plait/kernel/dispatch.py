"""One dispatch per walk: tables from kernel IR node types to handlers.

A walk over kernel IR (printing, simplifying, rebuilding, checking, emitting C) looks
up the handler of each node in a :class:`TypeTable` built once when its module loads,
instead of testing the node against each class in turn::

    _TEXT = TypeTable("kernel text printer", PrimExpr, {
        Var: _var,
        (IntImm, FloatImm): _imm,
        BinaryOp: _binary,        # every subclass, unless it has its own entry
        ...
    })
    text = _TEXT[type(e)](printer, e)

A key is a class or a tuple of classes; a node type without an entry of its own takes
its nearest base class's (looked up once, then cached); a type of no entry takes the
table's ``fallback`` if it has one, else the lookup raises :class:`NoRuleError`.
Every table is recorded in :data:`TABLES`, so a test checks that each covers every
node type of its ``base``: a node type added to :mod:`plait.kernel.ir` without a
handler in every walk fails it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from plait.errors import PlaitError

H = TypeVar("H", bound=Callable[..., Any])


class NoRuleError(PlaitError, TypeError):
    """A walk met a node type its table has no handler for."""


TABLES: list[TypeTable[Any]] = []
"""Every table made (but those made with ``register=False``), for the coverage test."""

_RAISE: Any = object()
"""The default ``fallback``: a type of no entry raises :class:`NoRuleError`."""


class TypeTable(dict, Generic[H]):  # type: ignore[type-arg]
    """A ``type -> handler`` table for one walk (a dict: ``table[type(node)]``).

    ``what`` names the walk in errors; ``base`` is the node class whose every concrete
    subclass the table must cover (``PrimExpr`` or ``Stmt``)."""

    def __init__(self, what: str, base: type, entries: Mapping[type | tuple[type, ...], H],
                 fallback: H | None = _RAISE, register: bool = True) -> None:
        flat: dict[type, H] = {}
        for key, handler in entries.items():
            for cls in key if isinstance(key, tuple) else (key,):
                if cls in flat:
                    raise NoRuleError(f"{what}: node type {cls.__name__} has two entries")
                flat[cls] = handler
        super().__init__(flat)
        self.what = what
        self.base = base
        self.own = frozenset(flat)
        """The classes given an entry of their own (not found through a base)."""
        self.fallback = fallback
        """The handler of a type with no entry, its own or a base's (text of a foreign
        node, in a message; None for a partial table); it covers no node type."""
        if register:  # a partial table (a few types, None for the rest) is not a walk
            TABLES.append(self)

    def __missing__(self, cls: type) -> H:
        for sup in cls.__mro__[1:]:
            if dict.__contains__(self, sup):
                handler = dict.__getitem__(self, sup)
                self[cls] = handler
                return handler
        if self.fallback is not _RAISE:
            return self.fallback  # type: ignore[return-value]
        raise NoRuleError(
            f"{self.what}: no rule for kernel IR node type {cls.__name__}; add an entry for "
            f"it to the walk's table")

    def covers(self, cls: type) -> bool:
        """True when nodes of type ``cls`` have a handler (their own or a base's)."""
        return any(sup in self.own for sup in cls.__mro__)

    def __hash__(self) -> int:  # tables are identified by identity (TABLES, caches)
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def concrete_node_classes(base: type, module: str = "plait.kernel.ir") -> list[type]:
    """The classes of ``module`` deriving from ``base`` that no other class there
    derives from: the node types a walk over ``base`` meets.  (Only the classes the
    module names count: ``dataclass(slots=True)`` leaves its first, slot-less class
    among the subclasses for a while.)"""
    import importlib

    names = vars(importlib.import_module(module))
    out: list[type] = []
    stack = [base]
    seen: set[type] = set()
    while stack:
        cls = stack.pop()
        subs = [c for c in cls.__subclasses__() if names.get(c.__name__) is c]
        if not subs and cls is not base:
            out.append(cls)
        for c in subs:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return sorted(out, key=lambda c: c.__name__)


def missing_rules(tables: list[TypeTable[Any]] | None = None) -> list[tuple[str, str]]:
    """(walk, node type) for every node type of :mod:`plait.kernel.ir` that a table
    (all of :data:`TABLES` by default) has no handler for."""
    out: list[tuple[str, str]] = []
    for table in TABLES if tables is None else tables:
        for cls in concrete_node_classes(table.base):
            if not table.covers(cls):
                out.append((table.what, cls.__name__))
    return out


__all__ = ["TABLES", "NoRuleError", "TypeTable", "concrete_node_classes", "missing_rules"]
