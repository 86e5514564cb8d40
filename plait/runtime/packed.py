"""The packed-function registry: named Python callables the VM can call.

A packed function is any Python callable registered under a dotted name such as
``vm.builtin.tuple`` or ``numpy.add``.  The VM resolves every ``Call`` instruction's
function name once, when it is constructed, first among the executable's own VM
functions, then in this registry, then through the native loaders (hooks that turn a
native library stored in the executable into callables; the C target plugs one in).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from plait.errors import PlaitError
from plait.runtime.lazy_compiler import load_compiler

if TYPE_CHECKING:
    from plait.runtime.executable import Executable

PackedFunc = Callable[..., Any]
NativeLoader = Callable[["Executable", str], PackedFunc | None]

_REGISTRY: dict[str, PackedFunc] = {}
_NATIVE_LOADERS: list[NativeLoader] = []


class PackedFuncNotFoundError(PlaitError, KeyError):
    """Raised by :func:`get_func` for a name that is not registered."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return str(self.args[0]) if self.args else ""


def register_func(name: str, fn: PackedFunc | None = None, *, override: bool = False) -> Any:
    """Register ``fn`` as the packed function ``name``.

    Usable directly, ``register_func("my.add", add)``, or as a decorator,
    ``@register_func("my.add")``.  Returns ``fn`` (or the decorator).  Registering a name
    that is already taken raises ``ValueError`` unless ``override=True``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"packed function name must be a non-empty string, got {name!r}")

    def decorate(f: PackedFunc) -> PackedFunc:
        if not callable(f):
            raise TypeError(f"packed function {name!r} must be callable, got {type(f).__name__}")
        if name in _REGISTRY and not override:
            raise ValueError(
                f"packed function {name!r} is already registered; pass override=True to replace it"
            )
        _REGISTRY[name] = f
        return f

    if fn is None:
        return decorate
    return decorate(fn)


def close_func_names(name: str, extra: list[str] | tuple[str, ...] = (), n: int = 3) -> list[str]:
    """Up to ``n`` registered names (and names in ``extra``) that look like ``name``."""
    return difflib.get_close_matches(name, list(_REGISTRY) + list(extra), n=n, cutoff=0.5)


def get_func(name: str) -> PackedFunc:
    """The packed function registered as ``name``.

    Raises ``KeyError`` (:class:`PackedFuncNotFoundError`) naming up to three close
    matches when ``name`` is unknown.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        pass
    if load_compiler() and name in _REGISTRY:  # registered by a module of the compiler
        return _REGISTRY[name]
    close = close_func_names(name)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise PackedFuncNotFoundError(f"no packed function named {name!r}{hint}")


def has_func(name: str) -> bool:
    """True when a packed function is registered as ``name``."""
    return name in _REGISTRY


def list_funcs(prefix: str = "") -> list[str]:
    """The sorted names of the registered packed functions that start with ``prefix``."""
    return sorted(n for n in _REGISTRY if n.startswith(prefix))


def register_native_loader(loader: NativeLoader) -> NativeLoader:
    """Register a hook that resolves functions from an executable's native libraries.

    ``loader(exe, func_name)`` returns a callable for ``func_name`` (loading it from
    ``exe.libs``) or ``None`` when it does not provide that function.  The VM asks the
    loaders, in registration order, for a ``Call`` whose function is neither a VM function
    of the executable nor a registered packed function, when the executable has libraries.
    Registering the same loader twice is a no-op.  Returns ``loader`` (usable as decorator).
    """
    if not callable(loader):
        raise TypeError(f"native loader must be callable, got {type(loader).__name__}")
    if loader not in _NATIVE_LOADERS:
        _NATIVE_LOADERS.append(loader)
    return loader


def unregister_native_loader(loader: NativeLoader) -> None:
    """Remove a loader registered with :func:`register_native_loader` (no-op if absent)."""
    if loader in _NATIVE_LOADERS:
        _NATIVE_LOADERS.remove(loader)


def load_native_func(exe: Executable, name: str) -> PackedFunc | None:
    """Ask the native loaders for ``name``; ``None`` when the executable has no libraries
    or no loader provides it.  Raises :class:`~plait.runtime.trust.UntrustedCodeError`,
    before any loader runs, when the executable's native code may not run (it came
    from a file nobody trusted: see :mod:`plait.runtime.trust`)."""
    if not exe.libs:
        return None
    from plait.runtime.trust import native_code_description, rebuild_hint, require_trusted

    require_trusted(getattr(exe, "trust", None), lambda: native_code_description(exe.libs),
                    lambda: rebuild_hint(exe))
    for loader in list(_NATIVE_LOADERS):
        fn = loader(exe, name)
        if fn is not None:
            if not callable(fn):
                raise TypeError(
                    f"native loader {getattr(loader, '__name__', loader)!r} returned a "
                    f"non-callable {type(fn).__name__} for {name!r}"
                )
            return fn
    return None
