"""The decode rule for attention over the key/value cache (issue 31, item 3; docs/llm.md):
the graph :mod:`plait.llm.split_attention` exports becomes one call of
``plait_kv_attention`` (:mod:`plait.target.c.kernels.decode`), which reads the cache
where it lies.

The graph, per layer (``q`` (B, H, S, D) with H = KV * G heads, the cache ``kp``/``vp``
(P, B, KV, D), the new rows ``kn``/``vn`` (B, KV, S, D))::

    qg = reshape(reshape(q, (B, KV, G, S, D)), (B*H, S, D))
    sp = multiply(reshape(matmul(qg, <kp permuted (1,2,3,0), G-broadcast>)), c)
    sn = multiply(reshape(matmul(qg, <kn transposed, G-broadcast>)), c)
    sn = where(greater(expand_dims(pos, 0), expand_dims(pos, 1)), -inf, sn)   # causal
    p  = softmax(concat((sp, sn), axis=4))
    o  = add(reshape(matmul(reshape(p[..., :P]), <vp permuted (1,2,0,3), G-broadcast>)),
             reshape(matmul(reshape(p[..., P:]), <vn G-broadcast>)))

With a sliding window of W positions (Mistral) both scores are masked as well::

    sp = where(greater_equal(subtract(add(queries, P), expand_dims(arange(P), 0)), W), -inf, sp)
    sn = where(logical_or(causal, greater_equal(subtract(queries, keys), W)), -inf, sn)

(queries = expand_dims(pos, 1), keys = expand_dims(pos, 0), pos = arange(S), P the
cache's length taken from its shape).  The rule anchors on the last ``add`` and follows
each operand back, checking every op, its attributes and that each intermediate has no
other use; anything else (another mask, another scale) is left to the general dispatch.  Today's
alternative is a transposed copy of the whole cache per layer and token (``permute_dims``)
and a copy of the values repeated for each grouped head (``broadcast_to``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from plait.ir.expr import Call, Constant, Expr, Op, Var
from plait.transform.pattern import Match, Pattern, is_op

from ..shapes import float_shape


class _Fail(Exception):
    """The graph is not the split attention's: the rule declines."""


class _Reader:
    """Follows a match's variables back to their values."""

    def __init__(self, m: Match) -> None:
        self.m = m

    def value(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            v = self.m.definition(e)
            if v is not None:
                return v
        return e

    def call(self, e: Expr, name: str, uses: int | None = 1) -> Call:
        """The call of op ``name`` that ``e`` is (its variable used ``uses`` times)."""
        v = self.value(e)
        if not (isinstance(v, Call) and isinstance(v.op, Op) and v.op.name == name):
            raise _Fail
        if uses is not None and isinstance(e, Var) and self.m.graph.uses.get(e, 0) != uses:
            raise _Fail
        return v

    def scalar(self, e: Expr) -> float:
        v = self.value(e)
        if not isinstance(v, Constant) or v.data.size != 1:
            raise _Fail
        return float(np.asarray(v.data).reshape(()))


def _axes(call: Call) -> tuple[int, ...]:
    return tuple(int(a) for a in (call.attrs.get("axes") or ()))


def _expanded(r: _Reader, e: Expr, axis: int = 2) -> Expr:
    """``e`` = expand_dims(x, axis): x."""
    c = r.call(e, "expand_dims", uses=None if axis == 0 else 1)
    if tuple(np.atleast_1d(c.attrs.get("axis"))) != (axis,):
        raise _Fail
    return c.args[0]


def _grouped(r: _Reader, e: Expr) -> Expr:
    """``e`` = reshape(broadcast_to(x)), the grouped-query broadcast, or reshape(x)
    (one query head per key head: nothing to broadcast): x."""
    x = r.call(e, "reshape").args[0]
    try:
        return r.call(x, "broadcast_to").args[0]
    except _Fail:
        return x


def _past(r: _Reader, e: Expr, axes: tuple[int, ...]) -> Expr:
    """A past operand: reshape(broadcast_to(expand_dims(permute_dims(cache, axes), 2)))."""
    perm = r.call(_expanded(r, _grouped(r, e)), "permute_dims")
    if _axes(perm) != axes:
        raise _Fail
    return perm.args[0]


def _scores(r: _Reader, e: Expr) -> tuple[Expr, Expr, float]:
    """multiply(reshape(matmul(qg, k)), c): (qg, k, c)."""
    mul = r.call(e, "multiply")
    scale = r.scalar(mul.args[1])
    mm = r.call(r.call(mul.args[0], "reshape").args[0], "matmul")
    return mm.args[0], mm.args[1], scale


def _causal(r: _Reader, cond: Expr) -> tuple[Expr, Expr]:
    """greater(expand_dims(x, 0), expand_dims(x, 1)), key j after query i: the two
    expanded positions (keys (1, S), queries (S, 1))."""
    gt = r.call(cond, "greater", uses=None)        # shared by the layers
    a, b = (r.call(x, "expand_dims", uses=None) for x in gt.args)
    if not (a.args[0] is b.args[0] and tuple(np.atleast_1d(a.attrs.get("axis"))) == (0,)
            and tuple(np.atleast_1d(b.attrs.get("axis"))) == (1,)):
        raise _Fail
    return gt.args[0], gt.args[1]


def _window(r: _Reader, cond: Expr, first: Expr, second: Expr) -> int:
    """greater_equal(subtract(first, second), W): W, a positive integer."""
    ge = r.call(cond, "greater_equal", uses=None)
    sub = r.call(ge.args[0], "subtract", uses=None)
    if sub.args[0] is not first or sub.args[1] is not second:
        raise _Fail
    w = r.scalar(ge.args[1])
    if w != int(w) or w < 1:
        raise _Fail
    return int(w)


def _arange(r: _Reader, e: Expr) -> Any:
    """The length of ``e`` = arange(n) as torch.export decomposes it
    (add(multiply(subtract(cumsum(broadcast_to(1, (n,))), 1), 1), 0), the add and the
    multiply optional): n."""
    for name, unit in (("add", 0.0), ("multiply", 1.0)):
        try:
            c = r.call(e, name, uses=None)
        except _Fail:
            continue
        if r.scalar(c.args[1]) != unit:
            raise _Fail
        e = c.args[0]
    sub = r.call(e, "subtract", uses=None)
    if r.scalar(sub.args[1]) != 1.0:
        raise _Fail
    cs = r.call(sub.args[0], "cumsum", uses=None)
    if int(cs.attrs.get("axis", -1)) != 0:
        raise _Fail
    ones = r.call(cs.args[0], "broadcast_to", uses=None)
    shape = tuple(ones.attrs.get("shape") or ())
    if r.scalar(ones.args[0]) != 1.0 or len(shape) != 1:
        raise _Fail
    return shape[0]


def _new_mask(r: _Reader, cond: Expr) -> tuple[Expr, Expr, int]:
    """The new rows' mask: causal, or causal or-ed with a sliding window
    (logical_or(causal, greater_equal(subtract(queries, keys), W)), either order):
    (key positions, query positions, W or 0)."""
    try:
        either = r.call(cond, "logical_or", uses=None)
    except _Fail:
        return (*_causal(r, cond), 0)
    for c, w in (either.args, tuple(reversed(either.args))):
        try:
            keys, queries = _causal(r, c)
            return keys, queries, _window(r, w, queries, keys)
        except _Fail:
            continue
    raise _Fail


def _past_window(r: _Reader, cond: Expr, queries: Expr, past: Any) -> int:
    """The past's sliding-window mask: greater_equal(subtract(add(queries, P),
    expand_dims(arange(P), 0)), W), with P the cache's length
    (take(shape_of(cache), 0)): W."""
    ge = r.call(cond, "greater_equal", uses=None)
    sub = r.call(ge.args[0], "subtract", uses=None)
    add = r.call(sub.args[0], "add", uses=None)
    size = add.args[1] if add.args[0] is queries else add.args[0]
    if queries not in (add.args[0], add.args[1]):
        raise _Fail
    take = r.call(size, "take", uses=None)
    if int(take.attrs.get("axis", 0)) != 0 or r.scalar(take.args[1]) != 0.0:
        raise _Fail
    cache = float_shape(r.call(take.args[0], "shape_of", uses=None).args[0])
    if not cache or cache[0] != past or _arange(r, _expanded(r, sub.args[1], 0)) != past:
        raise _Fail
    return _window(r, cond, sub.args[0], sub.args[1])


def trace_kv_attention(m: Match, root: Call) -> dict[str, Any] | None:
    """The operands of the split attention ending in ``root`` (an ``add``): ``q``,
    ``kp``, ``vp``, ``kn``, ``vn``, ``scale`` and ``window`` (a sliding window's length,
    0 for none); None when it is not that graph."""
    r = _Reader(m)
    try:
        mms = [r.call(r.call(x, "reshape").args[0], "matmul") for x in root.args]
        slices = [r.call(r.call(mm.args[0], "reshape").args[0], "strided_slice")
                  for mm in mms]
        if slices[0].attrs.get("begin") != (0,):
            mms.reverse()
            slices.reverse()
        sm_var = slices[0].args[0]
        if slices[1].args[0] is not sm_var or any(_axes(s) != (4,) for s in slices):
            raise _Fail
        sm = r.call(sm_var, "softmax", uses=2)
        if int(sm.attrs.get("axis", -1)) not in (-1, 4):
            raise _Fail
        cat = r.call(sm.args[0], "concat")
        if int(cat.attrs.get("axis", 0)) not in (4, -1) or len(cat.args[0].fields) != 2:
            raise _Fail
        s_past, s_new = cat.args[0].fields
        where = r.call(s_new, "where")
        if r.scalar(where.args[1]) != -np.inf:
            raise _Fail
        keys, queries, window = _new_mask(r, where.args[0])
        past_where = None
        if window:
            past_where = r.call(s_past, "where")
            if r.scalar(past_where.args[1]) != -np.inf:
                raise _Fail
            s_past = past_where.args[2]
            _arange(r, _expanded(r, keys, 0))          # the positions are 0, 1, ...
        qg, kpe, scale = _scores(r, s_past)
        qg2, kne, scale2 = _scores(r, where.args[2])
        if qg2 is not qg or scale2 != scale:
            raise _Fail
        kp = _past(r, kpe, (1, 2, 3, 0))
        if past_where is not None:
            p = float_shape(kp)
            if not p or _past_window(r, past_where.args[0], queries, p[0]) != window:
                raise _Fail
        vp = _past(r, mms[0].args[1], (1, 2, 0, 3))
        kt = r.call(_grouped(r, kne), "permute_dims")
        if _axes(kt) != (0, 1, 2, 4, 3):
            raise _Fail
        kn = _expanded(r, kt.args[0])
        vn = _expanded(r, _grouped(r, mms[1].args[1]))
        q5 = r.call(qg, "reshape", uses=2)
        q = r.call(q5.args[0], "reshape").args[0]
    except _Fail:
        return None
    shapes = {k: float_shape(v) for k, v in
              {"q": q, "kp": kp, "vp": vp, "kn": kn, "vn": vn, "out": root}.items()}
    if any(s is None or len(s) != (5 if k == "out" else 4) for k, s in shapes.items()):
        return None
    b, kv, g, s, d = shapes["out"]  # type: ignore[misc]
    heads = shapes["q"][1]  # type: ignore[index]
    if not all(type(x) is int for x in (kv, g, d, heads)) or heads != kv * g:
        return None
    if (shapes["kp"] != shapes["vp"] or shapes["kn"] != shapes["vn"]
            or tuple(shapes["kn"]) != (b, kv, s, d)  # type: ignore[arg-type]
            or tuple(shapes["kp"][1:]) != (b, kv, d)  # type: ignore[index]
            or tuple(shapes["q"]) != (b, heads, s, d)):  # type: ignore[arg-type]
        return None
    return {"q": q, "kp": kp, "vp": vp, "kn": kn, "vn": vn, "scale": scale,
            "window": window, "shapes": shapes}


def kv_attention_pattern() -> Pattern:
    """The anchor: ``add(reshape(matmul), reshape(matmul))`` (the rest is traced)."""
    def part() -> Pattern:
        return is_op("reshape")(is_op("matmul").has_dtype("float32"))

    return is_op("add")(part(), part())


__all__ = ["kv_attention_pattern", "trace_kv_attention"]
