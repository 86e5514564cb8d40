"""The global pass registry: pass classes by name.

Registering is how passes plug in: the decorators :func:`~plait.transform.module_pass`
and :func:`~plait.transform.function_pass` register by default, so a pipeline can be
written as text (``"Normalize,LambdaLift"``) and edited by name, and dialects,
targets and codegens add their passes without the core naming them.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from ..runtime.lazy_compiler import LoadingDict, load_compiler
from .errors import PipelineError

if TYPE_CHECKING:
    from .pass_base import Pass, PassInfo

_PASSES: dict[str, type[Pass]] = LoadingDict()  # loads the compiler on a miss
_GENERATION = [0]  # bumped by every change of _PASSES (see registry_generation)


def registry_generation() -> int:
    """A number that changes whenever a pass is registered under a name (anew or
    replacing another class) or unregistered: what was computed from the registry
    under one number (a validated pipeline, the default pipeline) holds while it
    stays the same."""
    return _GENERATION[0]


def register_pass(cls: type[Pass], *, override: bool = False) -> type[Pass]:
    """Register pass class ``cls`` under ``cls.info.name``.

    Registering a second class under a used name is an error unless ``override``
    (re-registering the same class is harmless)."""
    info = cls.info
    old = _PASSES.get(info.name)
    if old is not None and not override and _origin(old) != _origin(cls):
        raise ValueError(
            f"a pass named {info.name!r} is already registered (by {_origin(old)}); "
            "choose another name, or pass override=True to replace it"
        )
    if old is not cls:
        _PASSES[info.name] = cls
        _GENERATION[0] += 1
    return cls


def unregister_pass(name: str) -> None:
    """Remove pass ``name`` from the registry (tests use this to clean up)."""
    if _PASSES.pop(name, None) is not None:
        _GENERATION[0] += 1


def _origin(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def is_registered(name: str) -> bool:
    return name in _PASSES


def get_pass_class(name: str) -> type[Pass]:
    """The class registered as ``name``; the error lists close matches."""
    cls = _PASSES.get(name)
    if cls is None:
        close = close_pass_names(name)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise PipelineError(
            f"no pass named {name!r} is registered{hint} (import the module that defines "
            "it first; plait.transform.list_passes() shows what is registered)"
        )
    return cls


def close_pass_names(name: str, n: int = 3) -> list[str]:
    """Up to ``n`` registered pass names that look like ``name``: close spellings,
    then names containing it (``Fold`` -> ``FoldConstant``), ignoring case."""
    out = difflib.get_close_matches(name, list(_PASSES), n=n)
    low = name.lower()
    lowered = {k.lower(): k for k in _PASSES}
    out += [k for k in difflib.get_close_matches(low, list(lowered), n=n) if k not in out]
    out = [lowered.get(k, k) for k in out]
    if low:
        out += [k for k in _PASSES if low in k.lower() and k not in out]
    return list(dict.fromkeys(out))[:n]


def make_pass(name: str, **params: Any) -> Pass:
    """A new instance of the pass registered as ``name``, built with ``params``."""
    cls = get_pass_class(name)
    try:
        return cls(**params)
    except TypeError as e:
        raise PipelineError(f"cannot create pass {name!r} with parameters {params}: {e}") from e


def pass_info(name: str) -> PassInfo:
    """The :class:`PassInfo` of registered pass ``name``."""
    return get_pass_class(name).info


def list_passes(module_prefix: str | None = None) -> list[PassInfo]:
    """The infos of every registered pass, in registration order; with
    ``module_prefix`` only passes whose class is defined in a module under it
    (``"plait."`` selects the passes that ship with plait)."""
    load_compiler()
    return [
        cls.info
        for cls in _PASSES.values()
        if module_prefix is None or (cls.__module__ + ".").startswith(module_prefix)
    ]


def registered_class(name: str) -> type[Pass] | None:
    """The class registered under ``name``, or None (:func:`get_pass_class` raises,
    naming close names, instead)."""
    return _PASSES.get(name)


def registered_classes() -> dict[str, type[Pass]]:
    """A copy of the registry: name to class."""
    load_compiler()
    return dict(_PASSES)


__all__ = [
    "get_pass_class",
    "is_registered",
    "list_passes",
    "make_pass",
    "pass_info",
    "register_pass",
    "registered_class",
    "registered_classes",
    "registry_generation",
    "unregister_pass",
]
