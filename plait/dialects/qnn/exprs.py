"""What the qnn dispatch rules ask of an expression's type: its shape when every size is
known, and its element type (:mod:`.dispatch`, :mod:`.dispatch_rows`,
:mod:`.dispatch_tables`)."""

from __future__ import annotations

from plait.ir.expr import Expr
from plait.ir.types import TensorType


def static_shape(e: Expr) -> tuple[int, ...] | None:
    """``e``'s shape as ints when it is a tensor whose sizes are all known, else None."""
    t = e.ty
    if not isinstance(t, TensorType) or t.shape is None:
        return None
    if not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(int(d) for d in t.shape)


def dtype_of(e: Expr) -> str | None:
    """``e``'s element type when it is a tensor, else None."""
    t = e.ty
    return t.dtype if isinstance(t, TensorType) else None
