"""Computes of the reductions: ``sum prod mean max min variance l2_norm argmax argmin``
and ``cumsum``.

A reduction is one stage accumulating over :func:`~plait.kernel.dsl.reduce_axis` axes
in local partial results: when the innermost reduced axis is contiguous, in 64 bytes of
interleaved lanes combined as a tree at the end (vectorized, see
:func:`plait.kernel.dsl._lower_reduce`), otherwise in one scalar in index order.  numpy
sums floats pairwise, so float sums differ from the reference in the last bits
(tolerance stated by the tests); integer results are exact."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.dsl import Reduce, Tensor
from plait.kernel.ir import Div, IntImm, PrimExpr, const, is_float_dtype

from .common import (
    Dim,
    norm_axes,
    norm_axis,
    out_shape,
    prod_expr,
    require_float,
    to_dtype,
    unravel,
)
from .registry import ComputeUnsupported, register_compute

CUMSUM_MAX_AXIS = 4096
"""``cumsum`` is computed as a triangular sum (quadratic in the axis length); longer
static axes are left to the library call.  A symbolic axis (the position ids of a
model of dynamic sequence length, a few hundred to a few thousand) is a kernel."""


def reduce_stage(
    x: Tensor,
    axes: Sequence[int],
    keepdims: bool,
    combiner: Callable[[PrimExpr, Any], Reduce],
    body: Callable[[tuple[PrimExpr, ...]], PrimExpr],
    name: str,
) -> Tensor:
    """A stage reducing ``body(index of x)`` over ``axes`` of ``x`` with ``combiner``
    (``dsl.sum``/``dsl.max``...); the result has x's shape without (or, with
    ``keepdims``, with size 1 on) the reduced axes."""
    axes = tuple(axes)
    shape = tuple(1 if d in axes else x.shape[d]
                  for d in range(x.ndim) if keepdims or d not in axes)

    def f(*i: PrimExpr) -> Reduce:
        rs = [dsl.reduce_axis(x.shape[a], f"r{a}") for a in axes]
        src: list[PrimExpr] = []
        it, rit = iter(i), iter(rs)
        for d in range(x.ndim):
            if d in axes:
                src.append(next(rit))
                if keepdims:
                    next(it)
            else:
                src.append(next(it))
        return combiner(body(tuple(src)), rs)

    return dsl.compute(shape, f, name)


def _attrs_axes(x: Tensor, attrs: Attrs) -> tuple[tuple[int, ...], bool]:
    return norm_axes(attrs.get("axis"), x.ndim), bool(attrs.get("keepdims", False))


def _check(t: Tensor, out_ty: Type) -> Tensor:
    shape = out_shape(out_ty)
    if len(shape) != t.ndim:
        raise ComputeUnsupported(f"reduction result has rank {t.ndim}, the type says {len(shape)}")
    return t


def count_of(x: Tensor, axes: Sequence[int]) -> PrimExpr:
    """The number of elements over ``axes`` of ``x`` as an int64 expression."""
    return prod_expr([x.shape[a] for a in axes])


def _copy(x: Tensor, out_ty: Type, name: str) -> Tensor:
    shape = out_shape(out_ty)
    return dsl.compute(shape, lambda *i: x[i], name)


def _simple(name: str, combiner: Callable[[PrimExpr, Any], Reduce], floats_only: bool = False,
            no_bool: bool = True) -> None:
    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        (x,) = inputs
        if no_bool and x.dtype == "bool":
            raise ComputeUnsupported(f"{name} of bool")
        axes, keep = _attrs_axes(x, attrs)
        if not axes:
            return _copy(x, out_ty, name)
        return _check(reduce_stage(x, axes, keep, combiner, lambda i: x[i], name), out_ty)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = f"The compute of ``{name}``."
    register_compute(name, compute)


_simple("sum", dsl.sum)
_simple("prod", dsl.prod)
_simple("max", dsl.max)
_simple("min", dsl.min)


def mean_of(x: Tensor, axes: Sequence[int], keepdims: bool, name: str) -> Tensor:
    """The mean of ``x`` over ``axes``: a sum stage, then a division by the count
    (truncating for integers, like the reference)."""
    s = reduce_stage(x, axes, keepdims, dsl.sum, lambda i: x[i], f"{name}_sum")
    n = count_of(x, axes)
    if is_float_dtype(x.dtype):
        return dsl.compute(s.shape, lambda *i: s[i] / to_dtype(n, x.dtype), name)
    return dsl.compute(s.shape, lambda *i: Div(s[i], to_dtype(n, x.dtype)), name)


@register_compute("mean")
def mean_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Sum, then divide by the count."""
    (x,) = inputs
    if x.dtype == "bool":
        raise ComputeUnsupported("mean of bool")
    axes, keep = _attrs_axes(x, attrs)
    if not axes:
        return _copy(x, out_ty, "mean")
    return _check(mean_of(x, axes, keep, "mean"), out_ty)


def variance_of(x: Tensor, axes: Sequence[int], keepdims: bool, name: str) -> Tensor:
    """The population variance over ``axes`` the way numpy computes it: the mean, then
    the mean of the squared deviations."""
    m = mean_of(x, axes, True, f"{name}_mean")

    def dev(i: tuple[PrimExpr, ...]) -> PrimExpr:
        mi = tuple(IntImm(0) if d in axes else i[d] for d in range(x.ndim))
        d_ = x[i] - m[mi]
        return d_ * d_

    ss = reduce_stage(x, axes, keepdims, dsl.sum, dev, f"{name}_ss")
    n = to_dtype(count_of(x, axes), x.dtype)
    return dsl.compute(ss.shape, lambda *i: ss[i] / n, name)


@register_compute("variance", note="integers are a library call")
def variance_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Mean of squared deviations from the mean (two passes, like numpy)."""
    (x,) = inputs
    require_float(x.dtype, "variance")
    axes, keep = _attrs_axes(x, attrs)
    if not axes:
        return dsl.compute(out_shape(out_ty), lambda *i: const(0, x.dtype) * x[i], "variance")
    return _check(variance_of(x, axes, keep, "variance"), out_ty)


@register_compute("l2_norm", note="integers are a library call")
def l2_norm_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """sqrt(sum(x * x))."""
    (x,) = inputs
    require_float(x.dtype, "l2_norm")
    axes, keep = _attrs_axes(x, attrs)
    if not axes:
        return dsl.compute(out_shape(out_ty), lambda *i: I.abs(x[i]), "l2_norm")
    ss = reduce_stage(x, axes, keep, dsl.sum, lambda i: x[i] * x[i], "l2_norm_ss")
    return _check(dsl.compute(ss.shape, lambda *i: I.sqrt(ss[i]), "l2_norm"), out_ty)


def _arg_reduce(name: str, find_max: bool) -> None:
    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        (x,) = inputs
        if x.dtype == "bool":
            raise ComputeUnsupported(f"{name} of bool")
        axis, keep, last = attrs["axis"], attrs["keepdims"], attrs["select_last_index"]
        if axis is None:
            axes = tuple(range(x.ndim))
        else:
            axes = (norm_axis(int(axis), x.ndim),)
        comb = dsl.max if find_max else dsl.min
        m = reduce_stage(x, axes, True, comb, lambda i: x[i], f"{name}_value")
        flat_sizes = [x.shape[a] for a in axes]

        def position(i: tuple[PrimExpr, ...]) -> PrimExpr:
            pos = i[axes[0]]
            for a, size in zip(axes[1:], flat_sizes[1:]):
                pos = pos * (size if not isinstance(size, int) else IntImm(size)) + i[a]
            return pos

        def candidate(i: tuple[PrimExpr, ...]) -> PrimExpr:
            mi = tuple(IntImm(0) if d in axes else i[d] for d in range(x.ndim))
            v, best = x[i], m[mi]
            hit = I.eq(v, best)
            if is_float_dtype(x.dtype):  # numpy returns the first NaN
                hit = I.logical_or(hit, I.isnan(v))
            miss = const(-1, "int64") if last else const(2**62, "int64")
            return I.select(hit, position(i), miss)

        out = reduce_stage(x, axes, keep, dsl.max if last else dsl.min, candidate, name)
        return _check(out, out_ty)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = f"The compute of ``{name}``: the extreme value, then its first index."
    register_compute(name, compute)


_arg_reduce("argmax", True)
_arg_reduce("argmin", False)


@register_compute("cumsum", note=f"static axes longer than {CUMSUM_MAX_AXIS} are a "
                                 "library call")
def cumsum_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """A triangular sum along the axis, in the reference's order (from the start, or
    from the end with ``reverse``)."""
    (x,) = inputs
    if x.dtype == "bool":
        raise ComputeUnsupported("cumsum of bool")
    shape = out_shape(out_ty)
    axis = attrs["axis"]
    if axis is None:

        def read(i: tuple[PrimExpr, ...]) -> PrimExpr:
            return x[unravel(i[0], x.shape)]

        length: Dim = shape[0]
        ax = 0
    else:
        ax = norm_axis(int(axis), x.ndim)
        length = x.shape[ax]

        def read(i: tuple[PrimExpr, ...]) -> PrimExpr:
            return x[i]

    if isinstance(length, int) and length > CUMSUM_MAX_AXIS:
        raise ComputeUnsupported(f"the cumsum axis has {length} elements "
                                 f"(> {CUMSUM_MAX_AXIS})")
    n: PrimExpr = IntImm(length) if isinstance(length, int) else length
    exclusive, reverse = attrs["exclusive"], attrs["reverse"]

    def f(*i: PrimExpr) -> Reduce:
        j = i[ax]
        if reverse:
            k = dsl.reduce_axis(n - 1 - j if exclusive else n - j, "k")
            src = n - 1 - k
        else:
            k = dsl.reduce_axis(j if exclusive else j + 1, "k")
            src = k
        idx = tuple(src if d == ax else i[d] for d in range(len(i)))
        return dsl.sum(read(idx), [k])

    return dsl.compute(shape, f, "cumsum")
