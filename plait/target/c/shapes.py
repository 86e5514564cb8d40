"""Static float32 shapes of graph expressions, as the ``c`` target's dispatch rules read them."""

from __future__ import annotations

from plait.ir.expr import Expr
from plait.ir.types import TensorType

__all__ = ["static_shape"]


def static_shape(e: Expr) -> tuple[int, ...] | None:
    """The shape of ``e`` as ints when it is a float32 tensor of static shape, else
    ``None``."""
    ty = e.ty
    if not isinstance(ty, TensorType) or ty.dtype != "float32" or ty.shape is None:
        return None
    if not all(isinstance(d, int) for d in ty.shape):
        return None
    return tuple(int(d) for d in ty.shape)
