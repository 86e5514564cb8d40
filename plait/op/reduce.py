"""Reduction operators."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType, Type
from .infer import normalize_axes, reduce_shape, tensor_arg
from .registry import AttrSpec, InferContext, register_op

REDUCE_ATTRS = {
    "axis": AttrSpec("ints", default=None, doc="axes to reduce; None reduces all"),
    "keepdims": AttrSpec("bool", default=False),
}


def infer_reduce(ctx: InferContext) -> Type:
    x = tensor_arg(ctx, 0)
    if x.shape is None:
        return x
    axes = normalize_axes(ctx, ctx.attrs["axis"], len(x.shape))
    return TensorType(reduce_shape(x.shape, axes, ctx.attrs["keepdims"]), x.dtype)


register_op(
    "sum",
    inputs=("x",),
    attrs=REDUCE_ATTRS,
    infer_type=infer_reduce,
    pattern="reduce",
    reference=lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
    doc="sum over axes",
)
