"""Small helpers to build ONNX models in tests and run imported modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import plait
from plait.ir import Function, IRModule
from plait.runtime import VirtualMachine

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name: str, shape: Sequence[Any] | None, elem: int = F32) -> onnx.ValueInfoProto:
    """A tensor value info (shape entries: ints, names, or None for unknown)."""
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def init(name: str, array: Any) -> onnx.TensorProto:
    """An initializer from a numpy array."""
    return numpy_helper.from_array(np.asarray(array), name)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    name: str = "test_graph",
    extra_opsets: dict[str, int] | None = None,
) -> onnx.ModelProto:
    """A model of one graph."""
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)]
    for dom, ver in (extra_opsets or {}).items():
        opsets.append(helper.make_opsetid(dom, ver))
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def run(mod: IRModule, *args: np.ndarray) -> Any:
    """Build ``mod`` for numpy and run ``main``."""
    return VirtualMachine(plait.build(mod, target="numpy"))["main"](*args)


def bindings(mod: IRModule, name: str = "main") -> list[Any]:
    """Every binding of a function, in order."""
    f = mod[name]
    assert isinstance(f, Function)
    return [b for blk in f.body.blocks for b in blk.bindings]


def op_names(mod: IRModule) -> list[str]:
    """The op of every call binding of ``main``."""
    out = []
    for b in bindings(mod):
        op = getattr(b.value, "op", None)
        if op is not None and hasattr(op, "name"):
            out.append(op.name)
    return out
