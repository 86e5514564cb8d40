"""The table of ATen op converters.

A converter turns one node of an exported program (a call of an ATen op overload,
after ``run_decompositions()``) into plait IR and returns the IR value (a list for an
op with several results; None for a result plait does not compute)::

    @converter("aten.relu.default")
    def relu(ctx: NodeContext) -> Expr:
        return ctx.call("relu", ctx.x(0))

Ops are named as PyTorch prints the overload (``str(torch.ops.aten.add.Tensor)``).
The table is split into small files per op family (``converters/*.py``);
``docs/pytorch.md`` is generated from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ConvertFn = Callable[[Any], Any]
"""``fn(ctx: NodeContext) -> expr, list of exprs, or None``."""


@dataclass(frozen=True)
class Converter:
    """The converter of ATen op ``op`` (``"aten.add.Tensor"``)."""

    op: str
    fn: ConvertFn
    doc: str = ""
    module: str = ""

    @property
    def family(self) -> str:
        """The converter file (``elementwise``, ``shape``, ...)."""
        return self.module.rsplit(".", 1)[-1]


_CONVERTERS: dict[str, Converter] = {}


def converter(ops: str | Iterable[str], *, doc: str = "") -> Callable[[ConvertFn], ConvertFn]:
    """Register the decorated function as the converter of ``ops`` (ATen overload names).
    ``doc`` is a one-line note for the generated documentation (default: the function's
    docstring)."""
    names = [ops] if isinstance(ops, str) else list(ops)

    def deco(fn: ConvertFn) -> ConvertFn:
        text = doc or " ".join((fn.__doc__ or "").split())
        for name in names:
            old = _CONVERTERS.get(name)
            if old is not None and (old.module, old.fn.__name__) != (fn.__module__, fn.__name__):
                raise ValueError(f"ATen op {name!r} already has a converter "
                                 f"({old.module}.{old.fn.__name__})")
            _CONVERTERS[name] = Converter(name, fn, text, fn.__module__)
        return fn

    return deco


def find_converter(op: str) -> Converter | None:
    """The converter of ATen op ``op``, or None."""
    return _CONVERTERS.get(op)


def list_converters() -> list[Converter]:
    """Every registered converter, sorted by op name."""
    return [_CONVERTERS[k] for k in sorted(_CONVERTERS)]
