"""Registries that load the compiler when asked for a name they lack.

``import plait`` is lazy (plait/__init__.py): a process that serves a saved executable
imports the runtime alone.  The compiler's registries (operators, passes, codegens,
dialects, the text format's ``@kernel`` parsers) are filled by importing the compiler's
modules, which ``import plait`` no longer does up front; a registry made with
:class:`LoadingDict` asks the package face to load the compiler whole
(``plait._load_compiler``) the first time a lookup misses, then looks again.  So
``from plait.ir import parse``-style code that never touches ``plait.<name>`` finds
every operator and pass as it did when ``import plait`` imported everything.
"""

from __future__ import annotations

import sys
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def load_compiler() -> bool:
    """Load the compiler whole, once (``plait._load_compiler``); False when it cannot
    be loaded now (a module of plait is being imported, or the load is under way)."""
    face = sys.modules.get("plait")
    loader = getattr(face, "_load_compiler", None)
    return bool(loader()) if loader is not None else False


def compiler_loaded() -> bool:
    """Whether the compiler has been loaded whole."""
    face = sys.modules.get("plait")
    state = getattr(face, "_state", None)
    return bool(state and state.get("loaded"))


class LoadingDict(dict[K, V]):
    """A registry (a dict) whose lookups (``[]``, ``get``, ``in``) load the compiler
    when the key is missing and it is not loaded yet, then look again.  Writes and
    iteration are a dict's."""

    def _load(self) -> bool:
        return not compiler_loaded() and load_compiler()

    def __missing__(self, key: K) -> V:
        if self._load() and dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        raise KeyError(key)

    def get(self, key: K, default: Any = None) -> Any:  # type: ignore[override]
        if dict.__contains__(self, key) or self._load():
            return dict.get(self, key, default)
        return default

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (self._load() and dict.__contains__(self, key))


__all__ = ["LoadingDict", "compiler_loaded", "load_compiler"]
