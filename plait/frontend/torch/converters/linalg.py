"""Products and convolutions."""

from __future__ import annotations

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter


@converter(["aten.mm.default", "aten.bmm.default", "aten.matmul.default"])
def mm(ctx: NodeContext) -> Expr:
    """matmul"""
    return ctx.call("matmul", ctx.x(0), ctx.x(1))


@converter(["aten.addmm.default", "aten.baddbmm.default"])
def addmm(ctx: NodeContext) -> Expr:
    """beta * input + alpha * (mat1 @ mat2) (batch1, batch2 for baddbmm)"""
    out = ctx.out_dtype()
    prod = ctx.call("matmul", ctx.x(1), ctx.x(2))
    alpha, beta = ctx.arg("alpha", 1), ctx.arg("beta", 1)
    if alpha != 1:
        prod = ctx.call("multiply", prod, ctx.scalar(alpha, out))
    if beta == 0:
        return prod
    bias = ctx.operand("self", out)
    if beta != 1:
        bias = ctx.call("multiply", bias, ctx.scalar(beta, out))
    return ctx.call("add", prod, bias)


@converter("aten.convolution.default")
def convolution(ctx: NodeContext) -> Expr:
    """conv1d / conv2d / conv_transpose1d / conv_transpose2d (+ bias); 3-D convolutions
    are not supported"""
    x, w = ctx.x("input"), ctx.x("weight")
    n = ctx.rank(w) - 2
    if n not in (1, 2):
        ctx.unsupported(f"a {n}-D convolution (plait has 1-D and 2-D)")
    unbatched = ctx.rank(x) == n + 1
    if unbatched:
        x = ctx.call("expand_dims", x, axis=0)
    stride = _per_axis(ctx, "stride", n)
    pad = _per_axis(ctx, "padding", n)
    dilation = _per_axis(ctx, "dilation", n)
    groups = ctx.int_arg("groups")
    padding = tuple(pad) + tuple(pad)
    if ctx.arg("transposed"):
        out_pad = _per_axis(ctx, "output_padding", n)
        y = ctx.call(f"conv_transpose{n}d", x, w, strides=stride, padding=padding,
                     output_padding=out_pad, dilation=dilation, groups=groups)
    else:
        y = ctx.call(f"conv{n}d", x, w, strides=stride, padding=padding, dilation=dilation,
                     groups=groups)
    if ctx.has("bias"):
        b = ctx.x("bias")
        b = ctx.call("reshape", b, shape=(-1,) + (1,) * n)
        y = ctx.call("add", y, b)
    if unbatched:
        y = ctx.call("squeeze", y, axis=(0,))
    return y


def _per_axis(ctx: NodeContext, key: str, n: int) -> tuple[int, ...]:
    v = ctx.ints(key)
    if len(v) == 1:
        v = v * n
    if len(v) != n:
        ctx.fail(f"{key}={v} has {len(v)} entries for {n} spatial axes")
    return tuple(v)
