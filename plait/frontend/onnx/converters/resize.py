"""``Resize`` and ``Upsample``.

A 4-D resize of the two spatial axes whose output size matches the scale becomes
``resize2d``.  Everything else (other ranks and axes, scales that do not divide the
sizes, ``half_pixel_symmetric``, ``tf_crop_and_resize``, antialiasing) is computed
exactly the way ONNX defines it, axis by axis: resizing one axis is a linear map, so
``nearest`` becomes a ``take`` of constant indices and ``linear``/``cubic`` a
``matmul`` with a constant interpolation matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ....ir import symbolic
from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter
from .common import FLOATS, cast, move_axis_last, move_last_to, norm_axes, scalar

_COORD_MODES = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_crop_and_resize",
)  # fmt: skip
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_PLAIT_COORD_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


# ------------------------------------------------------------- interpolation maps


def _nearest_coeffs(mode: str) -> Callable[[float, float], np.ndarray]:
    def f(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        if mode == "floor":
            return np.array([1.0, 0.0])
        return np.array([0.0, 1.0])

    return f


def _linear_coeffs(antialias: bool) -> Callable[[float, float], np.ndarray]:
    def f(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        footprint = 2 - 2 * start
        args = (np.arange(start, start + footprint) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()

    return f


def _cubic_coeffs(a: float, antialias: bool) -> Callable[[float, float], np.ndarray]:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    def f(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array(
                [kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)]
            )
        s = min(scale, 1.0)
        i_start = int(np.floor(-2 / s) + 1)
        i_end = 2 - i_start
        c = np.array([kernel(s * (i - ratio)) for i in range(i_start, i_end)])
        return c / c.sum()

    return f


def _source_coords(
    mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    y = np.arange(out_len, dtype=np.float64)
    out_w = scale * in_len
    extrapolated = None
    if mode == "align_corners":
        x = np.zeros(out_len) if out_w == 1 else y * (in_len - 1) / (out_w - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        assert roi is not None
        if out_w == 1:
            x = np.full(out_len, (roi[1] - roi[0]) * (in_len - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (in_len - 1) / (out_w - 1)
        x = x + roi[0] * (in_len - 1)
        extrapolated = (x < 0) | (x > in_len - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if out_w == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        adjustment = out_len / out_w
        offset = in_len / 2 * (1 - adjustment)
        x = offset + (y + 0.5) / scale - 0.5
    return x, extrapolated


def interpolation_matrix(
    in_len: int, out_len: int, scale: float, coeffs: Callable[[float, float], np.ndarray],
    coord_mode: str, exclude_outside: bool, roi: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """The (out_len, in_len) matrix of ONNX Resize along one axis, and the mask of the
    output positions that take the extrapolation value (tf_crop_and_resize)."""
    x, extrapolated = _source_coords(coord_mode, out_len, in_len, scale, roi)
    m = np.zeros((out_len, in_len), dtype=np.float64)
    for o in range(out_len):
        xo = x[o]
        ratio = 1.0 if float(xo).is_integer() else xo - math.floor(xo)
        c = np.asarray(coeffs(ratio, scale), dtype=np.float64)
        n = len(c)
        pad = math.ceil(n / 2)
        xp = xo + pad
        p = math.floor(xp)
        frac = xp - p
        if n % 2 == 0:
            off = -(n // 2) if frac == 0 else -(n // 2) + 1
        else:
            base = -((n - 1) // 2)
            off = base if frac <= 0.5 else base + 1
        idx = p + off + np.arange(n) - pad
        if exclude_outside:
            c = np.where((idx < 0) | (idx >= in_len), 0.0, c)
            total = c.sum()
            c = c / (total if total != 0 else 1.0)
        for i, w in zip(np.clip(idx, 0, in_len - 1), c):
            m[o, i] += w
    return m, extrapolated


# ------------------------------------------------------------------ converters


def _resize(
    ctx: NodeContext, scales: list[float] | None, sizes: list | None, axes: list[int],
    mode: str, coord_mode: str, nearest_mode: str, cubic_a: float, exclude_outside: bool,
    extrapolation: float, antialias: bool, roi: list[float] | None, keep_aspect: str,
) -> Expr:  # fmt: skip
    shape = ctx.shape(0)
    r = len(shape)
    in_sizes = [shape[a] for a in axes]
    if sizes is not None and len(sizes) != len(axes):
        ctx.fail(f"{len(sizes)} sizes for {len(axes)} axes")
    if scales is not None and len(scales) != len(axes):
        ctx.fail(f"{len(scales)} scales for {len(axes)} axes")
    # a symbolic input or output size (a dynamic batch or image): kept sizes (a scale of
    # 1, or the input's own size as Concat(Shape(x)[:2], [h, w]) writes it) need
    # nothing; resized ones go to resize2d, which takes symbolic sizes, with an
    # integer scale (the exact ONNX size floor(d * s) and ratio) or a given size
    kept: set[int] = set()
    moving: dict[int, object] = {}   # axis index -> symbolic or static output size
    static_moves: dict[int, int] = {}
    inexact = False   # a static axis whose scale is not out / in (resize2d takes sizes)
    for k, d in enumerate(in_sizes):
        target = sizes[k] if sizes is not None else None
        if isinstance(d, int) and (target is None or isinstance(target, int)):
            o = target if target is not None else int(scales[k] * d)  # type: ignore[index]
            if o != d:
                static_moves[k] = o
                inexact |= target is None and o / d != scales[k]  # type: ignore[index]
            continue
        if target is not None:
            if target == d:
                kept.add(k)
            else:
                moving[k] = target
        elif scales[k] == 1.0:  # type: ignore[index]
            kept.add(k)
        elif float(scales[k]).is_integer() and scales[k] >= 1:  # type: ignore[index]
            moving[k] = symbolic.mul(d, int(scales[k]))  # type: ignore[index]
        else:
            ctx.fail(f"axis {axes[k]} of size {d} is resized by the scale {scales[k]}; "  # type: ignore[index]
                     "plait resizes a symbolic size by an integer scale only (or to given "
                     "sizes); fix the input shapes with from_onnx(..., shapes={...})")
    if kept or moving:
        if keep_aspect != "stretch":
            ctx.fail(f"keep_aspect_ratio_policy {keep_aspect!r} with the symbolic shape {shape}")
        if roi is not None and coord_mode == "tf_crop_and_resize":
            ctx.fail(f"tf_crop_and_resize of the symbolic shape {shape}; fix the input "
                     "shapes with from_onnx(..., shapes={...})")
    if moving:
        if inexact:
            ctx.fail(f"a static axis is resized by a scale its size does not take exactly "
                     f"while a symbolic one is resized (shape {shape}); fix the input "
                     "shapes with from_onnx(..., shapes={...})")
        return _symbolic_resize2d(ctx, shape, axes, {**static_moves, **moving}, mode,
                                  coord_mode, nearest_mode, cubic_a, exclude_outside,
                                  antialias)
    if sizes is not None:
        axis_scales = [1.0 if k in kept else s / d  # type: ignore[operator]
                       for k, (s, d) in enumerate(zip(sizes, in_sizes))]
        out = list(sizes)
        if keep_aspect != "stretch":
            sc = min(axis_scales) if keep_aspect == "not_larger" else max(axis_scales)
            axis_scales = [sc] * len(axes)
            out = [int(sc * d + 0.5) for d in in_sizes]  # type: ignore[operator]
    else:
        assert scales is not None
        axis_scales = list(scales)
        out = [d if k in kept else int(s * d)  # type: ignore[operator]
               for k, (s, d) in enumerate(zip(scales, in_sizes))]
    if any(s <= 0 for s in axis_scales):
        ctx.fail(f"the scales must be positive, got {axis_scales}")
    rois: list[tuple[float, float] | None] = [None] * len(axes)
    if coord_mode == "tf_crop_and_resize":
        if roi is None:
            ctx.fail("tf_crop_and_resize needs the roi input")
        full = len(roi) == 2 * r
        for k, a in enumerate(axes):
            rois[k] = (roi[a], roi[a + r]) if full else (roi[k], roi[k + len(axes)])
    todo = [
        k for k in range(len(axes))
        if not (math.isclose(axis_scales[k], 1.0) and out[k] == in_sizes[k]
                and (rois[k] is None or rois[k] == (0.0, 1.0)))
    ]  # fmt: skip
    x = ctx.x(0)
    if not todo:
        return x
    dtype = ctx.dtype(0)
    # the common case: a 4-D resize of the two last axes with an exact scale
    if (
        r == 4 and {axes[k] for k in todo} <= {2, 3} and not antialias
        and coord_mode in _PLAIT_COORD_MODES and mode in ("nearest", "linear", "cubic")
        and all(out[k] / in_sizes[k] == axis_scales[k] for k in todo)  # type: ignore[operator]
        and not (mode == "cubic" and coord_mode == "pytorch_half_pixel" and 1 in out)
        and not (mode != "cubic" and exclude_outside and mode != "linear")
    ):  # fmt: skip
        size = [shape[2], shape[3]]
        for k in todo:
            size[axes[k] - 2] = out[k]
        return ctx.call(
            "resize2d", x, size=tuple(size), method=mode,
            coordinate_transformation_mode=coord_mode, rounding_method=nearest_mode,
            cubic_alpha=cubic_a, cubic_exclude=exclude_outside,
        )  # fmt: skip
    if mode == "nearest":
        coeffs = _nearest_coeffs(nearest_mode)
    elif mode == "linear":
        coeffs = _linear_coeffs(antialias)
    else:
        coeffs = _cubic_coeffs(cubic_a, antialias)
    y = x
    exact = mode == "nearest"
    work_dtype = dtype if (exact or dtype in FLOATS) else "float64"
    if not exact:
        y = cast(ctx, y, work_dtype)
    for k in todo:
        a = axes[k]
        m, extra = interpolation_matrix(
            in_sizes[k],
            out[k],
            axis_scales[k],
            coeffs,
            coord_mode,
            exclude_outside,
            rois[k],  # type: ignore[arg-type]
        )
        if exact:
            idx = np.argmax(m, axis=1).astype(np.int64)
            y = ctx.call("take", y, ctx.constant(idx), axis=a)
        else:
            t = move_axis_last(ctx, y, a, r)
            t = ctx.call("matmul", t, ctx.constant(m.T.astype(work_dtype)))
            y = move_last_to(ctx, t, a, r)
        if extra is not None and extra.any():
            mask = extra.reshape([out[k] if i == a else 1 for i in range(r)])
            fill = scalar(ctx, extrapolation, work_dtype if not exact else dtype)
            y = ctx.call("where", ctx.constant(mask), fill, y)
    if not exact and work_dtype != dtype:
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            y = ctx.call("clip", ctx.call("round", y), min=float(info.min), max=float(info.max))
        y = cast(ctx, y, dtype)
    return y


def _symbolic_resize2d(
    ctx: NodeContext, shape: tuple, axes: list[int], moving: dict[int, object], mode: str,
    coord_mode: str, nearest_mode: str, cubic_a: float, exclude_outside: bool,
    antialias: bool,
) -> Expr:  # fmt: skip
    """``resize2d`` of the spatial axes of an NCHW tensor to sizes of which some are
    symbolic (its interpolation reads them when the model runs)."""
    spatial = {axes[k] for k in moving}
    if not (
        len(shape) == 4 and spatial <= {2, 3} and not antialias
        and coord_mode in _PLAIT_COORD_MODES and mode in ("nearest", "linear", "cubic")
        and not (mode == "cubic" and coord_mode == "pytorch_half_pixel")
        and not (mode == "nearest" and exclude_outside)
    ):  # fmt: skip
        ctx.fail(f"resizing the symbolic shape {shape} (axes {sorted(spatial)}, mode {mode!r}, "
                 f"{coord_mode!r}) is supported for the two spatial axes of a 4-D tensor "
                 "with nearest, linear or cubic interpolation and no antialiasing; fix the "
                 "input shapes with from_onnx(..., shapes={...})")
    size = [shape[2], shape[3]]
    for k, out in moving.items():
        size[axes[k] - 2] = out
    return ctx.call(
        "resize2d", ctx.x(0), size=tuple(size), method=mode,
        coordinate_transformation_mode=coord_mode, rounding_method=nearest_mode,
        cubic_alpha=cubic_a, cubic_exclude=exclude_outside,
    )  # fmt: skip


@converter(
    "Resize", since=10,
    attr_choices={
        "mode": ("nearest", "linear", "cubic"),
        "coordinate_transformation_mode": _COORD_MODES,
        "nearest_mode": _NEAREST_MODES,
        "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller"),
    },
)  # fmt: skip
def convert_resize(ctx: NodeContext) -> Expr:
    """``resize2d`` for 4-D spatial resizes with exact scales; otherwise ``take`` /
    ``matmul`` with the exact ONNX interpolation along each axis (every mode,
    coordinate transformation, antialiasing and tf_crop_and_resize)."""
    r = ctx.rank(0)
    mode = ctx.attr_str("mode", "nearest")
    if ctx.opset < 11:
        scales = [float(s) for s in ctx.const(1, "the scales").reshape(-1)]
        return _resize(
            ctx, scales, None, list(range(r)), mode, "asymmetric", "floor", -0.75, False, 0.0,
            False, None, "stretch",
        )  # fmt: skip
    axes = ctx.attr_ints("axes", None)
    axes = list(range(r)) if axes is None else norm_axes(ctx, axes, r)
    roi = [float(v) for v in ctx.const(1, "the roi").reshape(-1)] if ctx.has(1) else None
    scales = sizes = None
    sized = ctx.sym(3) if ctx.has(3) else None
    if sized is not None and sized.size:   # ints, or sizes from a shape subgraph
        sizes = list(sized.reshape(-1))
        if any(d is None for d in sizes):
            ctx.need_constant(3, "the sizes")
    elif ctx.has(2) and (ctx.maybe_const(2) is None or ctx.const(2).size):
        scales = [float(s) for s in ctx.const(2, "the scales").reshape(-1)]
    elif ctx.has(3):
        sizes = [int(v) for v in ctx.const(3, "the sizes").reshape(-1)]
    else:
        ctx.fail("needs scales or sizes")
    coord = ctx.attr_str("coordinate_transformation_mode", "half_pixel")
    return _resize(
        ctx, scales, sizes, axes, mode, coord,
        ctx.attr_str("nearest_mode", "round_prefer_floor"),
        ctx.attr_float("cubic_coeff_a", -0.75), bool(ctx.attr_int("exclude_outside", 0)),
        ctx.attr_float("extrapolation_value", 0.0), bool(ctx.attr_int("antialias", 0)), roi,
        ctx.attr_str("keep_aspect_ratio_policy", "stretch"),
    )  # fmt: skip


@converter("Upsample", since=7, until=9, attr_choices={"mode": ("nearest", "linear", "bilinear")})
def convert_upsample(ctx: NodeContext) -> Expr:
    """Resize with asymmetric coordinates (nearest rounds down)."""
    r = ctx.rank(0)
    mode = ctx.attr_str("mode", "nearest")
    mode = "linear" if mode == "bilinear" else mode
    if ctx.opset < 9:
        scales = ctx.attr_floats("scales")
    else:
        scales = [float(s) for s in ctx.const(1, "the scales").reshape(-1)]
    return _resize(
        ctx, scales, None, list(range(r)), mode, "asymmetric", "floor", -0.75, False, 0.0, False,
        None, "stretch",
    )  # fmt: skip
