"""Computes of the neural-network ops: softmax and log_softmax, the normalizations
(layer, batch, group, instance), pooling (max, average, adaptive, global) and
``resize2d`` (nearest and linear).

Statistics are separate reduction stages (mean, then variance from the mean, like the
numpy reference); float sums are accumulated in vector lanes (see
:mod:`plait.target.c.compute.reduce`), so results differ from numpy's pairwise sums in
the last bits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.dsl import Reduce, Tensor
from plait.kernel.ir import Div, IntImm, PrimExpr, const, is_float_dtype
from plait.runtime.numpy_ops import reachable_taps

from .common import (
    Dim,
    dim_expr,
    expand,
    expand_padding,
    join_index,
    lowest,
    norm_axes,
    norm_axis,
    out_dtype,
    out_shape,
    require_float,
    split_index,
    static_int,
    to_dtype,
)
from .reduce import count_of, mean_of, reduce_stage
from .registry import ComputeUnsupported, register_compute


def _kept(i: Sequence[PrimExpr], axes: Sequence[int]) -> tuple[PrimExpr, ...]:
    """Index ``i`` with the reduced ``axes`` set to 0 (into a keepdims statistic)."""
    return tuple(IntImm(0) if d in axes else e for d, e in enumerate(i))


# ---------------------------------------------------------------- softmax


@register_compute("softmax")
def softmax_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """max, exp(x - max), sum, divide."""
    (x,) = inputs
    require_float(x.dtype, "softmax")
    ax = (norm_axis(attrs["axis"], x.ndim),)
    m = reduce_stage(x, ax, True, dsl.max, lambda i: x[i], "softmax_max")
    e = dsl.compute(x.shape, lambda *i: I.exp(x[i] - m[_kept(i, ax)]), "softmax_exp")
    s = reduce_stage(e, ax, True, dsl.sum, lambda i: e[i], "softmax_sum")
    return dsl.compute(x.shape, lambda *i: e[i] / s[_kept(i, ax)], "softmax")


@register_compute("log_softmax")
def log_softmax_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """s = x - max; s - log(sum(exp(s)))."""
    (x,) = inputs
    require_float(x.dtype, "log_softmax")
    ax = (norm_axis(attrs["axis"], x.ndim),)
    m = reduce_stage(x, ax, True, dsl.max, lambda i: x[i], "log_softmax_max")
    sh = dsl.compute(x.shape, lambda *i: x[i] - m[_kept(i, ax)], "log_softmax_shift")
    se = reduce_stage(sh, ax, True, dsl.sum, lambda i: I.exp(sh[i]), "log_softmax_sum")
    return dsl.compute(x.shape, lambda *i: sh[i] - I.log(se[_kept(i, ax)]), "log_softmax")


# ---------------------------------------------------------------- normalizations


def moments(x: Tensor, axes: Sequence[int], name: str) -> tuple[Tensor, Tensor]:
    """Mean and population variance of ``x`` over ``axes`` (keepdims shapes), as the
    numpy reference computes them: the mean, then the mean of the squared deviations."""
    m = mean_of(x, axes, True, f"{name}_mean")

    def sq(i: tuple[PrimExpr, ...]) -> PrimExpr:
        d = x[i] - m[_kept(i, axes)]
        return d * d

    ss = reduce_stage(x, axes, True, dsl.sum, sq, f"{name}_ss")
    n = to_dtype(count_of(x, axes), x.dtype)
    v = dsl.compute(ss.shape, lambda *i: ss[i] / n, f"{name}_var")
    return m, v


def normalized(x: Tensor, m: Tensor, v: Tensor, i: Sequence[PrimExpr], axes: Sequence[int],
               epsilon: float) -> PrimExpr:
    """``(x - mean) / sqrt(var + epsilon)`` at index ``i``."""
    k = _kept(i, axes)
    return (x[tuple(i)] - m[k]) / I.sqrt(v[k] + const(epsilon, x.dtype))


@register_compute("layer_norm")
def layer_norm_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Statistics over ``axes``, then ``* gamma + beta`` (shaped like x on ``axes``)."""
    x, gamma, beta = inputs
    require_float(x.dtype, "layer_norm")
    axes = norm_axes(attrs["axes"], x.ndim)
    m, v = moments(x, axes, "layer_norm")
    eps = attrs["epsilon"]

    def f(*i: PrimExpr) -> PrimExpr:
        p = tuple(i[a] for a in axes)
        return normalized(x, m, v, i, axes, eps) * gamma[p] + beta[p]

    return dsl.compute(x.shape, f, "layer_norm")


@register_compute("batch_norm")
def batch_norm_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """scale = gamma / sqrt(var + epsilon); (x - mean) * scale + beta per channel."""
    x, gamma, beta, mean, var = inputs
    require_float(x.dtype, "batch_norm")
    ax = norm_axis(attrs["axis"], x.ndim)
    eps = const(attrs["epsilon"], x.dtype)
    scale = dsl.compute(gamma.shape, lambda c: gamma[c] / I.sqrt(var[c] + eps), "batch_norm_scale")
    return dsl.compute(
        x.shape,
        lambda *i: (x[i] - mean[i[ax]]) * scale[i[ax]] + beta[i[ax]],
        "batch_norm",
    )


@register_compute("instance_norm")
def instance_norm_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Statistics of each channel of each sample over the spatial axes."""
    x, gamma, beta = inputs
    require_float(x.dtype, "instance_norm")
    ca = norm_axis(attrs["channel_axis"], x.ndim)
    axes = tuple(d for d in range(x.ndim) if d not in (0, ca))
    m, v = moments(x, axes, "instance_norm")
    eps = attrs["epsilon"]
    return dsl.compute(
        x.shape,
        lambda *i: normalized(x, m, v, i, axes, eps) * gamma[i[ca]] + beta[i[ca]],
        "instance_norm",
    )


@register_compute("group_norm", note="a symbolic channel count is a library call")
def group_norm_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Statistics over each group of channels (and every non-batch axis) of each
    sample, then per-channel ``* gamma + beta``."""
    x, gamma, beta = inputs
    require_float(x.dtype, "group_norm")
    ca = norm_axis(attrs["channel_axis"], x.ndim)
    groups = int(attrs["num_groups"])
    channels = static_int(x.shape[ca], "the channel count of group_norm")
    cg = channels // groups
    others = [d for d in range(1, x.ndim) if d != ca]
    count = to_dtype(IntImm(cg) * count_of(x, others) if others else IntImm(cg), x.dtype)

    def element(n: PrimExpr, g: PrimExpr, rc: PrimExpr, rs: Sequence[PrimExpr]) -> PrimExpr:
        idx: list[PrimExpr] = [n] + [IntImm(0)] * (x.ndim - 1)
        idx[ca] = g * cg + rc
        for d, r in zip(others, rs):
            idx[d] = r
        return x[tuple(idx)]

    def total(n: PrimExpr, g: PrimExpr) -> Reduce:
        rc = dsl.reduce_axis(cg, "rc")
        rs = [dsl.reduce_axis(x.shape[d], f"r{d}") for d in others]
        return dsl.sum(element(n, g, rc, rs), [rc, *rs])

    bshape = (x.shape[0], groups)
    s = dsl.compute(bshape, total, "group_norm_sum")
    m = dsl.compute(bshape, lambda n, g: s[n, g] / count, "group_norm_mean")

    def sq(n: PrimExpr, g: PrimExpr) -> Reduce:
        rc = dsl.reduce_axis(cg, "rc")
        rs = [dsl.reduce_axis(x.shape[d], f"r{d}") for d in others]
        d_ = element(n, g, rc, rs) - m[n, g]
        return dsl.sum(d_ * d_, [rc, *rs])

    ss = dsl.compute(bshape, sq, "group_norm_ss")
    eps = const(attrs["epsilon"], x.dtype)
    inv = dsl.compute(bshape, lambda n, g: I.sqrt(ss[n, g] / count + eps), "group_norm_std")

    def f(*i: PrimExpr) -> PrimExpr:
        c = i[ca]
        g = Div(c, IntImm(cg))
        return (x[i] - m[i[0], g]) / inv[i[0], g] * gamma[c] + beta[c]

    return dsl.compute(x.shape, f, "group_norm")


# ---------------------------------------------------------------- pooling


def _pool_geometry(attrs: Attrs, nd: int,
                   sizes: Sequence[Dim]) -> tuple[tuple[int, ...], ...]:
    """Window, strides, dilation and padding; the window only as far as its taps can
    reach the input or its padding (``reachable_taps``: a ceil-mode window may be far
    larger than the input)."""
    k = expand(attrs["pool_size"], nd, "pool_size")
    s = expand(attrs["strides"], nd, "strides")
    d = expand(attrs["dilation"], nd, "dilation")
    p = expand_padding(attrs["padding"], nd)
    k = tuple(reachable_taps(n, k[a], d[a], p[a], p[a + nd]) if isinstance(n, int) else k[a]
              for a, n in enumerate(sizes))
    return k, s, d, p


def _window(osp: Sequence[PrimExpr], rs: Sequence[PrimExpr], k: Sequence[int],
            s: Sequence[int], d: Sequence[int], p: Sequence[int]) -> list[PrimExpr]:
    return [osp[a] * s[a] + rs[a] * d[a] - p[a] for a in range(len(osp))]


def _inside(pos: Sequence[PrimExpr], sizes: Sequence[Dim]) -> PrimExpr:
    cond: PrimExpr | None = None
    for q, size in zip(pos, sizes):
        c = I.logical_and(q >= 0, q < dim_expr(size))
        cond = c if cond is None else I.logical_and(cond, c)
    assert cond is not None
    return cond


def _always_inside(k: Sequence[int], s: Sequence[int], d: Sequence[int], p: Sequence[int],
                   sizes: Sequence[Dim], osizes: Sequence[Dim]) -> bool:
    """Whether every window tap of every output lies inside the input (no padding
    reached): then no bounds test is needed, and the loop stays a plain load."""
    nd = len(k)
    for a in range(nd):
        size, osize = sizes[a], osizes[a]
        if not isinstance(size, int) or not isinstance(osize, int) or p[a] != 0:
            return False
        if (osize - 1) * s[a] + (k[a] - 1) * d[a] > size - 1:
            return False
    return True


def _tap_count(a: int, k: Sequence[int], s: Sequence[int], d: Sequence[int], p: Sequence[int],
               sizes: Sequence[Dim], include: bool, dtype: str) -> Any:
    """The per-output-index count (as ``dtype``) of the window taps of axis ``a`` that
    fall inside the input (or inside input and padding with ``include``)."""
    nd = len(k)
    lo = -p[a] if include else 0
    hi = dim_expr(sizes[a]) + p[a + nd] if include else dim_expr(sizes[a])

    def cnt(o: PrimExpr) -> Reduce:
        r = dsl.reduce_axis(k[a], "k")
        q = o * s[a] + r * d[a] - p[a]
        inside = I.logical_and(q >= lo, q < hi)
        return dsl.sum(I.select(inside, const(1, dtype), const(0, dtype)), [r])

    return cnt


def _max_pool(nd: int) -> None:
    name = f"max_pool{nd}d"

    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        (x,) = inputs
        if x.dtype == "bool":
            raise ComputeUnsupported(f"{name} of bool")
        layout = attrs["layout"]
        sizes = split_index(layout, x.shape)[2]  # type: ignore[arg-type]
        k, s, d, p = _pool_geometry(attrs, nd, sizes)
        osizes = split_index(layout, out_shape(out_ty))[2]  # type: ignore[arg-type]
        inside = _always_inside(k, s, d, p, sizes, osizes)
        low = lowest(x.dtype)

        def f(*oi: PrimExpr) -> Reduce:
            n, c, osp = split_index(layout, oi)
            rs = [dsl.reduce_axis(k[a], f"k{a}") for a in range(nd)]
            pos = _window(osp, rs, k, s, d, p)
            v = x[join_index(layout, n, c, pos)]
            if not inside:
                v = I.select(_inside(pos, sizes), v, low)
            return dsl.max(v, rs)

        return dsl.compute(out_shape(out_ty), f, name)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = f"{nd}-D max pooling: padding never wins (it holds the lowest value)."
    register_compute(name, compute)


def _avg_pool(nd: int) -> None:
    name = f"avg_pool{nd}d"

    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        (x,) = inputs
        require_float(x.dtype, name)
        layout = attrs["layout"]
        sizes = split_index(layout, x.shape)[2]  # type: ignore[arg-type]
        k, s, d, p = _pool_geometry(attrs, nd, sizes)
        shape = out_shape(out_ty)
        osizes = split_index(layout, shape)[2]  # type: ignore[arg-type]
        zero = const(0, x.dtype)
        include = attrs["count_include_pad"]

        def total(*oi: PrimExpr) -> Reduce:
            n, c, osp = split_index(layout, oi)
            rs = [dsl.reduce_axis(k[a], f"k{a}") for a in range(nd)]
            pos = _window(osp, rs, k, s, d, p)
            v = I.select(_inside(pos, sizes), x[join_index(layout, n, c, pos)], zero)
            return dsl.sum(v, rs)

        t = dsl.compute(shape, total, f"{name}_sum")
        counts = [
            dsl.compute((osizes[a],), _tap_count(a, k, s, d, p, sizes, include, x.dtype),
                        f"{name}_count{a}")
            for a in range(nd)
        ]

        def f(*oi: PrimExpr) -> PrimExpr:
            osp = split_index(layout, oi)[2]
            div = const(1, x.dtype)
            for a in range(nd):
                div = div * counts[a][osp[a]]
            return t[oi] / div

        return dsl.compute(shape, f, name)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = (f"{nd}-D average pooling: the window sum over the taps inside the input, "
                       "divided by the tap count (with the padding if count_include_pad).")
    register_compute(name, compute)


for _nd in (1, 2):
    _max_pool(_nd)
    _avg_pool(_nd)


@register_compute("global_avg_pool2d")
def global_avg_pool2d_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """The mean over both spatial axes, kept as size 1."""
    (x,) = inputs
    require_float(x.dtype, "global_avg_pool2d")
    axes = (2, 3) if attrs["layout"] == "NCHW" else (1, 2)
    return mean_of(x, axes, True, "global_avg_pool2d")


@register_compute("adaptive_avg_pool2d", note="symbolic spatial sizes are a library call")
def adaptive_avg_pool2d_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """The mean of each of torch's bins ``[floor(i * H / oh), ceil((i + 1) * H / oh))``,
    accumulated in float64 like the reference."""
    (x,) = inputs
    require_float(x.dtype, "adaptive_avg_pool2d")
    layout = attrs["layout"]
    h, w = (static_int(d, "a spatial size of adaptive_avg_pool2d")
            for d in split_index(layout, x.shape)[2])  # type: ignore[arg-type]
    size = attrs["output_size"]
    oh, ow = (h, w) if size is None else expand(size, 2, "output_size")

    def bins(size: int, out: int) -> tuple[int, ...]:
        return tuple(-((-(i + 1) * size) // out) - (i * size) // out for i in range(out))

    kh, kw = max(bins(h, oh)), max(bins(w, ow))
    f64 = "float64"

    def start(o: PrimExpr, size: int, out: int) -> PrimExpr:
        return Div(o * size, IntImm(out))

    def end(o: PrimExpr, size: int, out: int) -> PrimExpr:
        return Div((o + 1) * size + (out - 1), IntImm(out))

    def total(*oi: PrimExpr) -> Reduce:
        n, c, (oy, ox) = split_index(layout, oi)
        ry, rx = dsl.reduce_axis(kh, "ky"), dsl.reduce_axis(kw, "kx")
        y0, x0 = start(oy, h, oh), start(ox, w, ow)
        valid = I.logical_and(ry < end(oy, h, oh) - y0, rx < end(ox, w, ow) - x0)
        v = I.select(valid, to_dtype(x[join_index(layout, n, c, (y0 + ry, x0 + rx))], f64),
                     const(0, f64))
        return dsl.sum(v, [ry, rx])

    shape = out_shape(out_ty)
    t = dsl.compute(shape, total, "adaptive_avg_pool2d_sum")

    def f(*oi: PrimExpr) -> PrimExpr:
        _, _, (oy, ox) = split_index(layout, oi)
        area = (end(oy, h, oh) - start(oy, h, oh)) * (end(ox, w, ow) - start(ox, w, ow))
        return to_dtype(t[oi] / to_dtype(area, f64), x.dtype)

    return dsl.compute(shape, f, "adaptive_avg_pool2d")


# ---------------------------------------------------------------- resize


def _source_coord(o: PrimExpr, out_len: Dim, in_len: Dim, mode: str) -> PrimExpr:
    """The input coordinate (float64) of output index ``o`` along one axis (ONNX); a
    symbolic output length (an upsampled dynamic image) is read at run time."""
    f64 = "float64"
    of = to_dtype(o, f64)
    inl = to_dtype(dim_expr(in_len), f64)
    if not isinstance(out_len, int):
        outl = to_dtype(dim_expr(out_len), f64)
        scale = outl / inl
        one = const(1.5, f64)   # out_len <= 1, for an integer length
        if mode in ("half_pixel", "pytorch_half_pixel"):
            y = (of + const(0.5, f64)) / scale - const(0.5, f64)
            return y if mode == "half_pixel" else I.select(outl < one, const(0, f64), y)
        if mode == "align_corners":
            return I.select(outl < one, const(0, f64),
                            of * (inl - const(1, f64)) / (outl - const(1, f64)))
        if mode == "asymmetric":
            return of / scale
        raise ComputeUnsupported(f"coordinate_transformation_mode {mode!r} of a symbolic size")
    scale = (const(out_len / in_len, f64) if isinstance(in_len, int)
             else const(out_len, f64) / inl)
    half = const(0.5, f64)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and out_len <= 1:
            return const(0, f64)
        return (of + half) / scale - half
    if mode == "align_corners":
        if out_len <= 1:
            return const(0, f64)
        return of * (inl - const(1, f64)) / const(out_len - 1, f64)
    if mode == "asymmetric":
        return of / scale
    if mode == "tf_half_pixel_for_nn":
        return (of + half) / scale
    raise ComputeUnsupported(f"coordinate_transformation_mode {mode!r}")


def _round_coord(c: PrimExpr, method: str) -> PrimExpr:
    half = const(0.5, "float64")
    if method == "round":  # half away from zero
        r = I.floor(I.abs(c) + half)
        return I.select(c < const(0, "float64"), const(0, "float64") - r, r)
    if method == "round_prefer_floor":
        return I.ceil(c - half)
    if method == "round_prefer_ceil":
        return I.floor(c + half)
    if method == "floor":
        return I.floor(c)
    if method == "ceil":
        return I.ceil(c)
    raise ComputeUnsupported(f"rounding_method {method!r}")


def _clamp(i: PrimExpr, size: Dim) -> PrimExpr:
    return I.maximum(I.minimum(i, dim_expr(size) - 1), IntImm(0))


@register_compute("resize2d", note="cubic, and linear of integers, are library calls")
def resize2d_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """Nearest: a gather of the rounded source coordinates.  Linear: two separable
    stages (height, then width) of two taps each, with the reference's float64
    coordinates and weights rounded to the input's dtype."""
    (x,) = inputs
    layout, method = attrs["layout"], attrs["method"]
    mode = attrs["coordinate_transformation_mode"]
    h, w = split_index(layout, x.shape)[2]  # type: ignore[arg-type]
    shape = out_shape(out_ty)
    oh, ow = split_index(layout, shape)[2]  # ints, or size variables (symbolic sizes)
    if method == "nearest":
        rounding = attrs["rounding_method"]

        def index(o: PrimExpr, out_len: Dim, in_len: Dim) -> PrimExpr:
            c = _round_coord(_source_coord(o, out_len, in_len, mode), rounding)
            hi = to_dtype(dim_expr(in_len), "float64") - const(1, "float64")
            return to_dtype(I.maximum(I.minimum(c, hi), const(0, "float64")), "int64")

        def near(*oi: PrimExpr) -> PrimExpr:
            n, c, (oy, ox) = split_index(layout, oi)
            return x[join_index(layout, n, c, (index(oy, oh, h), index(ox, ow, w)))]

        return dsl.compute(shape, near, "resize2d")
    if method != "linear":
        raise ComputeUnsupported(f"method {method!r}")
    if not is_float_dtype(x.dtype):
        raise ComputeUnsupported(f"linear resize of {x.dtype}")
    dt = x.dtype

    def taps(o: PrimExpr, out_len: Dim, in_len: Dim) -> tuple[PrimExpr, ...]:
        c = _source_coord(o, out_len, in_len, mode)
        f = I.floor(c)
        t = c - f
        i0 = to_dtype(f, "int64")
        w0 = to_dtype(const(1, "float64") - t, dt)
        return _clamp(i0, in_len), _clamp(i0 + 1, in_len), w0, to_dtype(t, dt)

    n_, c_, _ = split_index(layout, x.shape)  # type: ignore[arg-type]
    mid_shape = join_index(layout, n_, c_, (oh, w))

    def rows(*i: PrimExpr) -> PrimExpr:
        n, c, (oy, xw) = split_index(layout, i)
        a, b, wa, wb = taps(oy, oh, h)
        return (x[join_index(layout, n, c, (a, xw))] * wa
                + x[join_index(layout, n, c, (b, xw))] * wb)

    mid = dsl.compute(mid_shape, rows, "resize2d_rows")

    def cols(*i: PrimExpr) -> PrimExpr:
        n, c, (oy, ox) = split_index(layout, i)
        a, b, wa, wb = taps(ox, ow, w)
        return (mid[join_index(layout, n, c, (oy, a))] * wa
                + mid[join_index(layout, n, c, (oy, b))] * wb)

    out_dtype(out_ty)
    return dsl.compute(shape, cols, "resize2d")
