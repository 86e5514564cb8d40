"""The ``onnxruntime`` external codegen: offload subgraphs to onnxruntime.

Its pattern takes every float32 op call the ONNX exporter (:mod:`.export`, opset 17)
can express; ``PartitionGraph`` merges adjacent ones into regions.  ``compile`` turns
each region function into an ONNX model (:func:`.export.export_function`), and the
:class:`~plait.runtime.external.ExternalModule` it returns (format ``"onnxruntime"``)
stores the model bytes; at run time each function is an onnxruntime session.  Use it
for what plait does not do well yet::

    mod = plait.partition(mod, "onnxruntime")
    exe = plait.build(mod, "c")      # or Target("c", offload=("onnxruntime",))

onnx is needed to compile (``plait[onnx]``), onnxruntime to run.
"""

from __future__ import annotations

from typing import Any

from plait.ir.expr import Function
from plait.ir.module import IRModule
from plait.ir.types import TensorType, TupleType
from plait.runtime.external import ExternalFunction, ExternalModule, TensorSig
from plait.transform.codegens import register_codegen
from plait.transform.partition import GLOBAL_SYMBOL_ATTR
from plait.transform.pattern import Match, is_op
from plait.transform.pattern_rewrite import Rule

from . import ops  # noqa: F401  (registers the converters)
from .export import export_function
from .onnx_graph import CONVERTERS, OnnxExportError, why_not

NAME = "onnxruntime"

SUPPORTED = is_op(*sorted(CONVERTERS)).has_dtype("float32")
"""What the codegen takes: a float32 call of an op the exporter converts (and a call
it can express, checked by the rule)."""


def _exportable(m: Match) -> bool:
    return why_not(m.call(SUPPORTED)) is None


def _sig(ty: Any) -> TensorSig:
    """The signature of a tensor type (a size expression as its text, "batch * 4")."""
    return TensorSig(tuple(d if isinstance(d, int | str) else str(d) for d in ty.shape),
                     ty.dtype)


def compile_onnxruntime(mod: IRModule, *, codegen: str = NAME) -> ExternalModule:
    """One ONNX model per function with a ``global_symbol`` (see the module docstring)."""
    functions, blobs, graphs = [], {}, {}
    for name, f in mod.graph_functions():
        symbol = f.attrs.get(GLOBAL_SYMBOL_ATTR)
        if symbol is None:
            continue
        assert isinstance(f, Function)
        model, ins, outs = export_function(mod, name)
        member = f"{symbol}.onnx"
        blobs[member] = model.SerializeToString()
        graphs[symbol] = {"model": member, "inputs": ins, "outputs": outs}
        ret = f.ret_ty
        out_types = list(ret.fields) if isinstance(ret, TupleType) else [ret]
        functions.append(ExternalFunction(
            symbol, tuple(_sig(p.ty) for p in f.params),
            tuple(_sig(t) for t in out_types if isinstance(t, TensorType))))
    return ExternalModule(codegen, "onnxruntime", tuple(functions), blobs, {"graphs": graphs})


register_codegen(
    NAME,
    patterns=[Rule("onnxruntime.op", SUPPORTED, check=_exportable)],
    compile=compile_onnxruntime,
    doc="regions of float32 ops exported to ONNX and run by onnxruntime sessions",
)

__all__ = ["NAME", "SUPPORTED", "OnnxExportError", "compile_onnxruntime", "export_function"]
