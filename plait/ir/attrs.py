"""An immutable, hashable mapping used for op-call and function/module attributes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

_ATOMS = frozenset({str, int, float, bool, type(None)})
"""Value classes that are frozen already (checked by class first: the ``Mapping``
test below is an abstract-class check, whose first use per class walks every
registered mapping class, about a millisecond in a fresh process)."""


def freeze_value(value: Any) -> Any:
    """Turn lists into tuples and numpy scalars into Python scalars, recursively."""
    if type(value) in _ATOMS:
        return value
    if isinstance(value, list | tuple):
        return tuple(freeze_value(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim <= 1 and value.size <= 64:
        return tuple(v.item() for v in value.reshape(-1))
    if isinstance(value, dict | Mapping) and not isinstance(value, Attrs):
        return Attrs(value)
    return value


class Attrs(Mapping[str, Any]):
    """A frozen string-keyed mapping; values are frozen with :func:`freeze_value`."""

    __slots__ = ("_d", "_hash", "checked_by")

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        d: dict[str, Any] = {}
        if items:
            for k, v in items.items():
                d[str(k)] = freeze_value(v)
        for k, v in kwargs.items():
            d[k] = freeze_value(v)
        self._d = d
        self._hash: int | None = None
        self.checked_by: object = None
        """The op definition whose schema these attributes were checked against
        (set by :func:`plait.op.registry.normalize_attrs`, so a check runs once)."""

    @classmethod
    def frozen(cls, d: dict[str, Any]) -> Attrs:
        """Attrs over ``d``, whose values are already frozen (no copy, no check)."""
        a = cls.__new__(cls)
        a._d = d
        a._hash = None
        a.checked_by = None
        return a

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def get(self, key: str, default: Any = None) -> Any:
        # (the dict's own lookup: Mapping.get goes through __getitem__ and a KeyError)
        return self._d.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(sorted((k, _hashable(v)) for k, v in self._d.items())))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._d == other._d
        if isinstance(other, Mapping):
            return self._d == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Attrs({self._d!r})"

    def set(self, **kwargs: Any) -> Attrs:
        """A copy with the given keys set."""
        d = dict(self._d)
        d.update(kwargs)
        return Attrs(d)

    def without(self, *keys: str) -> Attrs:
        """A copy without the given keys."""
        return Attrs({k: v for k, v in self._d.items() if k not in keys})


def _hashable(v: Any) -> Any:
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


EMPTY_ATTRS = Attrs()
