"""What the ``c`` target's dispatch rules share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.ir.expr import Call, Constant, Expr, Op, Var
from plait.transform.pattern import Match


def fused_span(graph: Any, members: Sequence[int], root: Any) -> Any:
    """The span of a native call replacing the bindings ``members`` of ``graph`` (the
    product and its epilogue...): ``root``'s place, noting every member's model node, so
    a profile names all the nodes the call computes."""
    from plait.transform.fuse_ops import joined_span

    return joined_span([graph.bindings[i].value.span for i in members], root.value.span)


__all__ = ["fused_span"]


def bound_value(e: Expr, m: Match) -> Expr:
    """``e``, or the value bound to it when ``e`` is a variable with a binding in the
    match's graph."""
    if isinstance(e, Var):
        value = m.definition(e)
        if value is not None:
            return value
    return e


def constant_data(e: Expr, m: Match) -> np.ndarray | None:
    """The data of ``e`` when it is (a variable bound to) a constant, else None."""
    v = bound_value(e, m)
    return v.data if isinstance(v, Constant) else None


def transposed_weight(e: Expr, m: Match) -> np.ndarray | None:
    """The 2-D constant ``W`` when ``e`` is (a variable bound to) ``permute_dims(W)``
    swapping its two axes: torch.export's ``linear`` as ``matmul(x, permute_dims(W))``,
    left unfolded when ``W`` is above FoldConstant's cap; else None."""
    v = bound_value(e, m)
    if not (isinstance(v, Call) and isinstance(v.op, Op) and v.op.name == "permute_dims"
            and len(v.args) == 1):
        return None
    axes = v.attrs.get("axes")
    if axes is not None and tuple(int(a) % 2 for a in axes) != (1, 0):
        return None
    w = constant_data(v.args[0], m)
    return w if w is not None and w.ndim == 2 else None
