"""The scaling benchmark's chain from each source a module comes from.

One function whose dataflow block is a chain of ``n`` elementwise bindings (multiply and
add, each of the previous value and the parameter), made four ways: with ``BlockBuilder``
(:func:`from_builder`), printed and parsed back (:func:`from_text`), as an ONNX graph
imported with ``from_onnx`` (:func:`from_onnx`) and as a ``torch.export`` program imported
with ``from_exported_program`` (:func:`from_torch_export`).  ``benchmarks/run.py
--scaling`` builds each (``plait.build(module, "numpy")``) and reports the cost per
binding of each source: a module gets the same speed wherever it came from.

torch.export itself (tracing, then ``run_decompositions``) costs a millisecond or more
per op, so the torch source is measured up to :data:`TORCH_MAX_BINDINGS` only.
"""

from __future__ import annotations

from typing import Any

TORCH_MAX_BINDINGS = 10_000
"""The largest chain exported with torch.export (its export takes ~1-3 ms per op)."""


def from_builder(n: int) -> Any:
    """The chain made with ``BlockBuilder``."""
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.op import make_call

    x = Var("x", TensorType((4, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            v = x
            for i in range(n):
                v = bb.emit(make_call("add" if i % 2 else "multiply", v, x))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    return bb.get()


def from_text(n: int) -> Any:
    """The chain printed in the text format and parsed back."""
    import plait

    text = from_builder(n).script()
    return plait.parse(text)


def from_onnx(n: int) -> Any:
    """The chain as an ONNX graph (Mul and Add nodes) imported with ``from_onnx``."""
    from onnx import TensorProto, helper

    from plait.frontend import from_onnx as import_onnx

    nodes = []
    prev = "x"
    for i in range(n):
        out = f"v{i}"
        nodes.append(helper.make_node("Add" if i % 2 else "Mul", [prev, "x"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return import_onnx(model)


def torch_program(n: int) -> Any:
    """The chain exported with ``torch.export`` and decomposed to core ATen (PyTorch's
    own work, timed apart from plait's)."""
    import torch

    class Chain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            v = x
            for i in range(n):
                v = v + x if i % 2 else v * x
            return v

    return torch.export.export(Chain(), (torch.randn(4, 4),)).run_decompositions()


def from_torch_export(program: Any) -> Any:
    """A decomposed exported program (:func:`torch_program`) imported with
    ``from_exported_program``."""
    from plait.frontend import from_exported_program

    return from_exported_program(program, run_decompositions=False)


__all__ = ["TORCH_MAX_BINDINGS", "from_builder", "from_onnx", "from_text",
           "from_torch_export", "torch_program"]
