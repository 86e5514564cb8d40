"""Float32 shapes of graph expressions, as the ``c`` target's dispatch rules read them:
:func:`float_shape` (sizes may be symbolic: ints, names, expressions),
:func:`is_static_shape`, and :func:`static_shape` (ints only, else None)."""

from __future__ import annotations

from collections.abc import Sequence

from plait.ir.expr import Expr
from plait.ir.symbolic import Dim
from plait.ir.types import TensorType

__all__ = ["float_shape", "is_static_shape", "static_shape"]


def float_shape(e: Expr) -> tuple[Dim, ...] | None:
    """The shape of ``e`` (ints, names and expressions) when it is a float32 tensor of
    known rank, else None."""
    ty = e.ty
    if not isinstance(ty, TensorType) or ty.dtype != "float32" or ty.shape is None:
        return None
    return tuple(ty.shape)


def is_static_shape(shape: Sequence[Dim]) -> bool:
    """Whether every dimension of ``shape`` is an int."""
    return all(type(d) is int for d in shape)


def static_shape(e: Expr) -> tuple[int, ...] | None:
    """The shape of ``e`` as ints when it is a float32 tensor of static shape, else
    ``None``."""
    shape = float_shape(e)
    if shape is None or not is_static_shape(shape):
        return None
    return tuple(int(d) for d in shape)
