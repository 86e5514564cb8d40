"""IRModule: the unit every pass takes and returns."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from .attrs import Attrs
from .expr import BaseFunc, Function, GlobalVar

PHASES = ("ingestion", "optimization", "lowering", "build")
"""The phases of a module, in order."""


class IRModule:
    """Functions and kernels by name, plus module attributes (``phase``, ``target``, ...).

    An IRModule is immutable: every ``with_*`` method returns a new module that shares
    the unchanged functions with this one.
    """

    __slots__ = ("_functions", "_attrs")

    def __init__(
        self,
        functions: Mapping[str, BaseFunc] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        funcs = dict(functions or {})
        for name, f in funcs.items():
            if not isinstance(f, BaseFunc):
                raise TypeError(
                    f"IRModule entry {name!r} must be a Function or Kernel, got {type(f).__name__}"
                )
        self._functions = funcs
        attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
        phase = attrs.get("phase")
        if phase is not None and phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
        self._attrs = attrs

    # ------------------------------------------------------------ access
    @property
    def functions(self) -> Mapping[str, BaseFunc]:
        return MappingProxyType(self._functions)

    @property
    def attrs(self) -> Attrs:
        return self._attrs

    @property
    def phase(self) -> str:
        """The module's phase; a module without the attribute is in ``ingestion``."""
        return self._attrs.get("phase", "ingestion")

    @property
    def target(self) -> Any:
        return self._attrs.get("target")

    def __getitem__(self, name: str | GlobalVar) -> BaseFunc:
        key = name.name_hint if isinstance(name, GlobalVar) else name
        try:
            return self._functions[key]
        except KeyError:
            raise KeyError(
                f"module has no function {key!r}; it has {', '.join(self._functions) or 'none'}"
            ) from None

    def __contains__(self, name: object) -> bool:
        key = name.name_hint if isinstance(name, GlobalVar) else name
        return key in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    def items(self) -> Iterator[tuple[str, BaseFunc]]:
        return iter(self._functions.items())

    def graph_functions(self) -> Iterator[tuple[str, Function]]:
        """The graph functions (not kernels), by name."""
        for name, f in self._functions.items():
            if isinstance(f, Function):
                yield name, f

    def get_global_var(self, name: str) -> GlobalVar:
        if name not in self._functions:
            self[name]  # raises the helpful KeyError
        return GlobalVar(name)

    def unique_name(self, hint: str) -> str:
        """A function name based on ``hint`` that the module does not use yet."""
        if hint not in self._functions:
            return hint
        i = 1
        while f"{hint}_{i}" in self._functions:
            i += 1
        return f"{hint}_{i}"

    # ------------------------------------------------------------ updates
    def with_function(self, name: str, func: BaseFunc) -> IRModule:
        funcs = dict(self._functions)
        funcs[name] = func
        return IRModule(funcs, self._attrs)

    def with_functions(self, functions: Mapping[str, BaseFunc]) -> IRModule:
        funcs = dict(self._functions)
        funcs.update(functions)
        return IRModule(funcs, self._attrs)

    def without_function(self, name: str) -> IRModule:
        funcs = dict(self._functions)
        funcs.pop(name)
        return IRModule(funcs, self._attrs)

    def with_attrs(self, **kwargs: Any) -> IRModule:
        """A copy with the given attributes set (a value of None removes the key)."""
        attrs = dict(self._attrs)
        for k, v in kwargs.items():
            if v is None:
                attrs.pop(k, None)
            else:
                attrs[k] = v
        return IRModule(self._functions, Attrs(attrs))

    def with_phase(self, phase: str) -> IRModule:
        return self.with_attrs(phase=phase)

    # ------------------------------------------------------------ text
    def script(self, name: str = "Module", constants: dict[str, Any] | None = None) -> str:
        """The module in the text format; with ``constants`` (a dict to fill), large
        constants are kept there and the text refers to them (``const(ref=...)``)."""
        from .printer import print_module

        return print_module(self, name, constants)

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return f"<IRModule {', '.join(self._functions)} attrs={dict(self._attrs)}>"
