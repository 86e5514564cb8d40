"""Computes of the linear-algebra ops as direct loop nests: ``matmul`` (numpy
semantics: batched, broadcasting, 1-D promotion), ``linear``, ``conv1d``/``conv2d``
(grouped, strided, dilated, any layout) and ``conv_transpose1d``/``conv_transpose2d``.

These are the kernels used when a target does not dispatch the op to a library (the
``c`` target sends float ``matmul``, ``linear`` and ``conv2d`` to BLAS-backed library
functions).  Sums run in index order, so float results differ from BLAS in the last
bits; integer results are exact."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.dsl import Reduce, Tensor
from plait.kernel.ir import Div, IntImm, PrimExpr, const

from .common import (
    Dim,
    broadcast_dims_index,
    dim_expr,
    expand,
    expand_padding,
    join_index,
    out_shape,
    split_index,
    static_int,
)
from .registry import ComputeUnsupported, register_compute


def _no_bool(t: Tensor, op: str) -> None:
    if t.dtype == "bool":
        raise ComputeUnsupported(f"{op} of bool")


@register_compute("matmul")
def matmul_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``out[b..., i, j] = sum_k x[b..., i, k] * y[b..., k, j]`` with broadcast batch
    dims; a 1-D operand is a row (x) or a column (y) that the result drops."""
    x, y = inputs
    _no_bool(x, "matmul")
    shape = out_shape(out_ty)
    xa, ya = x.ndim == 1, y.ndim == 1
    nb = len(shape) - (0 if xa else 1) - (0 if ya else 1)
    batch = shape[:nb]
    k_ext = x.shape[-1]

    def f(*i: PrimExpr) -> Reduce:
        k = dsl.reduce_axis(k_ext, "k")
        b = i[:nb]
        if xa:
            xi: tuple[PrimExpr, ...] = (k,)
        else:
            xb = x.ndim - 2
            xi = (*broadcast_dims_index(x.shape[:xb], b, batch, x.name), i[nb], k)
        if ya:
            yi: tuple[PrimExpr, ...] = (k,)
        else:
            yb = y.ndim - 2
            yi = (*broadcast_dims_index(y.shape[:yb], b, batch, y.name), k, i[-1])
        return dsl.sum(x[xi] * y[yi], [k])

    return dsl.compute(shape, f, "matmul")


@register_compute("linear")
def linear_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``x @ weight.T``, then ``+ bias`` (two stages, in the reference's order)."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    _no_bool(x, "linear")
    shape = out_shape(out_ty)
    k_ext = x.shape[-1]

    def f(*i: PrimExpr) -> Reduce:
        k = dsl.reduce_axis(k_ext, "k")
        return dsl.sum(x[(*i[:-1], k)] * w[i[-1], k], [k])

    mm = dsl.compute(shape, f, "linear_matmul" if b is not None else "linear")
    if b is None:
        return mm
    return dsl.compute(shape, lambda *i: mm[i] + b[i[-1]], "linear")


def _weight_index(layout: str, o: PrimExpr, i: PrimExpr,
                  ks: Sequence[PrimExpr]) -> tuple[PrimExpr, ...]:
    """The index into a weight of ``layout`` (``OIW WIO OIHW HWIO``)."""
    spatial = iter(ks)
    out = []
    for ch in layout:
        out.append(o if ch == "O" else i if ch == "I" else next(spatial))
    return tuple(out)


def _weight_dims(layout: str, shape: Sequence[Dim]) -> tuple[Dim, Dim, list[Dim]]:
    o = shape[layout.index("O")]
    i = shape[layout.index("I")]
    ks = [d for ch, d in zip(layout, shape) if ch not in "OI"]
    return o, i, ks


def _inside(pos: Sequence[PrimExpr], sizes: Sequence[Dim]) -> PrimExpr:
    cond: PrimExpr | None = None
    for q, size in zip(pos, sizes):
        c = I.logical_and(q >= 0, q < dim_expr(size))
        cond = c if cond is None else I.logical_and(cond, c)
    assert cond is not None
    return cond


MAX_UNROLLED_TAPS = 64
"""The largest window (taps) a depthwise convolution's kernel writes out as one sum."""


def _window_taps(ks: Sequence[Dim]) -> list[list[int]] | None:
    """Every tap of a static window in row-major order, or None when the window is
    symbolic or larger than MAX_UNROLLED_TAPS."""
    if not all(isinstance(k, int) for k in ks) or math.prod(ks) > MAX_UNROLLED_TAPS:  # type: ignore[arg-type]
        return None
    taps: list[list[int]] = [[]]
    for k in ks:
        taps = [t + [j] for t in taps for j in range(k)]  # type: ignore[arg-type]
    return taps


def _conv(nd: int) -> None:
    name = f"conv{nd}d"

    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        x, w = inputs
        _no_bool(x, name)
        dl, kl = attrs["data_layout"], attrs["kernel_layout"]
        s = expand(attrs["strides"], nd, "strides")
        d = expand(attrs["dilation"], nd, "dilation")
        p = expand_padding(attrs["padding"], nd)
        groups = int(attrs["groups"])
        n_, c_, sizes = split_index(dl, x.shape)  # type: ignore[arg-type]
        o_, cg, ks = _weight_dims(kl, w.shape)
        og = static_int(o_, "the output channel count") // groups if groups > 1 else 0
        zero = const(0, x.dtype)
        padded = any(p) and all(isinstance(z, int) for z in sizes)
        if padded:
            psizes = [z + p[a] + p[a + nd] for a, z in enumerate(sizes)]  # type: ignore[operator]

            def pad(*i: PrimExpr) -> PrimExpr:
                n, c, sp = split_index(dl, i)
                src = [q - p[a] for a, q in enumerate(sp)]
                return I.select(_inside(src, sizes), x[join_index(dl, n, c, src)], zero)

            xp = dsl.compute(join_index(dl, n_, c_, psizes), pad, f"{name}_pad")

        def load(n: PrimExpr, c: PrimExpr, pos: list[PrimExpr]) -> PrimExpr:
            """The input at window position ``pos`` (padded coordinates): from the
            padded copy, or guarded, or plain."""
            if padded:
                return xp[join_index(dl, n, c, pos)]
            if any(p):
                src = [q - p[a] for a, q in enumerate(pos)]
                return I.select(_inside(src, sizes), x[join_index(dl, n, c, src)], zero)
            return x[join_index(dl, n, c, pos)]

        taps = _window_taps(ks) if cg == 1 and groups > 1 else None
        if taps is not None:
            # depthwise: one input channel per group, a window of static size; the sum
            # over the window written out, so the stage is elementwise and its loop
            # along the output row vectorizes (a reduction loop over a 3x3 window
            # would be innermost and scalar)
            def dw(*oi: PrimExpr) -> PrimExpr:
                n, o, osp = split_index(dl, oi)
                c = Div(o, IntImm(og)) if og > 1 else o
                total: PrimExpr | None = None
                for tap in taps:
                    xv = load(n, c, [osp[a] * s[a] + tap[a] * d[a] for a in range(nd)])
                    term = xv * w[_weight_index(kl, o, IntImm(0), [IntImm(t) for t in tap])]
                    total = term if total is None else total + term
                assert total is not None
                return total

            return dsl.compute(out_shape(out_ty), dw, name)

        def f(*oi: PrimExpr) -> Reduce:
            n, o, osp = split_index(dl, oi)
            rc = dsl.reduce_axis(cg, "rc")
            rk = [dsl.reduce_axis(k, f"k{a}") for a, k in enumerate(ks)]
            c = rc if groups == 1 else Div(o, IntImm(og)) * dim_expr(cg) + rc
            xv = load(n, c, [osp[a] * s[a] + rk[a] * d[a] for a in range(nd)])
            return dsl.sum(xv * w[_weight_index(kl, o, rc, rk)], [rc, *rk])

        return dsl.compute(out_shape(out_ty), f, name)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = (f"{nd}-D convolution as a direct loop nest (a zero-padded copy of the "
                       "input first when there is padding).")
    register_compute(name, compute)


def _conv_transpose(nd: int) -> None:
    name = f"conv_transpose{nd}d"

    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        x, w = inputs
        _no_bool(x, name)
        dl = attrs["data_layout"]
        s = expand(attrs["strides"], nd, "strides")
        d = expand(attrs["dilation"], nd, "dilation")
        p = expand_padding(attrs["padding"], nd)
        groups = int(attrs["groups"])
        _, c_, sizes = split_index(dl, x.shape)  # type: ignore[arg-type]
        cg = static_int(c_, "the input channel count") // groups
        og = w.shape[1]
        ks = list(w.shape[2:])
        zero = const(0, x.dtype)

        def f(*oi: PrimExpr) -> Reduce:
            n, o, osp = split_index(dl, oi)
            rc = dsl.reduce_axis(cg, "rc")
            rk = [dsl.reduce_axis(k, f"k{a}") for a, k in enumerate(ks)]
            if groups == 1:
                g_c: PrimExpr = rc
                oo = o
            else:
                g = Div(o, dim_expr(og))
                g_c = g * cg + rc
                oo = o - g * dim_expr(og)
            cond: PrimExpr | None = None
            src = []
            for a in range(nd):
                t = osp[a] + p[a] - rk[a] * d[a]
                c = t >= 0
                if s[a] != 1:
                    c = I.logical_and(c, I.eq(t % s[a], 0))
                    t = Div(t, IntImm(s[a]))
                c = I.logical_and(c, t < dim_expr(sizes[a]))
                cond = c if cond is None else I.logical_and(cond, c)
                src.append(t)
            assert cond is not None
            v = x[join_index(dl, n, g_c, src)] * w[(g_c, oo, *rk)]
            return dsl.sum(I.select(cond, v, zero), [rc, *rk])

        return dsl.compute(out_shape(out_ty), f, name)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = (f"{nd}-D transposed convolution gathered per output element: the input "
                       "pixels whose strided, dilated taps land on it.")
    register_compute(name, compute)


for _nd in (1, 2):
    _conv(_nd)
    _conv_transpose(_nd)
