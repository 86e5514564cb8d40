"""Signal processing: ``DFT`` and ``STFT`` as matrix products with constant cosine and
sine tables (the transform length must be static), ``MelWeightMatrix`` (a constant)."""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr, Tuple
from ..context import NodeContext
from ..registry import converter
from .common import cast, move_axis_last, move_last_to, norm_axis, onnx_dtype, select, shape_of


def _split_complex(ctx: NodeContext, x: Expr) -> tuple[Expr, Expr | None]:
    shape = shape_of(ctx, x)
    r = len(shape)
    if shape[-1] == 1:
        return ctx.call("squeeze", x, axis=r - 1), None
    if shape[-1] != 2:
        ctx.fail(f"the last axis must be 1 (real) or 2 (complex), got shape {shape}")

    def part(k: int) -> Expr:
        return select(ctx, x, k, r - 1)

    return part(0), part(1)


def _dft_last(
    ctx: NodeContext, xr: Expr, xi: Expr | None, n: int, inverse: bool, onesided: bool
) -> tuple[Expr, Expr]:
    """The DFT along the last axis (of length n) of ``xr + i xi`` in float64."""
    k = n // 2 + 1 if onesided else n
    nk = np.outer(np.arange(n), np.arange(k)) * (2 * np.pi / n)
    cos, sin = ctx.constant(np.cos(nk)), ctx.constant(np.sin(nk))
    sign = 1.0 if inverse else -1.0
    # (xr + i xi)(cos + i sign sin)
    yr = ctx.call("matmul", xr, cos)
    yi = ctx.call("matmul", xr, ctx.call("multiply", sin, ctx.constant(np.asarray(sign))))
    if xi is not None:
        yr = ctx.call(
            "subtract",
            yr,
            ctx.call("multiply", ctx.call("matmul", xi, sin), ctx.constant(np.asarray(sign))),
        )
        yi = ctx.call("add", yi, ctx.call("matmul", xi, cos))
    if inverse:
        scale = ctx.constant(np.asarray(1.0 / n))
        yr, yi = ctx.call("multiply", yr, scale), ctx.call("multiply", yi, scale)
    return yr, yi


def _irfft(
    ctx: NodeContext, xr: Expr, xi: Expr | None, k: int, n: int, axis: int, rank: int, dtype: str
) -> Expr:
    """The real inverse of a one-sided spectrum of ``k`` bins: a length-``n`` signal (the
    missing bins are the conjugates of the given ones, like numpy's irfft)."""
    bins = np.arange(min(k, n // 2 + 1))
    weight = np.where((bins == 0) | ((n % 2 == 0) & (bins == n // 2)), 1.0, 2.0)
    angle = np.outer(bins, np.arange(n)) * (2 * np.pi / n)
    cr = weight[:, None] * np.cos(angle) / n
    ci = -weight[:, None] * np.sin(angle) / n
    used = len(bins)
    if used < k:
        xr = ctx.call("strided_slice", xr, axes=(axis,), begin=(0,), end=(used,))
        xi = (
            ctx.call("strided_slice", xi, axes=(axis,), begin=(0,), end=(used,))
            if xi is not None
            else None
        )
    xr = move_axis_last(ctx, xr, axis, rank)
    y = ctx.call("matmul", xr, ctx.constant(cr))
    if xi is not None:
        y = ctx.call(
            "add", y, ctx.call("matmul", move_axis_last(ctx, xi, axis, rank), ctx.constant(ci))
        )
    y = move_last_to(ctx, y, axis, rank)
    return cast(ctx, ctx.call("expand_dims", y, axis=rank), dtype)


def _stack_complex(ctx: NodeContext, yr: Expr, yi: Expr, dtype: str) -> Expr:
    r = len(shape_of(ctx, yr))
    parts = Tuple(
        (
            ctx.atom(ctx.call("expand_dims", yr, axis=r)),
            ctx.atom(ctx.call("expand_dims", yi, axis=r)),
        )
    )
    return cast(ctx, ctx.call("concat", parts, axis=r), dtype)


@converter("DFT", since=17)
def convert_dft(ctx: NodeContext) -> Expr:
    """Matrix products with constant tables (zero padding or truncation to dft_length)."""
    shape = ctx.shape(0)
    r = len(shape)
    dtype = ctx.dtype(0)
    if ctx.opset >= 20:
        axis = int(ctx.const(2, "the axis").reshape(-1)[0]) if ctx.has(2) else -2
    else:
        axis = ctx.attr_int("axis", 1)
    axis = norm_axis(ctx, axis, r - 1)
    inverse, onesided = bool(ctx.attr_int("inverse", 0)), bool(ctx.attr_int("onesided", 0))
    x = cast(ctx, ctx.x(0), "float64")
    xr, xi = _split_complex(ctx, x)
    n = shape[axis]
    if not isinstance(n, int):
        ctx.fail(f"the transformed axis must be static, got shape {shape}")
    if inverse and onesided:
        length = int(ctx.const(1, "dft_length").reshape(-1)[0]) if ctx.has(1) else 2 * (n - 1)
        return _irfft(ctx, xr, xi, n, length, axis, r - 1, dtype)
    if ctx.has(1):
        length = int(ctx.const(1, "dft_length").reshape(-1)[0])
        parts = [xr] if xi is None else [xr, xi]
        fixed = []
        for p in parts:
            if length < n:
                p = ctx.call("strided_slice", p, axes=(axis,), begin=(0,), end=(length,))
            elif length > n:
                width = [0] * (2 * (r - 1))
                width[2 * axis + 1] = length - n
                p = ctx.call("pad", p, pad_width=tuple(width))
            fixed.append(p)
        xr, xi = fixed[0], (fixed[1] if xi is not None else None)
        n = length
    xr = move_axis_last(ctx, xr, axis, r - 1)
    xi = move_axis_last(ctx, xi, axis, r - 1) if xi is not None else None
    yr, yi = _dft_last(ctx, xr, xi, n, inverse, onesided)
    yr, yi = move_last_to(ctx, yr, axis, r - 1), move_last_to(ctx, yi, axis, r - 1)
    return _stack_complex(ctx, yr, yi, dtype)


@converter("STFT", since=17)
def convert_stft(ctx: NodeContext) -> Expr:
    """Frames gathered with constant indices, windowed, then a DFT of each frame."""
    shape = ctx.static_shape(0)
    dtype = ctx.dtype(0)
    length = shape[1]
    step = int(ctx.const(1, "frame_step").reshape(-1)[0])
    window = ctx.x(2) if ctx.has(2) else None
    if ctx.has(3):
        frame = int(ctx.const(3, "frame_length").reshape(-1)[0])
    elif window is not None:
        frame = shape_of(ctx, window)[0]  # type: ignore[assignment]
    else:
        frame = length
    onesided = bool(ctx.attr_int("onesided", 1))
    n_frames = 1 + (length - frame) // step
    idx = (np.arange(n_frames)[:, None] * step + np.arange(frame)[None, :]).astype(np.int64)
    x = cast(ctx, ctx.x(0), "float64")
    xr, xi = _split_complex(ctx, x)
    c_idx = ctx.constant(idx)
    xr = ctx.call("take", xr, c_idx, axis=1)
    xi = ctx.call("take", xi, c_idx, axis=1) if xi is not None else None
    if window is not None:
        w = cast(ctx, window, "float64")
        xr = ctx.call("multiply", xr, w)
        xi = ctx.call("multiply", xi, w) if xi is not None else None
    yr, yi = _dft_last(ctx, xr, xi, frame, False, onesided)
    return _stack_complex(ctx, yr, yi, dtype)


@converter("MelWeightMatrix", since=17)
def convert_mel_weight_matrix(ctx: NodeContext) -> Expr:
    """A constant computed from the (constant) inputs."""
    num_mel, dft_length, sample_rate = (int(ctx.const(i).reshape(-1)[0]) for i in range(3))
    lower, upper = (ctx.const(i).reshape(-1)[0] for i in (3, 4))
    bins = np.arange(0, num_mel + 2)
    low_mel = 2595 * np.log1p(lower / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high_mel - low_mel) / bins.shape[0]
    freqs = bins * step + low_mel
    freqs = 700 * np.expm1(freqs / 2595 * np.log(10))
    freqs = (((dft_length + 1) * freqs) // sample_rate).astype(int)
    out = np.zeros((dft_length // 2 + 1, num_mel))
    for i in range(num_mel):
        lo, mid, hi = freqs[i], freqs[i + 1], freqs[i + 2]
        if mid - lo == 0:
            out[mid, i] = 1
        else:
            for j in range(lo, mid + 1):
                out[j, i] = (j - lo) / (mid - lo)
        if hi - mid > 0:
            for j in range(mid, hi):
                out[j, i] = (hi - j) / (hi - mid)
    dtype = onnx_dtype(ctx, ctx.attr_int("output_datatype", 1), "output_datatype")
    return ctx.constant(out.astype(dtype))
