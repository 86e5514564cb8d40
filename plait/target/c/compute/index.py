"""Computes of the indexing ops: ``strided_slice take gather_elements one_hot
shape_of``.  Indices go through ``checked_index`` (plait.kernel.intrin): one out of
range fails the kernel's call, as numpy raises (never a read outside the buffer); the
``c`` target's ``out_of_range_indices="clamp"`` clamps them instead."""

from __future__ import annotations

from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.dsl import Tensor
from plait.kernel.ir import IntImm, PrimExpr, const

from .common import (
    checked_index,
    dim_expr,
    norm_axis,
    numpy_const,
    out_dtype,
    out_shape,
    to_dtype,
    unravel,
)
from .registry import ComputeUnsupported, register_compute


@register_compute("strided_slice", note="a symbolic start, or a negative step on a "
                  "symbolic axis, is a library call")
def strided_slice_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[i] = x[start + i * stride]`` on the sliced axes (Python slice rules).  The
    result's type holds how many elements each axis keeps, so the end may be symbolic
    (``x[:, :seq]``); the start is computed from the begin and the axis (a begin from
    the end is counted from the axis's size, symbolic or not; a negative step needs
    the size static)."""
    (x,) = inputs
    shape = out_shape(out_ty)
    strides = attrs["strides"] or (1,) * len(attrs["axes"])
    starts: dict[int, tuple[Any, int]] = {}
    for a, b, s in zip(attrs["axes"], attrs["begin"], strides):
        ax = norm_axis(int(a), x.ndim)
        if type(b) is not int or type(s) is not int:
            raise ComputeUnsupported("the slice start or step is a symbolic size")
        size = x.shape[ax]
        if isinstance(size, int):   # (the start does not depend on the end)
            start, _, step = slice(b, None, s).indices(size)
        elif b >= 0 and s > 0:      # past the end: the result's axis is empty
            start, step = b, s
        elif s > 0:                 # from the end (x[:, -1:]): max(size + b, 0)
            start, step = I.maximum(dim_expr(size) + b, IntImm(0)), s
        else:
            raise ComputeUnsupported(f"a negative start or step on the symbolic axis {ax}")
        starts[ax] = (start, step)

    def f(*i: PrimExpr) -> PrimExpr:
        src = []
        for d, e in enumerate(i):
            if d in starts:
                start, step = starts[d]
                src.append(e * step + start if step != 1 else e + start)
            else:
                src.append(e)
        return x[tuple(src)]

    return dsl.compute(shape, f, "strided_slice")


@register_compute("take", note="an out-of-range index fails the call (or is clamped: "
                  "out_of_range_indices)")
def take_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[..., j..., ...] = x[..., indices[j...], ...]`` along ``axis`` (the flattened
    x when None); negative indices count from the end."""
    x, indices = inputs
    shape = out_shape(out_ty)
    axis = attrs["axis"]
    k = indices.ndim
    if axis is None:
        total: PrimExpr = IntImm(1)
        for d in x.shape:
            total = total * dim_expr(d)
        return dsl.compute(
            shape, lambda *i: x[unravel(checked_index(indices[i], total), x.shape)], "take"
        )
    ax = norm_axis(int(axis), x.ndim)

    def f(*i: PrimExpr) -> PrimExpr:
        j = checked_index(indices[tuple(i[ax: ax + k])], x.shape[ax])
        return x[(*i[:ax], j, *i[ax + k:])]

    return dsl.compute(shape, f, "take")


@register_compute("gather_elements", note="an out-of-range index fails the call (or is "
                  "clamped: out_of_range_indices)")
def gather_elements_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[i][j] = x[indices[i][j]][j]`` for axis 0 (``torch.gather``)."""
    x, indices = inputs
    shape = out_shape(out_ty)
    ax = norm_axis(int(attrs["axis"]), x.ndim)

    def f(*i: PrimExpr) -> PrimExpr:
        j = checked_index(indices[i], x.shape[ax])
        return x[tuple(j if d == ax else e for d, e in enumerate(i))]

    return dsl.compute(shape, f, "gather_elements")


@register_compute("one_hot")
def one_hot_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """on_value where the index (negative counts from depth) equals the position on
    the new axis, off_value elsewhere."""
    (indices,) = inputs
    shape = out_shape(out_ty)
    dtype = out_dtype(out_ty)
    depth = int(attrs["depth"])
    ax = norm_axis(int(attrs["axis"]), len(shape))
    on, off = numpy_const(attrs["on_value"], dtype), numpy_const(attrs["off_value"], dtype)

    def f(*i: PrimExpr) -> PrimExpr:
        v = to_dtype(indices[tuple(e for d, e in enumerate(i) if d != ax)], "int64")
        v = I.select(v < 0, v + depth, v)
        return I.select(I.eq(v, i[ax]), on, off)

    return dsl.compute(shape, f, "one_hot")


@register_compute("shape_of")
def shape_of_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """x's sizes (static, or the kernel's size variables) as an int64 vector."""
    (x,) = inputs
    dims = [dim_expr(d) for d in x.shape]

    def f(i: PrimExpr) -> PrimExpr:
        if not dims:
            return const(0, "int64")
        v = dims[-1]
        for k in range(len(dims) - 2, -1, -1):
            v = I.select(I.eq(i, k), dims[k], v)
        return v

    if not dims:
        raise ComputeUnsupported("shape_of of a scalar (empty result)")
    return dsl.compute(out_shape(out_ty), f, "shape_of")
