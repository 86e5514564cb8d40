"""Computes of the creation ops: ``full full_like zeros_like ones_like arange``
(values converted like numpy's ``astype``; float ``arange`` computed in float64 like
the reference)."""

from __future__ import annotations

from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import dsl
from plait.kernel.dsl import Tensor
from plait.kernel.ir import PrimExpr, const, is_float_dtype

from .common import numpy_const, out_dtype, out_shape, to_dtype
from .registry import register_compute


def _fill(out_ty: Type, value: Any, name: str) -> Tensor:
    dtype = out_dtype(out_ty)
    v = numpy_const(value, dtype)
    return dsl.compute(out_shape(out_ty), lambda *i: v, name)


@register_compute("full")
def full_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``fill_value`` everywhere."""
    return _fill(out_ty, attrs["fill_value"], "full")


@register_compute("full_like")
def full_like_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``fill_value`` everywhere, shaped like x."""
    return _fill(out_ty, attrs["fill_value"], "full_like")


@register_compute("zeros_like")
def zeros_like_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Zeros shaped like x."""
    return _fill(out_ty, 0, "zeros_like")


@register_compute("ones_like")
def ones_like_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Ones shaped like x."""
    return _fill(out_ty, 1, "ones_like")


@register_compute("arange")
def arange_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``start + i * step``: in the integer dtype, or in float64 then rounded."""
    dtype = out_dtype(out_ty)
    start, step = attrs["start"], attrs["step"]

    def f(i: PrimExpr) -> PrimExpr:
        if is_float_dtype(dtype) or dtype == "bool":
            v = const(start, "float64") + to_dtype(i, "float64") * const(step, "float64")
            return to_dtype(v, dtype)
        return const(int(start), dtype) + to_dtype(i, dtype) * const(int(step), dtype)

    return dsl.compute(out_shape(out_ty), f, "arange")
