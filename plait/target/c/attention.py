"""The ``c`` target's fused attention: ``softmax(scale * Q @ K^T) @ V`` as one call.

:class:`DispatchAttention` (``c.DispatchAttention``, first in the ``c`` target's dispatch
stage) finds, in each dataflow block,

    s = matmul(q, k)              # q: (..., SQ, D), k: (..., D, SK)
    s = multiply(s, c)            # optional, any number: c a float32 scalar constant
    s = add(s, m)                 # optional, once: a float32 mask broadcasting to s
    p = softmax(s, axis=-1)
    o = matmul(p, v)              # v: (..., SK, DV)
    y = permute_dims(o, axes)     # optional, when it keeps the last axis last

with ``s`` and ``p`` (and ``o`` when permuted) used nowhere else, and rewrites the last
binding into a call of ``plait_attention`` (in ``plait_gemm.c``): per batch and head,
6 query rows at a time, the scores are computed on the micro-kernel's register tile into
a block that stays in the L1 cache, the softmax is applied there and the probabilities
are multiplied by V straight into the output.  The score matrix never goes to memory.

``q``, ``k`` and ``v`` are read where they lie: each is followed back through view ops
(``reshape``, ``expand_dims``, ``squeeze``, ``flatten``, ``permute_dims``,
``strided_slice``) and scalar multiplications (folded into the scale) to a tensor whose
strided view it is — the heads of one fused QKV projection are three views of its
output, so the split, reshape and transpose copies disappear.  Batch dimensions
broadcast (a K shared by all heads is a stride of 0).  The stride arithmetic is numpy's
own: the view ops are replayed on a zero-copy strided stand-in array, so a reshape that
would need a copy is recognized exactly as numpy recognizes it.

The mask (a BERT-style padding mask of shape (batch, 1, 1, keys), a causal mask of
(queries, keys) with -inf above the diagonal, a relative-position bias) is read as a
strided view too, broadcast dimensions as strides of 0; the scales met between the mask
and the softmax scale it as well.

Not taken (left to ``c.DispatchGemm`` and legalization): float64, more than one tensor
added to the scores, a softmax over another axis, ranks above 4, empty dimensions,
dynamic shapes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.ir.builder import BlockBuilder
from plait.ir.expr import (
    BindingBlock,
    Call,
    Constant,
    Expr,
    ExternFunc,
    Function,
    Op,
    SeqExpr,
    Tuple,
    Var,
    VarBinding,
)
from plait.ir.module import IRModule
from plait.op.registry import make_call
from plait.transform.dead_code import dead_code_elimination
from plait.transform.pass_base import module_pass

from .gemm import _static_shape, _use_counts, functions_to_rewrite, with_native_calls

VIEW_CHAIN_OPS = ("reshape", "expand_dims", "squeeze", "flatten", "permute_dims",
                  "strided_slice")
"""The ops a Q, K or V operand is followed back through (each only re-indexes)."""

_ITEM = 4   # bytes of a float32


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
    """A tensor read as a strided view of ``base`` (element strides, offset)."""

    base: Expr
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    scale: float


def _stand_in(shape: tuple[int, ...]) -> np.ndarray:
    """A C-contiguous float32 array of ``shape`` backed by no memory of its own: for
    stride arithmetic only (views of it are never read)."""
    strides = []
    acc = _ITEM
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=shape,
                                           strides=tuple(reversed(strides)))


def _replay(arr: np.ndarray, call: Call) -> np.ndarray | None:
    """``call`` (a view op) applied to ``arr`` as a numpy view, or None when that
    needs a copy."""
    name = _op_name(call)
    out_shape = _static_shape(call)
    if out_shape is None:
        return None
    a = call.attrs
    if name == "permute_dims":
        axes = a.get("axes")
        view = arr.transpose(None if axes is None else tuple(int(x) for x in axes))
    elif name == "strided_slice":
        idx: list[slice] = [slice(None)] * arr.ndim
        steps = a.get("strides") or (1,) * len(a["axes"])
        for ax, b, e, s in zip(a["axes"], a["begin"], a["end"], steps):
            idx[int(ax) % arr.ndim] = slice(int(b), int(e), int(s))
        view = arr[tuple(idx)]
    else:   # reshape, expand_dims, squeeze, flatten: the same elements in the same order
        view = arr.view()
        try:
            view.shape = out_shape
        except AttributeError:
            return None
    return view if view.shape == out_shape else None


def _operand(e: Expr, bound: dict[Var, Expr]) -> _Operand | None:
    """``e`` followed back through view ops and scalar multiplications (bindings of
    ``bound``) to the tensor it views."""
    chain: list[Call] = []
    scale = 1.0
    base = e
    while isinstance(base, Var) and base in bound:
        value = bound[base]
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
    shape = _static_shape(base)
    if shape is None:
        return None
    arr = _stand_in(shape)
    start = arr.__array_interface__["data"][0]
    for call in reversed(chain):
        arr = _replay(arr, call)
        if arr is None:
            return None
    offset = (arr.__array_interface__["data"][0] - start) // _ITEM
    return _Operand(base, offset, tuple(arr.shape),
                    tuple(s // _ITEM for s in arr.strides), scale)


def _batched(op: _Operand, batch: tuple[int, ...], tail: tuple[int, int]) -> list[int] | None:
    """The operand's strides as (b, h, row, col) with its batch dimensions broadcast to
    ``batch`` (at most 2 dimensions), or None when its shape does not fit."""
    if len(op.shape) < 2 or tuple(op.shape[-2:]) != tail:
        return None
    return _broadcast_strides(op, batch + tail)


def _leads_to_scores(e: Expr, bound: dict[Var, Expr], counts: dict[Var, int]) -> bool:
    """Whether ``e`` is a matmul result used once, possibly through scalar scalings."""
    while isinstance(e, Var) and counts.get(e, 0) == 1 and e in bound:
        value = bound[e]
        if _op_name(value) == "matmul":
            return True
        scaled = _scale_of(value)
        if scaled is None:
            return False
        e = scaled[0]
    return False


def _mask_of(value: Expr, bound: dict[Var, Expr],
             counts: dict[Var, int]) -> tuple[Var, Expr] | None:
    """``(scores, mask)`` when ``value`` is ``add`` of the scores (a matmul result,
    possibly scaled) and a float32 tensor that broadcasts to them; else None."""
    if _op_name(value) != "add":
        return None
    assert isinstance(value, Call)
    for s, m in (value.args, value.args[::-1]):
        if (isinstance(s, Var) and s.ty == value.ty and _static_shape(m) is not None
                and _leads_to_scores(s, bound, counts)):
            return s, m
    return None


def _broadcast_strides(op: _Operand, shape: tuple[int, ...]) -> list[int] | None:
    """The operand's strides broadcast to ``shape`` (rank 2 to 4), as 4 (b, h, row,
    col), or None when it does not broadcast."""
    try:
        view = np.broadcast_to(
            np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=op.shape,
                                            strides=tuple(s * _ITEM for s in op.strides)),
            shape)
    except ValueError:
        return None
    return [0] * (4 - len(shape)) + [s // _ITEM for s in view.strides]


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
        d = self.desc
        fields = ", ".join(
            repr(d[k]) if "scale" not in k else f"{float(np.float32(d[k])).hex()}f"
            for k in ATTENTION_FIELDS)
        params = [(_static_shape(x.base), "float32") for x in self.operands()]
        params.append((_static_shape_of_type(self.out_ty), "float32"))
        key = repr((sorted(d.items()), params))
        name = f"plait_attention_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
        mask_param, mask_arg = ("const float* m, ", "m") if self.mask else ("", "NULL")
        code = (f"int {name}(const float* q, const float* k, const float* v, {mask_param}"
                f"float* out) {{\n"
                f"    static const plait_attention_desc d = {{{fields}}};\n"
                f"    return plait_attention(&d, q, k, v, {mask_arg}, out);\n}}\n")
        return name, code, CFunction(name, tuple(params), 1, name, "int")

    def operands(self) -> list[_Operand]:
        """Q, K, V and the mask (when there is one), in the C function's order."""
        return [self.q, self.k, self.v] + ([self.mask] if self.mask else [])


ATTENTION_FIELDS = ("B", "H", "SQ", "SK", "D", "DV",
                    "q_off", "q_sb", "q_sh", "q_ss", "q_sd",
                    "k_off", "k_sb", "k_sh", "k_ss", "k_sd",
                    "v_off", "v_sb", "v_sh", "v_ss", "v_sd",
                    "o_sb", "o_sh", "o_ss", "scale",
                    "m_off", "m_sb", "m_sh", "m_si", "m_sj", "mask_scale")
"""The fields of ``plait_attention_desc``, in order."""


def _static_shape_of_type(ty: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in ty.shape)


def _match(i: int, bindings: Sequence[Any], index: dict[Var, int], bound: dict[Var, Expr],
           counts: dict[Var, int]) -> _Attention | None:
    """The attention whose softmax is binding ``i``, or None."""
    sm = bindings[i].value
    if _op_name(sm) != "softmax" or not isinstance(sm.args[0], Var):
        return None
    shape = _static_shape(sm)
    if shape is None or not 2 <= len(shape) <= 4 or 0 in shape:
        return None
    if int(sm.attrs["axis"]) % len(shape) != len(shape) - 1:
        return None
    p = bindings[i].var
    # the scores, through scalar multiplications and at most one additive mask: the
    # scales met before the mask (nearer the softmax) apply to it too
    members = [i]
    scale, mask, mask_scale = 1.0, None, 1.0
    s = sm.args[0]
    while True:
        if counts.get(s, 0) != 1 or s not in index:
            return None
        members.append(index[s])
        value = bound[s]
        scaled = _scale_of(value)
        if scaled is None and mask is None:
            masked = _mask_of(value, bound, counts)
            if masked is not None:
                s, mask = masked
                mask_scale = scale
                continue
        if scaled is None:
            break
        s2, c = scaled
        if not isinstance(s2, Var):
            return None
        s, scale = s2, scale * c
    if _op_name(value) != "matmul" or value.ty != sm.ty:
        return None
    qe, ke = value.args
    # the product with V: the one use of p
    users = [j for j in range(i + 1, len(bindings))
             if _op_name(bindings[j].value) == "matmul" and bindings[j].value.args[0] is p]
    if counts.get(p, 0) != 1 or len(users) != 1:
        return None
    j = users[0]
    mm2 = bindings[j].value
    ve = mm2.args[1]
    o_shape = _static_shape(mm2)
    if o_shape is None or len(o_shape) != len(shape) or 0 in o_shape:
        return None
    members.append(j)
    out_var = bindings[j].var
    out_ty = mm2.ty
    # an output permutation that keeps the last axis last: written in place
    o_arr = _stand_in(o_shape)
    users = [u for u in range(j + 1, len(bindings))
             if _op_name(bindings[u].value) == "permute_dims"
             and bindings[u].value.args[0] is out_var]
    if counts.get(out_var, 0) == 1 and len(users) == 1:
        perm = bindings[users[0]].value
        axes = perm.attrs.get("axes")
        rank = len(o_shape)
        order = list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]
        if order[-1] == rank - 1:
            y_shape = _static_shape(perm)
            if y_shape is not None:
                o_arr = _stand_in(y_shape).transpose(np.argsort(order))
                members.append(users[0])
                out_ty = perm.ty
    q, k, v = (_operand(e, bound) for e in (qe, ke, ve))
    if q is None or k is None or v is None:
        return None
    m = _operand(mask, bound) if mask is not None else None
    ms = _broadcast_strides(m, shape) if m is not None else [0, 0, 0, 0]
    if mask is not None and (m is None or ms is None):
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
    os_ = [s // _ITEM for s in o_arr.strides]
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
                m_off=m.offset if m is not None else 0, m_sb=ms[0], m_sh=ms[1], m_si=ms[2],
                m_sj=ms[3], mask_scale=float(np.float32(mask_scale * (m.scale if m else 1.0))))
    if v.scale != 1.0 or not np.isfinite([desc["scale"], desc["mask_scale"]]).all():
        return None
    return _Attention(q, k, v, m, desc, out_ty, sorted(members))


def _rewrite_block(block: BindingBlock, counts: dict[Var, int], bound: dict[Var, Expr],
                   wrappers: dict[str, tuple[str, CFunction]]) -> BindingBlock:
    bindings = block.bindings
    index = {b.var: i for i, b in enumerate(bindings) if isinstance(b, VarBinding)}
    found: list[_Attention] = []
    taken: set[int] = set()
    for i, b in enumerate(bindings):
        if isinstance(b, VarBinding) and _op_name(b.value) == "softmax":
            att = _match(i, bindings, index, bound, counts)
            if att is not None and not taken & set(att.members):
                found.append(att)
                taken.update(att.members)
    if not found:
        return block
    replace: dict[int, Expr] = {}
    drop: set[int] = set()
    bb = BlockBuilder()
    for att in found:
        name, code, cfn = att.symbol_and_code()
        wrappers.setdefault(name, (code, cfn))
        last = att.members[-1]
        args = Tuple([x.base for x in att.operands()])
        replace[last] = bb.normalize(make_call("call_extern", ExternFunc(name), args,
                                               out=att.out_ty,
                                               span=bindings[last].value.span))
        drop.update(att.members[:-1])
    out = []
    for i, b in enumerate(bindings):
        if i in drop:
            continue
        out.append(VarBinding(b.var, replace[i]) if i in replace else b)
    return type(block)(tuple(out))


def dispatch_attention(mod: IRModule, skip: Any = None) -> IRModule:
    """``mod`` with float32 attention patterns (see the module docstring) rewritten into
    calls of ``plait_attention``; functions for which ``skip`` is true (default: those
    of external codegens) are left alone."""
    wrappers: dict[str, tuple[str, CFunction]] = {}
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        assert isinstance(f.body, SeqExpr)
        bound = {b.var: b.value for blk in f.body.blocks for b in blk.bindings
                 if isinstance(b, VarBinding)}
        counts = _use_counts(f)
        blocks = tuple(_rewrite_block(blk, counts, bound, wrappers) for blk in f.body.blocks)
        if all(a is b for a, b in zip(blocks, f.body.blocks)):
            continue
        body = SeqExpr(blocks, f.body.body, ty=f.body.ty, span=f.body.span)
        funcs[name] = dead_code_elimination(
            Function(f.params, body, f.ret_ty, f.pure, attrs=f.attrs, span=f.span))
    return with_native_calls(mod, funcs, wrappers, "plait_attention_calls")


@module_pass(name="c.DispatchAttention", phases=("optimization",))
class DispatchAttention:
    """Send float32 attention, softmax(scale * Q @ K^T) @ V, to one fused native call.

    Q, K, V and an additive mask are read as strided views of the tensors they slice,
    broadcast or transpose, and scalar multiplications of Q, K or the scores fold into
    the scale."""

    def __init__(self, *, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import enabled_codegens

        enabled = enabled_codegens(self, ctx)  # type: ignore[arg-type]
        return dispatch_attention(mod, skip=lambda f: bool(f.attrs.get("compiler"))
                                  and f.attrs.get("compiler") not in enabled)
