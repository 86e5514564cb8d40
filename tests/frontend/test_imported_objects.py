"""What an imported module holds: only plait's nodes, Python scalars and containers, and
numpy arrays for the constants.

A module imported from ONNX or torch.export builds at the speed of one made with
BlockBuilder only if it holds the same kinds of objects: a numpy scalar in a shape or an
attribute (``np.int64(3)`` where ``3`` belongs) makes every hash, comparison and
arithmetic on it several times slower in every pass, and an object of the source
framework (a protobuf message, an fx node, a sympy expression) keeps the framework's
graph alive as long as the module.  The walk follows every reference the garbage
collector knows of (``gc.get_referents``), so it sees spans, attributes, types and
module attributes alike.
"""

from __future__ import annotations

import gc
import types
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from onnx_helpers import F32, init, model, vi  # noqa: E402

from plait.frontend import from_onnx  # noqa: E402
from plait.ir import IRModule  # noqa: E402

PLAIN = (int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set,
         frozenset, object, slice, type(Ellipsis), np.ndarray, np.dtype)
"""The non-plait types an imported module may hold (``np.dtype`` covers its subclasses:
an array's dtype)."""

SKIPPED = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, types.WrapperDescriptorType, types.MethodDescriptorType,
           types.GetSetDescriptorType, types.MemberDescriptorType, types.CellType,
           types.CodeType)
"""Code and its environment, which a module reaches through an op's type rules and a
deferred constant's recipe: shared by every module, not made by the import."""


def foreign_objects(mod: IRModule) -> dict[str, int]:
    """Types (``module.qualname``) of the objects reachable from ``mod`` that are neither
    plait's nor :data:`PLAIN`, with how many of each (iterative: any module size)."""
    seen: set[int] = set()
    found: dict[str, int] = {}
    stack: list[Any] = [mod]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, SKIPPED):
            continue
        seen.add(id(o))
        t = type(o)
        if not (t in PLAIN or isinstance(o, np.dtype)
                or t.__module__.split(".", 1)[0] == "plait"):
            key = f"{t.__module__}.{t.__qualname__}"
            found[key] = found.get(key, 0) + 1
        stack.extend(gc.get_referents(o))
    return found


def test_the_walk_finds_a_numpy_scalar_and_a_protobuf_message() -> None:
    """The check itself: a numpy scalar in a span and a protobuf message in a module
    attribute are found (types and attributes turn numpy scalars into Python's
    themselves: TensorType, Attrs)."""
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.ir.expr import Span
    from plait.op import make_call

    x = Var("x", TensorType((4, 4), "float32"), Span("model.onnx", line=np.int64(3)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(make_call("relu", x))
        bb.emit_func_output(out)
    mod = bb.get().with_attrs(proto=helper.make_opsetid("", 17))
    found = foreign_objects(mod)
    assert found.get("numpy.int64", 0) >= 1
    assert any("onnx" in k or "protobuf" in k for k in found), found


def _onnx_model() -> Any:
    """Attributes of every kind an importer reads from protobuf (ints, a list of ints,
    a float, a string), a shape from an int64 initializer, a symbolic batch and named
    nodes (each binding's span)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1],
                         strides=[1, 1], dilations=[1, 1], group=1),
        helper.make_node("LeakyRelu", ["c"], ["r"], name="act", alpha=0.2),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
        helper.make_node("Gather", ["f", "idx"], ["g"], name="pick", axis=1),
        helper.make_node("Cast", ["g"], ["y"], name="cast", to=F32),
        helper.make_node("Resize", ["x", "", "scales"], ["z"], name="up", mode="nearest"),
    ]
    return model(
        nodes, [vi("x", ["batch", 2, 4, 4])], [vi("y", ["batch", 2]), vi("z", None)],
        [init("w", np.ones((3, 2, 3, 3), np.float32)),
         init("shape", np.array([0, -1], np.int64)),
         init("idx", np.array([0, 5], np.int64)),
         init("scales", np.array([1, 1, 2, 2], np.float32))])


def test_an_onnx_import_holds_no_protobuf_and_no_numpy_scalar() -> None:
    mod = from_onnx(_onnx_model())
    assert foreign_objects(mod) == {}


def test_a_torch_export_import_holds_no_torch_fx_or_sympy_object() -> None:
    torch = pytest.importorskip("torch")
    from plait.frontend import from_exported_program

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(3)
            self.fc = torch.nn.Linear(48, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.leaky_relu(self.bn(self.conv(x)), 0.2)
            return torch.softmax(self.fc(y.reshape(y.shape[0], -1)), dim=-1)

    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(Net().eval(), (torch.randn(2, 2, 4, 4),),
                             dynamic_shapes=({0: batch},))
    mod = from_exported_program(ep)
    assert foreign_objects(mod) == {}
    # spans name the file of their node, and the spans of one file share one string
    spans = [b.value.span for blk in mod["main"].body.blocks for b in blk.bindings
             if b.value.span is not None and b.value.span.source]
    files = {sp.source for sp in spans}
    assert len(spans) > len(files) >= 1
    assert len({id(sp.source) for sp in spans}) == len(files)


def test_unnamed_onnx_nodes_of_one_op_share_one_span() -> None:
    """Unnamed nodes' spans are equal (the model, ``<unnamed Op> (Op)``): one object per
    op type, as a BlockBuilder module shares its values, not a span and a note per
    binding; a named node keeps its own (its name is what a profile shows)."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["a"]),
             helper.make_node("Add", ["a", "x"], ["b"]),
             helper.make_node("Mul", ["b", "x"], ["c"]),
             helper.make_node("Add", ["c", "x"], ["d"]),
             helper.make_node("Add", ["d", "x"], ["y"], name="last")]
    mod = from_onnx(model(nodes, [vi("x", [2, 2])], [vi("y", [2, 2])]))
    spans = [b.value.span for blk in mod["main"].body.blocks for b in blk.bindings
             if b.value.span is not None]
    notes = [sp.note for sp in spans]
    assert notes == ["<unnamed Mul> (Mul)", "<unnamed Add> (Add)", "<unnamed Mul> (Mul)",
                     "<unnamed Add> (Add)", "last (Add)"]
    assert spans[0] is spans[2] and spans[1] is spans[3] and spans[4] is not spans[1]
