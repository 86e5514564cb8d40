"""Export plait graph functions to ONNX graphs (opset 17).

:func:`export_function` turns one graph function of a module into an ONNX model: its
parameters become graph inputs (symbolic sizes become ``dim_param``), each binding one
or a few ONNX nodes (the converters of :mod:`.ops`), constants initializers, and its
result (a tensor, or a tuple of tensors) the graph outputs.  Calls of other functions
of the module are inlined.  An op without a converter, or a call its converter cannot
express, is an :class:`OnnxExportError` naming the op, the binding and the function,
and listing what the exporter can do.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from plait.errors import PlaitError
from plait.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Op,
    PrimValue,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
)
from plait.ir.module import IRModule
from plait.ir.types import TensorType

OPSET = 17
"""The ONNX opset the exported graphs use."""

IR_VERSION = 8
"""The ONNX IR version of the exported models (read by every onnxruntime since 1.10)."""


class OnnxExportError(PlaitError, ValueError):
    """A function cannot be expressed in ONNX; the message says where and why."""


@dataclass(frozen=True)
class Converter:
    """How one op becomes ONNX nodes: ``emit(g, call, out)`` writes the nodes that
    compute ``out`` from the call's arguments; ``check(call)`` returns why a call cannot
    be exported (None when it can)."""

    emit: Callable[[Graph, Call, str], None]
    check: Callable[[Call], str | None] | None = None


CONVERTERS: dict[str, Converter] = {}


def converter(*names: str, check: Callable[[Call], str | None] | None = None) -> Callable:
    """Register the decorated ``emit(g, call, out)`` for ops ``names``."""

    def deco(fn: Callable[[Graph, Call, str], None]) -> Callable[[Graph, Call, str], None]:
        for n in names:
            CONVERTERS[n] = Converter(fn, check)
        return fn

    return deco


def why_not(call: Call) -> str | None:
    """Why ``call`` cannot be exported, or None when it can."""
    if not isinstance(call.op, Op):
        return None
    conv = CONVERTERS.get(call.op.name)
    if conv is None:
        return f"op {call.op.name!r} has no ONNX converter"
    for a in (*call.args, call):
        ty = a.ty
        if isinstance(ty, TensorType) and (ty.shape is None or ty.dtype is None):
            return f"a tensor of unknown rank or dtype ({ty})"
    return conv.check(call) if conv.check is not None else None


def np_tensor_type(dtype: str) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


class Graph:
    """An ONNX graph under construction."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.used: set[str] = set()
        self.values: dict[Var, Any] = {}   # a variable -> its value name (or tuple of names)

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "v"
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name

    def const(self, array: Any, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: list[str] | None = None,
             hint: str | None = None, **attrs: Any) -> str:
        """Add a node; returns its (first) output, a fresh name unless given."""
        from onnx import helper

        outs = outputs or [self.fresh(hint or op_type.lower())]
        self.nodes.append(helper.make_node(op_type, inputs, outs,
                                           name=self.fresh(f"n_{op_type}"), **attrs))
        return outs[0]

    def value(self, e: Expr) -> Any:
        """The value name of an atom (a variable, a constant, a scalar literal)."""
        if isinstance(e, Var):
            return self.values[e]
        if isinstance(e, Constant):
            return self.const(e.data, "const")
        if isinstance(e, PrimValue):
            return self.const(np.asarray(e.value, dtype=e.dtype), "prim")
        if isinstance(e, Tuple):
            return tuple(self.value(f) for f in e.fields)
        raise OnnxExportError(f"a {type(e).__name__} cannot be an ONNX value")

    def arg(self, call: Call, i: int) -> str:
        v = self.value(call.args[i])
        if isinstance(v, tuple):
            raise OnnxExportError("a tuple argument where the op takes a tensor")
        return v


def _value_info(name: str, ty: TensorType) -> Any:
    from onnx import helper

    dims = [d if isinstance(d, int) else str(d) for d in ty.shape]  # type: ignore[union-attr]
    return helper.make_tensor_value_info(name, np_tensor_type(ty.dtype), dims)  # type: ignore[arg-type]


class _Exporter:
    def __init__(self, mod: IRModule, fname: str) -> None:
        self.mod = mod
        self.fname = fname
        self.g = Graph(fname)

    def fail(self, binding: str, why: str) -> OnnxExportError:
        ops = ", ".join(sorted(CONVERTERS))
        return OnnxExportError(
            f"function {self.fname!r}, binding {binding!r}: cannot export to ONNX: {why}. "
            f"The exporter converts {ops}; keep such calls out of the onnxruntime codegen's "
            "functions (its patterns offer only calls it can export)")

    def body(self, func: Function, where: str) -> Any:
        body = func.body
        seq = body if isinstance(body, SeqExpr) else SeqExpr((), body)
        for block in seq.blocks:
            for b in block.bindings:
                self.binding(b.var, b.value, where)
        return self.g.value(seq.body)

    def binding(self, var: Var, value: Expr, where: str) -> None:
        g = self.g
        name = var.name_hint
        if isinstance(value, Var | Constant | PrimValue):
            g.values[var] = g.value(value)
        elif isinstance(value, Tuple):
            g.values[var] = g.value(value)
        elif isinstance(value, TupleGetItem):
            t = g.value(value.tuple_value)
            if not isinstance(t, tuple):
                raise self.fail(name, "an item of a value that is not a tuple")
            g.values[var] = t[value.index]
        elif isinstance(value, Call) and isinstance(value.op, GlobalVar):
            callee = self.mod.functions.get(value.op.name_hint)
            if not isinstance(callee, Function):
                raise self.fail(name, f"a call of {value.op.name_hint!r}, which is not a "
                                "graph function of the module")
            for p, a in zip(callee.params, value.args):
                g.values[p] = g.value(a)
            g.values[var] = self.body(callee, value.op.name_hint)
        elif isinstance(value, Call) and isinstance(value.op, Op):
            why = why_not(value)
            if why is not None:
                raise self.fail(name, why)
            out = g.fresh(name)
            try:
                CONVERTERS[value.op.name].emit(g, value, out)
            except OnnxExportError as e:
                raise self.fail(name, str(e)) from None
            g.values[var] = out
        else:
            raise self.fail(name, f"a {type(value).__name__} binding (control flow and "
                                  "calls of variables are not exported)")

    def run(self) -> tuple[Any, list[str], list[str]]:
        from onnx import helper

        func = self.mod[self.fname]
        assert isinstance(func, Function)
        inputs = []
        in_names = []
        for p in func.params:
            if not isinstance(p.ty, TensorType) or p.ty.shape is None or p.ty.dtype is None:
                raise self.fail(p.name_hint, f"parameter of type {p.ty}, not a tensor of "
                                "known rank and dtype")
            n = self.g.fresh(p.name_hint)
            self.g.values[p] = n
            in_names.append(n)
            inputs.append(_value_info(n, p.ty))
        result = self.body(func, self.fname)
        results = list(result) if isinstance(result, tuple) else [result]
        ret = func.ret_ty
        types = list(ret.fields) if not isinstance(ret, TensorType) else [ret]  # type: ignore[union-attr]
        outputs, out_names = [], []
        for r, ty in zip(results, types):
            if r in in_names or r in out_names or r in {i.name for i in self.g.initializers}:
                r = self.g.node("Identity", [r], hint="out")
            out_names.append(r)
            outputs.append(_value_info(r, ty))
        graph = helper.make_graph(self.g.nodes, self.fname, inputs, outputs,
                                  self.g.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="plait")
        model.ir_version = IR_VERSION
        return model, in_names, out_names


def export_function(mod: IRModule, fname: str) -> tuple[Any, list[str], list[str]]:
    """The ONNX model of graph function ``fname`` of ``mod``, with its graph input and
    output names."""
    from . import ops  # noqa: F401  (registers the converters)

    return _Exporter(mod, fname).run()


__all__ = ["CONVERTERS", "IR_VERSION", "OPSET", "Converter", "Graph", "OnnxExportError",
           "converter", "export_function", "why_not"]
