"""The ONNX graph the exporter writes and its converter registry (opset 17).

:class:`Graph` is an ONNX graph under construction; :func:`converter` registers how one
op becomes ONNX nodes (the converters of :mod:`.ops`), :func:`why_not` says why a call
cannot be exported.  :mod:`.export` walks a function and calls the converters.
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
    Op,
    PrimValue,
    Tuple,
    Var,
)
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


__all__ = ["CONVERTERS", "IR_VERSION", "OPSET", "Converter", "Graph", "OnnxExportError",
           "converter", "np_tensor_type", "why_not"]
