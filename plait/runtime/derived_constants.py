"""The constants of the graph an executable keeps, some of them derived from the
executable's own constants instead of held twice.

``plait.build`` keeps the module it built as text (``exe.graph``) with its large
constants in a table (``exe.graph_constants``, key -> array).  A weight the target
packed for a kernel (panels for a matrix product) is held by the executable in its
packed form only: its entry here is that packed array and the function that unpacks
it, bit for bit, and each read computes the original afresh (nothing is cached), so
saving the executable or rebuilding its graph holds one original at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np

Unpack = Callable[[np.ndarray], np.ndarray]
Packed = np.ndarray | Callable[[], np.ndarray]
"""A packed array, or what computes it (called when first needed)."""


class DerivedConstants(Mapping[str, np.ndarray]):
    """key -> array, each either held or computed when read from a held array
    (``derive(key, packed, unpack)``)."""

    def __init__(self, held: Mapping[str, np.ndarray] | None = None) -> None:
        self._held: dict[str, np.ndarray] = dict(held or {})
        self._derived: dict[str, tuple[Packed, Unpack]] = {}
        self._sizes: dict[str, int] = {}
        self._order: list[str] = list(self._held)

    def derive(self, key: str, packed: Packed, unpack: Unpack) -> None:
        """Make ``key``'s array ``unpack(packed)`` (``packed`` an array, or a function
        returning it), computed when read; an array held for ``key`` is dropped."""
        if key not in self._held and key not in self._derived:
            self._order.append(key)
        held = self._held.pop(key, None)
        if held is not None:   # the size of what unpacking gives back
            self._sizes[key] = held.nbytes
        self._derived[key] = (packed, unpack)

    def is_derived(self, key: str) -> bool:
        """Whether ``key``'s array is computed from a packed array when read."""
        return key in self._derived

    def nbytes(self, key: str) -> int | None:
        """The bytes of ``key``'s array without computing it (None: a derived array
        whose original the table never held)."""
        held = self._held.get(key)
        return held.nbytes if held is not None else self._sizes.get(key)

    def __getitem__(self, key: str) -> np.ndarray:
        held = self._held.get(key)
        if held is not None:
            return held
        packed, unpack = self._derived[key]
        return unpack(packed if isinstance(packed, np.ndarray) else packed())

    def resolve(self) -> None:
        """Call the functions given for packed arrays and keep the arrays they return
        (dropping whatever the functions held)."""
        for key, (packed, unpack) in list(self._derived.items()):
            if not isinstance(packed, np.ndarray):
                self._derived[key] = (packed(), unpack)

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


__all__ = ["DerivedConstants", "Packed", "Unpack"]
