"""The ``c`` target's fused attention: ``softmax(scale * Q @ K^T) @ V`` as one call.

:class:`DispatchAttention` (``c.DispatchAttention``, first in the ``c`` target's dispatch
stage) finds, in each dataflow block,

    s = matmul(q, k)              # q: (..., SQ, D), k: (..., D, SK)
    s = multiply(s, c)            # optional, any number: c a float32 scalar constant
    s = add(s, m)                 # optional, once: a float32 mask broadcasting to s
    p = softmax(s, axis=-1)
    p = where(not(any(s != -inf, axis=-1, keepdims)), 0, p)   # optional: the guard
    o = matmul(p, v)              # v: (..., SK, DV)
    y = permute_dims(o, axes)     # optional, when it keeps the last axis last

with ``s`` and ``p`` (and ``o`` when permuted) used nowhere else (but by the guard) —
the pattern :data:`ATTENTION` — where reshapes that only regroup the batch axes may sit
between the steps (torch's ``bmm`` works on (batch * heads, rows, d) and views the scores
as (batch, heads, rows, keys)), and rewrites the last binding into a call of ``plait_attention``
(``plait_attention.c``): per batch and head, 6 query rows at a time, the scores are
computed on the micro-kernel's register tile into a block that stays in the L1 cache,
the softmax is applied there and the probabilities are multiplied by V straight into
the output.  The score matrix never goes to memory.

``q``, ``k`` and ``v`` are read where they lie: each is followed back through view ops
(``reshape``, ``expand_dims``, ``squeeze``, ``flatten``, ``permute_dims``,
``strided_slice``) and scalar multiplications (folded into the scale) to a tensor whose
strided view it is — the heads of one fused QKV projection are three views of its
output, so the split, reshape and transpose copies disappear.  Batch dimensions
broadcast (a K shared by all heads is a stride of 0).  The stride arithmetic is that of
numpy's views, on size expressions (:mod:`.views`), so a reshape that would need a copy
is recognized as numpy recognizes it, and a model of symbolic batch and sequence is
read in place like a static one: the call takes its sizes at run time (:mod:`.dims`).

The guard is what PyTorch's ``scaled_dot_product_attention`` decomposes into
(``_safe_softmax``: the ``any`` written as a max over a cast to uint8): a query row whose
scores are all -inf gives zeros instead of the softmax's NaN.  The fused call does the
same (``zero_masked_rows``); without the guard such a row gives NaN, as numpy's softmax.

The mask (a BERT-style padding mask of shape (batch, 1, 1, keys), a causal mask of
(queries, keys) with -inf above the diagonal, a relative-position bias) is read as a
strided view too, broadcast dimensions as strides of 0; the scales met between the mask
and the softmax scale it as well.

Not taken (left to ``c.DispatchGemm`` and legalization): float64, more than one tensor
added to the scores, a softmax over another axis, ranks above 4, empty dimensions,
views whose strides depend on which sizes are 1 at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.codegen.c.sizes import UnboundSize
from plait.ir.expr import (
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    Op,
    Tuple,
)
from plait.ir.module import IRModule
from plait.ir.symbolic import Dim, product
from plait.op.registry import make_call
from plait.transform.dead_code import dead_code_elimination
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, Pattern, is_const, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, functions_to_rewrite, rewrite_function

from ..kernels.attention import attention_call
from ..kernels.registry import record_calls
from ..kernels.wrapper import emit_call
from ..shapes import float_shape
from ..views import View, broadcast_strides
from .common import fused_span

VIEW_CHAIN_OPS = ("reshape", "expand_dims", "squeeze", "flatten", "permute_dims",
                  "strided_slice")
"""The ops a Q, K or V operand is followed back through (each only re-indexes)."""



def _op_name(value: Expr) -> str | None:
    if isinstance(value, Call) and isinstance(value.op, Op):
        return value.op.name
    return None


def _scalar(e: Expr) -> float | None:
    """The value of a float32 constant of one element, else None."""
    if isinstance(e, Constant) and e.data.dtype == np.float32 and e.data.size == 1:
        return float(e.data.reshape(()))
    return None


def _scale_of(value: Expr) -> tuple[Expr, float] | None:
    """``(x, c)`` when ``value`` is ``multiply(x, c)``/``multiply(c, x)`` or
    ``divide(x, c)`` with ``c`` a float32 scalar constant and the result shaped like
    ``x``; else None."""
    name = _op_name(value)
    if name not in ("multiply", "divide"):
        return None
    assert isinstance(value, Call)
    a, b = value.args
    if name == "multiply" and _scalar(a) is not None:
        a, b = b, a
    c = _scalar(b)
    if c is None or a.ty != value.ty:
        return None
    if name == "divide":
        if c == 0.0:
            return None
        c = 1.0 / c
    return a, c


@dataclass
class _Operand:
    """A tensor read as a strided view of ``base`` (element strides, offset; sizes may
    be symbolic)."""

    base: Expr
    offset: Dim
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    scale: float


def _replay(view: View, call: Call) -> View | None:
    """``call`` (a view op) applied to ``view``, or None when that needs a copy."""
    name = _op_name(call)
    out_shape = float_shape(call)
    if out_shape is None:
        return None
    a = call.attrs
    if name == "permute_dims":
        out: View | None = view.permute(a.get("axes"))
    elif name == "strided_slice":
        steps = a.get("strides") or (1,) * len(a["axes"])
        out = view.slice(a["axes"], a["begin"], steps, out_shape)
    else:   # reshape, expand_dims, squeeze, flatten: the same elements in the same order
        out = view.reshape(out_shape)
    return out if out is not None and tuple(out.shape) == tuple(out_shape) else None


def _operand(e: Expr, definition: Callable[[Expr], Expr | None]) -> _Operand | None:
    """``e`` followed back through view ops and scalar multiplications (the values
    ``definition`` gives for variables) to the tensor it views."""
    chain: list[Call] = []
    scale = 1.0
    base = e
    while (value := definition(base)) is not None:
        if _op_name(value) in VIEW_CHAIN_OPS and len(value.args) == 1:  # type: ignore[union-attr]
            assert isinstance(value, Call)
            chain.append(value)
            base = value.args[0]
            continue
        scaled = _scale_of(value)
        if scaled is None:
            break
        base, c = scaled
        scale *= c
    shape = float_shape(base)
    if shape is None:
        return None
    view: View | None = View.contiguous(shape)
    for call in reversed(chain):
        view = _replay(view, call)  # type: ignore[arg-type]
        if view is None:
            return None
    assert view is not None
    return _Operand(base, view.offset, view.shape, view.strides, scale)


def _batched(op: _Operand, batch: tuple[Dim, ...], tail: tuple[Dim, Dim]) -> list[Dim] | None:
    """The operand's strides as (b, h, row, col) with its batch dimensions broadcast to
    ``batch`` (at most 2 dimensions), or None when its shape does not fit."""
    if len(op.shape) < 2 or tuple(op.shape[-2:]) != tail:
        return None
    return _broadcast_strides(op, batch + tail)


def _broadcast_strides(op: _Operand, shape: tuple[Dim, ...]) -> list[Dim] | None:
    """The operand's strides broadcast to ``shape`` (rank 2 to 4), as 4 (b, h, row,
    col), or None when it does not broadcast."""
    out = broadcast_strides(View(op.shape, op.strides, op.offset), shape)
    return None if out is None else [0] * (4 - len(shape)) + out


@dataclass
class _Attention:
    q: _Operand
    k: _Operand
    v: _Operand
    mask: _Operand | None
    desc: dict[str, Any]
    out_ty: Any
    members: list[int]       # binding indices replaced (the last one gets the call)

    def symbol_and_code(self) -> tuple[str, str, CFunction]:
        """The wrapper's symbol, C text and :class:`CFunction`; symbolic sizes are its
        size arguments, the descriptor's fields expressions over them."""
        q, k, v, *m = (float_shape(x.base) for x in self.operands())
        return emit_call(attention_call(q, k, v, m[0] if m else None,  # type: ignore[arg-type]
                                        tuple(self.out_ty.shape), self.desc))

    def operands(self) -> list[_Operand]:
        """Q, K, V and the mask (when there is one), in the C function's order."""
        return [self.q, self.k, self.v] + ([self.mask] if self.mask else [])


# -------------------------------------------------------------- the rule


def _is_scale(call: Call) -> bool:
    return _scale_of(call) is not None


def _scale_step(y: Pattern) -> Pattern:
    """A multiplication of the running value ``y`` (read only here) by a float32
    scalar constant, or its division by one."""
    y = y.single_use()
    c = is_const()
    return (is_op("multiply", "divide")(y, c) | is_op("multiply")(c, y)).where(_is_scale)


def _keeps_first(call: Call) -> bool:
    return call.args[0].ty == call.ty and float_shape(call.args[1]) is not None


def _keeps_second(call: Call) -> bool:
    return call.args[1].ty == call.ty and float_shape(call.args[0]) is not None


def _mask_step(s: Pattern) -> Pattern:
    """The scores ``s`` plus a float32 mask broadcasting to them (either order)."""
    s = s.single_use()
    return (is_op("add")(s, wildcard()).where(_keeps_first)
            | is_op("add")(wildcard(), s).where(_keeps_second))


def _softmax_ok(call: Call) -> bool:
    shape = float_shape(call)
    return (shape is not None and 2 <= len(shape) <= 4 and 0 not in shape
            and int(call.attrs["axis"]) % len(shape) == len(shape) - 1)


def _output_permutation_ok(call: Call) -> bool:
    """A permute_dims that keeps the last axis last (the output is written in place)."""
    rank = len(call.ty.shape) if call.ty.shape is not None else 0  # type: ignore[union-attr]
    axes = call.attrs.get("axes")
    order = list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]
    return bool(order) and order[-1] == rank - 1 and float_shape(call) is not None


def _batch_reshape_ok(call: Call) -> bool:
    """A reshape that keeps the last two axes and regroups only the batch axes (the
    (heads, rows, keys) <-> (1, heads, rows, keys) views around torch's ``bmm``)."""
    src, dst = float_shape(call.args[0]), float_shape(call)
    return (src is not None and dst is not None and len(src) >= 2 and len(dst) >= 2
            and src[-2:] == dst[-2:] and product(src[:-2]) == product(dst[:-2]))


def _batch_reshape_step(y: Pattern) -> Pattern:
    return is_op("reshape")(y.single_use()).where(_batch_reshape_ok)


def _scores_step(y: Pattern) -> Pattern:
    return _scale_step(y) | _batch_reshape_step(y)


SCORES = is_op("matmul").repeat(_scores_step).optional(_mask_step).repeat(_scores_step)
"""``Q @ K^T``, scaled any number of times, plus at most one mask, scaled again; views
that regroup the batch axes may come anywhere between."""

GUARDED_SOFTMAX = is_op("where")(wildcard(), wildcard(),
                                 is_op("softmax")(SCORES).where(_softmax_ok))
"""``where(row_is_all_masked, 0, softmax(scores))``: the guard PyTorch's
scaled_dot_product_attention decomposition puts around the softmax, so a query row whose
every score is -inf gives zeros instead of NaN (checked by :func:`_masked_row_guard`)."""

ATTENTION = is_op("matmul")(
    (is_op("softmax")(SCORES.single_use()).where(_softmax_ok) | GUARDED_SOFTMAX)
    .single_use().optional(_batch_reshape_step),
    wildcard(),
).optional(lambda o: is_op("permute_dims")(o.single_use()).where(_output_permutation_ok))
"""The shape :class:`DispatchAttention` takes: ``softmax(scores, axis=-1) @ V`` (the
softmax optionally guarded against fully masked rows, the probabilities' batch axes
optionally regrouped), optionally permuted with the last axis kept last."""


def _unwrap(e: Expr, m: Match, *names: str) -> Call | None:
    """The call bound to ``e`` when it is one of ``names`` (casts to bool or an integer
    type looked through first), else None."""
    while True:
        v = m.definition(e)
        if not isinstance(v, Call):
            return None
        name = _op_name(v)
        if name == "cast" and "cast" not in names:
            e = v.args[0]
            continue
        return v if name in names else None


def _is_neg_inf(e: Expr) -> bool:
    return (isinstance(e, Constant) and e.data.size == 1
            and bool(np.isneginf(e.data.reshape(())).item()))


def _masked_row_guard(where: Call, scores: Expr, m: Match) -> bool:
    """Whether ``where`` is ``where(not(any(scores != -inf, axis=-1, keepdims)), 0, p)``
    (the any written as ``max`` over a cast to an integer, the ``!=`` as
    ``not(==)``): the condition is true exactly on rows of ``scores`` that are all -inf,
    and the value there is zero."""
    cond, fill = where.args[0], where.args[1]
    fv = m.definition(fill) if not isinstance(fill, Constant) else fill
    if isinstance(fv, Constant):
        if fv.data.size == 0 or np.any(fv.data != 0):
            return False
    elif not (isinstance(fv, Call) and _op_name(fv) == "full_like"
              and fv.attrs.get("fill_value") in (0, 0.0, False)):
        return False
    rank = len(where.ty.shape)  # type: ignore[union-attr]
    outer = _unwrap(cond, m, "logical_not")
    red = _unwrap(outer.args[0], m, "max", "any") if outer is not None else None
    if red is None or not red.attrs.get("keepdims"):
        return False
    axis = red.attrs.get("axis")
    axes = [axis] if isinstance(axis, int) else list(axis or ())
    if [int(a) % rank for a in axes] != [rank - 1]:
        return False
    inner = _unwrap(red.args[0], m, "logical_not", "not_equal")
    if inner is not None and _op_name(inner) == "logical_not":
        inner = _unwrap(inner.args[0], m, "equal")
    if inner is None:
        return False
    a, b = inner.args
    return (a is scores and _is_neg_inf(b)) or (b is scores and _is_neg_inf(a))


def _strip_ones(shape: Sequence[Dim]) -> tuple[Dim, ...]:
    """``shape`` without its leading 1s."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _attention_plan(m: Match) -> _Attention | None:
    """The fused call for a match of :data:`ATTENTION` (bindings in program order:
    the scores' matmul, scalings and the mask, the softmax, the product with V, the
    permutation), or None when the operands are no strided views it can read."""
    g = m.graph
    members = sorted(m.bindings)
    calls = [g.bindings[i].value for i in members]
    names = [_op_name(c) for c in calls]
    k_sm = names.index("softmax")
    k_mm2 = names.index("matmul", k_sm)
    sm, mm1, mm2 = calls[k_sm], calls[0], calls[k_mm2]
    shape = float_shape(sm)
    s_shape = float_shape(mm1)
    if (shape is None or s_shape is None or s_shape[-2:] != shape[-2:]
            or mm1.ty.dtype != sm.ty.dtype):  # type: ignore[union-attr]
        return None
    zero_rows = 0
    if "where" in names[k_sm:k_mm2]:
        guard = calls[names.index("where", k_sm)]
        if not _masked_row_guard(guard, sm.args[0], m):
            return None
        zero_rows = 1
    # the scales between the scores and the softmax, and the mask: the scales after
    # the mask (nearer the softmax) apply to the mask too
    scale, mask, mask_scale, mask_shape = 1.0, None, 1.0, shape
    prev = g.bindings[members[0]].var
    for i, call in zip(members[1:k_sm], calls[1:k_sm]):
        name = _op_name(call)
        if name == "add":
            mask = call.args[1] if call.args[0] is prev else call.args[0]
            mask_shape = float_shape(call)
        elif name != "reshape":
            c = _scale_of(call)[1]  # type: ignore[index]
            scale *= c
            if mask is not None:
                mask_scale *= c
        prev = g.bindings[i].var
    qe, ke = mm1.args
    ve = mm2.args[1]
    o_shape = float_shape(mm2)
    if (o_shape is None or 0 in o_shape or not 2 <= len(o_shape) <= 4
            or product(o_shape[:-2]) != product(shape[:-2])):
        return None
    out_ty = mm2.ty
    o_view = View.contiguous(o_shape)
    if len(calls) > k_mm2 + 1:   # the output permutation: written in place
        perm = calls[k_mm2 + 1]
        axes = perm.attrs.get("axes")
        rank = len(o_shape)
        order = list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]
        o_view = View.contiguous(float_shape(perm)).permute(  # type: ignore[arg-type]
            [int(a) for a in np.argsort(order)])
        out_ty = perm.ty
    q, k, v = (_operand(e, m.definition) for e in (qe, ke, ve))
    if q is None or k is None or v is None:
        return None
    mo = _operand(mask, m.definition) if mask is not None else None
    if mo is not None and _strip_ones(mask_shape[:-2]) != _strip_ones(o_shape[:-2]):
        return None   # the mask broadcasts over batch axes that the output regroups
    ms = _broadcast_strides(mo, mask_shape) if mo is not None else [0, 0, 0, 0]
    if mask is not None and (mo is None or ms is None):
        return None
    batch = tuple(o_shape[:-2])
    sq, dv = o_shape[-2:]
    sk = shape[-1]
    d = q.shape[-1] if q.shape else 0
    if d == 0:
        return None
    qs = _batched(q, batch, (sq, d))
    ks = _batched(k, batch, (d, sk))
    vs = _batched(v, batch, (sk, dv))
    if qs is None or ks is None or vs is None:
        return None
    os_: list[Dim] = list(o_view.strides)
    if os_[-1] != 1:
        return None
    os_ = [0] * (4 - len(os_)) + os_
    lead = (1,) * (2 - len(batch)) + batch
    desc = dict(B=lead[0], H=lead[1], SQ=sq, SK=sk, D=d, DV=dv,
                q_off=q.offset, q_sb=qs[0], q_sh=qs[1], q_ss=qs[2], q_sd=qs[3],
                # K is given as K^T (..., D, SK): element (j, e) of K is at (e, j)
                k_off=k.offset, k_sb=ks[0], k_sh=ks[1], k_ss=ks[3], k_sd=ks[2],
                v_off=v.offset, v_sb=vs[0], v_sh=vs[1], v_ss=vs[2], v_sd=vs[3],
                o_sb=os_[0], o_sh=os_[1], o_ss=os_[2],
                scale=float(np.float32(scale * q.scale * k.scale)),
                m_off=mo.offset if mo is not None else 0, m_sb=ms[0], m_sh=ms[1],
                m_si=ms[2], m_sj=ms[3],
                mask_scale=float(np.float32(mask_scale * (mo.scale if mo else 1.0))),
                zero_masked_rows=zero_rows)
    if v.scale != 1.0 or not np.isfinite([desc["scale"], desc["mask_scale"]]).all():
        return None
    return _Attention(q, k, v, mo, desc, out_ty, members)


def attention_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`DispatchAttention`: :data:`ATTENTION`, and a rewrite into
    the fused call (its C wrapper recorded in ``wrappers``)."""

    def rewrite(m: Match) -> Expr | None:
        att = _attention_plan(m)
        if att is None:
            return None
        try:
            name, code, cfn = att.symbol_and_code()
        except UnboundSize:
            return None   # a stride naming a size no operand binds
        wrappers.setdefault(name, (code, cfn))
        root = m.graph.bindings[att.members[-1]]
        return make_call("call_extern", ExternFunc(name), Tuple([x.base for x in att.operands()]),
                         out=att.out_ty, span=fused_span(m.graph, att.members, root))

    return Rule("c.attention", ATTENTION, rewrite)


def dispatch_attention(mod: IRModule, skip: Any = None) -> IRModule:
    """``mod`` with float32 attention patterns (see the module docstring) rewritten into
    calls of ``plait_attention``; functions for which ``skip`` is true (default: those
    of external codegens) are left alone."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    rule = attention_rule(wrappers)
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        nf = rewrite_function(f, [rule], mod, name=name)
        if nf is not f:
            funcs[name] = dead_code_elimination(nf)
    return record_calls(mod, wrappers, "plait_attention_calls", funcs)


@module_pass(name="c.DispatchAttention", phases=("optimization",))
class DispatchAttention:
    """Send float32 attention, softmax(scale * Q @ K^T) @ V, to one fused native call.

    Q, K, V and an additive mask are read as strided views of the tensors they slice,
    broadcast or transpose, and scalar multiplications of Q, K or the scores fold into
    the scale."""

    def __init__(self, *, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_attention(mod, skip=skips_external(self, ctx))  # type: ignore[arg-type]
