"""Nodes plait cannot import, run by onnxruntime: ``from_onnx(..., fallback="onnxruntime")``.

Each group of :mod:`.fallback_plan` becomes one ONNX sub-model — its nodes as they are,
the model's own opsets (contrib domains included), its inputs the values the nodes
read (values plait knows at import time become initializers), its outputs the values
used after it — and one function of an :class:`~plait.runtime.external.ExternalModule`
of format ``"onnxruntime"`` (codegen ``"onnxruntime"``): exactly what plait's
onnxruntime codegen makes of an offloaded region after ``RunCodegen``, so the same
machinery stores it in executables (saved as data), checks it (no external data),
loads it (one onnxruntime session per function) and calls it.  In the graph the group
is one ``call_extern(extern("onnxruntime_fallback_<k>"), (inputs...), out=<type>)``;
the module keeps the external module in its ``external_mods`` attribute (a graph
carrying it asks for consent when rebuilt from a file nobody vouched for:
docs/reliability.md).

The output types come from ``onnx.shape_inference`` on the sub-model with the input
types plait gives them (symbolic sizes as ``dim_param``, so they stay symbolic), and
where onnx cannot type an output (a contrib op) from onnxruntime's own inference when
it builds a session for the sub-model.  A size neither can tell from the input sizes
(it depends on the data) is an error naming the node: plait's graphs need output sizes
known from input sizes.  A group that reads only values known at import time is run
once, at import (through the same external module), and its results are constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...ir.expr import Constant, ExternFunc, Span, Tuple, TupleGetItem, Var
from ...ir.types import TensorType, TupleType
from ...op.registry import make_call
from ...runtime.external import ExternalFunction, ExternalModule, TensorSig
from .dtypes import DTYPE_TO_ONNX, onnx_type_name, to_dtype
from .errors import OnnxImportError, describe_node
from .fallback_plan import Group
from .values import Value

if TYPE_CHECKING:
    from .importer import GraphImporter

FALLBACKS = ("onnxruntime",)
"""What ``from_onnx(..., fallback=...)`` accepts."""

CODEGEN = "onnxruntime"
SYMBOL_PREFIX = "onnxruntime_fallback_"
NODES_META = "fallback_nodes"
"""Key of an external module's metadata: ``{symbol: ["'name' (Op)", ...]}``, the ONNX
nodes each fallback function runs."""


def check_fallback(fallback: str | None, source: str) -> None:
    """Refuse an unknown ``fallback=`` value, naming the ones there are."""
    if fallback is not None and fallback not in FALLBACKS:
        raise OnnxImportError(
            f"fallback={fallback!r} is not a fallback plait knows; use "
            f"{', '.join(repr(f) for f in FALLBACKS)} (or None)", source=source)


def node_label(node: onnx.NodeProto) -> str:
    """``'fm' (com.microsoft::FusedMatMul)``: how the fallback names a node."""
    op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
    return f"{node.name or '<unnamed>'!r} ({op})"


class FallbackEmitter:
    """Emits the groups of one import and collects their external module."""

    def __init__(self, importer: GraphImporter) -> None:
        self.imp = importer
        self.functions: list[ExternalFunction] = []
        self.blobs: dict[str, bytes] = {}
        self.graphs: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, list[str]] = {}

    # ---------------------------------------------------------------- one group
    def emit(self, group: Group) -> None:
        """Convert ``group``: a call of its sub-model, its outputs defined."""
        imp = self.imp
        if not group.outputs:
            return  # nothing reads what the nodes compute
        symbol = f"{SYMBOL_PREFIX}{len(self.functions)}"
        where = ", ".join(describe_node(n.name, n.op_type, domain=n.domain)
                          for n in group.nodes[:4])
        where += f" and {len(group.nodes) - 4} more" if len(group.nodes) > 4 else ""
        args: list[Var] = []
        in_infos, inits = [], []
        dims: dict[str, Any] = {}
        for name in group.inputs:
            value = imp.lookup(name)
            if value.seq is not None or value.is_none:
                raise OnnxImportError(
                    f"{where}: value {name!r} is a sequence or an omitted value; the "
                    "onnxruntime fallback passes tensors only", source=imp.source)
            array = value.const
            expr = None if array is not None else imp.materialize(value)
            if isinstance(expr, Constant):
                array = np.asarray(expr.data)
            if array is not None:
                inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
                continue
            ty = expr.ty if expr is not None else None
            if not isinstance(expr, Var) or not isinstance(ty, TensorType) or ty.dtype is None:
                raise OnnxImportError(
                    f"{where}: value {name!r} is not a tensor of known element type "
                    f"({ty}); the onnxruntime fallback passes tensors only",
                    source=imp.source)
            args.append(expr)
            in_infos.append(_value_info(name, ty, dims))
        model = self._model(group, in_infos, inits)
        types = output_types(model, group.outputs, dims, where, imp.source)
        del model.graph.output[:]
        model.graph.output.extend(_value_info(o, t, {}) for o, t in zip(group.outputs, types))
        member = f"{symbol}.onnx"
        blob = model.SerializeToString()
        graph = {"model": member, "inputs": [i.name for i in in_infos],
                 "outputs": list(group.outputs)}
        fn = ExternalFunction(symbol, tuple(_sig(a.ty) for a in args),
                              tuple(_sig(t) for t in types))
        if not args:  # computed from constants only: run it once now, a constant
            ext = ExternalModule(CODEGEN, "onnxruntime", (fn,), {member: blob},
                                 {"graphs": {symbol: graph}})
            res = ext.load()[symbol]()
            for name, arr in zip(group.outputs, res if isinstance(res, tuple) else (res,)):
                imp.define(name, Value.of_const(np.asarray(arr)))
            return
        self.blobs[member] = blob
        self.graphs[symbol] = graph
        self.functions.append(fn)
        self.nodes[symbol] = [node_label(n) for n in group.nodes]
        self._define(group, symbol, args, types)

    def _model(self, group: Group, inputs: list[Any], inits: list[Any]) -> onnx.ModelProto:
        src = self.imp.model
        outputs = [helper.make_value_info(o, onnx.TypeProto()) for o in group.outputs]
        graph = helper.make_graph(group.nodes, f"fallback_{group.index}", inputs, outputs,
                                  inits)
        model = helper.make_model(graph, opset_imports=list(src.opset_import),
                                  producer_name="plait fallback")
        model.ir_version = src.ir_version or model.ir_version
        return model

    def _define(self, group: Group, symbol: str, args: Sequence[Var],
                types: list[TensorType]) -> None:
        imp = self.imp
        note = ", ".join(node_label(n) for n in group.nodes)
        span = Span(imp.source, note=f"onnxruntime: {note}")
        out = types[0] if len(types) == 1 else TupleType(tuple(types))
        call = make_call("call_extern", ExternFunc(symbol), Tuple(tuple(args)), out=out,
                         span=span)
        var = imp.emit(call, group.outputs[0] if len(types) == 1 else symbol, span)
        if len(types) == 1:
            imp.define(group.outputs[0], Value(var))
            return
        for k, name in enumerate(group.outputs):
            item = imp.emit(TupleGetItem(var, k), name, span)
            imp.define(name, Value(item))

    # ------------------------------------------------------------------- result
    def module(self) -> ExternalModule | None:
        """The external module of every group emitted, or None when there is none."""
        if not self.functions:
            return None
        return ExternalModule(CODEGEN, "onnxruntime", tuple(self.functions), self.blobs,
                              {"graphs": self.graphs, NODES_META: self.nodes})


# ------------------------------------------------------------------------- types


def _dim_text(d: Any) -> str | int:
    return d if isinstance(d, int) else str(d)


def _value_info(name: str, ty: TensorType, dims: dict[str, Any]) -> Any:
    """A value info of ``ty``; symbolic sizes become ``dim_param`` (recorded in ``dims``
    so that the output types map them back)."""
    shape = None
    if ty.shape is not None:
        shape = []
        for d in ty.shape:
            t = _dim_text(d)
            if isinstance(t, str):
                dims[t] = d
            shape.append(t)
    return helper.make_tensor_value_info(name, DTYPE_TO_ONNX[ty.dtype], shape)  # type: ignore[index]


def _sig(ty: Any) -> TensorSig:
    return TensorSig(tuple(_dim_text(d) for d in ty.shape), ty.dtype)


def _tensor_type(t: onnx.TypeProto, dims: dict[str, Any]) -> tuple[TensorType | None, str]:
    """The plait type of an inferred ONNX type, or None and why not."""
    if t.WhichOneof("value") != "tensor_type" or not t.tensor_type.elem_type:
        return None, "no element type"
    tt = t.tensor_type
    dtype = to_dtype(tt.elem_type)
    if dtype is None:
        return None, f"element type {onnx_type_name(tt.elem_type)}, which plait does not support"
    if not tt.HasField("shape"):
        return None, "no shape"
    shape: list[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param in dims:
            shape.append(dims[d.dim_param])
        else:
            return None, "a size that depends on the data"
    return TensorType(tuple(shape), dtype), ""


def _ort_type(elem: str, shape: Any) -> onnx.TypeProto:
    """The ONNX type of an onnxruntime ``NodeArg`` (``tensor(float)``, [2, 'n', None])."""
    names = {"float": "FLOAT", "double": "DOUBLE", "float16": "FLOAT16", "bool": "BOOL"}
    inner = elem[len("tensor("):-1] if elem.startswith("tensor(") else ""
    code = getattr(onnx.TensorProto, names.get(inner, inner.upper()), 0) if inner else 0
    dims = None if shape is None else [d if isinstance(d, int) else (d or "?") for d in shape]
    return helper.make_tensor_type_proto(code, dims)


def output_types(model: onnx.ModelProto, outputs: Sequence[str], dims: dict[str, Any],
                 where: str, source: str) -> list[TensorType]:
    """The types of ``outputs`` of ``model``: onnx shape inference, then onnxruntime's
    for what onnx cannot type (see the module docstring)."""
    found: dict[str, TensorType] = {}
    why: dict[str, str] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        infos = {vi.name: vi.type for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    except Exception:  # noqa: BLE001 - onnx cannot infer: onnxruntime tries below
        infos = {}
    for o in outputs:
        if o in infos:
            ty, why[o] = _tensor_type(infos[o], dims)
            if ty is not None:
                found[o] = ty
    missing = [o for o in outputs if o not in found]
    if missing:
        for name, t in _ort_types(model, where, source).items():
            if name in missing:
                ty, why[name] = _tensor_type(t, dims)
                if ty is not None:
                    found[name] = ty
    bad = [o for o in outputs if o not in found]
    if bad:
        raise OnnxImportError(
            f"{where}: the onnxruntime fallback cannot type "
            + ", ".join(f"{o!r} ({why.get(o) or 'not inferred'})" for o in bad)
            + "; plait needs each output's sizes from the input sizes (fix open sizes "
            "with shapes=..., or give the values sizes depend on with constants=...)",
            source=source)
    return [found[o] for o in outputs]


def _ort_types(model: onnx.ModelProto, where: str, source: str) -> dict[str, onnx.TypeProto]:
    try:
        import onnxruntime as ort
    except ImportError:
        raise OnnxImportError(
            f"{where}: onnx cannot type the outputs of these nodes and onnxruntime, "
            "which runs them, is not installed: pip install onnxruntime", source=source,
        ) from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's own message says why
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxImportError(
            f"{where}: onnxruntime cannot run these nodes either: {first}", source=source,
        ) from None
    return {o.name: _ort_type(o.type, o.shape) for o in sess.get_outputs()}


def offloaded_nodes(modules: Sequence[Any]) -> dict[str, list[str]]:
    """``{symbol: ["'name' (Op)", ...]}``: the ONNX nodes each fallback function of
    ``modules`` (external modules of a module or an executable) runs."""
    out: dict[str, list[str]] = {}
    for m in modules or ():
        nodes = getattr(m, "meta", {}).get(NODES_META)
        if isinstance(nodes, dict):
            out.update({str(k): [str(x) for x in v] for k, v in nodes.items()})
    return out


__all__ = ["FALLBACKS", "FallbackEmitter", "check_fallback", "node_label", "offloaded_nodes",
           "output_types"]
