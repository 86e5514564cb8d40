"""What a converter sees: :class:`NodeContext`, one ONNX node being converted.

A converter reads its inputs (``x(i)`` for the IR expression, ``const(i)`` for a value
that must be known at compile time, ``dims(i)`` for a shape-like input that may hold
symbolic sizes), its attributes (``attr_int("axis", 0)``, ...), builds IR with
``call(op, *args, **attrs)`` and returns the node's output(s).  ``call`` type-checks
at once (an error names the node) and folds calls whose arguments are all constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, numpy_helper

from ...ir import symbolic
from ...ir.builder import IRTypeError, is_atom
from ...ir.expr import Constant, Expr, Span, Tuple, TupleGetItem, Var
from ...ir.types import TensorType
from ...op.registry import OpError, make_call
from ..common import FOLD_LIMIT, fold
from .dtypes import onnx_type_name, to_dtype
from .errors import NeedsConstantError, OnnxImportError, describe_node
from .values import EMPTY, Value, sym_array, sym_is_static

if TYPE_CHECKING:
    from .importer import GraphImporter

_MISSING = object()

class ConversionError(OnnxImportError):
    """A node could not be converted (bad attribute value, unsupported case, ...)."""


class NodeContext:
    """One ONNX node under conversion, with helpers to read it and to build IR."""

    def __init__(
        self, importer: GraphImporter, node: NodeProto, opset: int, runtime: bool = False
    ) -> None:
        self.importer = importer
        self.node = node
        self.op_type = node.op_type
        self.name = node.name
        self.opset = opset
        self.runtime = runtime
        """True when a symbolic value is being turned into run-time computations: the
        converter must not produce a symbolic value again."""
        self.inputs: list[Value | None] = [importer.lookup(n) if n else None for n in node.input]
        self.attrs = {a.name: a for a in node.attribute}
        if node.name:
            self.span = Span(importer.source, note=f"{node.name} ({node.op_type})")
        else:
            span = importer.unnamed_spans.get(node.op_type)
            if span is None:
                span = importer.unnamed_spans[node.op_type] = Span(
                    importer.source, note=f"<unnamed {node.op_type}> ({node.op_type})")
            self.span = span
        self._hint = node.output[0] if node.output and node.output[0] else node.op_type.lower()
        self._deps: frozenset[str] | None = None

    @property
    def deps(self) -> frozenset[str]:
        """The graph inputs whose data the node's inputs are computed from."""
        if self._deps is None:
            sets = {id(v.deps): v.deps for v in self.inputs if v is not None and v.deps}
            if not sets:
                self._deps = EMPTY
            elif len(sets) == 1:
                self._deps = next(iter(sets.values()))
            else:
                self._deps = frozenset().union(*sets.values())
        return self._deps

    # ------------------------------------------------------------------ messages
    def describe(self) -> str:
        return describe_node(self.name, self.op_type, self.opset, self.node.domain)

    def fail(self, message: str, attribute: str | None = None) -> NoReturn:
        """Raise a :class:`ConversionError` naming the node (and the attribute)."""
        where = self.describe() + (f", attribute {attribute!r}" if attribute else "")
        raise ConversionError(f"{where}: {message}", source=self.importer.source)

    def unsupported(self, what: str, attribute: str | None = None) -> NoReturn:
        """Raise: this use of the op is not supported (says what is)."""
        self.fail(f"{what} is not supported", attribute)

    # -------------------------------------------------------------------- inputs
    @property
    def n_inputs(self) -> int:
        """The number of inputs, trailing omitted optional ones not counted."""
        n = len(self.node.input)
        while n and not self.node.input[n - 1]:
            n -= 1
        return n

    def has(self, i: int) -> bool:
        """True if optional input ``i`` is given."""
        return i < len(self.inputs) and self.inputs[i] is not None and not self.inputs[i].is_none  # type: ignore[union-attr]

    def value(self, i: int) -> Value:
        if not self.has(i):
            self.fail(f"input {i} is required")
        return self.inputs[i]  # type: ignore[return-value]

    def x(self, i: int) -> Expr:
        """The IR expression of input ``i``."""
        return self.importer.materialize(self.value(i))

    def ty(self, i: int) -> TensorType:
        """The tensor type of input ``i``."""
        v = self.value(i)
        if v.seq is not None:
            self.fail(f"input {i} ({self.node.input[i]!r}) is a sequence, expected a tensor")
        t = v.ty
        if not isinstance(t, TensorType):
            self.fail(f"input {i} ({self.node.input[i]!r}) has type {t}, expected a tensor")
        return t

    def shape(self, i: int) -> tuple[int | str, ...]:
        """The shape of input ``i``; the rank must be known."""
        t = self.ty(i)
        if t.shape is None:
            self.fail(
                f"the rank of input {i} ({self.node.input[i]!r}) is unknown; give the graph "
                "inputs a shape (from_onnx(..., shapes={...}))"
            )
        return t.shape

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    def static_shape(self, i: int) -> tuple[int, ...]:
        """The shape of input ``i``, which must be fully static."""
        s = self.shape(i)
        if not all(isinstance(d, int) for d in s):
            self.fail(
                f"input {i} ({self.node.input[i]!r}) has the symbolic shape {s}; this "
                "conversion needs static sizes (fix them with from_onnx(..., shapes={...}))"
            )
        return s  # type: ignore[return-value]

    def dtype(self, i: int) -> str:
        d = self.ty(i).dtype
        if d is None:
            self.fail(f"the dtype of input {i} ({self.node.input[i]!r}) is unknown")
        return d

    def maybe_const(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` if it is known at import time."""
        if not self.has(i):
            return None
        v = self.inputs[i]
        assert v is not None
        if v.const is not None:
            return v.const
        if v.sym is not None and sym_is_static(v.sym):
            return np.asarray(v.sym.astype(np.int64))
        return None

    def const(self, i: int, what: str | None = None) -> np.ndarray:
        """The value of input ``i``, which must be known at import time."""
        c = self.maybe_const(i)
        if c is not None:
            return c
        self.need_constant(i, what)

    def need_constant(self, i: int, what: str | None = None) -> NoReturn:
        v = self.value(i)
        name = self.node.input[i]
        what = what or f"input {i}"
        if v.deps:
            inputs = ", ".join(repr(d) for d in sorted(v.deps))
            raise NeedsConstantError(
                f"{self.describe()}: {what} ({name!r}) must be known at compile time, but it "
                f"is computed from the graph input(s) {inputs}; give their values with "
                "from_onnx(..., constants={...})",
                source=self.importer.source,
                needs_constants=v.deps,
            )
        self.fail(
            f"{what} ({name!r}) must be known at compile time, but it is computed at run time"
            + (
                " from symbolic sizes; fix the input shapes with from_onnx(..., shapes={...})"
                if v.sym is not None or v.lazy is not None
                else ""
            )
        )

    def const_ints(self, i: int, what: str | None = None) -> list[int]:
        return [int(v) for v in self.const(i, what).reshape(-1)]

    def sym(self, i: int) -> np.ndarray | None:
        """Input ``i`` as a symbolic object array (ints, dimension names, None), if it is
        a constant or a shape-derived value; None otherwise."""
        if not self.has(i):
            return None
        v = self.inputs[i]
        assert v is not None
        if v.const is not None:
            if v.const.dtype.kind in "iub" and v.const.size <= 4096:
                return sym_array(v.const.astype(object) if v.const.dtype.kind != "b" else v.const)
            return None
        if self.runtime:
            return None
        return v.sym

    def dims(self, i: int, what: str | None = None) -> list[int | str | None]:
        """A shape-like 1-D input: ints, symbolic names and None (known at run time)."""
        s = self.sym(i)
        if s is None:
            self.need_constant(i, what)
        return list(s.reshape(-1))

    def symbolic(self, entries: Any, dtype: str = "int64") -> Value:
        """A symbolic output (a constant if every entry is an int); its size expressions
        simplified with the ranges given to the import."""
        arr = sym_array(entries)
        ranges = self.importer.dim_ranges
        if ranges and arr.size:
            flat = arr.reshape(-1)
            for i, e in enumerate(flat):
                if e is not None and not isinstance(e, int):
                    flat[i] = symbolic.simplify(e, ranges)
        if sym_is_static(arr):
            return Value.of_const(arr.astype(dtype), self.deps)
        return Value(ty=TensorType(tuple(arr.shape), dtype), sym=arr, deps=self.deps)

    # ---------------------------------------------------------------- attributes
    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        """The attribute ``name`` as a Python value (strings decoded, tensors as numpy
        arrays, lists for repeated values)."""
        a = self.attrs.get(name)
        if a is None:
            if default is _MISSING:
                self.fail("the required attribute is missing", name)
            return default
        if a.ref_attr_name:
            self.fail("refers to an attribute of an enclosing function", name)
        if a.type == AttributeProto.TENSOR:
            return self.tensor_value(a.t, name)
        if a.type == AttributeProto.TENSORS:
            return [self.tensor_value(t, name) for t in a.tensors]
        if a.type == AttributeProto.SPARSE_TENSOR:
            return self.sparse_value(a.sparse_tensor, name)
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, list) and v and isinstance(v[0], bytes):
            return [s.decode("utf-8", "replace") for s in v]
        if isinstance(v, list):
            return list(v)
        return v

    def attr_int(self, name: str, default: Any = _MISSING) -> int:
        v = self.attr(name, default)
        if v is not None and not isinstance(v, int | np.integer):
            self.fail(f"must be an int, got {v!r}", name)
        return v if v is None else int(v)

    def attr_float(self, name: str, default: Any = _MISSING) -> float:
        v = self.attr(name, default)
        if v is not None and not isinstance(v, float | int):
            self.fail(f"must be a float, got {v!r}", name)
        return v if v is None else float(v)

    def attr_str(self, name: str, default: Any = _MISSING) -> str:
        v = self.attr(name, default)
        if v is not None and not isinstance(v, str):
            self.fail(f"must be a string, got {v!r}", name)
        return v

    def attr_ints(self, name: str, default: Any = _MISSING) -> list[int] | None:
        v = self.attr(name, default)
        if v is None:
            return None
        if isinstance(v, int):
            return [v]
        return [int(x) for x in v]

    def attr_floats(self, name: str, default: Any = _MISSING) -> list[float] | None:
        v = self.attr(name, default)
        return None if v is None else [float(x) for x in v]

    def tensor_value(self, t: onnx.TensorProto, what: str) -> np.ndarray:
        if to_dtype(t.data_type) is None:
            self.fail(
                f"the tensor has element type {onnx_type_name(t.data_type)}, which plait does "
                "not support",
                what,
            )
        try:
            return np.asarray(numpy_helper.to_array(t))
        except Exception as e:
            self.fail(f"cannot read the tensor: {e}", what)

    def sparse_value(self, sp: onnx.SparseTensorProto, what: str) -> np.ndarray:
        """A sparse tensor as a dense array."""
        values = self.tensor_value(sp.values, what)
        idx = np.asarray(numpy_helper.to_array(sp.indices), dtype=np.int64)
        dense = np.zeros(tuple(sp.dims), dtype=values.dtype)
        if idx.ndim == 1:
            dense.reshape(-1)[idx] = values
        else:
            dense[tuple(idx.T)] = values
        return dense

    def choice(self, name: str, default: str, allowed: Sequence[str]) -> str:
        """A string attribute that must be one of ``allowed``."""
        v = self.attr_str(name, default)
        if v not in allowed:
            self.fail(
                f"{v!r} is not supported (plait supports {', '.join(map(repr, allowed))})", name
            )
        return v

    # ------------------------------------------------------------------ building
    def atom(self, a: Any) -> Expr:
        """``a`` (a Value, an array, an expression) as an atom, emitting it if needed."""
        if isinstance(a, Value):
            return self.importer.materialize(a)
        if isinstance(a, np.ndarray):
            return Constant(a)
        if isinstance(a, Tuple):
            fields = tuple(self.atom(f) for f in a.fields)
            if any(x is not y for x, y in zip(fields, a.fields)) or a.ty is None:
                return self.normalize(Tuple(fields))
            return a
        if isinstance(a, Expr):
            return a if is_atom(a) else self.emit(a)
        raise TypeError(f"cannot use {type(a).__name__} as an IR argument")

    def normalize(self, expr: Expr) -> Expr:
        try:
            return self.importer.bb.normalize(expr)
        except IRTypeError as e:
            self.fail(e.detail)  # the node is named by fail(); the IR location adds nothing
        except (OpError, TypeError, ValueError) as e:
            self.fail(str(e))

    def call(self, op: str, *args: Any, **attrs: Any) -> Expr:
        """A typed call of op ``op`` (folded to a constant when every argument is one)."""
        typed = self.call_kept(op, *args, **attrs)
        folded = fold(typed)
        return folded if folded is not None else typed

    def call_kept(self, op: str, *args: Any, **attrs: Any) -> Expr:
        """A typed call of op ``op``, kept as a call even when every argument is a
        constant (a dialect keeps ``qnn.dequantize`` of quantized weights, which its
        canonicalization folds into the ops that read them; FoldConstant evaluates what
        is left)."""
        atoms = [self.atom(a) for a in args]
        try:
            c = make_call(op, *atoms, span=self.span, **attrs)
        except (OpError, TypeError, ValueError, KeyError) as e:
            self.fail(f"cannot build {op}: {e}")
        return self.normalize(c)

    def emit(self, expr: Expr, suffix: str = "") -> Expr:
        """Bind ``expr`` to a fresh variable named after the node's output."""
        if is_atom(expr) and isinstance(expr, Var | Constant):
            return expr
        return self.importer.emit(expr, self._hint + (f"_{suffix}" if suffix else ""), self.span)

    def match_cast(self, expr: Expr, ty: TensorType) -> Expr:
        """Bind ``expr`` with the refined type ``ty`` (checked at run time)."""
        value = self.atom(expr)
        return self.importer.bb.emit_match_cast(value, ty, self.importer.unique(self._hint))

    def item(self, expr: Expr, i: int) -> Expr:
        """Field ``i`` of a tuple-valued expression."""
        if isinstance(expr, Tuple):
            return expr.fields[i]
        v = self.emit(expr)
        return self.normalize(TupleGetItem(v, i))

    def constant(self, value: Any, dtype: str | None = None) -> Constant:
        """A constant of the given value and dtype."""
        return Constant(np.asarray(value, dtype=dtype))

    def scalar_like(self, value: Any, i_or_dtype: int | str) -> Constant:
        """A 0-d constant with the dtype of input ``i`` (or the given dtype)."""
        dtype = self.dtype(i_or_dtype) if isinstance(i_or_dtype, int) else i_or_dtype
        with np.errstate(all="ignore"):
            return Constant(np.asarray(value).astype(dtype))

    def type_of(self, expr: Expr) -> TensorType:
        t = expr.ty
        if not isinstance(t, TensorType):
            self.fail(f"expected a tensor, got {t}")
        return t


__all__ = ["ConversionError", "FOLD_LIMIT", "NodeContext", "Value", "fold", "EMPTY"]
