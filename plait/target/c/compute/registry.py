"""The registry of op computes: each core op described as compute-DSL tensor expressions.

A *compute* is a pure function ::

    fn(inputs: list[Tensor | tuple[Tensor, ...]], attrs: Attrs, out_ty: Type)
        -> Tensor | tuple[Tensor, ...]

``inputs`` mirrors the op call's arguments (a tuple argument, as ``concat`` takes,
arrives as a Python tuple of DSL tensors), ``attrs`` are the call's attributes with the
op's defaults filled in, ``out_ty`` is the call's inferred type (a ``TensorType``, or a
``TupleType`` for ops with several results).  The function returns the DSL tensor(s)
holding the result, with exactly the shape and dtype of ``out_ty``.

Computes build :func:`plait.kernel.dsl.compute` stages on whatever tensors they are
given — placeholders when the default legalization makes one kernel per op, or the
stages of producer ops when a fusion pass composes the computes of a group.  So a
compute never calls ``create_kernel``, never keeps state and never looks at anything
but its arguments.  A compute that does not handle a particular case (an integer
``power``, a cubic ``resize2d``...) raises :class:`ComputeUnsupported`; the caller then
lowers that call to its numpy library function instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel.dsl import Tensor

ComputeResult = Tensor | tuple[Tensor, ...]
ComputeFn = Callable[[list[Any], Attrs, Type], ComputeResult]


class ComputeUnsupported(Exception):
    """A compute does not handle this call (its dtypes, shapes or attributes); the
    op is lowered to its library call instead.  The message says why."""


@dataclass(frozen=True)
class ComputeDef:
    """A registered compute: the op, the function, and a note on the cases it leaves
    to the library call (shown in the coverage table)."""

    op: str
    fn: ComputeFn
    note: str = ""


COMPUTES: dict[str, ComputeDef] = {}
"""Every registered compute, by op name."""


def register_compute(
    op_name: str, fn: ComputeFn | None = None, *, note: str = "", override: bool = False
) -> Any:
    """Register ``fn`` as the compute of op ``op_name``; usable as a decorator
    (``@register_compute("relu")``).  ``note`` names the cases the compute leaves to
    the library call."""

    def deco(f: ComputeFn) -> ComputeFn:
        if op_name in COMPUTES and not override:
            raise ValueError(
                f"a compute for op {op_name!r} is already registered "
                f"({COMPUTES[op_name].fn.__module__}); pass override=True to replace it"
            )
        COMPUTES[op_name] = ComputeDef(op_name, f, note)
        return f

    return deco(fn) if fn is not None else deco


def get_compute(op_name: str) -> ComputeFn | None:
    """The compute of op ``op_name``, or None when the op has none (it is lowered to
    its library call)."""
    d = COMPUTES.get(op_name)
    return None if d is None else d.fn


def compute_note(op_name: str) -> str:
    """The registered note of op ``op_name``'s compute ('' when none)."""
    d = COMPUTES.get(op_name)
    return "" if d is None else d.note


def list_computes() -> list[str]:
    """The names of the ops that have a compute, sorted."""
    return sorted(COMPUTES)
