"""ConvertLayout: put layout-sensitive ops in the layouts a target wants.

    ConvertLayout(desired={"conv2d": "NHWC"})          # kernel layout: HWIO
    ConvertLayout(desired={"conv2d": ("NHWC", "HWIO"), "max_pool2d": "NHWC"})

Walking each block in order, a call of an op named in ``desired`` is rebuilt in the
desired layout: its input is transposed into that layout (``permute_dims``), a
convolution's weight into the desired kernel layout, and its result stays in the new
layout.  What follows it keeps the new layout as long as it can:

* elementwise ops of one tensor (``relu``, ``gelu``, ``clip`` ...) run on it as it is;
* broadcasting binary ops (``add``, ``multiply`` ...) run on it with their other
  operand brought into the same layout (a per-channel bias ``(C, 1, 1)`` is reshaped to
  rank 4 and transposed; FoldConstant turns that into a constant);
* ops with a layout attribute (the poolings, ``resize2d``, ``conv2d``) and
  ``batch_norm`` switch to the layout their input is in, when they can take it.

Anywhere else — an op that has no notion of layout (``reshape``, ``matmul``, ...), a
value that leaves its block, the function's result — the value is transposed back
(once per value) where it is used: the transforms sit at the borders of the converted
region, never between two ops that both take the new layout.  Finally a transpose of
a transpose composes into one, and into nothing when the two cancel (a pattern rule),
and the bindings left unused go.  Constant weights are transposed by ``permute_dims``
of the constant: run ``FoldConstant`` after (``ConvertLayout(...),FoldConstant``).

It is an ordinary function pass: on the whole module, or on exactly one external
codegen's functions (``ForCodegen("mydnn", "ConvertLayout(desired={'conv2d': 'NHWC'}),
FoldConstant")``).  Bindings inside ``if`` branches are left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..ir.builder import BlockBuilder
from ..ir.expr import (
    Binding,
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.types import TensorType
from ..ir.visitor import used_vars
from ..op.registry import make_call
from .canonicalize import canonicalize_bindings
from .context import PassContext
from .dead_code import dead_code_elimination
from .fuse_ops import count_uses, substitute
from .pass_base import function_pass
from .pattern import Match, is_op, wildcard
from .pattern_rewrite import Rule, rewrite_function

DATA_LAYOUTS = ("NCHW", "NHWC")
"""The 2-D data layouts (ops take one of these)."""

KERNEL_LAYOUTS = {"NCHW": "OIHW", "NHWC": "HWIO"}
"""The kernel layout that goes with each data layout by default."""

LAYOUT_ATTR = {
    "conv2d": "data_layout", "max_pool2d": "layout", "avg_pool2d": "layout",
    "global_avg_pool2d": "layout", "adaptive_avg_pool2d": "layout", "resize2d": "layout",
}
"""The ops with a data layout attribute, and its name."""


def layout_perm(src: str, dst: str) -> tuple[int, ...]:
    """The axes of ``permute_dims`` taking a tensor in layout ``src`` to ``dst``."""
    return tuple(src.index(c) for c in dst)


def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return tuple(out)


def _check_desired(desired: Any) -> dict[str, tuple[str, str | None]]:
    if not isinstance(desired, Mapping) or not desired:
        raise ValueError("ConvertLayout(desired={op: layout, ...}): give at least one op and "
                         f"its layout, e.g. {{'conv2d': 'NHWC'}}; got {desired!r}")
    out: dict[str, tuple[str, str | None]] = {}
    for op, want in desired.items():
        if op not in LAYOUT_ATTR:
            import difflib

            close = difflib.get_close_matches(str(op), list(LAYOUT_ATTR), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"ConvertLayout: op {op!r} has no layout to convert{hint}; "
                             f"the ops with one are {', '.join(LAYOUT_ATTR)}")
        data, kernel = (want, None) if isinstance(want, str) else tuple(want)
        if data not in DATA_LAYOUTS:
            raise ValueError(f"ConvertLayout: layout {data!r} for {op!r} is not one of "
                             f"{', '.join(DATA_LAYOUTS)}")
        if op == "conv2d":
            kernel = kernel or KERNEL_LAYOUTS[data]
            if kernel not in KERNEL_LAYOUTS.values():
                raise ValueError(f"ConvertLayout: kernel layout {kernel!r} for conv2d is not "
                                 f"one of {', '.join(KERNEL_LAYOUTS.values())}")
        elif kernel is not None:
            raise ValueError(f"ConvertLayout: {op!r} has no kernel layout; give its data "
                             "layout alone")
        out[str(op)] = (data, kernel)
    return out


def _rank4(e: Expr) -> bool:
    ty = e.ty
    return isinstance(ty, TensorType) and ty.shape is not None and len(ty.shape) == 4


def _follows(call: Call) -> str | None:
    """How a call can keep its input's layout: ``"unary"``, ``"binary"``,
    ``"batch_norm"``, or None (it cannot)."""
    op = call.op
    if not isinstance(op, Op) or not op.is_registered:
        return None
    d = op.definition
    if op.name == "batch_norm":
        return "batch_norm"
    if d.pattern not in ("elemwise", "broadcast") or any("axis" in k for k in call.attrs):
        return None
    tensors = [a for a in call.args if isinstance(a.ty, TensorType)]
    if len(tensors) != len(call.args):
        return None
    if len(call.args) == 1:
        return "unary"
    return "binary" if len(call.args) == 2 else None


class _Converter:
    """Converts the blocks of one function."""

    def __init__(self, desired: dict[str, tuple[str, str | None]], mod: IRModule | None):
        self.desired = desired
        self.bb = BlockBuilder(mod)
        self.moved: dict[Var, tuple[Var, tuple[int, ...]]] = {}   # var -> (new var, perm)
        self.back: dict[Var, Expr] = {}                            # var -> original form
        self.made: dict[tuple[Var, tuple[int, ...]], Var] = {}     # transposes emitted
        self.changed = False

    # ------------------------------------------------------------ values
    def emit(self, value: Expr, hint: str) -> Var:
        return self.bb.emit(value, hint)

    def original(self, e: Expr) -> Expr:
        """``e`` in its original layout (transposed back once, where first needed)."""
        if not isinstance(e, Var) or e not in self.moved:
            return e
        got = self.back.get(e)
        if got is None:
            new, perm = self.moved[e]
            got = self.back[e] = self.emit(
                make_call("permute_dims", new, axes=_inverse(perm)), e.name_hint)
        return got

    def in_perm(self, e: Expr, perm: tuple[int, ...], hint: str) -> Expr:
        """``e`` (rank 4, original layout, or moved by ``perm``) transposed by ``perm``."""
        if isinstance(e, Var) and e in self.moved and self.moved[e][1] == perm:
            return self.moved[e][0]
        if isinstance(e, Var) and (e, perm) in self.made:
            return self.made[e, perm]
        out = self.emit(make_call("permute_dims", self.original(e), axes=perm), hint)
        if isinstance(e, Var):
            self.made[e, perm] = out
        return out

    def operand(self, e: Expr, perm: tuple[int, ...]) -> Expr:
        """The other operand of a broadcasting op whose moved operand has ``perm``."""
        ty = e.ty
        if not isinstance(ty, TensorType) or ty.shape is None:
            raise _Unmovable
        if len(ty.shape) == 4:
            return self.in_perm(e, perm, "operand")
        if all(d == 1 for d in ty.shape) or len(ty.shape) > 4:
            if len(ty.shape) > 4:
                raise _Unmovable
            return self.original(e)
        full = (1,) * (4 - len(ty.shape)) + tuple(ty.shape)
        if any(isinstance(d, str) for d in full):
            raise _Unmovable
        shaped = make_call("reshape", self.original(e), shape=full)
        return self.emit(make_call("permute_dims", shaped, axes=perm), "operand")

    # ------------------------------------------------------------ calls
    def convert(self, b: Binding) -> tuple[Expr, tuple[int, ...]] | None:
        """The new value of binding ``b`` in a new layout and its perm, or None."""
        call = b.value
        if not isinstance(call, Call) or not isinstance(call.op, Op):
            return None
        name = call.op.name
        x = call.args[0] if call.args else None
        moved = x is not None and isinstance(x, Var) and x in self.moved
        if name in LAYOUT_ATTR and x is not None and _rank4(x):
            attr = LAYOUT_ATTR[name]
            cur = call.attrs[attr]
            if name in self.desired:
                want, kernel = self.desired[name]
            elif moved:
                perm = self.moved[x][1]  # type: ignore[index]
                want = next((L for L in DATA_LAYOUTS if layout_perm(cur, L) == perm), "")
                kernel = KERNEL_LAYOUTS.get(want)
                if not want:
                    return None
            else:
                return None
            if cur not in DATA_LAYOUTS:
                return None
            perm = layout_perm(cur, want)
            attrs = dict(call.attrs)
            attrs[attr] = want
            args = [self.in_perm(x, perm, x.name_hint)]
            if name == "conv2d":
                k0 = call.attrs["kernel_layout"]
                k1 = kernel or KERNEL_LAYOUTS[want]
                attrs["kernel_layout"] = k1
                w = call.args[1]
                args.append(w if k0 == k1 else self.emit(
                    make_call("permute_dims", w, axes=layout_perm(k0, k1)), "weight"))
            if perm == tuple(range(4)):
                return None
            return make_call(name, *args, **attrs), perm
        kind = _follows(call)
        if kind is None or not any(isinstance(a, Var) and a in self.moved for a in call.args):
            return None
        first = next(a for a in call.args if isinstance(a, Var) and a in self.moved)
        perm = self.moved[first][1]  # type: ignore[index]
        if kind == "unary":
            return Call(call.op, (self.moved[first][0],), call.attrs), perm  # type: ignore[index]
        if kind == "batch_norm":
            if first is not call.args[0]:
                return None
            args = (self.moved[first][0], *(self.original(a) for a in call.args[1:]))
            attrs = dict(call.attrs)
            attrs["axis"] = perm.index(int(call.attrs["axis"]) % 4)
            return make_call("batch_norm", *args, **attrs), perm
        if not _rank4(call):
            return None
        try:
            args = tuple(self.moved[a][0] if a is first else self.operand(a, perm)
                         for a in call.args)
        except _Unmovable:
            return None
        return Call(call.op, args, call.attrs), perm

    # ------------------------------------------------------------ blocks
    def binding(self, b: Binding, dataflow: bool, seen_after: bool) -> None:
        bb = self.bb
        got = self.convert(b) if isinstance(b, VarBinding) else None
        if got is not None:
            value, perm = got
            self.changed = True
            keep = seen_after or not dataflow   # the variable is read after its block
            new = self.bb.emit(value, b.var.name_hint, is_output=keep and dataflow)
            self.moved[b.var] = (new, perm)
            if keep:   # the original variable keeps its layout for whoever reads it
                self.back[b.var] = b.var
                bb.emit_binding(VarBinding(b.var, bb.normalize(make_call(
                    "permute_dims", new, axes=_inverse(perm)))))
            return
        value = self._restore(b.value)
        bb.emit_binding(b if value is b.value else replace(b, value=value))

    def _restore(self, value: Expr) -> Expr:
        """``value`` reading every moved variable in its original layout."""
        if isinstance(value, Var):
            return self.original(value)
        if isinstance(value, Call):
            args = tuple(self._restore(a) if isinstance(a, Var | Tuple) else a
                         for a in value.args)
            if all(x is y for x, y in zip(args, value.args)):
                return value
            return replace(value, args=args)
        if isinstance(value, Tuple):
            fields = tuple(self._restore(f) for f in value.fields)
            if all(x is y for x, y in zip(fields, value.fields)):
                return value
            return replace(value, fields=fields)
        if isinstance(value, TupleGetItem):
            t = self._restore(value.tuple_value)
            return value if t is value.tuple_value else replace(value, tuple_value=t)
        return value

    def seq(self, seq: SeqExpr) -> SeqExpr:
        bb = self.bb
        blocks: list[BindingBlock] = []
        last_use = _last_use(seq)
        for i, block in enumerate(seq.blocks):
            df = isinstance(block, DataflowBlock)
            bb.begin_scope(df)
            for b in block.bindings:
                self.binding(b, df, last_use.get(b.var, -1) > i)
            blocks.append(type(block)(tuple(bb.end_scope())))
            if df:  # dataflow variables do not outlive their block
                self.moved = {v: m for v, m in self.moved.items()
                              if not isinstance(v, DataflowVar) and
                              not isinstance(m[0], DataflowVar)}
                self.made = {k: v for k, v in self.made.items()
                             if not isinstance(k[0], DataflowVar) and
                             not isinstance(v, DataflowVar)}
        body = seq.body
        bb.begin_scope(False)
        new_body = self._restore(body) if isinstance(body, Var | Tuple) else body
        extra = bb.end_scope()
        if extra:
            blocks.append(BindingBlock(tuple(extra)))
        return replace(seq, blocks=tuple(blocks), body=new_body)


def _last_use(seq: SeqExpr) -> dict[Var, int]:
    """The index of the last block reading each variable (the body: one past the end)."""
    out: dict[Var, int] = {}
    for i, block in enumerate(seq.blocks):
        for b in block.bindings:
            for v in used_vars(b.value):
                out[v] = i
    for v in used_vars(seq.body):
        out[v] = len(seq.blocks)
    return out


class _Unmovable(Exception):
    """An operand that cannot follow a layout (unknown rank, symbolic sizes)."""


def _compose(m: Match) -> Expr | None:
    outer, inner = m.call(_TWO_PERMUTES), m.call(_INNER)
    x = inner.args[0]
    if not isinstance(x.ty, TensorType) or x.ty.shape is None:
        return None
    rank = len(x.ty.shape)
    a = inner.attrs.get("axes") or tuple(range(rank))[::-1]
    b = outer.attrs.get("axes") or tuple(range(rank))[::-1]
    axes = tuple(int(a[int(i)]) for i in b)
    if axes == tuple(range(rank)):
        return x
    return make_call("permute_dims", x, axes=axes)


_INNER = is_op("permute_dims")(wildcard())
_TWO_PERMUTES = is_op("permute_dims")(_INNER)
CANCEL_TRANSPOSES = Rule("compose_transposes", _TWO_PERMUTES, _compose)
"""``permute_dims(permute_dims(x, a), b)`` is one transpose of ``x``, or ``x`` itself."""


def convert_layout(func: Function, desired: Mapping[str, Any],
                   mod: IRModule | None = None) -> Function:
    """``func`` with the layouts of ``desired`` (see the module docstring)."""
    want = _check_desired(desired)
    if not isinstance(func.body, SeqExpr):
        return func
    conv = _Converter(want, mod)
    body = conv.seq(func.body)
    if not conv.changed:
        return func
    out = replace(func, body=body)
    out = rewrite_function(out, [CANCEL_TRANSPOSES], mod, max_rounds=4)
    out = _fold_output_aliases(canonicalize_bindings(dead_code_elimination(out)))
    return _demote_unread_outputs(out)


def _demote_unread_outputs(func: Function) -> Function:
    """Variables a dataflow block outputs that nothing after it reads become dataflow
    variables (a converted value the block had to output, whose original took its place
    after the block)."""
    body = func.body
    if not isinstance(body, SeqExpr):
        return func
    last_use = _last_use(body)
    blocks = list(body.blocks)
    for i, block in enumerate(blocks):
        if not isinstance(block, DataflowBlock):
            continue
        subst: dict[Var, Var] = {
            b.var: DataflowVar(b.var.name_hint, ty=b.var.ty) for b in block.bindings
            if isinstance(b, VarBinding) and not isinstance(b.var, DataflowVar)
            and last_use.get(b.var, -1) <= i}
        if subst:
            blocks[i] = DataflowBlock(tuple(
                replace(b, var=subst.get(b.var, b.var), value=substitute(b.value, subst))
                for b in block.bindings))
    if all(a is b for a, b in zip(blocks, body.blocks)):
        return func
    return replace(func, body=replace(body, blocks=tuple(blocks)))


def _fold_output_aliases(func: Function) -> Function:
    """``s = f(...); y = s`` (``y`` leaving the dataflow block, ``s`` used only there)
    becomes ``y = f(...)``: what a cancelled transpose before the block's output leaves."""
    body = func.body
    if not isinstance(body, SeqExpr):
        return func
    uses = count_uses(body)
    blocks = []
    for block in body.blocks:
        if not isinstance(block, DataflowBlock):
            blocks.append(block)
            continue
        index = {b.var: i for i, b in enumerate(block.bindings)}
        new = list(block.bindings)
        for i, b in enumerate(block.bindings):
            src = b.value
            if (isinstance(b, VarBinding) and not isinstance(b.var, DataflowVar)
                    and isinstance(src, DataflowVar) and src in index
                    and uses.get(src, 0) == 1 and src.ty == b.var.ty):
                j = index[src]
                new[j] = VarBinding(b.var, block.bindings[j].value)
                new[i] = None  # type: ignore[call-overload]
        kept = tuple(x for x in new if x is not None)
        blocks.append(block if len(kept) == len(block.bindings) else DataflowBlock(kept))
    if all(a is b for a, b in zip(blocks, body.blocks)):
        return func
    return replace(func, body=replace(body, blocks=tuple(blocks)))


@function_pass(name="ConvertLayout", phases=("optimization",))
class ConvertLayout:
    """Put chosen ops in the desired layouts; layout-agnostic ops follow, transforms at borders."""

    def __init__(self, desired: Mapping[str, Any]) -> None:
        super().__init__()
        _check_desired(desired)
        self.desired = dict(desired)

    def transform_function(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return convert_layout(func, self.desired, mod)


__all__ = ["CANCEL_TRANSPOSES", "ConvertLayout", "convert_layout", "layout_perm"]
