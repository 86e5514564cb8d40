"""plait: a deep-learning compiler with a composable, phase-checked pass infrastructure.

The package's face is lazy (PEP 562): ``import plait`` imports nothing else, and each
name of :data:`__all__` imports its module when first used.  ``plait.load("m.plx")``
and :class:`Session` then import the runtime alone; the first use of a compiler name
(``plait.build``, ``plait.parse``, ``plait.IRModule`` ...) loads the compiler whole: the
core operators, the kernel IR's text hooks, the passes, the shipped codegens and the
dialects, in the order :func:`_load_compiler` gives.  The registries that those
imports fill (operators, passes, codegens, dialects, ``@kernel`` text) load the compiler
the same way when asked for a name they lack, so importing a submodule such as
``plait.ir`` directly still finds every registered name.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_RUNTIME_NAMES = {
    "LimitExceeded": "plait.runtime.limits", "Limits": "plait.runtime.limits",
    "current_limits": "plait.runtime.limits", "use_limits": "plait.runtime.limits",
    "load": "plait.session", "Session": "plait.session", "generate": "plait.llm",
}
"""Names that serve a built model: their modules import the runtime, not the compiler."""

_COMPILER_NAMES = {
    "build": "plait.build", "graph_module": "plait.build", "rebuild": "plait.build",
    "default_pipeline": "plait.pipeline", "parse": "plait.ir.parser",
    "partition": "plait.offload", "Target": "plait.target",
    "export_library": "plait.export",
}
"""Names of the compiler besides those of :mod:`plait.ir` (``plait.ir.__all__``, all
re-exported): the first use of one loads the compiler (:func:`_load_compiler`)."""

_SERVING_MODULES = frozenset({"errors", "runtime", "session", "llm"})
"""Subpackages whose use as ``plait.<name>`` does not load the compiler."""

_COMPILER_MODULES = (
    "plait.kernel",    # the kernel IR: @kernel text hooks, phase checks
    "plait.op",        # registers the core operators
    "plait.transform",  # the pass infrastructure and its passes
    "plait.build",
    "plait.codegen.onnxruntime",  # registers the codegen
    "plait.ir.parser",
    "plait.offload",
    "plait.pipeline",
    "plait.target",
)
"""What loading the compiler imports, in this order, before the dialects."""

_OWN_NAMES = ["build", "default_pipeline", "export_library", "graph_module", "parse",
              "partition", "rebuild",
              "Target", "transform", "LimitExceeded", "Limits", "current_limits",
              "use_limits", "load", "Session", "generate"]
"""``__all__`` is ``plait.ir.__all__`` and these (made when asked for: it imports the IR)."""

_state = {"loaded": False, "loading": False}
_lock = threading.RLock()  # one thread loads; another that needs the compiler waits


def _importing_plait() -> bool:
    """Whether the code of a module of plait is running at import (a frame of the
    stack is its module body): loading the compiler then would meet that module
    half-made, so the load waits for a later lookup."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and str(
                frame.f_globals.get("__name__", "")).startswith("plait."):
            return True
        frame = frame.f_back
    return False


def _load_compiler() -> bool:
    """Import the compiler whole (the modules of ``_COMPILER_MODULES``, then every
    dialect), once; the registries call this when asked for a name they lack.  Returns
    whether the compiler is loaded (False while a module of plait is being imported, or
    while this runs)."""
    if _state["loaded"]:
        return True
    if _importing_plait():
        return False
    with _lock:
        if _state["loaded"] or _state["loading"]:  # loaded meanwhile, or this thread
            return _state["loaded"]                # is loading it (a nested lookup)
        _state["loading"] = True
        try:
            for module in _COMPILER_MODULES:
                importlib.import_module(module)
            from .dialects import load_dialects

            load_dialects()
            _state["loaded"] = True
        finally:
            _state["loading"] = False
    return True


def __getattr__(name: str) -> Any:
    module = _RUNTIME_NAMES.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    module = _COMPILER_NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        _load_compiler()
        return value
    if name == "__all__":
        return [*importlib.import_module(f"{__name__}.ir").__all__, *_OWN_NAMES]
    if name.isidentifier() and not name.startswith("__"):
        try:  # a subpackage: plait.runtime, plait.transform ...
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
        else:
            if name not in _SERVING_MODULES:
                _load_compiler()
            return value
        ir = importlib.import_module(f"{__name__}.ir")
        if name in ir.__all__:  # the IR's names: plait.IRModule, plait.BlockBuilder ...
            _load_compiler()
            return getattr(ir, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})


class _Face(types.ModuleType):
    """The package's module type: ``plait.build`` stays the function ``build`` when
    the submodule :mod:`plait.build` is imported (the import system binds a
    submodule as an attribute of its package; this keeps the function there).  Any
    other value set (a test's stand-in) is kept."""

    @property
    def build(self) -> Any:
        given = self.__dict__.get("_build_set")
        if given is not None:
            return given
        value = importlib.import_module(f"{__name__}.build").build
        _load_compiler()
        return value

    @build.setter
    def build(self, value: Any) -> None:
        if not isinstance(value, types.ModuleType):  # not the submodule being bound
            self.__dict__["_build_set"] = value


sys.modules[__name__].__class__ = _Face

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from . import transform as transform
    from .build import build as build
    from .build import graph_module as graph_module
    from .build import rebuild as rebuild
    from .export import export_library as export_library
    from .ir import *  # noqa: F403
    from .ir.parser import parse as parse
    from .llm import generate as generate
    from .offload import partition as partition
    from .pipeline import default_pipeline as default_pipeline
    from .runtime.limits import LimitExceeded as LimitExceeded
    from .runtime.limits import Limits as Limits
    from .runtime.limits import current_limits as current_limits
    from .runtime.limits import use_limits as use_limits
    from .session import Session as Session
    from .session import load as load
    from .target import Target as Target
