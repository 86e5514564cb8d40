"""The keyword arguments packed functions accept, checked before anything runs.

A ``call`` instruction of an executable passes keywords to its function
(``call numpy.conv2d(%0, %1, %2, strides=(2, 2), groups=1, ...)``), and so does a
``call_extern(extern("numpy.conv2d"), ..., attrs={...})`` of lowering-phase text.  A
function's *keyword check* says what is wrong with a set of keywords (an unknown name, a
missing one, a value of the wrong kind, outside its choices or below its minimum), or
None.  :class:`~plait.runtime.executable.Executable` validation (at load and when a VM is
made) and the type inference of ``call_extern`` (at parse and in the well-formedness
check) ask :func:`keyword_problem`, so a bad keyword is refused with the instruction
named instead of failing inside the function at run time.

Any other registered packed function is judged by its Python signature (a keyword
it has no parameter for).  The ``numpy.<op>`` functions register theirs here
(:mod:`plait.runtime.numpy_ops`: the names and defaults of the implementation's
keyword-only parameters, and the minimums of the attributes it divides or steps by);
the op registry adds each op's attribute
schema (kinds and choices: :mod:`plait.op.registry`).  Keywords given as registers or
constants (known only at run time) are checked by name only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

KeywordCheck = Callable[[Mapping[str, Any]], "str | None"]
"""``check(kwargs)``: what is wrong with the keywords (one sentence), or None."""

_CHECKS: dict[str, list[KeywordCheck]] = {}


def register_keyword_check(func: str, check: KeywordCheck) -> None:
    """Check the keywords of every call of the packed function ``func`` with ``check``
    (several checks of one function all run, in registration order)."""
    _CHECKS.setdefault(func, []).append(check)


def keyword_problem(func: str, kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with the keywords ``kwargs`` of a call of ``func``, or None.  A
    packed function that registered no check is judged by its Python signature (a
    keyword it has no parameter for, and no ``**kwargs``); other names (functions of
    native libraries, resolved later) are not checked here."""
    checks = _CHECKS.get(func)
    if checks is None:
        checks = _signature_checks(func)
    for check in checks:
        problem = check(kwargs)
        if problem:
            return problem
    return None


_BY_SIGNATURE: dict[int, tuple[Any, list[KeywordCheck]]] = {}


def _signature_checks(func: str) -> list[KeywordCheck]:
    """The check of the registered packed function ``func`` from its signature (cached
    per function object), or none."""
    from plait.runtime.packed import get_func, has_func

    if not has_func(func):
        return []
    fn = get_func(func)
    hit = _BY_SIGNATURE.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin of C)
        checks: list[KeywordCheck] = []
    else:
        P = inspect.Parameter
        if any(p.kind is P.VAR_KEYWORD for p in params):
            checks = []
        else:
            names = [p.name for p in params if p.kind in (P.KEYWORD_ONLY,
                                                          P.POSITIONAL_OR_KEYWORD)]

            def check(kwargs: Mapping[str, Any]) -> str | None:
                unknown = [k for k in kwargs if k not in names]
                if unknown:
                    return (f"{func} has no keyword {unknown[0]!r}; its keywords are "
                            f"{', '.join(names) or 'none'}")
                return None

            checks = [check]
    _BY_SIGNATURE[id(fn)] = (fn, checks)
    return checks


def _is_runtime_value(v: Any) -> bool:
    """A keyword given as a register or constant (its value is known at run time)."""
    return type(v).__name__ in ("Reg", "Const")


def _ints(v: Any) -> list[int] | None:
    """The ints of an int or a tuple/list of ints, else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v]
    if isinstance(v, tuple | list) and all(isinstance(x, int) and not isinstance(x, bool)
                                           for x in v):
        return list(v)
    return None


def signature_check(name: str, fn: Callable[..., Any],
                    minimums: Mapping[str, int] | None = None) -> KeywordCheck:
    """The check of a function taking its attributes as keyword-only parameters
    (``fn``): no keyword it does not have (unless it takes ``**kwargs``), every one
    without a default given; and the
    keywords of ``minimums`` (name -> least value), when they are ints or tuples of
    ints, at least that."""
    P = inspect.Parameter
    params = inspect.signature(fn).parameters.values()
    accepted = [p.name for p in params if p.kind is P.KEYWORD_ONLY]
    required = [p.name for p in params if p.kind is P.KEYWORD_ONLY and p.default is P.empty]
    any_name = any(p.kind is P.VAR_KEYWORD for p in params)
    lows = {k: v for k, v in (minimums or {}).items() if k in accepted}

    def check(kwargs: Mapping[str, Any]) -> str | None:
        unknown = [] if any_name else [k for k in kwargs if k not in accepted]
        if unknown:
            return (f"{name} has no keyword {unknown[0]!r}; its keywords are "
                    f"{', '.join(accepted) or 'none'}")
        missing = [k for k in required if k not in kwargs]
        if missing:
            return f"{name} needs the keyword {missing[0]!r}"
        for k, least in lows.items():
            v = kwargs.get(k)
            if v is None or _is_runtime_value(v):
                continue
            ints = _ints(v)
            if ints is not None and any(x < least for x in ints):
                return f"keyword {k!r} of {name} must be at least {least}, got {v!r}"
        return None

    return check


__all__ = ["KeywordCheck", "keyword_problem", "register_keyword_check", "signature_check"]
