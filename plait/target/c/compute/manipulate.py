"""Computes of the shape-manipulating ops: ``reshape flatten permute_dims expand_dims
squeeze broadcast_to tile repeat concat split pad``.  Each output element is a load of
one input element (``pad``: or the pad value), so results are exact."""

from __future__ import annotations

from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.dsl import Tensor
from plait.kernel.ir import Div, IntImm, PrimExpr

from .common import (
    bload,
    dim_expr,
    norm_axes,
    norm_axis,
    num_fields,
    numpy_const,
    out_dtype,
    out_shape,
    reshape_load,
    same_dim,
    static_int,
    unravel,
)
from .registry import ComputeUnsupported, register_compute


def _reshape(inputs: list[Any], attrs: Attrs, out_ty: Type, name: str) -> Tensor:
    (x,) = inputs
    shape = out_shape(out_ty)
    return dsl.compute(shape, lambda *i: reshape_load(x, i, shape), name)


@register_compute("reshape", note="a result of unknown shape is a library call")
def reshape_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Row-major copy into the new shape."""
    return _reshape(inputs, attrs, out_ty, "reshape")


@register_compute("flatten")
def flatten_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """A reshape that merges ``start_dim..end_dim``."""
    return _reshape(inputs, attrs, out_ty, "flatten")


@register_compute("permute_dims")
def permute_dims_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[i0, i1, ...] = x[...]`` with ``x``'s axis ``axes[k]`` indexed by ``ik``."""
    (x,) = inputs
    axes = attrs["axes"]
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    else:
        axes = tuple(norm_axis(a, x.ndim) for a in axes)
    shape = out_shape(out_ty)

    def f(*i: PrimExpr) -> PrimExpr:
        src: list[PrimExpr] = [IntImm(0)] * x.ndim
        for k, a in enumerate(axes):
            src[a] = i[k]
        return x[tuple(src)]

    return dsl.compute(shape, f, "permute_dims")


@register_compute("expand_dims")
def expand_dims_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Size-1 axes inserted at ``axis`` (positions of the result)."""
    (x,) = inputs
    shape = out_shape(out_ty)
    new = set(norm_axes(attrs["axis"], len(shape)))
    return dsl.compute(shape, lambda *i: x[tuple(e for d, e in enumerate(i) if d not in new)],
                       "expand_dims")


@register_compute("squeeze")
def squeeze_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """The given size-1 axes (all static size-1 axes when None) dropped."""
    (x,) = inputs
    shape = out_shape(out_ty)
    if attrs["axis"] is None:
        gone = {d for d, s in enumerate(x.shape) if isinstance(s, int) and s == 1}
    else:
        gone = set(norm_axes(attrs["axis"], x.ndim))
    if x.ndim - len(gone) != len(shape):
        raise ComputeUnsupported(f"squeeze of shape {x.shape} to rank {len(shape)}")

    def f(*i: PrimExpr) -> PrimExpr:
        it = iter(i)
        return x[tuple(IntImm(0) if d in gone else next(it) for d in range(x.ndim))]

    return dsl.compute(shape, f, "squeeze")


@register_compute("broadcast_to")
def broadcast_to_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """numpy broadcasting to the attribute shape."""
    (x,) = inputs
    shape = out_shape(out_ty)
    return dsl.compute(shape, lambda *i: bload(x, i, shape), "broadcast_to")


@register_compute("tile")
def tile_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[i] = x[i % size]`` on every axis (x aligned to the right, like np.tile)."""
    (x,) = inputs
    shape = out_shape(out_ty)
    off = len(shape) - x.ndim
    if off < 0:
        raise ComputeUnsupported(f"tile result rank {len(shape)} below the input's {x.ndim}")

    def f(*i: PrimExpr) -> PrimExpr:
        src = []
        for k, d in enumerate(x.shape):
            j = i[off + k]
            src.append(j if same_dim(d, shape[off + k]) else j - Div(j, dim_expr(d)) * dim_expr(d))
        return x[tuple(src)]

    return dsl.compute(shape, f, "tile")


@register_compute("repeat")
def repeat_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[i] = x[i // repeats]`` along ``axis`` (of the flattened x when None)."""
    (x,) = inputs
    shape = out_shape(out_ty)
    r = int(attrs["repeats"])
    if attrs["axis"] is None:
        return dsl.compute(shape, lambda i: x[unravel(Div(i, IntImm(r)), x.shape)], "repeat")
    ax = norm_axis(attrs["axis"], x.ndim)
    return dsl.compute(
        shape,
        lambda *i: x[tuple(Div(e, IntImm(r)) if d == ax else e for d, e in enumerate(i))],
        "repeat",
    )


@register_compute("concat")
def concat_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Each output element read from the input whose range along ``axis`` holds it."""
    (parts,) = inputs
    parts = tuple(parts)
    if not parts:
        raise ComputeUnsupported("concat of no tensors")
    shape = out_shape(out_ty)
    ax = norm_axis(attrs["axis"], len(shape))
    offsets: list[PrimExpr] = []
    off: PrimExpr = IntImm(0)
    for p in parts:
        offsets.append(off)
        off = off + dim_expr(p.shape[ax])

    def f(*i: PrimExpr) -> PrimExpr:
        j = i[ax]

        def load(k: int) -> PrimExpr:
            src = tuple(j - offsets[k] if d == ax else e for d, e in enumerate(i))
            return parts[k][src]

        v = load(len(parts) - 1)
        for k in range(len(parts) - 2, -1, -1):
            v = I.select(j < offsets[k + 1], load(k), v)
        return v

    return dsl.compute(shape, f, "concat")


@register_compute("split", note="results of unknown shape are a library call")
def split_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> tuple[Tensor, ...]:
    """Each result a slice of x along ``axis`` (sizes from the result types)."""
    (x,) = inputs
    ax = norm_axis(attrs["axis"], x.ndim)
    outs = []
    off: PrimExpr = IntImm(0)
    for k in range(num_fields(out_ty)):
        shape = out_shape(out_ty, k)
        start = off

        def f(*i: PrimExpr, start: PrimExpr = start) -> PrimExpr:
            return x[tuple(e + start if d == ax else e for d, e in enumerate(i))]

        outs.append(dsl.compute(shape, f, f"split{k}"))
        off = off + dim_expr(shape[ax])
    return tuple(outs)


@register_compute("pad", note="reflect padding wider than the axis is a library call")
def pad_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[i] = x[i - before]`` inside x; outside, the pad value (constant), the
    mirrored element (reflect), the nearest edge (edge) or the wrapped one (wrap).
    Negative widths crop."""
    (x,) = inputs
    shape = out_shape(out_ty)
    pw = attrs["pad_width"]
    mode = attrs["pad_mode"]
    before = [int(pw[2 * d]) for d in range(x.ndim)]
    after = [int(pw[2 * d + 1]) for d in range(x.ndim)]
    if mode == "reflect":
        for d in range(x.ndim):
            if before[d] > 0 or after[d] > 0:
                size = static_int(x.shape[d], "a reflect-padded axis")
                if max(before[d], after[d]) >= size:
                    raise ComputeUnsupported(f"reflect padding {pw} wider than axis {d}")
    elif mode not in ("constant", "edge", "wrap"):
        raise ComputeUnsupported(f"pad_mode {mode!r}")
    value = numpy_const(attrs["pad_value"], x.dtype) if mode == "constant" else None
    out_dtype(out_ty)

    def f(*i: PrimExpr) -> PrimExpr:
        src: list[PrimExpr] = []
        inside: PrimExpr | None = None
        for d, e in enumerate(i):
            q = e - before[d] if before[d] else e
            size = dim_expr(x.shape[d])
            if before[d] <= 0 and after[d] <= 0:
                src.append(q)
                continue
            if mode == "constant":
                c = I.logical_and(q >= 0, q < size)
                inside = c if inside is None else I.logical_and(inside, c)
                src.append(q)
            elif mode == "edge":
                src.append(I.maximum(I.minimum(q, size - 1), IntImm(0)))
            elif mode == "wrap":
                src.append(q % size)
            else:  # reflect, at most one mirror on each side
                q = I.select(q < 0, IntImm(0) - q, q)
                src.append(I.select(q >= size, (size - 1) * 2 - q, q))
        if value is None or inside is None:
            return x[tuple(src)]
        return I.select(inside, x[tuple(src)], value)

    return dsl.compute(shape, f, "pad")
