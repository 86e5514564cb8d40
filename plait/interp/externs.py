"""Finding the function an extern call names, for the reference interpreter.

An ``extern("name")`` is looked up, in order, as the VM does:

1. in the runtime's packed-function registry (``numpy.*``, ``blas.*``, ``vm.builtin.*``
   and anything registered with :func:`plait.runtime.register_func`);
2. in the module's compiled native libraries (``mod.attrs["native_libs"]``), through
   the runtime's native loaders;
3. by the *extern providers*: hooks that targets and codegens register with
   :func:`register_extern_provider` to make their functions callable before they are
   compiled into the module (the ``c`` target compiles the module's C sources).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ir.module import IRModule
from ..runtime.packed import close_func_names, get_func, has_func, load_native_func

ExternProvider = Callable[[IRModule, str], Callable[..., Any] | None]
"""``provider(mod, name) -> function or None``."""

_PROVIDERS: list[ExternProvider] = []


def register_extern_provider(provider: ExternProvider) -> ExternProvider:
    """Let ``provider(mod, name)`` supply the extern functions of ``mod`` it knows
    (None for the others).  Registering one twice is a no-op; returns it (usable as a
    decorator)."""
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)
    return provider


def unregister_extern_provider(provider: ExternProvider) -> None:
    """Remove a provider (no-op if absent)."""
    if provider in _PROVIDERS:
        _PROVIDERS.remove(provider)


class _Libraries:
    """What the runtime's native loaders read: ``libs`` (name -> bytes)."""

    def __init__(self, mod: IRModule) -> None:
        self.libs = {k: bytes(v) for k, v in (mod.attrs.get("native_libs") or {}).items()}


class ExternResolver:
    """Resolves extern names for one module, caching what it found."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self._found: dict[str, Callable[..., Any]] = {}
        self._libs: _Libraries | None = None

    def find(self, name: str) -> Callable[..., Any] | None:
        """The function ``name``, or None."""
        fn = self._found.get(name)
        if fn is not None:
            return fn
        if has_func(name):
            fn = get_func(name)
        else:
            if self._libs is None:
                self._libs = _Libraries(self.mod)
            fn = load_native_func(self._libs, name) if self._libs.libs else None  # type: ignore[arg-type]
            if fn is None:
                for provider in list(_PROVIDERS):
                    fn = provider(self.mod, name)
                    if fn is not None:
                        break
        if fn is not None:
            self._found[name] = fn
        return fn

    def get(self, name: str) -> Callable[..., Any]:
        """The function ``name``; a :class:`LookupError` saying what exists."""
        fn = self.find(name)
        if fn is None:
            close = close_func_names(name)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise LookupError(
                f"no extern function {name!r}: not a packed function, not in the "
                f"module's native libraries and no extern provider knows it{hint} (register "
                "it with plait.runtime.register_func, or compile the module's native code "
                "first)")
        return fn


__all__ = [
    "ExternProvider",
    "ExternResolver",
    "register_extern_provider",
    "unregister_extern_provider",
]
