"""FuseOps: group chains of fusable op calls into primitive functions.

Each group that :func:`plait.transform.fusion_groups.partition` forms (two or more
bindings; see that module for the rules) becomes a module-level graph function with
the attributes ``{"primitive": True, "private": True}`` -- a *primitive function*, as
in TVM Relax -- and the group's bindings in the caller are replaced by one call of it::

    # before                                  # after
    y = matmul(x, w)                          y = matmul(x, w)
    z = add(y, b)                             r = cls.fused_add_relu(y, b)
    r = relu(z)

    @function(attrs={"primitive": True, "private": True})
    def fused_add_relu(y: ..., b: ...) -> ...:
        with dataflow():
            z = add(y, b)
            r = relu(z)
            output(r)
        return r

The primitive function's parameters are the values the group reads from outside, in
order of first use; constants and literals stay in its body.  The call takes the
place of the group's last binding and binds the same variable, so every use after it
is unchanged.

Fusion happens inside dataflow blocks and inside runs of pure bindings of ordinary
blocks; an impure call, a call of a function, an ``if`` or a ``match_cast`` ends a
run, so no group spans one.  Functions that are already primitive are left alone;
functions of an external codegen (``compiler="x"``) are skipped unless the pass is
enabled for ``x`` (``FuseOps(codegens=["x"])``, the context's
``transform.external_passes`` or the codegen's registration), exactly as function
passes do; the primitive functions made from such a function belong to ``x`` too.

A group holds at most ``transform.fuse.max_group_size`` bindings (config key, 256 by
default), so a chain of 100,000 elementwise ops becomes about 400 calls.  The pass is
iterative: it never recurses on the length of a function (only on the nesting of
``if`` branches).

On a native target :class:`~plait.transform.fuse_kernels.FuseKernels` then turns every
primitive function into one kernel; see ``docs/fusion.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..ir.expr import (
    Binding,
    BindingBlock,
    Call,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Op,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.module import IRModule
from ..ir.types import FuncType
from .context import PassContext, register_config
from .debug_counter import allow_rewrite
from .external import COMPILER_ATTR, enabled_codegens
from .fusion_groups import partition
from .pass_base import module_pass

PRIMITIVE_ATTR = "primitive"
"""Attribute marking a primitive function (the body of one fused group)."""


def _check_group_size(value: int) -> int:
    if value < 2:
        raise ValueError(f"transform.fuse.max_group_size must be at least 2, got {value}")
    return value


register_config(
    "transform.fuse.max_group_size",
    int,
    256,
    "the largest number of bindings FuseOps puts in one primitive function",
    check=_check_group_size,
)

_MAX_NAME_OPS = 4
"""Op names spelled out in a primitive function's name; the rest are counted."""


def is_primitive(func: Any) -> bool:
    """True for a primitive function (made by FuseOps)."""
    return isinstance(func, Function) and bool(func.attrs.get(PRIMITIVE_ATTR, False))


# ------------------------------------------------------------------ uses


def value_uses(value: Expr) -> list[Var]:
    """The variables ``value`` reads directly, in order, one entry per occurrence
    (``if`` branches excluded: the walk over the function reaches them)."""
    if isinstance(value, Call):  # the common case, kept fast
        out: list[Var] = [value.op] if isinstance(value.op, Var) else []
        for a in value.args:
            if isinstance(a, Var):
                out.append(a)
            elif isinstance(a, Tuple):
                out.extend(value_uses(a))
        return out
    out = []
    stack: list[Expr] = [value]
    while stack:
        e = stack.pop()
        if isinstance(e, Var):
            out.append(e)
        elif isinstance(e, Call):
            stack.extend(reversed(e.args))
            stack.append(e.op)
        elif isinstance(e, Tuple):
            stack.extend(reversed(e.fields))
        elif isinstance(e, TupleGetItem):
            stack.append(e.tuple_value)
        elif isinstance(e, If):
            stack.append(e.cond)
    return out


def count_uses(body: Expr) -> dict[Var, int]:
    """How often each variable is used anywhere in a function body."""
    counts: dict[Var, int] = {}
    todo: list[Expr] = [body]
    while todo:
        e = todo.pop()
        if isinstance(e, SeqExpr):
            for block in e.blocks:
                for b in block.bindings:
                    value = b.value
                    if type(value) is Call and type(value.op) is Op:
                        # the common binding (value_uses of it, without the list)
                        for a in value.args:
                            ta = type(a)
                            if ta is Var or ta is DataflowVar or isinstance(a, Var):
                                counts[a] = counts.get(a, 0) + 1
                            elif isinstance(a, Tuple):
                                for v in value_uses(a):
                                    counts[v] = counts.get(v, 0) + 1
                        continue
                    for v in value_uses(value):
                        counts[v] = counts.get(v, 0) + 1
                    if isinstance(value, If):
                        todo.append(b.value.then_branch)
                        todo.append(b.value.else_branch)
            todo.append(e.body)
        else:
            for v in value_uses(e):
                counts[v] = counts.get(v, 0) + 1
            if isinstance(e, If):
                todo.append(e.then_branch)
                todo.append(e.else_branch)
    return counts


# ------------------------------------------------------------------ segments


def _is_barrier(b: Binding) -> bool:
    """Bindings that end a run of fusable bindings in an ordinary block: anything but
    a pure op call, a tuple, a tuple item or an atom."""
    if isinstance(b, MatchCast):
        return True
    v = b.value
    if isinstance(v, Call):
        op = v.op
        return not (isinstance(op, Op) and op.is_registered and op.definition.pure)
    return isinstance(v, If | SeqExpr | Function)


def _segments(block: BindingBlock) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of the block's bindings that may be fused together."""
    n = len(block.bindings)
    if isinstance(block, DataflowBlock):
        return [(0, n)]
    out, start = [], 0
    for i, b in enumerate(block.bindings):
        if _is_barrier(b):
            if i > start:
                out.append((start, i))
            start = i + 1
    if start < n:
        out.append((start, n))
    return out


# ------------------------------------------------------------------ the rewrite


class _Fuser:
    """Fuses the blocks of one function; collects the primitive functions it makes."""

    def __init__(self, used_names: set[str], max_size: int, codegen: str | None) -> None:
        self.used_names = used_names
        self.max_size = max_size
        self.codegen = codegen
        self.new_funcs: dict[str, Function] = {}
        self.uses: dict[Var, int] = {}

    def run(self, func: Function) -> Function:
        if not isinstance(func.body, SeqExpr):
            return func
        self.uses = count_uses(func.body)
        body = self.fuse_seq(func.body)
        if body is func.body:
            return func
        return replace(func, body=body)

    def fuse_seq(self, seq: SeqExpr) -> SeqExpr:
        blocks: list[BindingBlock] = []
        changed = False
        for block in seq.blocks:
            new = self.fuse_block(block)
            changed |= new is not block
            blocks.append(new)
        return replace(seq, blocks=tuple(blocks)) if changed else seq

    def fuse_block(self, block: BindingBlock) -> BindingBlock:
        bindings = list(block.bindings)
        changed = False
        # if branches first (recursion only follows their nesting)
        for i, b in enumerate(bindings):
            if isinstance(b, VarBinding) and isinstance(b.value, If):
                e = b.value
                then_b = self.fuse_seq(e.then_branch) if isinstance(
                    e.then_branch, SeqExpr) else e.then_branch
                else_b = self.fuse_seq(e.else_branch) if isinstance(
                    e.else_branch, SeqExpr) else e.else_branch
                if then_b is not e.then_branch or else_b is not e.else_branch:
                    bindings[i] = replace(b, value=replace(e, then_branch=then_b,
                                                           else_branch=else_b))
                    changed = True
        out: list[Binding] = []
        pos = 0
        for start, end in _segments(block):
            out.extend(bindings[pos:start])
            seg = bindings[start:end]
            new_seg = self.fuse_segment(seg)
            changed |= new_seg is not seg
            out.extend(new_seg)
            pos = end
        out.extend(bindings[pos:])
        return type(block)(tuple(out)) if changed else block

    def fuse_segment(self, seg: list[Binding]) -> list[Binding]:
        index = {b.var: i for i, b in enumerate(seg)}
        consumers: list[list[int]] = [[] for _ in seg]
        uses = [value_uses(b.value) for b in seg]
        for i, vs in enumerate(uses):
            for v in vs:
                j = index.get(v)
                if j is not None:
                    consumers[j].append(i)
        escapes = [self.uses.get(b.var, 0) > len(consumers[i]) for i, b in enumerate(seg)]
        groups = [g for g in partition(seg, consumers, escapes, self.max_size)
                  if allow_rewrite(lambda g=g: "fuse " + " -> ".join(
                      f"{seg[m].var.name_hint}" for m in g))]
        if not groups:
            return seg
        replaced: dict[int, Binding | None] = {}
        for members in groups:
            call_binding = self.make_primitive(seg, uses, members)
            for m in members[:-1]:
                replaced[m] = None
            replaced[members[-1]] = call_binding
        out: list[Binding] = []
        for i, b in enumerate(seg):
            r = replaced.get(i, b)
            if r is not None:
                out.append(r)
        return out

    def unique_name(self, ops: list[str]) -> str:
        parts = [o.replace(".", "_") for o in ops[:_MAX_NAME_OPS]]
        if len(ops) > _MAX_NAME_OPS:
            parts.append(f"{len(ops) - _MAX_NAME_OPS}more")
        hint = "fused_" + "_".join(parts)
        name, k = hint, 1
        while name in self.used_names:
            name = f"{hint}_{k}"
            k += 1
        self.used_names.add(name)
        return name

    def make_primitive(self, seg: list[Binding], uses: list[list[Var]],
                       members: list[int]) -> Binding:
        """Make the primitive function of one group; return the binding that calls it."""
        member_vars = {seg[m].var for m in members}
        root = seg[members[-1]]
        subst: dict[Var, Var] = {}
        outer_args: list[Var] = []
        params: list[Var] = []
        body_bindings: list[Binding] = []
        op_names: list[str] = []
        for m in members:
            b = seg[m]
            call: Call = b.value  # type: ignore[assignment]
            for v in uses[m]:
                if v not in member_vars and v not in subst:
                    p = Var(v.name_hint, v.ty, span=v.span)
                    subst[v] = p
                    outer_args.append(v)
                    params.append(p)
            args = tuple(subst.get(a, a) if isinstance(a, Var) else substitute(a, subst)
                         for a in call.args)
            new_call = Call(call.op, args, call.attrs, ty=call.ty, span=call.span)
            is_root = m == members[-1]
            var_cls = Var if is_root else DataflowVar
            new_var = var_cls(b.var.name_hint, b.var.ty, span=b.var.span)
            subst[b.var] = new_var
            body_bindings.append(VarBinding(new_var, new_call))
            op_names.append(call.op.name)  # type: ignore[attr-defined]
        ret_ty = root.var.ty
        out_var = subst[root.var]
        body = SeqExpr((DataflowBlock(tuple(body_bindings)),), out_var, ty=ret_ty)
        attrs: dict[str, Any] = {PRIMITIVE_ATTR: True, "private": True}
        if self.codegen is not None:
            attrs[COMPILER_ATTR] = self.codegen
        func = Function(tuple(params), body, ret_ty, True, attrs=attrs)
        name = self.unique_name(op_names)
        self.new_funcs[name] = func
        gv = GlobalVar(name, ty=FuncType(tuple(p.ty for p in params), ret_ty))
        span = joined_span([seg[m].value.span for m in members], root.value.span)
        call = Call(gv, tuple(outer_args), ty=ret_ty, span=span)
        return VarBinding(root.var, call)


JOINED_NOTES = 6
"""The most member notes a fused call's span names (then "and N more")."""


def joined_span(spans: list[Any], root: Any) -> Any:
    """The span of a fused call: the root's place, and the notes of every member (the
    ONNX nodes or source lines it computes, in order), so a profile of its kernel
    names them all; ``root`` when fewer than two members have notes."""
    notes = list(dict.fromkeys(s.note for s in spans if s is not None and s.note))
    if len(notes) < 2:
        return root
    shown = ", ".join(notes[:JOINED_NOTES])
    if len(notes) > JOINED_NOTES:
        shown += f" and {len(notes) - JOINED_NOTES} more"
    base = root if root is not None else next(s for s in spans if s is not None)
    return replace(base, note=shown)


def substitute(e: Expr, subst: dict[Var, Var]) -> Expr:
    """``e`` (a binding's value: a call, tuple, tuple item or atom) with the variables
    of ``subst`` replaced."""
    if isinstance(e, Var):
        return subst.get(e, e)
    if isinstance(e, Tuple):
        fields = tuple(substitute(f, subst) for f in e.fields)
        if all(a is b for a, b in zip(fields, e.fields)):
            return e
        return replace(e, fields=fields)
    if isinstance(e, TupleGetItem):
        t = substitute(e.tuple_value, subst)
        return e if t is e.tuple_value else replace(e, tuple_value=t)
    if isinstance(e, Call):
        op = substitute(e.op, subst) if isinstance(e.op, Var) else e.op
        args = tuple(substitute(a, subst) for a in e.args)
        if op is e.op and all(a is b for a, b in zip(args, e.args)):
            return e
        return replace(e, op=op, args=args)
    return e


def fuse_module(
    mod: IRModule,
    max_size: int,
    enabled: frozenset[str] = frozenset(),
    on_error: Callable[[Exception, str], Exception] | None = None,
) -> IRModule:
    """``mod`` with the fusable groups of its graph functions made primitive
    functions (external functions only for the codegens in ``enabled``).  An error
    while fusing function ``name`` is raised as ``on_error(err, name)`` when given."""
    used_names = set(mod.functions)
    changed: dict[str, Any] = {}
    for name, func in list(mod.graph_functions()):
        codegen = func.attrs.get(COMPILER_ATTR)
        if codegen is not None and codegen not in enabled:
            continue
        if is_primitive(func):
            continue
        fuser = _Fuser(used_names, max_size, codegen)
        try:
            new = fuser.run(func)
        except Exception as err:
            if on_error is None:
                raise
            raise on_error(err, name) from err
        if new is not func:
            changed[name] = new
            changed.update(fuser.new_funcs)
    return mod.with_functions(changed) if changed else mod


@module_pass(phases=("optimization",))
class FuseOps:
    """Group chains of fusable ops into primitive functions (one per fused kernel)."""

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        max_size = ctx.get_config("transform.fuse.max_group_size")
        return fuse_module(mod, max_size, enabled_codegens(self, ctx),
                           lambda err, name: self._failure(err, mod, ctx, function=name))


__all__ = ["PRIMITIVE_ATTR", "FuseOps", "count_uses", "fuse_module", "is_primitive",
           "substitute", "value_uses"]
