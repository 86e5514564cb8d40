"""The ``c`` target's part of the numpy reference path (:mod:`plait.interp`).

Before ``c.CompileKernels`` has built the module's library, the functions of the C
sources that dispatch recorded in the module (``c_sources``: ``plait_gemm.c`` and its
per-shape wrappers, user sources) exist only as text.  This extern provider compiles
those sources alone (no kernels; cached on disk like every library) when the
interpreter calls one of their functions, so a module can be run at every phase.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

from plait.codegen.c import compile_kernels
from plait.interp.externs import register_extern_provider
from plait.ir.module import IRModule

from .build import c_sources, target_options

_LIBS: dict[str, Any] = {}
_LOCK = threading.Lock()


def _key(mod: IRModule) -> str:
    h = hashlib.sha256()
    for lit in mod.attrs.get("c_sources") or ():
        h.update(lit["name"].encode())
        h.update(b"\0")
        h.update(lit["code"].encode())
        h.update(repr(lit["functions"]).encode())
    h.update(repr(sorted(target_options(mod).items())).encode())
    return h.hexdigest()


def c_source_provider(mod: IRModule, name: str) -> Callable[..., Any] | None:
    """Function ``name`` of ``mod``'s C sources, compiled on first use; None when no
    source of the module defines it."""
    sources = c_sources(mod)
    if not any(f.name == name for src in sources for f in src.functions):
        return None
    key = _key(mod)
    with _LOCK:
        lib = _LIBS.get(key)
        if lib is None:
            lib = _LIBS[key] = compile_kernels({}, c_sources=sources, **target_options(mod))
    return lib.get(name)


register_extern_provider(c_source_provider)

__all__ = ["c_source_provider"]
