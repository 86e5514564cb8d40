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

from typing import Any

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

from . import ops  # noqa: F401  (registers the converters)
from .onnx_graph import (
    CONVERTERS,
    IR_VERSION,
    OPSET,
    Converter,
    Graph,
    OnnxExportError,
    converter,
    np_tensor_type,
    why_not,
)


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
        known = ", ".join(sorted(CONVERTERS))
        return OnnxExportError(
            f"function {self.fname!r}, binding {binding!r}: cannot export to ONNX: {why}. "
            f"The exporter converts {known}; keep such calls out of the onnxruntime codegen's "
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
    return _Exporter(mod, fname).run()


__all__ = ["CONVERTERS", "IR_VERSION", "OPSET", "Converter", "Graph", "OnnxExportError",
           "converter", "export_function", "why_not"]
