"""The PyTorch importer: an exported program (``torch.export``) as an IRModule.

The import runs in three steps:

1. every call node's op is looked up in the converter table; the ops without a converter
   are reported together, each with its nodes and the source lines PyTorch recorded
   (:class:`~.errors.UnsupportedOpsError`), before anything is built;
2. the placeholders become the parameters of ``main`` (user inputs; parameters and
   buffers too with ``keep_params_as_input``) or constants (parameters, buffers, lifted
   tensor constants); a dynamic size becomes a plait symbolic size named after its
   ``torch.export.Dim``, and its range (``ep.range_constraints``) a fact of the module
   (``dim_ranges``, see :mod:`plait.ir.facts`);
3. the nodes are converted in graph order (the graph is a flat list: no recursion); each
   result is checked against the shape and dtype PyTorch recorded for it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ...ir import symbolic as sym
from ...ir.builder import BlockBuilder, IRTypeError
from ...ir.expr import Constant, DataflowVar, Expr, Span, Tuple, Var
from ...ir.facts import DIM_RANGES, check_dim_ranges
from ...ir.module import IRModule
from ...ir.types import Dim, TensorType
from ...op.registry import OpError
from ..common import unique_name
from .context import ConversionError, NodeContext
from .dtypes import to_dtype
from .errors import TorchImportError, UnsupportedOpsError, describe, last_frame
from .registry import find_converter
from .symbolic import SymValue, as_value, sanitize, sym_expr, to_dim, upper_bound

OUTPUTS_ATTR = "torch_outputs"
"""The key (in the module's and the executable's ``runtime_attrs``) of the structure of
the model's outputs: ``{"spec": <pytree TreeSpec as JSON>, "leaves": [...]}``."""

SYM_OPS = frozenset({"aten.sym_size.int", "aten.sym_numel.default", "aten.sym_stride.int",
                     "aten.sym_storage_offset.default"})
"""Ops whose result is a size: its value is the expression PyTorch recorded."""


def op_name(target: Any) -> str:
    """``aten.add.Tensor`` for an op overload; ``operator.mul`` for a Python function."""
    import torch

    if isinstance(target, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
        return str(target)
    mod = getattr(target, "__module__", "") or ""
    return f"{mod.removeprefix('_')}.{getattr(target, '__name__', repr(target))}"


class ProgramImporter:
    """Builds the IR of one exported program; converters reach it through
    :class:`NodeContext`."""

    def __init__(self, ep: Any, *, keep_params_as_input: bool = False,
                 dim_names: dict[Any, str] | None = None) -> None:
        self.ep = ep
        self.keep_params = keep_params_as_input
        self.bb = BlockBuilder()
        self.env: dict[Any, Any] = {}
        self.sym_names: dict[Any, str] = {}
        """sympy expression -> plait symbolic size name."""
        self.dim_sources: dict[str, tuple[Var, int]] = {}
        """symbolic size name -> a variable and the axis whose size it is."""
        self._dim_names = dict(dim_names or {})
        self._sym_cache: dict[Any, Expr] = {}
        self._used: dict[str, int] = {}
        self.param_names: list[str] = []
        """The state_dict names of the parameters kept as inputs, in order."""
        self.range_facts: dict[str, tuple[int, int | None]] = {}
        """The ranges of the named symbols (set once the inputs are bound)."""

    # ---------------------------------------------------------------- helpers
    def unique(self, hint: str) -> str:
        return unique_name(self._used, sanitize(hint))

    def source_of(self, node: Any) -> str:
        return last_frame(node.meta.get("stack_trace"))

    def span_of(self, node: Any, op: str, src: str | None = None) -> Span:
        """The span of fx node ``node`` (of op ``op``): its file and line from
        ``src`` (:meth:`source_of`, computed when not given), its name and op as the
        note.  The file's name is one string for every span of that file (interned),
        not a copy per node: a module of a million bindings holds a million spans."""
        if src is None:
            src = self.source_of(node)
        path, line = "", 0
        if src:
            where = src.split(" (", 1)[0]
            path, _, ln = where.rpartition(":")
            path = sys.intern(path)
            line = int(ln) if ln.isdigit() else 0
        return Span(path, line, 0, f"{node.name} ({op})")

    def emit(self, expr: Expr, hint: str, span: Span | None, is_output: bool = False) -> Var:
        try:
            return self.bb.emit(expr, self.unique(hint), span=span, is_output=is_output)
        except IRTypeError as e:
            note = f" ({span.note})" if span is not None and span.note else ""
            raise ConversionError(f"cannot import the exported program: type error{note}: "
                                  f"{e.detail}") from None

    def resolve(self, a: Any) -> Any:
        """An fx argument with nodes replaced by their values (lists element-wise)."""
        import torch

        if isinstance(a, torch.fx.Node):
            if a not in self.env:
                raise TorchImportError(f"cannot import the exported program: node {a.name!r} "
                                       "is used before it is defined")
            return self.env[a]
        if isinstance(a, list | tuple):
            return [self.resolve(e) for e in a]
        return a

    # -------------------------------------------------------------- symbolic sizes
    def dim_of(self, expr: Any) -> Dim | None:
        """The plait dimension of a size expression: an int, a name, a size expression
        over the named symbols, or None when plait cannot write it and it has no name
        yet."""
        if isinstance(expr, int):
            return expr
        name = self.sym_names.get(expr)
        if name is not None:
            return name
        return to_dim(expr, self._symbol_names())

    def _symbol_names(self) -> dict[Any, str]:
        """The names of the plain shape symbols (not of compound expressions)."""
        return {e: n for e, n in self.sym_names.items() if getattr(e, "is_Symbol", False)}

    def dims_of(self, shape: Any) -> list[Dim | None]:
        return [self.dim_of(sym_expr(d)) for d in shape]

    def name_dim(self, expr: Any) -> str:
        """The name of size ``expr``, a fresh one for a compound expression."""
        name = self.sym_names.get(expr)
        if name is None:
            text = str(expr)
            for sym, n in self.sym_names.items():
                text = text.replace(str(sym), n)
            name = self.unique("d_" + sanitize(text).lstrip("_"))
            self.sym_names[expr] = name
        return name

    def expected_type(self, val: Any) -> TensorType:
        """The plait type of a FakeTensor (sizes plait cannot write get names)."""
        dtype = to_dtype(val.dtype)
        shape: list[Dim] = []
        for d in val.shape:
            e = sym_expr(d)
            dim = self.dim_of(e)
            shape.append(self.name_dim(e) if dim is None else dim)
        return TensorType(tuple(shape), dtype)

    def sym_tensor(self, expr: Any, span: Span | None) -> Expr:
        """A 0-d int64 tensor holding size ``expr`` at run time."""
        if isinstance(expr, int):
            return Constant(np.asarray(expr, dtype=np.int64))
        cached = self._sym_cache.get(expr)
        if cached is not None:
            return cached
        out = self._sym_compute(expr, span)
        self._sym_cache[expr] = out
        return out

    def _sym_compute(self, expr: Any, span: Span | None) -> Expr:
        from ...op.registry import make_call

        def call(op: str, *args: Expr, **attrs: Any) -> Expr:
            return self.emit(make_call(op, *args, **attrs), "size", span)

        name = self.sym_names.get(expr)
        if name is not None and name in self.dim_sources:
            var, axis = self.dim_sources[name]
            shape = call("shape_of", var)
            return call("take", shape, Constant(np.asarray(axis, dtype=np.int64)), axis=0)
        if getattr(expr, "is_Integer", False):
            return Constant(np.asarray(int(expr), dtype=np.int64))
        fname = type(expr).__name__
        binary = {"FloorDiv": "floor_divide", "CleanDiv": "floor_divide",
                  "PythonMod": "mod", "Mod": "mod", "Max": "maximum", "Min": "minimum"}
        args = [self.sym_tensor(a, span) for a in expr.args]
        if fname in ("Add", "Mul"):
            out = args[0]
            for a in args[1:]:
                out = call("add" if fname == "Add" else "multiply", out, a)
            return out
        if fname in binary and len(args) == 2:
            return call(binary[fname], args[0], args[1])
        raise TorchImportError(
            f"cannot import the exported program: the size {expr} is used as a value, and "
            f"plait cannot compute {fname} of sizes at run time"
        )

    # -------------------------------------------------------------------- checks
    def check_ops(self, graph: Any) -> None:
        unsupported: dict[str, list[tuple[str, str]]] = {}
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            op = op_name(node.target)
            if self._is_sym_node(node, op) or op == "operator.getitem":
                continue
            if find_converter(op) is None:
                unsupported.setdefault(op, []).append((node.name, self.source_of(node)))
        if unsupported:
            raise UnsupportedOpsError(unsupported)

    @staticmethod
    def _is_sym_node(node: Any, op: str) -> bool:
        import torch

        val = node.meta.get("val")
        if op in SYM_OPS:
            return True
        return not op.startswith("aten.") and isinstance(
            val, torch.SymInt | torch.SymBool | torch.SymFloat | int | float | bool)

    # ---------------------------------------------------------------------- run
    def run(self, function_name: str = "main") -> IRModule:
        import torch
        from torch.export.graph_signature import InputKind, OutputKind

        ep = self.ep
        graph = ep.graph
        self.check_ops(graph)
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        specs = ep.graph_signature.input_specs
        if len(specs) != len(placeholders):
            raise TorchImportError("cannot import the exported program: its signature lists "
                                   f"{len(specs)} inputs but the graph has "
                                   f"{len(placeholders)} placeholders")
        user_params: list[Var] = []
        state_params: list[Var] = []
        state: list[tuple[Any, np.ndarray]] = []
        for node, spec in zip(placeholders, specs):
            val = node.meta.get("val")
            if spec.kind == InputKind.USER_INPUT:
                if isinstance(val, torch.Tensor):
                    var = Var(self.unique(node.name), self._input_type(node, val))
                    self._bind_dims(var, val)
                    user_params.append(var)
                    self.env[node] = var
                else:
                    self.env[node] = as_value(val) if isinstance(val, torch.SymInt) else val
                continue
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                array = self._state_array(node, spec)
                if self.keep_params and spec.kind != InputKind.CONSTANT_TENSOR:
                    ty = TensorType(tuple(array.shape), array.dtype.name)
                    var = Var(self.unique(spec.target or node.name), ty)
                    state_params.append(var)
                    self.param_names.append(spec.target)
                    self.env[node] = var
                else:
                    state.append((node, array))
                continue
            raise TorchImportError(f"cannot import the exported program: input {node.name!r} is "
                                   f"a {spec.kind.name.lower()}, which plait does not support")
        self.range_facts = self._ranges()
        out_node = next(n for n in graph.nodes if n.op == "output")
        out_values = list(out_node.args[0])
        out_specs = ep.graph_signature.output_specs
        user_outs = [v for v, s in zip(out_values, out_specs) if s.kind == OutputKind.USER_OUTPUT]
        attrs: dict[str, Any] = {}
        if self.keep_params:
            attrs["num_input"] = len(user_params)
        with self.bb.function(function_name, user_params + state_params, attrs=attrs):
            with self.bb.dataflow():
                for node, array in state:
                    self.env[node] = Constant(array)
                for node in graph.nodes:
                    if node.op == "call_function":
                        self.convert(node)
                outs, leaves = self._outputs(user_outs)
            result = outs[0] if len(outs) == 1 else self.bb.normalize(Tuple(tuple(outs)))
            self.bb.emit_func_output(result)
        mod = self.bb.get()
        spec = torch.utils._pytree.treespec_dumps(ep.call_spec.out_spec)
        mod_attrs: dict[str, Any] = {
            "phase": "ingestion",
            "source": "torch.export",
            "runtime_attrs": {OUTPUTS_ATTR: {"spec": spec, "leaves": leaves}},
        }
        ranges = self.range_facts
        if ranges:
            mod_attrs[DIM_RANGES] = ranges
        return mod.with_attrs(**mod_attrs)

    def _input_type(self, node: Any, val: Any) -> TensorType:
        dtype = to_dtype(val.dtype)
        if dtype is None:
            raise TorchImportError(f"cannot import the exported program: input {node.name!r} "
                                   f"has dtype {val.dtype}, which plait does not support")
        shape: list[Dim] = []
        for axis, d in enumerate(val.shape):
            e = sym_expr(d)
            if isinstance(e, int):
                shape.append(e)
                continue
            name = self.sym_names.get(e)
            if name is None:
                if getattr(e, "is_Symbol", False):
                    hint = self._dim_names.get(e) or f"{node.name}_{axis}"
                    name = self.unique(hint)
                    self.sym_names[e] = name
                else:
                    dim = self.dim_of(e)
                    name = self.name_dim(e) if dim is None else dim
            shape.append(name)
        return TensorType(tuple(shape), dtype)

    def _bind_dims(self, var: Var, val: Any) -> None:
        assert isinstance(var.ty, TensorType) and var.ty.shape is not None
        for axis, d in enumerate(var.ty.shape):
            if isinstance(d, str) and d not in self.dim_sources:
                self.dim_sources[d] = (var, axis)

    def _state_array(self, node: Any, spec: Any) -> np.ndarray:
        ep = self.ep
        t = ep.state_dict.get(spec.target) if spec.target in ep.state_dict else (
            ep.constants.get(spec.target))
        if t is None:
            raise TorchImportError(f"cannot import the exported program: no value for "
                                   f"{spec.kind.name.lower()} {spec.target!r}")
        if to_dtype(t.dtype) is None:
            raise TorchImportError(f"cannot import the exported program: "
                                   f"{spec.kind.name.lower()} {spec.target!r} has dtype "
                                   f"{t.dtype}, which plait does not support")
        return np.array(t.detach().cpu().resolve_conj().numpy(), order="C", copy=True)

    def _ranges(self) -> dict[str, tuple[int, int | None]]:
        out: dict[str, tuple[int, int | None]] = {}
        for symbol, vr in self.ep.range_constraints.items():
            name = self.sym_names.get(symbol)
            if name is None or name not in self.dim_sources:
                continue
            lo = int(vr.lower) if upper_bound(vr.lower) is not None else 0
            out[name] = (max(lo, 0), upper_bound(vr.upper))
        return check_dim_ranges(out)

    # ------------------------------------------------------------------- nodes
    def convert(self, node: Any) -> None:
        import torch

        op = op_name(node.target)
        if op == "operator.getitem":
            self.env[node] = self._getitem(node)
            return
        if self._is_sym_node(node, op):
            val = node.meta.get("val")
            self.env[node] = as_value(val)
            return
        conv = find_converter(op)
        assert conv is not None  # check_ops
        ctx = NodeContext(self, node, op)
        try:
            result = conv.fn(ctx)
        except TorchImportError:
            raise
        except IRTypeError as e:
            raise ConversionError(f"cannot import the exported program: {ctx.describe()}: "
                                  f"{e.detail}") from None
        except OpError as e:
            raise ConversionError(f"cannot import the exported program: {ctx.describe()}: "
                                  f"{e}") from None
        except Exception as e:
            raise TorchImportError(
                f"cannot import the exported program: {ctx.describe()}: internal error in the "
                f"converter ({type(e).__name__}: {e})") from e
        val = node.meta.get("val")
        if isinstance(result, list):
            vals = list(val) if isinstance(val, list | tuple) else [None] * len(result)
            self.env[node] = [self._checked(ctx, r, v) for r, v in zip(result, vals)]
        elif isinstance(val, torch.Tensor) and isinstance(result, Expr):
            self.env[node] = self._checked(ctx, result, val)
        else:
            self.env[node] = result

    def _checked(self, ctx: NodeContext, result: Any, val: Any) -> Any:
        """``result`` checked against PyTorch's FakeTensor ``val`` (refined by a
        match_cast when PyTorch knows sizes plait's inference did not derive)."""
        import torch

        if result is None or not isinstance(val, torch.Tensor) or not isinstance(result, Expr):
            return result
        want = self.expected_type(val)
        have = result.ty
        if not isinstance(have, TensorType):
            ctx.fail(f"internal error: the converter produced a {have}, PyTorch expects {want}")
        if have.dtype != want.dtype:
            ctx.fail(f"internal error: the converter produced dtype {have.dtype}, PyTorch "
                     f"expects {want.dtype}")
        if have.shape == want.shape:
            return result
        if have.shape is not None:
            if len(have.shape) != len(want.shape):
                ctx.fail(f"internal error: the converter produced shape {have.shape}, PyTorch "
                         f"expects {want.shape}")
            for h, w in zip(have.shape, want.shape):
                if isinstance(h, int) and isinstance(w, int) and h != w:
                    ctx.fail(f"internal error: the converter produced shape {have.shape}, "
                             f"PyTorch expects {want.shape}")
        if have.shape is not None and all(
                self._same_size(h, w) for h, w in zip(have.shape, want.shape)):
            # the same sizes by the Dims' ranges (PyTorch simplified max(0, n - 2) to
            # n - 2 knowing n >= 4): a reshape gives the value PyTorch's form of the type
            return ctx.call("reshape", result, shape=tuple(want.shape))
        # a match_cast binds names: sizes plait's inference did not derive get one
        named = [d if isinstance(d, int | str) else self.name_dim(sym_expr(v))
                 for d, v in zip(want.shape, val.shape)]
        want = TensorType(tuple(named), want.dtype)
        var = self.bb.emit_match_cast(ctx.atom(result), want, self.unique(ctx.name))
        for axis, d in enumerate(want.shape):
            if isinstance(d, str) and d not in self.dim_sources:
                self.dim_sources[d] = (var, axis)
        return var

    def _same_size(self, a: Dim | None, b: Dim) -> bool:
        """True when sizes ``a`` and ``b`` are proved equal for every value in the
        Dims' ranges."""
        if a is None:
            return False
        r = self.range_facts
        return sym.prove_eq(a, b, r) or sym.simplify(a, r) == sym.simplify(b, r)

    def _getitem(self, node: Any) -> Any:
        src, index = node.args
        value = self.env.get(src)
        if not isinstance(value, list):
            raise TorchImportError(f"cannot import the exported program: node {node.name!r} "
                                   f"takes item {index} of {src.name!r}, which is not a tuple")
        item = value[index]
        if item is None:
            op = op_name(src.target)
            raise TorchImportError(
                f"cannot import the exported program: {describe(node.name, 'getitem')}: "
                f"result {index} of {describe(src.name, op, self.source_of(src))} is used; "
                "computing it is not supported (e.g. the indices of max_pool2d_with_indices)")
        return item

    def _outputs(self, values: list[Any]) -> tuple[list[Expr], list[Any]]:
        import torch

        outs: list[Expr] = []
        leaves: list[Any] = []
        for i, v in enumerate(values):
            if isinstance(v, torch.fx.Node):
                value = self.env[v]
                if isinstance(value, SymValue):
                    value = self.sym_tensor(value.expr, None)
                elif isinstance(value, int) and not isinstance(value, bool) and isinstance(
                        v.meta.get("val"), torch.SymInt | int):
                    value = Constant(np.asarray(value, dtype=np.int64))
                if not isinstance(value, Expr):
                    raise TorchImportError(f"cannot import the exported program: output {i} "
                                           f"({v.name!r}) is a {type(value).__name__}, not a "
                                           "tensor")
                if isinstance(value, Var) and not isinstance(value, DataflowVar):
                    outs.append(value)
                else:
                    outs.append(self.bb.emit_output(value, self.unique(f"out{i}")))
                leaves.append({"tensor": len(outs) - 1})
            else:
                leaves.append({"value": v if isinstance(v, bool | int | float | str) or v is None
                               else repr(v)})
        if not outs:
            raise TorchImportError("cannot import the exported program: it returns no tensor")
        return outs, leaves


def output_structure(obj: Any) -> dict[str, Any]:
    """The recorded structure of the outputs of an IRModule, Executable or
    VirtualMachine built from an exported program."""
    attrs = getattr(obj, "attrs", None)
    if attrs is None and hasattr(obj, "executable"):
        attrs = obj.executable.attrs
    if attrs is None:
        raise TypeError(f"expected an IRModule, Executable or VirtualMachine, got "
                        f"{type(obj).__name__}")
    info = attrs.get(OUTPUTS_ATTR)
    if info is None:
        rt = attrs.get("runtime_attrs") or {}
        info = rt.get(OUTPUTS_ATTR)
    if info is None:
        raise ValueError("the module was not imported from an exported program (it records "
                         "no output structure)")
    return {"spec": str(info["spec"]), "leaves": [dict(e) for e in info["leaves"]]}


def unflatten_outputs(obj: Any, outputs: Any) -> Any:
    """The outputs of a compiled model (one array or a tuple of arrays) in the
    structure the PyTorch module returned (tuples, lists, dicts, constants)."""
    from torch.utils import _pytree as pytree

    info = output_structure(obj)
    flat = list(outputs) if isinstance(outputs, tuple | list) else [outputs]
    leaves = [flat[e["tensor"]] if "tensor" in e else e["value"] for e in info["leaves"]]
    return pytree.tree_unflatten(leaves, pytree.treespec_loads(info["spec"]))


def flatten_inputs(args: Any, kwargs: Any = None) -> list[np.ndarray]:
    """The tensor leaves of ``(args, kwargs)`` as numpy arrays, in the order of the
    imported function's parameters (what ``vm["main"]`` takes)."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, _ = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    return [t.detach().cpu().numpy() for t in leaves if isinstance(t, torch.Tensor)]


__all__ = ["OUTPUTS_ATTR", "ProgramImporter", "flatten_inputs", "output_structure",
           "unflatten_outputs"]
