"""``aten.scaled_dot_product_attention``, for programs whose decomposition of it PyTorch
cannot run (a dynamic sequence in torch 2.13: see ``frontend.py``)."""

from __future__ import annotations

import math

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter


def _causal(ctx: NodeContext, scores: Expr, dtype: str) -> Expr:
    """True where key position <= query position (``tril(ones(L, S))``), built from
    running sums so that L and S may be symbolic."""
    shape = ctx.ty(scores).shape
    assert shape is not None
    ones = ctx.call("broadcast_to", ctx.scalar(1, "int64"), shape=tuple(shape[-2:]))
    rows = ctx.call("cumsum", ones, axis=0)
    cols = ctx.call("cumsum", ones, axis=1)
    return ctx.call("less_equal", cols, rows)


@converter("aten.scaled_dot_product_attention.default")
def scaled_dot_product_attention(ctx: NodeContext) -> Expr:
    """softmax(q @ k^T * scale + mask) @ v (a boolean mask keeps where True; causal;
    grouped-query key/value heads repeated); dropout must be 0"""
    q, k, v = ctx.x("query"), ctx.x("key"), ctx.x("value")
    dtype = ctx.out_dtype()
    if float(ctx.arg("dropout_p", 0.0)) != 0.0:
        ctx.unsupported("dropout in attention (export the model in eval mode)")
    causal = ctx.arg("is_causal", False)
    if not isinstance(causal, bool):
        ctx.unsupported(f"a symbolic is_causal ({causal!r})")
    rank = ctx.rank(q)
    qs, ks = ctx.ty(q).shape, ctx.ty(k).shape
    assert qs is not None and ks is not None
    if ctx.arg("enable_gqa", False) and rank >= 3 and qs[-3] != ks[-3]:
        if not (isinstance(qs[-3], int) and isinstance(ks[-3], int)) or qs[-3] % ks[-3]:
            ctx.unsupported(f"grouped-query attention with {qs[-3]} query and {ks[-3]} "
                            "key/value heads")
        group = qs[-3] // ks[-3]
        k = ctx.call("repeat", k, repeats=group, axis=rank - 3)
        v = ctx.call("repeat", v, repeats=group, axis=rank - 3)
    scale = ctx.arg("scale", None)
    if scale is None:
        e = qs[-1]
        if not isinstance(e, int):
            ctx.unsupported(f"attention with a symbolic head size {e} and no scale")
        scale = 1.0 / math.sqrt(e)
    axes = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    scores = ctx.call("matmul", q, ctx.call("permute_dims", k, axes=axes))
    scores = ctx.call("multiply", scores, ctx.scalar(float(scale), dtype))
    neg = ctx.scalar(-math.inf, dtype)
    if causal:
        scores = ctx.call("where", _causal(ctx, scores, dtype), scores, neg)
    if ctx.has("attn_mask"):
        mask = ctx.x("attn_mask")
        if ctx.dtype(mask) == "bool":
            scores = ctx.call("where", mask, scores, neg)
        else:
            scores = ctx.call("add", scores, ctx.cast(mask, dtype))
    probs = ctx.call("softmax", scores, axis=rank - 1)
    return ctx.call("matmul", probs, v)
