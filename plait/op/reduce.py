"""Reductions (sum, mean, max, argmax, variance, ...) and the running sum ``cumsum``."""

from __future__ import annotations

from ..ir.types import TensorType, Type
from ..runtime import numpy_ops as npo
from .define import op_definer
from .infer import (
    check_dtype_class,
    merge_dims,
    normalize_axes,
    normalize_axis,
    reduce_shape,
    shape_or_none,
    shape_str,
    tensor_arg,
)
from .registry import AttrSpec, InferContext, InferFn

define = op_definer(__name__)

REDUCE_ATTRS = {
    "axis": AttrSpec("int_or_ints", default=None, doc="axes to reduce; None reduces all"),
    "keepdims": AttrSpec("bool", default=False, doc="keep reduced axes as size 1"),
}


def infer_reduce_of(cls: str) -> InferFn:
    """Type inference of a reduction over an argument of dtype class ``cls``."""

    def infer(ctx: InferContext) -> Type:
        """The input shape without the reduced axes (size 1 with keepdims)."""
        x = tensor_arg(ctx, 0)
        check_dtype_class(ctx, 0, x, cls)
        if x.shape is None:
            return x
        axis = ctx.attrs["axis"]
        axes = normalize_axes(ctx, (axis,) if isinstance(axis, int) else axis, len(x.shape))
        return TensorType(reduce_shape(x.shape, axes, ctx.attrs["keepdims"]), x.dtype)

    return infer


infer_reduce = infer_reduce_of("any")

# name: (dtype class, doc)
_REDUCTIONS = {
    "sum": ("numeric", "sum over axes (float16 accumulates in float32)"),
    "prod": ("numeric", "product over axes"),
    "mean": ("float", "arithmetic mean over axes"),
    "max": ("any", "maximum over axes (NaN propagates)"),
    "min": ("any", "minimum over axes (NaN propagates)"),
    "variance": ("float", "population variance (divides by the count) over axes"),
    "l2_norm": ("float", "sqrt(sum(x * x)) over axes (ONNX ReduceL2)"),
}

for _name, (_cls, _doc) in _REDUCTIONS.items():
    define(
        _name,
        inputs=("x",),
        attrs=REDUCE_ATTRS,
        infer_type=infer_reduce_of(_cls),
        pattern="reduce",
        reference=npo.IMPLS[_name],
        doc=_doc,
    )


def infer_arg_reduce(ctx: InferContext) -> Type:
    """int64 indices: the input shape without ``axis`` (or a scalar when None), or with
    it as size 1 under ``keepdims``."""
    x = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, x, "numeric")
    if x.shape is None:
        return TensorType(None, "int64")
    axis = ctx.attrs["axis"]
    if axis is None:
        axes = tuple(range(len(x.shape)))
    else:
        axes = (normalize_axis(ctx, axis, len(x.shape)),)
    for a in axes:
        if x.shape[a] == 0:
            ctx.fail(f"{ctx.op.name}: axis {a} of x (shape {shape_str(x.shape)}) is empty", arg=0)
    return TensorType(reduce_shape(x.shape, axes, ctx.attrs["keepdims"]), "int64")


_ARG_ATTRS = {
    "axis": AttrSpec("int", default=None, doc="axis; None for the flattened tensor"),
    "keepdims": AttrSpec("bool", default=False, doc="keep the axis as size 1"),
    "select_last_index": AttrSpec("bool", default=False, doc="last instead of first on ties"),
}

for _name, _what in (("argmax", "maximum"), ("argmin", "minimum")):
    define(
        _name,
        inputs=("x",),
        attrs=_ARG_ATTRS,
        infer_type=infer_arg_reduce,
        pattern="reduce",
        reference=npo.IMPLS[_name],
        doc=f"int64 index of the {_what} along an axis",
    )


def infer_cumsum(ctx: InferContext) -> Type:
    """The input type (1-D of all elements when ``axis`` is None)."""
    x = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, x, "numeric")
    if x.shape is None:
        return x if ctx.attrs["axis"] is not None else TensorType(None, x.dtype)
    if ctx.attrs["axis"] is None:
        return TensorType(shape_or_none([merge_dims(x.shape)]), x.dtype)
    normalize_axis(ctx, ctx.attrs["axis"], len(x.shape))
    return x


define(
    "cumsum",
    inputs=("x",),
    attrs={
        "axis": AttrSpec("int", default=None, doc="axis; None for the flattened tensor"),
        "exclusive": AttrSpec("bool", default=False, doc="leave out the element itself"),
        "reverse": AttrSpec("bool", default=False, doc="sum from the end"),
    },
    infer_type=infer_cumsum,
    pattern="opaque",
    reference=npo.cumsum,
    doc="running sum along an axis (ONNX CumSum)",
)
