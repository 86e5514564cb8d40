"""The ONNX importer: :func:`from_onnx` turns an ONNX model into an IRModule.

The import runs in three steps:

1. :func:`~.loader.load_model` parses the file; :func:`~.loader.prepare_model`
   upgrades opsets older than 7, inlines model-local functions and expands ops that
   plait converts through their ONNX function definition;
2. :func:`~.loader.check_model` checks the whole model and reports every problem at
   once (unsupported ops with their nodes and opset, undefined values, cycles, missing
   inputs, ill-typed or unsupported attributes) before anything is built;
3. :class:`GraphImporter` walks the nodes in topological order (iteratively) and calls
   the registered converter of each.  Graph inputs become the parameters of ``main``
   (symbolic sizes for ``dim_param`` and unknown dimensions, unless ``shapes`` fixes
   them), initializers become constants, every binding's span names its ONNX node, and
   computations on shapes are evaluated at import time (symbolically where sizes are
   symbolic), so shape subgraphs fold away.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import GraphProto, NodeProto, numpy_helper

from ...ir import symbolic
from ...ir.builder import BlockBuilder, IRTypeError, is_atom
from ...ir.expr import Constant, DataflowVar, Expr, SeqExpr, Span, Tuple, TupleGetItem, Var
from ...ir.facts import FactError, with_dim_ranges
from ...ir.module import IRModule
from ...ir.types import TensorType, TupleType
from ...op.registry import OpError
from ...transform.run_codegen import EXTERNAL_MODS_ATTR
from ..common import unique_name
from .context import ConversionError, NodeContext
from .dtypes import onnx_type_name, sanitize, to_dtype
from .errors import OnnxImportError, describe_node
from .export_ranges import recorded_ranges
from .fallback import FallbackEmitter, check_fallback
from .fallback_plan import Group, plan_fallback
from .loader import (
    FALLBACK_HINT,
    LoadedModel,
    check_model,
    clear_order_cache,
    iter_nodes,
    load_model,
    prepare_model,
    topological_order,
)
from .registry import find_converter, normalize_domain
from .values import Value

Shapes = Mapping[str, Sequence[int | str]]


def from_onnx(
    model_or_path: Any,
    shapes: Shapes | None = None,
    *,
    constants: Mapping[str, Any] | None = None,
    function_name: str = "main",
    dim_ranges: Mapping[str, tuple[int, int | None]] | None = None,
    fallback: str | None = None,
    mmap: bool = True,
) -> IRModule:
    """Import an ONNX model as an IRModule in phase ``ingestion``.

    Args:
        model_or_path: a path to a ``.onnx`` file, the bytes of one, or an
            ``onnx.ModelProto``.
        shapes: fixed shapes of graph inputs by name, e.g. ``{"input": (1, 3, 224, 224)}``;
            dimensions the model leaves symbolic and the inputs not named here keep
            symbolic sizes (named after the ``dim_param``, or ``<input>_<axis>``).  For a
            sequence input, the list of its tensors' shapes (it becomes a tuple
            parameter).
        constants: values of graph inputs to treat as constants (they are not parameters
            of ``main``); needed when a graph input decides a shape, axes or a count.
        function_name: the name of the function the graph becomes.
        dim_ranges: inclusive ranges ``(min, max or None)`` of symbolic sizes of the
            inputs, e.g. ``{"batch": (1, 32), "seq": (1, 512)}`` (ONNX files carry no
            ranges, except the dynamo exporter's: those of its ``Dim``s are read from the
            file, :mod:`.export_ranges`, and these go on top); recorded as the module's
            ``dim_ranges`` fact, so the compiler may use them and the built model refuses
            a size outside its range.  The sizes the
            shape subgraphs compute are simplified with them, so two formulas of one size
            (a convolution's output length and the exporter's ``Div`` of it) agree.
        fallback: ``"onnxruntime"`` runs the nodes plait has no converter for (unknown
            ops, onnxruntime contrib ops such as ``com.microsoft::FusedMatMul``) with
            onnxruntime: each connected run of them becomes one ONNX sub-model called
            as an external function (``call_extern``; the module attribute
            ``external_mods`` holds the models, :mod:`.fallback`).  Without it such
            nodes are an error listing every one of them.
        mmap: for a model given by its path, its large weights (in the file or in
            external data files) are views of a private, copy-on-write mapping of
            their file, not copies (a write changes this process's page, never the
            file).  Do not rewrite the file in place while the module, or an executable
            built from it, is alive (write a new file and rename it over the old one);
            ``mmap=False`` reads every weight into memory instead (docs/onnx.md).

    Returns:
        A module with one function whose parameters are the graph inputs (initializers
        excluded) and whose result is the graph output (a tuple for several outputs).

    Raises:
        OnnxImportError: the file cannot be read or is malformed, the model uses
            operators or attribute values plait does not support (all of them are
            listed, with the ``fallback`` that would run them), or a node cannot be
            expressed (the node and op are named).
    """
    from ...dialects import load_frontend_converters

    load_frontend_converters("onnx")  # dialects registered since the frontend loaded
    check_fallback(fallback, model_source(model_or_path))
    try:
        loaded = load_model(model_or_path, mmap=mmap)
        loaded = prepare_model(loaded)
        check_model(loaded, fallback=fallback)
        recorded = recorded_ranges(loaded.model)   # the dynamo exporter's Dim ranges
        ranges = {**recorded, **dict(dim_ranges or {})}
        importer = GraphImporter(loaded, shapes=shapes, constants=constants, fallback=fallback,
                                 dim_ranges=ranges)
        try:
            mod = importer.run(function_name)
        finally:
            # the importer and its fallback emitter refer to each other: unbroken, the
            # cycle keeps every weight it saw until the collector runs (plait.build
            # pauses it), so a build could not free the originals it packs
            importer._fallback = None
        if recorded:   # a recorded size that shapes= fixed is no parameter's size now
            sizes = _param_sizes(mod)
            ranges = {n: r for n, r in ranges.items() if n in sizes or n in (dim_ranges or {})}
        return mod if not ranges else add_dim_ranges(mod, ranges, loaded.source)
    except RecursionError:  # pragma: no cover - the walk is iterative
        raise OnnxImportError(
            "the graph is nested too deeply", source=model_source(model_or_path)
        ) from None
    finally:
        clear_order_cache()


class GraphImporter:
    """Builds the IR of one model; converters reach it through :class:`NodeContext`."""

    def __init__(
        self,
        loaded: LoadedModel,
        shapes: Shapes | None = None,
        constants: Mapping[str, Any] | None = None,
        fallback: str | None = None,
        dim_ranges: Mapping[str, tuple[int, int | None]] | None = None,
    ) -> None:
        self.model = loaded.model
        self.dim_ranges = dict(dim_ranges or {})
        """Ranges of symbolic sizes: the shape subgraph's values are simplified with them
        (``max(0, frames - 1) // 2 + 1`` is ``(frames + 1) // 2`` for ``frames >= 1``)."""
        self.fallback = fallback
        self._fallback = FallbackEmitter(self)
        self.source = loaded.source
        self.opsets = loaded.opsets
        self.arrays = loaded.arrays
        self.shapes = dict(shapes or {})
        self.constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
        self.bb = BlockBuilder()
        self.scopes: list[dict[str, Value]] = [{}]
        self.level = 0
        self._scoped: list[list[Value]] = [[]]
        self._used_names: dict[str, int] = {}
        self._output_names: set[str] = set()
        self._sequence_params: list[tuple[str, Var]] = []
        self._params: list[Var] = []
        self.unnamed_spans: dict[str, Span] = {}
        """op type -> the span of its unnamed nodes (equal for all of them: one object
        for all, as a BlockBuilder module shares its values, not one per binding)."""

    # ------------------------------------------------------------------ scopes
    def lookup(self, name: str) -> Value:
        for scope in reversed(self.scopes):
            v = scope.get(name)
            if v is not None:
                return v
        raise OnnxImportError(f"value {name!r} is used before it is defined", source=self.source)

    def define(self, name: str, value: Value) -> None:
        if value.level is None:
            value.level = self.level
        self.scopes[-1][name] = value

    def unique(self, hint: str) -> str:
        return unique_name(self._used_names, sanitize(hint))

    def fresh_dim(self, hint: str) -> str:
        """A new symbolic size name (for a size that is a product of symbolic sizes)."""
        return self.unique(hint)

    def emit(self, expr: Expr, hint: str, span: Span | None, is_output: bool = False) -> Var:
        try:
            return self.bb.emit(expr, self.unique(hint), span=span, is_output=is_output)
        except IRTypeError as e:
            note = f" ({span.note})" if span is not None and span.note else ""
            raise ConversionError(f"type error{note}: {e.detail}", source=self.source) from None

    # ------------------------------------------------------------------ values
    def materialize(self, value: Value) -> Expr:
        """The IR expression of ``value``, emitting the run-time computation of a
        symbolic value (and of the symbolic values it depends on) if needed."""
        if value.expr is not None:
            return value.expr
        if value.seq is not None:
            fields = tuple(self.materialize(v) for v in value.seq)
            return self.bb.normalize(Tuple(fields))
        if value.is_none:
            raise OnnxImportError("an omitted optional value is used", source=self.source)
        stack = [value]
        while stack:
            v = stack[-1]
            if v.expr is not None:
                stack.pop()
                continue
            if v.lazy is None:
                raise OnnxImportError(
                    f"internal error: a value of type {v.ty} has no IR expression",
                    source=self.source,
                )
            node, scopes = v.lazy
            saved = self.scopes
            self.scopes = scopes
            try:
                pending = []
                for name in node.input:
                    if not name:
                        continue
                    iv = self.lookup(name)
                    if iv.expr is None and iv.lazy is not None and iv not in stack:
                        pending.append(iv)
                if pending:
                    stack.extend(pending)
                    continue
                self._materialize_node(node)
            finally:
                self.scopes = saved
            stack.pop()
        assert value.expr is not None
        return value.expr

    def _materialize_node(self, node: NodeProto) -> None:
        outs = self.convert_node(node, runtime=True)
        for name, out in zip(node.output, outs):
            if not name:
                continue
            target = self.lookup(name)
            if target.expr is not None:
                continue
            expr = out.expr if out.expr is not None else self.materialize(out)
            target.expr = expr
            if (target.level or 0) < self.level:
                self._scoped[-1].append(target)

    # ------------------------------------------------------------------- nodes
    def convert_nodes(self, graph: GraphProto) -> None:
        """Convert the nodes of ``graph`` in topological order into the current scope
        (with a fallback, the main graph's groups of nodes plait cannot convert each as
        one call of an onnxruntime sub-model: :mod:`.fallback`)."""
        plan = None
        if self.fallback is not None and graph is self.model.graph:
            plan = plan_fallback(graph, self.opsets, self.source)
        units = plan.units if plan is not None else topological_order(graph, self.source)
        for node in units:
            if isinstance(node, Group):
                self._fallback.emit(node)
                continue
            outs = self.convert_node(node)
            for name, v in zip(node.output, outs):
                if name:
                    self.define(name, v)

    def convert_node(self, node: NodeProto, runtime: bool = False) -> list[Value]:
        dom = normalize_domain(node.domain)
        version = self.opsets.get(dom, 1)
        conv = find_converter(node.op_type, dom, version)
        if conv is None:
            raise OnnxImportError(
                f"{describe_node(node.name, node.op_type, version, dom)}: unsupported operator",
                source=self.source,
                unsupported={node.op_type: [node.name]},
                hint=FALLBACK_HINT,
            )
        ctx = NodeContext(self, node, version, runtime)
        try:
            result = conv.fn(ctx)
        except OnnxImportError:
            raise
        except IRTypeError as e:
            raise ConversionError(f"{ctx.describe()}: {e.detail}", source=self.source) from None
        except OpError as e:
            raise ConversionError(f"{ctx.describe()}: {e}", source=self.source) from None
        except Exception as e:
            raise OnnxImportError(
                f"{ctx.describe()}: internal error in the converter ({type(e).__name__}: {e})",
                source=self.source,
            ) from e
        outs = list(result) if isinstance(result, list) else [result]
        values: list[Value] = []
        for i, name in enumerate(node.output):
            out = outs[i] if i < len(outs) else None
            if out is None:
                if name:
                    ctx.fail(f"output {i} ({name!r}) is not supported")
                values.append(Value(is_none=True))
                continue
            values.append(self._as_value(ctx, out, name or f"{node.op_type}_unused", runtime))
        return values

    def _as_value(self, ctx: NodeContext, out: Any, name: str, runtime: bool) -> Value:
        if isinstance(out, Value):
            if out.expr is None and out.seq is None and out.const is None and not out.is_none:
                out.lazy = (ctx.node, list(self.scopes))
            return out
        if isinstance(out, np.ndarray):
            return Value.of_const(out, ctx.deps)
        if isinstance(out, Constant):
            return Value.of_const(np.asarray(out.data), ctx.deps)
        if isinstance(out, Expr):
            if isinstance(out, Var):
                return Value(out, deps=ctx.deps)
            is_output = (
                name in self._output_names and self.level == 0 and self.bb.in_dataflow
                and not runtime
            )  # fmt: skip
            var = self.emit(out, name, ctx.span, is_output=is_output)
            return Value(var, deps=ctx.deps)
        raise OnnxImportError(
            f"{ctx.describe()}: internal error: the converter returned a {type(out).__name__}",
            source=self.source,
        )

    # --------------------------------------------------------------- subgraphs
    def run_subgraph(
        self, graph: GraphProto, inputs: Sequence[Value], *, branch: bool = False
    ) -> tuple[list[Value], list[Any]]:
        """Convert ``graph`` with its inputs bound to ``inputs``.  Inline (``branch``
        False): the nodes go into the current block; returns the output values.  As a
        branch: the bindings are collected; returns the output expressions and the
        bindings (for an ``If``)."""
        if len(inputs) != len(graph.input):
            raise OnnxImportError(
                f"subgraph {graph.name!r} takes {len(graph.input)} inputs, got {len(inputs)}",
                source=self.source,
            )
        self.scopes.append({})
        if branch:
            self.level += 1
            self._scoped.append([])
            self.bb.begin_scope(False)
        bindings: list[Any] = []
        try:
            for vi, v in zip(graph.input, inputs):
                self.define(vi.name, v)
            self._define_initializers(graph)
            self.convert_nodes(graph)
            outs = [self.lookup(o.name) for o in graph.output]
            if branch:
                exprs = [self.materialize(o) for o in outs]
                outs = [Value(e) for e in exprs]
        finally:
            if branch:
                bindings = self.bb.end_scope()
                for v in self._scoped.pop():
                    v.expr = None
                self.level -= 1
            self.scopes.pop()
        return outs, bindings

    def branch_seq(self, graph: GraphProto) -> SeqExpr:
        """``graph`` (no inputs) as the body of an If branch."""
        from ...ir.expr import BindingBlock

        outs, bindings = self.run_subgraph(graph, [], branch=True)
        exprs = [o.expr for o in outs]
        body: Expr = exprs[0] if len(exprs) == 1 else self.bb.normalize(Tuple(tuple(exprs)))  # type: ignore[arg-type]
        blocks = (BindingBlock(tuple(bindings)),) if bindings else ()
        return SeqExpr(blocks, body, ty=body.ty)

    def _define_initializers(self, graph: GraphProto,
                             arrays: Mapping[str, np.ndarray] | None = None) -> None:
        """Constants of the graph's initializers; ``arrays`` holds the main graph's
        initializers read from the file (see weights.py), whose tensors have no data."""
        arrays = arrays or {}
        for init in graph.initializer:
            if init.name in self.constants:
                continue
            if to_dtype(init.data_type) is None:
                raise OnnxImportError(
                    f"initializer {init.name!r} has element type "
                    f"{onnx_type_name(init.data_type)}, which plait does not support",
                    source=self.source,
                )
            try:
                read = arrays.get(init.name)
                arr = read if read is not None else np.asarray(numpy_helper.to_array(init))
            except Exception as e:
                raise OnnxImportError(
                    f"cannot read initializer {init.name!r}: {e}", source=self.source
                ) from None
            self.define(init.name, Value.of_const(arr))
        for sp in graph.sparse_initializer:
            values = np.asarray(numpy_helper.to_array(sp.values))
            idx = np.asarray(numpy_helper.to_array(sp.indices), dtype=np.int64)
            dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
            if idx.ndim == 1:
                dense.reshape(-1)[idx] = values
            else:
                dense[tuple(idx.T)] = values
            self.define(sp.values.name, Value.of_const(dense))

    # -------------------------------------------------------------------- main
    def _make_params(self) -> list[Var]:
        graph = self.model.graph
        inits = {i.name for i in graph.initializer}
        names = [vi.name for vi in graph.input]
        for n in list(self.shapes) + list(self.constants):
            if n not in names:
                raise OnnxImportError(
                    f"there is no graph input {n!r}; the inputs are "
                    f"{', '.join(repr(x) for x in names if x not in inits) or 'none'}",
                    source=self.source,
                )
        params: list[Var] = []
        for vi in graph.input:
            if vi.name in self.constants:
                arr = self.constants[vi.name]
                dtype = self._input_dtype(vi)
                if dtype is not None and arr.dtype.name != dtype:
                    arr = arr.astype(dtype)
                self.define(vi.name, Value.of_const(arr))
                continue
            if vi.name in inits:
                continue  # an initializer listed as an input (old exporters): a constant
            if vi.type.HasField("sequence_type"):
                var = Var(self.unique(vi.name), self._sequence_type(vi))
                params.append(var)
                self._sequence_params.append((vi.name, var))
                continue
            ty = self._input_type(vi)
            var = Var(self.unique(vi.name), ty)
            params.append(var)
            self.define(vi.name, Value(var, deps=frozenset([vi.name])))
        return params

    def _sequence_type(self, vi: onnx.ValueInfoProto) -> TupleType:
        """A sequence input is a tuple of tensors; ``shapes`` must give their shapes."""
        elem = vi.type.sequence_type.elem_type
        if not elem.HasField("tensor_type"):
            raise OnnxImportError(
                f"graph input {vi.name!r} is a sequence of non-tensors", source=self.source
            )
        dtype = to_dtype(elem.tensor_type.elem_type) if elem.tensor_type.elem_type else None
        if elem.tensor_type.elem_type and dtype is None:
            raise OnnxImportError(
                f"graph input {vi.name!r} is a sequence of "
                f"{onnx_type_name(elem.tensor_type.elem_type)}, which plait does not support",
                source=self.source,
            )
        given = self.shapes.get(vi.name)
        if given is None or not all(isinstance(s, list | tuple) for s in given):
            raise OnnxImportError(
                f"graph input {vi.name!r} is a sequence; give the shapes of its tensors, e.g. "
                f"from_onnx(..., shapes={{{vi.name!r}: [(2, 3), (2, 3)]}})",
                source=self.source,
            )
        return TupleType(tuple(TensorType(tuple(int(d) for d in s), dtype) for s in given))

    def _define_sequence_params(self) -> None:
        for name, var in self._sequence_params:
            assert isinstance(var.ty, TupleType)
            items = []
            for i in range(len(var.ty.fields)):
                item = self.emit(TupleGetItem(var, i), f"{name}_{i}", None)
                items.append(Value(item, deps=frozenset([name])))
            self.define(name, Value(seq=items, deps=frozenset([name])))

    def _input_dtype(self, vi: onnx.ValueInfoProto) -> str | None:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None or not tt.elem_type:
            return None
        return to_dtype(tt.elem_type)

    def _input_type(self, vi: onnx.ValueInfoProto) -> TensorType:
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"graph input {vi.name!r} has no tensor type", source=self.source)
        tt = vi.type.tensor_type
        dtype = to_dtype(tt.elem_type) if tt.elem_type else None
        if tt.elem_type and dtype is None:
            raise OnnxImportError(
                f"graph input {vi.name!r} has element type {onnx_type_name(tt.elem_type)}, "
                "which plait does not support",
                source=self.source,
            )
        declared: list[int | str] | None = None
        if tt.HasField("shape"):
            declared = []
            for axis, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value") and d.dim_value >= 0:
                    declared.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    declared.append(sanitize(d.dim_param, f"{sanitize(vi.name)}_{axis}"))
                else:
                    declared.append(f"{sanitize(vi.name)}_{axis}")
        given = self.shapes.get(vi.name)
        if given is None:
            return self._tensor_type(vi, None if declared is None else tuple(declared), dtype)
        given = tuple(int(d) if not isinstance(d, str) else sanitize(d) for d in given)
        if declared is not None:
            if len(given) != len(declared):
                raise OnnxImportError(
                    f"shapes[{vi.name!r}] = {given} has rank {len(given)}, but the model "
                    f"declares rank {len(declared)} ({tuple(declared)})",
                    source=self.source,
                )
            for a, (g, d) in enumerate(zip(given, declared)):
                if isinstance(d, int) and isinstance(g, int) and g != d:
                    raise OnnxImportError(
                        f"shapes[{vi.name!r}] = {given} gives size {g} to axis {a}, but the "
                        f"model declares it as {d}",
                        source=self.source,
                    )
        if any(isinstance(d, int) and d < 0 for d in given):
            raise OnnxImportError(
                f"shapes[{vi.name!r}] = {given} has a negative size", source=self.source
            )
        return self._tensor_type(vi, given, dtype)

    def _tensor_type(self, vi: onnx.ValueInfoProto, shape: tuple[int | str, ...] | None,
                     dtype: str | None) -> TensorType:
        try:
            return TensorType(shape, dtype)
        except TypeError as e:  # a size beyond int64
            raise OnnxImportError(f"graph input {vi.name!r}: {e}", source=self.source) from None

    def run(self, function_name: str = "main") -> IRModule:
        graph = self.model.graph
        self._output_names = {o.name for o in graph.output}
        self._define_initializers(graph, self.arrays)
        params = self._make_params()
        self._params = params
        use_dataflow = not any(n.op_type == "If" for n, _ in iter_nodes(graph))
        attrs = {"source": self.source}
        with self.bb.function(function_name, params, attrs=attrs):
            if use_dataflow:
                with self.bb.dataflow():
                    self._define_sequence_params()
                    self.convert_nodes(graph)
                    outs = self._outputs(graph, in_dataflow=True)
            else:
                self._define_sequence_params()
                self.convert_nodes(graph)
                outs = self._outputs(graph, in_dataflow=False)
            result = outs[0] if len(outs) == 1 else Tuple(tuple(outs))
            self.bb.emit_func_output(result)
        mod = self.bb.get().with_attrs(phase="ingestion", source=self.source)
        ext = self._fallback.module()
        return mod if ext is None else mod.with_attrs(**{EXTERNAL_MODS_ATTR: (ext,)})

    def _outputs(self, graph: GraphProto, in_dataflow: bool) -> list[Expr]:
        outs: list[Expr] = []
        for o in graph.output:
            value = self.lookup(o.name)
            expr = self.materialize(value)
            if in_dataflow:
                if isinstance(expr, Var) and not isinstance(expr, DataflowVar):
                    outs.append(expr)
                else:
                    outs.append(self.bb.emit_output(expr, self.unique(o.name)))
            else:
                outs.append(expr if is_atom(expr) else self.emit(expr, o.name, None))
        return outs


def _param_sizes(mod: IRModule) -> set[str]:
    """The symbolic sizes of the parameters of ``mod``'s functions."""
    names: set[str] = set()
    for fn in mod.functions.values():
        for p in getattr(fn, "params", ()):
            if isinstance(p.ty, TensorType) and p.ty.shape is not None:
                for d in p.ty.shape:
                    names |= symbolic.free_symbols(d) if not isinstance(d, int) else set()
    return names


def add_dim_ranges(
    mod: IRModule, ranges: Mapping[str, tuple[int, int | None]], source: str
) -> IRModule:
    """``mod`` with the ranges of symbolic sizes of its parameters recorded (a name that
    is no symbolic size of an input is refused, naming the ones there are)."""
    names = _param_sizes(mod)
    unknown = sorted(set(ranges) - names)
    if unknown:
        raise OnnxImportError(
            f"dim_ranges names {', '.join(map(repr, unknown))}, which "
            f"{'is' if len(unknown) == 1 else 'are'} no symbolic size of the inputs; the "
            f"symbolic sizes are {', '.join(map(repr, sorted(names))) or 'none'}",
            source=source,
        )
    try:
        return with_dim_ranges(mod, ranges)
    except FactError as e:
        raise OnnxImportError(str(e), source=source) from None


def model_source(model_or_path: Any) -> str:
    """A short name for messages: the path, or the graph name."""
    if isinstance(model_or_path, str | os.PathLike):
        return os.fspath(model_or_path)
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path.graph.name
    return "<bytes>"
