"""``Attention`` (opset 23+): scaled dot-product attention with the masks ONNX defines
(an attention mask, causal and sliding-window masks aligned to a KV cache, padding of
the KV sequence), grouped-query heads, a past KV cache, soft-capping and the optional
QK output, as matmuls, a softmax and elementwise ops.  The batch and the sequence
lengths (query, past, key/value) may be symbolic: masks that depend only on static
lengths are constants, on symbolic ones they are computed from row and column numbers
when the model runs; the heads and the head size must be static."""

from __future__ import annotations

import numpy as np

from ....ir import symbolic
from ....ir.expr import Expr, Tuple
from ....ir.types import Dim
from ..context import NodeContext
from ..registry import converter
from .common import cast, dtype_of, onnx_dtype, reshape, scalar, shape_of
from .shape import pad_sizes, size_range


def _heads_first(ctx: NodeContext, x: Expr, heads: int) -> Expr:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    b, s, hidden = shape_of(ctx, x)
    if not isinstance(hidden, int) or hidden % heads:
        ctx.fail(f"the hidden size {hidden} does not split into {heads} heads")
    t = reshape(ctx, x, [b, s, heads, hidden // heads])
    return ctx.call("permute_dims", t, axes=(0, 2, 1, 3))


def _mask_bias(ctx: NodeContext, allowed: Expr, dtype: str) -> Expr:
    """0 where allowed, -inf elsewhere."""
    return ctx.call("where", allowed, scalar(ctx, 0, dtype), scalar(ctx, -np.inf, dtype))


def _positions(ctx: NodeContext, n: Dim) -> np.ndarray | Expr:
    """``0, 1, ..., n - 1`` (int64): a numpy array for a static ``n``, else computed when
    the model runs."""
    if isinstance(n, int):
        return np.arange(n, dtype=np.int64)
    return size_range(ctx, 0, n, 1, "int64")


def _length(ctx: NodeContext, x: Expr, axis: int) -> Expr:
    """The size of ``x``'s axis ``axis`` as an int64 scalar read when the model runs."""
    return ctx.call("take", ctx.call("shape_of", x), scalar(ctx, axis, "int64"), axis=0)


def _frontier(
    ctx: NodeContext, qs: Dim, kvs: Dim, offset: int | Expr, test: str, window: tuple[int, int]
) -> Expr:
    """The bias of a causal (``test == "causal"``) or sliding-window mask whose query
    ``i`` sits at absolute position ``i + offset`` (offset per batch when an
    expression of shape (batch,), or a scalar expression)."""
    left, right = window
    i, j = _positions(ctx, qs), _positions(ctx, kvs)
    if isinstance(offset, int) and isinstance(i, np.ndarray) and isinstance(j, np.ndarray):
        diff = i.reshape(-1, 1) + offset - j.reshape(1, -1)
        if test == "causal":
            allowed = diff >= 0
        else:
            allowed = np.ones_like(diff, dtype=bool)
            if left >= 0:
                allowed &= diff <= left
            if right >= 0:
                allowed &= -diff <= right
        return ctx.constant(allowed)
    rows = ctx.constant(i.reshape(-1, 1)) if isinstance(i, np.ndarray) else \
        ctx.call("expand_dims", i, axis=1)
    cols = ctx.constant(j) if isinstance(j, np.ndarray) else j
    if isinstance(offset, int):
        pos = ctx.call("add", rows, scalar(ctx, offset, "int64")) if offset else rows
    else:
        off = ctx.call("reshape", offset, shape=(-1, 1, 1, 1))
        pos = ctx.call("add", rows, off)  # (batch, 1, q, 1)
    diff = ctx.call("subtract", pos, cols)
    zero = scalar(ctx, 0, "int64")
    if test == "causal":
        return ctx.call("greater_equal", diff, zero)
    allowed = None
    if left >= 0:
        allowed = ctx.call("less_equal", diff, scalar(ctx, left, "int64"))
    if right >= 0:
        r = ctx.call("less_equal", ctx.call("neg", diff), scalar(ctx, right, "int64"))
        allowed = r if allowed is None else ctx.call("logical_and", allowed, r)
    return allowed if allowed is not None else ctx.call("greater_equal", diff, diff)


@converter("Attention", since=23)
def convert_attention(ctx: NodeContext) -> list[Expr]:
    """Scaled dot-product attention: ``softmax(Q K^T * scale + bias) V`` with ONNX's masks,
    grouped-query heads, a past KV cache and the optional outputs."""
    rank = ctx.rank(0)
    if rank not in (3, 4):
        ctx.fail(f"Q must be 3-D or 4-D, got rank {rank}")
    dt = ctx.dtype(0)
    q, k, v = ctx.x(0), ctx.x(1), ctx.x(2)
    q_heads = ctx.attr_int("q_num_heads", None)
    kv_heads = ctx.attr_int("kv_num_heads", None)
    if rank == 3:
        if q_heads is None or kv_heads is None:
            ctx.fail("3-D inputs need q_num_heads and kv_num_heads")
        q, k, v = (
            _heads_first(ctx, q, q_heads),
            _heads_first(ctx, k, kv_heads),
            _heads_first(ctx, v, kv_heads),
        )
    batch, hq, qs, head = shape_of(ctx, q)
    if not all(isinstance(d, int) for d in (hq, head)):
        ctx.fail(f"the heads and the head size must be static, got Q of shape "
                 f"{shape_of(ctx, q)} (batch, heads, sequence, head size)")
    scale = ctx.attr_float("scale", None)
    if scale is None:
        scale = 1 / np.sqrt(head)
    s = scalar(ctx, np.sqrt(scale), dt)
    if ctx.has(4) != ctx.has(5):
        ctx.fail("past_key and past_value must be given together")
    offset: int | Expr = 0
    if ctx.has(4):
        past_len = shape_of(ctx, ctx.x(4))[2]
        offset = past_len if isinstance(past_len, int) else _length(ctx, ctx.x(4), 2)
        k = ctx.call("concat", Tuple((ctx.x(4), ctx.atom(k))), axis=2)
        v = ctx.call("concat", Tuple((ctx.x(5), ctx.atom(v))), axis=2)
    present_k, present_v = k, v
    kvs = shape_of(ctx, k)[2]
    nonpad = cast(ctx, ctx.x(6), "int64") if ctx.has(6) else None
    is_causal = bool(ctx.attr_int("is_causal", 0))
    window = (ctx.attr_int("left_window_size", -1), ctx.attr_int("right_window_size", -1))
    if nonpad is not None and not ctx.has(4):
        length = scalar(ctx, qs, "int64") if isinstance(qs, int) else _length(ctx, q, 2)
        offset = ctx.call("subtract", nonpad, length)

    bias: Expr | None = None
    if ctx.has(3):
        mask = ctx.x(3)
        mshape = shape_of(ctx, mask)
        pad = symbolic.sub(kvs, mshape[-1])
        boolean = dtype_of(ctx, mask) == "bool"
        if pad != 0:   # a mask shorter than the keys: the keys past it are masked
            if not symbolic.prove_ge(pad, 0):
                pad = symbolic.maximum(pad, 0)
            width: list[Dim] = [0] * (2 * len(mshape))
            width[-1] = pad
            mask = pad_sizes(ctx, mask, width, "constant", 0.0 if boolean else -np.inf)
        bias = _mask_bias(ctx, mask, dt) if boolean else cast(ctx, mask, dt)
    if is_causal:
        causal = _mask_bias(ctx, _frontier(ctx, qs, kvs, offset, "causal", window), dt)
        bias = causal if bias is None else ctx.call("add", bias, causal)
    if window[0] >= 0 or window[1] >= 0:
        win = _mask_bias(ctx, _frontier(ctx, qs, kvs, offset, "window", window), dt)
        bias = win if bias is None else ctx.call("add", bias, win)
    if nonpad is not None:
        cols = _positions(ctx, kvs)
        keep = ctx.call(
            "less",
            ctx.constant(cols) if isinstance(cols, np.ndarray) else cols,
            ctx.call("reshape", nonpad, shape=(-1, 1, 1, 1)),
        )
        padding = _mask_bias(ctx, keep, dt)
        bias = padding if bias is None else ctx.call("add", bias, padding)

    hk = shape_of(ctx, k)[1]
    if isinstance(hk, int) and hq != hk:
        if hq % hk:
            ctx.fail(f"{hq} query heads are not a multiple of {hk} key/value heads")
        k = ctx.call("repeat", k, repeats=hq // hk, axis=1)
        v = ctx.call("repeat", v, repeats=hq // hk, axis=1)
    qk = ctx.call(
        "matmul",
        ctx.call("multiply", q, s),
        ctx.call("multiply", ctx.call("permute_dims", k, axes=(0, 1, 3, 2)), s),
    )
    softcap = ctx.attr_float("softcap", 0.0)
    if softcap > 0:
        c = scalar(ctx, softcap, dt)
        qk = ctx.call("multiply", ctx.call("tanh", ctx.call("divide", qk, c)), c)
    with_bias = qk if bias is None else ctx.call("add", qk, bias)
    mode = ctx.attr_int("qk_matmul_output_mode", 0)
    qk_out = with_bias if mode == 2 else qk
    work = with_bias
    precision = ctx.attr_int("softmax_precision", None)
    if precision:
        work = cast(ctx, work, onnx_dtype(ctx, precision, "softmax_precision"))
    probs = ctx.call("softmax", work, axis=-1)
    if bias is not None:  # rows whose every key is masked attend nothing: zeros
        row_max = ctx.call("max", bias, axis=-1, keepdims=True)
        masked = ctx.call("equal", row_max, scalar(ctx, -np.inf, dt))
        probs = ctx.call("where", masked, scalar(ctx, 0, dtype_of(ctx, probs)), probs)
    if mode == 3:
        qk_out = probs
    probs = cast(ctx, probs, dt)
    y = ctx.call("matmul", probs, v)
    if rank == 3:
        y = ctx.call("permute_dims", y, axes=(0, 2, 1, 3))
        b, sq, _, _ = shape_of(ctx, y)
        y = reshape(ctx, y, [b, sq, hq * shape_of(ctx, v)[3]])  # type: ignore[operator]
    return [y, present_k, present_v, cast(ctx, qk_out, dt)]


@converter(
    "LinearAttention", since=27,
    attr_choices={"update_rule": ("linear", "gated", "delta", "gated_delta")},
)  # fmt: skip
def convert_linear_attention(ctx: NodeContext) -> list[Expr]:
    """The recurrence unrolled over the (static) sequence: the state decays (gated),
    is corrected by the retrieved value (delta) and accumulates ``k v^T``; each step
    reads ``scale * q S`` (computed in float32)."""
    rule = ctx.attr_str("update_rule", "gated_delta")
    hq, hkv = ctx.attr_int("q_num_heads"), ctx.attr_int("kv_num_heads")
    if hq <= 0 or hkv <= 0 or hq % hkv:
        ctx.fail(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != ctx.has(4) or delta != ctx.has(5):
        ctx.fail(f"update_rule {rule!r} needs decay: {gating}, beta: {delta}")
    dt = ctx.dtype(0)
    f32 = "float32"
    q = _heads_first(ctx, cast(ctx, ctx.x(0), f32), hq)
    k = _heads_first(ctx, cast(ctx, ctx.x(1), f32), hkv)
    v = _heads_first(ctx, cast(ctx, ctx.x(2), f32), hkv)
    b, _, t, dk = shape_of(ctx, k)
    dv = shape_of(ctx, v)[3]
    if not all(isinstance(d, int) for d in (t, dk, dv)):
        ctx.fail("the sequence length and head sizes must be static")
    decay = beta = None
    if gating:
        dshape = shape_of(ctx, ctx.x(4))
        d = cast(ctx, ctx.x(4), f32)
        if dshape[-1] == hkv:
            decay = ctx.call("permute_dims", reshape(ctx, d, [b, t, hkv, 1]), axes=(0, 2, 1, 3))
        else:
            decay = _heads_first(ctx, d, hkv)
    if delta:
        last = shape_of(ctx, ctx.x(5))[-1]
        beta = ctx.call(
            "permute_dims",
            reshape(ctx, cast(ctx, ctx.x(5), f32), [b, t, last, 1]),
            axes=(0, 2, 1, 3),
        )
    if ctx.has(3):
        state_dtype = ctx.dtype(3)
        state = cast(ctx, ctx.x(3), f32)
    else:
        state_dtype = dt
        if not isinstance(b, int):
            ctx.fail("a missing past_state needs a static batch size")
        state = ctx.constant(np.zeros((b, hkv, dk, dv), np.float32))
    scale = ctx.attr_float("scale", 0.0) or 1 / np.sqrt(dk)
    from .common import select

    outs = []
    for i in range(t):  # type: ignore[arg-type]
        q_t, k_t, v_t = select(ctx, q, i, 2), select(ctx, k, i, 2), select(ctx, v, i, 2)
        if decay is not None:
            g = ctx.call("exp", select(ctx, decay, i, 2))
            state = ctx.call("multiply", state, ctx.call("expand_dims", g, axis=-1))
        if beta is not None:
            kx = ctx.call("expand_dims", k_t, axis=-1)
            retrieved = ctx.call("sum", ctx.call("multiply", state, kx), axis=-2)
            v_t = ctx.call(
                "multiply", select(ctx, beta, i, 2), ctx.call("subtract", v_t, retrieved)
            )
        outer = ctx.call(
            "multiply", ctx.call("expand_dims", k_t, axis=-1), ctx.call("expand_dims", v_t, axis=-2)
        )
        state = ctx.call("add", state, outer)
        read = state if hq == hkv else ctx.call("repeat", state, repeats=hq // hkv, axis=1)
        o = ctx.call(
            "sum", ctx.call("multiply", ctx.call("expand_dims", q_t, axis=-1), read), axis=-2
        )
        outs.append(
            ctx.atom(
                ctx.call("expand_dims", ctx.call("multiply", o, scalar(ctx, scale, f32)), axis=2)
            )
        )
    y = ctx.call("concat", Tuple(tuple(outs)), axis=2) if len(outs) > 1 else outs[0]
    y = ctx.call("permute_dims", y, axes=(0, 2, 1, 3))
    y = reshape(ctx, y, [b, t, hq * dv])
    return [cast(ctx, y, dt), cast(ctx, state, state_dtype)]
