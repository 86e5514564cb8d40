"""Normalizations, softmax, pooling, embedding, padding, resizing."""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter


def _affine(ctx: NodeContext, key: str, shape: tuple[int, ...], fill: float, dtype: str
            ) -> Expr:
    if ctx.has(key):
        return ctx.x(key)
    return ctx.atom(np.full(shape, fill, dtype=dtype))


def _eps(ctx: NodeContext) -> float:
    eps = float(ctx.arg("eps"))
    if eps < 0:
        ctx.unsupported(f"a negative eps ({eps})")
    return eps


@converter("aten._native_batch_norm_legit_no_training.default")
def batch_norm_inference(ctx: NodeContext) -> list:
    """batch_norm with the running statistics (inference); the saved mean and rstd
    results are not computed"""
    x = ctx.x("input")
    dt = ctx.dtype(x)
    c = ctx.ty(ctx.x("running_mean")).shape[0]  # type: ignore[index]
    gamma = _affine(ctx, "weight", (c,), 1.0, dt)
    beta = _affine(ctx, "bias", (c,), 0.0, dt)
    y = ctx.call("batch_norm", x, gamma, beta, ctx.x("running_mean"), ctx.x("running_var"),
                 axis=1, epsilon=_eps(ctx))
    return [y, None, None]


@converter("aten.native_layer_norm.default")
def layer_norm(ctx: NodeContext) -> list:
    """layer_norm over the last len(normalized_shape) axes; the mean and rstd results
    are computed only if used"""
    x = ctx.x("input")
    dt = ctx.dtype(x)
    shape = tuple(ctx.ints("normalized_shape"))
    k = len(shape)
    gamma = _affine(ctx, "weight", shape, 1.0, dt)
    beta = _affine(ctx, "bias", shape, 0.0, dt)
    eps = _eps(ctx)
    axes = tuple(range(-k, 0))
    y = ctx.call("layer_norm", x, gamma, beta, axes=axes, epsilon=eps)
    users = {u.args[1] for u in ctx.node.users if u.op == "call_function" and u.args}
    if not (users - {0}):
        return [y, None, None]
    mean = ctx.call("mean", x, axis=axes, keepdims=True)
    var = ctx.call("variance", x, axis=axes, keepdims=True)
    rstd = ctx.call("rsqrt", ctx.call("add", var, ctx.scalar(eps, dt)))
    return [y, mean, rstd]


@converter("aten.native_group_norm.default")
def group_norm(ctx: NodeContext) -> list:
    """group_norm; the mean and rstd results are not computed"""
    x = ctx.x("input")
    dt = ctx.dtype(x)
    c = ctx.int_arg("C")
    gamma = _affine(ctx, "weight", (c,), 1.0, dt)
    beta = _affine(ctx, "bias", (c,), 0.0, dt)
    y = ctx.call("group_norm", x, gamma, beta, num_groups=ctx.int_arg("group"),
                 channel_axis=1, epsilon=_eps(ctx))
    return [y, None, None]


@converter(["aten._softmax.default", "aten._log_softmax.default"])
def softmax(ctx: NodeContext) -> Expr:
    """softmax / log_softmax along dim (1 / 0 for a 0-d tensor)"""
    x = ctx.cast(ctx.x(0), ctx.out_dtype())
    op = "softmax" if ctx.op == "aten._softmax.default" else "log_softmax"
    if ctx.rank(x) == 0:  # one element: probability 1
        return ctx.call("ones_like" if op == "softmax" else "zeros_like", x)
    return ctx.call(op, x, axis=ctx.int_arg("dim"))


def _pool_args(ctx: NodeContext, n: int) -> tuple[tuple, tuple, tuple]:
    k = ctx.ints("kernel_size")
    k = k * n if len(k) == 1 else k
    s = ctx.ints("stride", []) or []
    s = list(k) if not s else s * n if len(s) == 1 else s
    p = ctx.ints("padding", [0])
    p = p * n if len(p) == 1 else p
    return tuple(k), tuple(s), tuple(p) + tuple(p)


def _batched(ctx: NodeContext, x: Expr, n: int) -> tuple[Expr, bool]:
    if ctx.rank(x) == n + 1:
        return ctx.call("expand_dims", x, axis=0), True
    return x, False


@converter("aten.max_pool2d_with_indices.default")
def max_pool2d(ctx: NodeContext) -> list:
    """max_pool2d; the indices result is not computed"""
    x, unbatched = _batched(ctx, ctx.x("self"), 2)
    k, s, p = _pool_args(ctx, 2)
    d = ctx.ints("dilation", [1])
    d = d * 2 if len(d) == 1 else d
    y = ctx.call("max_pool2d", x, pool_size=k, strides=s, padding=p, dilation=tuple(d),
                 ceil_mode=bool(ctx.arg("ceil_mode", False)))
    if unbatched:
        y = ctx.call("squeeze", y, axis=(0,))
    return [y, None]


@converter(["aten.avg_pool2d.default", "aten.avg_pool1d.default"])
def avg_pool(ctx: NodeContext) -> Expr:
    """avg_pool1d / avg_pool2d (integers averaged in float64 and truncated, like torch;
    divisor_override as the window sum over the divisor, without ceil_mode)"""
    n = 2 if ctx.op == "aten.avg_pool2d.default" else 1
    divisor = ctx.arg("divisor_override", None) if n == 2 else None
    if divisor is not None and ctx.arg("ceil_mode", False):
        ctx.unsupported("divisor_override with ceil_mode")
    x, unbatched = _batched(ctx, ctx.x("self"), n)
    k, s, p = _pool_args(ctx, n)
    dtype = ctx.dtype(x)
    y = ctx.call(f"avg_pool{n}d", _float(ctx, x), pool_size=k, strides=s, padding=p,
                 ceil_mode=bool(ctx.arg("ceil_mode", False)),
                 count_include_pad=divisor is not None or bool(ctx.arg("count_include_pad", True)))
    if divisor is not None:  # the window sums over the given divisor
        area = 1
        for w in k:
            area *= w
        y = ctx.call("multiply", y, ctx.scalar(area / int(divisor), ctx.dtype(y)))
    if unbatched:
        y = ctx.call("squeeze", y, axis=(0,))
    return _back(ctx, y, dtype)


def _float(ctx: NodeContext, x: Expr) -> Expr:
    """An integer tensor as float64 for an averaging op (exact for |x| < 2**53)."""
    return x if ctx.dtype(x).startswith("float") else ctx.cast(x, "float64")


def _back(ctx: NodeContext, y: Expr, dtype: str) -> Expr:
    """An average computed in float64 back to integer ``dtype``, truncated like torch."""
    if dtype.startswith("float"):
        return y
    return ctx.cast(ctx.call("trunc", y), dtype)


@converter("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(ctx: NodeContext) -> Expr:
    """adaptive_avg_pool2d (global_avg_pool2d for output size 1)"""
    x, unbatched = _batched(ctx, ctx.x("self"), 2)
    dtype = ctx.dtype(x)
    x = _float(ctx, x)
    size = ctx.ints("output_size")
    size = size * 2 if len(size) == 1 else size
    if tuple(size) == (1, 1):
        y = ctx.call("global_avg_pool2d", x)
    else:
        y = ctx.call("adaptive_avg_pool2d", x, output_size=tuple(size))
    if unbatched:
        y = ctx.call("squeeze", y, axis=(0,))
    return _back(ctx, y, dtype)


@converter("aten.embedding.default")
def embedding(ctx: NodeContext) -> Expr:
    """take(weight, indices, axis=0)"""
    return ctx.call("take", ctx.x("weight"), ctx.x("indices"), axis=0)


@converter("aten.constant_pad_nd.default")
def constant_pad_nd(ctx: NodeContext) -> Expr:
    """pad (constant; negative widths crop)"""
    x = ctx.x("self")
    r = ctx.rank(x)
    pad = ctx.ints("pad")
    widths = [0] * (2 * r)
    for i in range(len(pad) // 2):
        axis = r - 1 - i
        widths[2 * axis], widths[2 * axis + 1] = pad[2 * i], pad[2 * i + 1]
    return ctx.call("pad", x, pad_width=tuple(widths), pad_mode="constant",
                    pad_value=float(ctx.arg("value", 0)))

