"""The scaling benchmark's chain from each source a module comes from.

One function whose dataflow block is a chain of ``n`` elementwise bindings (multiply and
add, each of the previous value and the parameter), made four ways: with ``BlockBuilder``
(:func:`from_builder`), printed and parsed back (:func:`from_text`), as an ONNX graph
imported with ``from_onnx`` (:func:`from_onnx`) and as a ``torch.export`` program imported
with ``from_exported_program`` (:func:`from_torch_export`).  ``benchmarks/run.py
--scaling`` builds each (``plait.build(module, "numpy")``) and reports the cost per
binding of each source: a module gets the same speed wherever it came from.

torch.export itself (tracing, then ``run_decompositions``) costs a millisecond or more
per op, so a chain longer than :data:`TORCH_MAX_BINDINGS` is not exported whole: the
program of a short chain is exported and its graph grown to ``n`` nodes
(:func:`grown_program`), each new node a copy of an exported one (the same op, the
FakeTensor and source line PyTorch recorded): the program plait imports is what an
export of the long chain would give, and only PyTorch's own export time is left out.
"""

from __future__ import annotations

from typing import Any

TORCH_MAX_BINDINGS = 10_000
"""The largest chain exported whole with torch.export (its export takes ~1-3 ms per op);
a longer one is grown from a short export (:func:`grown_program`)."""


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

    if n > TORCH_MAX_BINDINGS:
        return grown_program(n)
    return torch.export.export(Chain(), (torch.randn(4, 4),)).run_decompositions()


def grown_program(n: int) -> Any:
    """The chain's program of ``n`` nodes, from the export of a 2-node chain (``mul``
    then ``add``) grown in place: nodes alternating its two, each of the previous node
    and ``x``, named as export names them, with the exported node's FakeTensor
    (``val``), tensor metadata and stack trace, the last one the output."""
    if n < 2:
        raise ValueError(f"a grown chain has at least 2 nodes, got {n}")
    program = torch_program(2)
    graph = program.graph
    x, mul, add, out = (list(graph.nodes)[i] for i in range(4))
    keep = ("val", "tensor_meta", "stack_trace")
    prev = add
    with graph.inserting_before(out):
        for i in range(2, n):
            like = add if i % 2 else mul
            k = i // 2
            node = graph.create_node("call_function", like.target, (prev, x),
                                     name=like.name if k == 0 else f"{like.name}_{k}")
            node.meta.update({k: like.meta[k] for k in keep if k in like.meta})
            prev = node
    out.args = ((prev,),)
    program.graph_signature.output_specs[0].arg.name = prev.name
    return program


def from_torch_export(program: Any) -> Any:
    """A decomposed exported program (:func:`torch_program`) imported with
    ``from_exported_program``."""
    from plait.frontend import from_exported_program

    return from_exported_program(program, run_decompositions=False)


__all__ = ["TORCH_MAX_BINDINGS", "from_builder", "from_onnx", "from_text",
           "from_torch_export", "grown_program", "torch_program"]
