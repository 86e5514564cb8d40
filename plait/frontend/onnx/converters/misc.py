"""Ops expressed by decomposition: ``Einsum``, ``Col2Im``, the ``ai.onnx.ml`` ops
``Binarizer`` and ``ArrayFeatureExtractor``, and the optimizer update rules of
``ai.onnx.preview.training`` (``Adagrad``, ``Momentum``, ``Adam``)."""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter
from .common import cast, norm_axis, reshape, scalar

# ------------------------------------------------------------------------ Einsum


def _parse_einsum(ctx: NodeContext, eq: str, ranks: list[int]) -> tuple[list[str], str]:
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        ctx.fail(f"the equation has {len(terms)} operands, the node {len(ranks)}", "equation")
    ells = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            if n < 0:
                ctx.fail(f"operand {term!r} has rank {rank}", "equation")
            ells.append(n)
        elif len(term) != rank:
            ctx.fail(f"operand {term!r} does not match rank {rank}", "equation")
    ell_max = max(ells, default=0)
    fixed = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            n = rank - (len(term) - 3)
            ell = "".join(chr(0x100 + k) for k in range(ell_max - n, ell_max))
            term = term.replace("...", ell)
        fixed.append(term)
    ell_all = "".join(chr(0x100 + k) for k in range(ell_max))
    if arrow:
        out = rhs.replace("...", ell_all)
    else:
        counts: dict[str, int] = {}
        for t in fixed:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell_all + "".join(sorted(c for c, n in counts.items() if n == 1 and ord(c) < 0x100))
    return fixed, out


def _einsum_as_matmul(ctx: NodeContext, terms: list[str], out: str) -> Expr | None:
    """A two-operand equation that is a batched matrix product -- every letter of an
    operand either a batch letter (in both operands and the output), the one row letter
    (first operand and output), the one column letter (second operand and output) or the
    one contracted letter (both operands, not the output), as in attention's
    ``bhlk,bhtk->bhlt`` -- as ``matmul`` between permutations; None for any other
    equation (then the broadcast product and sum of :func:`convert_einsum`)."""
    if len(terms) != 2 or any(len(set(t)) != len(t) for t in terms) or len(set(out)) != len(out):
        return None
    a, b = terms
    if set(out) - set(a) - set(b):
        return None
    batch = [c for c in out if c in a and c in b]
    rows = [c for c in out if c in a and c not in b]
    cols = [c for c in out if c in b and c not in a]
    inner = [c for c in a if c in b and c not in out]
    if len(rows) != 1 or len(cols) != 1 or len(inner) != 1:
        return None
    if set(a) != {*batch, *rows, *inner} or set(b) != {*batch, *inner, *cols}:
        return None   # a letter summed in one operand alone: the general path

    def arranged(i: int, term: str, order: list[str]) -> Expr:
        x = ctx.x(i)
        perm = tuple(term.index(c) for c in order)
        return x if perm == tuple(range(len(perm))) else ctx.call("permute_dims", x, axes=perm)

    y = ctx.call("matmul", arranged(0, a, [*batch, *rows, *inner]),
                 arranged(1, b, [*batch, *inner, *cols]))
    have = [*batch, *rows, *cols]
    perm = tuple(have.index(c) for c in out)
    return y if perm == tuple(range(len(perm))) else ctx.call("permute_dims", y, axes=perm)


@converter("Einsum", since=12)
def convert_einsum(ctx: NodeContext) -> Expr:
    """A batched matrix product of two operands (each letter a batch, row, column or
    contracted one, as attention's ``bhlk,bhtk->bhlt``) as ``matmul`` between
    permutations; any other equation: each operand's diagonals taken and its axes
    aligned to the output and summed letters; then a broadcast product and a sum over
    the summed letters."""
    n = ctx.n_inputs
    shapes = [ctx.shape(i) for i in range(n)]
    terms, out = _parse_einsum(ctx, ctx.attr_str("equation"), [len(s) for s in shapes])
    for ch in out:
        if not any(ch in t for t in terms):
            ctx.fail(f"the output letter {ch!r} is in no operand", "equation")
    product = _einsum_as_matmul(ctx, terms, out)
    if product is not None:
        return product
    letters = list(out) + sorted({c for t in terms for c in t} - set(out))
    operands = []
    for i, term in enumerate(terms):
        x = ctx.x(i)
        shape = list(shapes[i])
        chars = list(term)
        # repeated letters: keep the diagonal
        while len(set(chars)) != len(chars):
            ch = next(c for c in chars if chars.count(c) > 1)
            p = chars.index(ch)
            q = chars.index(ch, p + 1)
            size = shape[p]
            if not isinstance(size, int) or shape[q] != size:
                ctx.fail(f"the diagonal over {ch!r} needs equal static sizes, got {shape}")
            eye_shape = [1] * len(chars)
            eye_shape[p], eye_shape[q] = size, size
            eye = np.eye(size, dtype=ctx.dtype(i)).reshape(eye_shape)
            x = ctx.call("sum", ctx.call("multiply", x, ctx.constant(eye)), axis=q)
            del chars[q]
            del shape[q]
        # letters only in this operand and not in the output: sum them now
        others = {c for j, t in enumerate(terms) if j != i for c in t} | set(out)
        lone = [k for k, c in enumerate(chars) if c not in others]
        if lone:
            x = ctx.call("sum", x, axis=tuple(lone))
            chars = [c for k, c in enumerate(chars) if k not in lone]
        present = [c for c in letters if c in chars]
        perm = [chars.index(c) for c in present]
        if perm != list(range(len(perm))):
            x = ctx.call("permute_dims", x, axes=tuple(perm))
        missing = [k for k, c in enumerate(letters) if c not in chars]
        if missing:
            x = ctx.call("expand_dims", x, axis=tuple(missing))
        operands.append(x)
    y = operands[0]
    for o in operands[1:]:
        y = ctx.call("multiply", y, o)
    summed = tuple(range(len(out), len(letters)))
    if summed:
        y = ctx.call("sum", y, axis=summed)
    return y


# ------------------------------------------------------------------------ Col2Im


@converter("Col2Im", since=18)
def convert_col2im(ctx: NodeContext) -> Expr:
    """``scatter_elements`` (add) of the columns into the image at constant indices."""
    xs = ctx.static_shape(0)
    image = [int(v) for v in ctx.const(1, "the image shape").reshape(-1)]
    block = [int(v) for v in ctx.const(2, "the block shape").reshape(-1)]
    nd = len(image)
    dil = ctx.attr_ints("dilations", [1] * nd)
    pads = ctx.attr_ints("pads", [0] * (2 * nd))
    strides = ctx.attr_ints("strides", [1] * nd)
    assert dil is not None and pads is not None and strides is not None
    n, ck, length = xs
    k = math.prod(block)
    if ck % k:
        ctx.fail(f"the input's second size {ck} is not a multiple of the block size {k}")
    c = ck // k
    counts = [
        (image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(nd)
    ]
    if math.prod(counts) != length:
        ctx.fail(f"the input has {length} columns, the geometry gives {math.prod(counts)}")
    hw = math.prod(image)
    # flat output position (or hw, a dump slot, for padding) of every (kernel tap, column)
    pos = np.zeros((k, length), dtype=np.int64)
    for kt, tap in enumerate(np.ndindex(*block)):
        for col, win in enumerate(np.ndindex(*counts)):
            coords = [win[i] * strides[i] + tap[i] * dil[i] - pads[i] for i in range(nd)]
            inside = all(0 <= coords[i] < image[i] for i in range(nd))
            pos[kt, col] = np.ravel_multi_index(coords, image) if inside else hw
    idx = (np.arange(c, dtype=np.int64)[:, None, None] * (hw + 1) + pos[None]).reshape(1, -1)
    idx = np.broadcast_to(idx, (n, idx.shape[1])).copy()
    zeros = ctx.constant(np.zeros((n, c * (hw + 1)), dtype=ctx.dtype(0)))
    vals = reshape(ctx, ctx.x(0), [n, ck * length])
    y = ctx.call("scatter_elements", zeros, ctx.constant(idx), vals, axis=1, reduction="add")
    y = reshape(ctx, y, [n, c, hw + 1])
    y = ctx.call("strided_slice", y, axes=(2,), begin=(0,), end=(hw,))
    return reshape(ctx, y, [n, c, *image])


# ------------------------------------------------------------------- ai.onnx.ml


@converter("Binarizer", domain="ai.onnx.ml")
def convert_binarizer(ctx: NodeContext) -> Expr:
    """1 where x > threshold, else 0."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    cond = ctx.call("greater", x, scalar(ctx, ctx.attr_float("threshold", 0.0), dt))
    return ctx.call("where", cond, scalar(ctx, 1, dt), scalar(ctx, 0, dt))


@converter("ArrayFeatureExtractor", domain="ai.onnx.ml")
def convert_array_feature_extractor(ctx: NodeContext) -> Expr:
    """``take`` along the last axis."""
    r = ctx.rank(0)
    idx = reshape(ctx, cast(ctx, ctx.x(1), "int64"), [-1])
    return ctx.call("take", ctx.x(0), idx, axis=norm_axis(ctx, -1, r))


# ------------------------------------------------------- ai.onnx.preview.training

_TRAINING = "ai.onnx.preview.training"


def _training_inputs(ctx: NodeContext, groups: int) -> tuple[Expr, Expr, list[list[Expr]]]:
    n = (ctx.n_inputs - 2) // groups
    r, t = ctx.x(0), ctx.x(1)
    tensors = [[ctx.x(2 + g * n + i) for i in range(n)] for g in range(groups)]
    return r, t, tensors


def _c(ctx: NodeContext, v: float, like: Expr) -> Expr:
    dt = ctx.type_of(like).dtype or "float32"
    return scalar(ctx, v, dt)


@converter("Adagrad", domain=_TRAINING)
def convert_adagrad(ctx: NodeContext) -> list[Expr]:
    """The Adagrad update rule."""
    r, t, (xs, gs, hs) = _training_inputs(ctx, 3)
    decay, eps = ctx.attr_float("decay_factor", 0.0), ctx.attr_float("epsilon", 1e-6)
    norm = ctx.attr_float("norm_coefficient", 0.0)
    tf = cast(ctx, t, ctx.type_of(r).dtype or "float32")
    rate = ctx.call(
        "divide", r, ctx.call("add", _c(ctx, 1, r), ctx.call("multiply", tf, _c(ctx, decay, r)))
    )
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        greg = ctx.call("add", ctx.call("multiply", _c(ctx, norm, x), x), g)
        h2 = ctx.call("add", h, ctx.call("multiply", greg, greg))
        adapt = ctx.call("add", ctx.call("sqrt", h2), _c(ctx, eps, x))
        step = ctx.call("divide", ctx.call("multiply", cast(ctx, rate, ctx.dtype(2)), greg), adapt)
        new_x.append(ctx.call("subtract", x, step))
        new_h.append(h2)
    return new_x + new_h


@converter("Momentum", domain=_TRAINING, attr_choices={"mode": ("standard", "nesterov")})
def convert_momentum(ctx: NodeContext) -> list[Expr]:
    """SGD with momentum (standard or Nesterov)."""
    r, t, (xs, gs, vs) = _training_inputs(ctx, 3)
    alpha, beta = ctx.attr_float("alpha"), ctx.attr_float("beta")
    norm = ctx.attr_float("norm_coefficient")
    nesterov = ctx.attr_str("mode") == "nesterov"
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        dt = ctx.type_of(x).dtype or "float32"
        first = ctx.call("greater", t, scalar(ctx, 0, ctx.type_of(t).dtype or "int64"))
        b = ctx.call("where", first, scalar(ctx, beta, dt), scalar(ctx, 1, dt))
        greg = ctx.call("add", ctx.call("multiply", scalar(ctx, norm, dt), x), g)
        v2 = ctx.call(
            "add", ctx.call("multiply", scalar(ctx, alpha, dt), v), ctx.call("multiply", b, greg)
        )
        rr = cast(ctx, r, dt)
        if nesterov:
            upd = ctx.call("add", greg, ctx.call("multiply", scalar(ctx, alpha, dt), v2))
        else:
            upd = v2
        new_x.append(ctx.call("subtract", x, ctx.call("multiply", rr, upd)))
        new_v.append(v2)
    return new_x + new_v


@converter("Adam", domain=_TRAINING)
def convert_adam(ctx: NodeContext) -> list[Expr]:
    """The Adam update rule with bias correction."""
    r, t, (xs, gs, vs, hs) = _training_inputs(ctx, 4)
    alpha, beta = ctx.attr_float("alpha", 0.9), ctx.attr_float("beta", 0.999)
    eps = ctx.attr_float("epsilon", 1e-6)
    norm, post = (
        ctx.attr_float("norm_coefficient", 0.0),
        ctx.attr_float("norm_coefficient_post", 0.0),
    )
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        dt = ctx.type_of(x).dtype or "float32"

        def s(val: float, dt: str = dt) -> Expr:
            return scalar(ctx, val, dt)

        tf = cast(ctx, t, dt)
        greg = ctx.call("add", ctx.call("multiply", s(norm), x), g)
        v2 = ctx.call(
            "add", ctx.call("multiply", s(alpha), v), ctx.call("multiply", s(1 - alpha), greg)
        )
        h2 = ctx.call(
            "add", ctx.call("multiply", s(beta), h),
            ctx.call("multiply", s(1 - beta), ctx.call("multiply", greg, greg)),
        )  # fmt: skip
        hs_ = ctx.call("add", ctx.call("sqrt", h2), s(eps))
        rr = cast(ctx, r, dt)
        corr = ctx.call(
            "divide",
            ctx.call("sqrt", ctx.call("subtract", s(1), ctx.call("power", s(beta), tf))),
            ctx.call("subtract", s(1), ctx.call("power", s(alpha), tf)),
        )
        first = ctx.call("greater", t, scalar(ctx, 0, ctx.type_of(t).dtype or "int64"))
        radj = ctx.call("where", first, ctx.call("multiply", rr, corr), rr)
        x2 = ctx.call("subtract", x, ctx.call("multiply", radj, ctx.call("divide", v2, hs_)))
        if post:
            x2 = ctx.call("multiply", s(1 - post), x2)
        new_x.append(x2)
        new_v.append(v2)
        new_h.append(h2)
    return new_x + new_v + new_h
