"""Outlining and inlining: bindings of a block into a function of their own, and back.

:func:`outline` turns chosen bindings of a block into a function: its parameters are
the variables the bindings read from outside (in order of first use), its results the
values used after them (one, or a tuple); constants stay in its body.
:func:`inline_call` replaces a call of a function by the function's bindings.
``FuseOpsByPattern`` and ``PartitionGraph`` are made of these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..ir.expr import (
    Binding,
    Call,
    DataflowBlock,
    DataflowVar,
    Expr,
    Function,
    GlobalVar,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from ..ir.types import TupleType
from .fuse_ops import substitute, value_uses


@dataclass
class Outlined:
    """An outlined group: the new function, the host variables passed to it and the
    host variables it produces (its results, in order)."""

    func: Function
    inputs: list[Var]
    outputs: list[Var]

    def call_bindings(self, gv: GlobalVar, dataflow: bool) -> list[Binding]:
        """The host bindings that replace the group: one call binding the single
        result, or a call binding a tuple and one item per result."""
        ret = self.func.ret_ty
        call = Call(GlobalVar(gv.name_hint, ty=self.func.ty), tuple(self.inputs), ty=ret)
        if len(self.outputs) == 1:
            return [VarBinding(self.outputs[0], call)]
        cls = DataflowVar if dataflow else Var
        tup = cls("_".join(v.name_hint for v in self.outputs[:2]) + "_t", ret)
        out: list[Binding] = [VarBinding(tup, call)]
        for k, v in enumerate(self.outputs):
            out.append(VarBinding(v, TupleGetItem(tup, k, ty=v.ty)))
        return out


def outline(
    bindings: Sequence[Binding],
    members: Sequence[int],
    uses: dict[Var, int],
    attrs: dict[str, Any],
) -> Outlined:
    """The function computing ``bindings[members]`` (in the order given, which must
    respect their dependencies); ``uses`` counts every use of each variable in the
    host function, so values used outside the group become results."""
    member_vars = {bindings[i].var for i in members}
    inside: dict[Var, int] = {}
    for i in members:
        for v in value_uses(bindings[i].value):
            if v in member_vars:
                inside[v] = inside.get(v, 0) + 1
    outputs = [bindings[i].var for i in members
               if uses.get(bindings[i].var, 0) > inside.get(bindings[i].var, 0)]
    if not outputs:
        outputs = [bindings[members[-1]].var]
    mapping: dict[Var, Var] = {}
    inputs: list[Var] = []
    params: list[Var] = []
    body: list[Binding] = []
    out_set = set(outputs)
    for i in members:
        b = bindings[i]
        for v in value_uses(b.value):
            if v not in member_vars and v not in mapping:
                p = Var(v.name_hint, v.ty, span=v.span)
                mapping[v] = p
                params.append(p)
                inputs.append(v)
        cls = Var if b.var in out_set else DataflowVar
        nv = cls(b.var.name_hint, b.var.ty, span=b.var.span)
        body.append(VarBinding(nv, substitute(b.value, mapping)))
        mapping[b.var] = nv
    if len(outputs) == 1:
        result: Expr = mapping[outputs[0]]
        ret = outputs[0].ty
    else:
        ret = TupleType(tuple(v.ty for v in outputs))
        result = Tuple(tuple(mapping[v] for v in outputs), ty=ret)
    seq = SeqExpr((DataflowBlock(tuple(body)),), result, ty=ret)
    func = Function(tuple(params), seq, ret, True, attrs=attrs)
    return Outlined(func, inputs, outputs)


def inline_call(binding: Binding, func: Function) -> list[Binding]:
    """The bindings of ``func``'s body (a single dataflow block, as :func:`outline`
    makes) with its parameters replaced by the call's arguments, the last one binding
    ``binding``'s variable.  Inner variables are fresh DataflowVars."""
    call = binding.value
    assert isinstance(call, Call)
    body = func.body
    if not isinstance(body, SeqExpr) or len(body.blocks) > 1:
        raise ValueError("inline_call: the function body is not one block of bindings")
    mapping: dict[Var, Var] = {}
    for p, a in zip(func.params, call.args):
        if not isinstance(a, Var):
            raise ValueError("inline_call: an argument is not a variable")
        mapping[p] = a
    out: list[Binding] = []
    result = body.body
    inner = body.blocks[0].bindings if body.blocks else ()
    for k, b in enumerate(inner):
        last = k == len(inner) - 1 and b.var is result
        nv = binding.var if last else DataflowVar(b.var.name_hint, b.var.ty, span=b.var.span)
        out.append(VarBinding(nv, substitute(b.value, mapping)))
        mapping[b.var] = nv
    if not inner or inner[-1].var is not result:
        out.append(VarBinding(binding.var, substitute(result, mapping)))
    return out


__all__ = ["Outlined", "inline_call", "outline", "substitute"]
