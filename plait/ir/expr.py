"""Expressions, bindings, blocks and functions of the graph IR.

All nodes are immutable.  Python ``==`` on expressions is identity (a ``Var`` is the
same variable only if it is the same object); use :func:`plait.ir.structural_equal`
to compare structure.  Every expression has a ``ty`` (its type, ``None`` until the
block builder infers it) and an optional ``span`` saying where it came from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..runtime.lazy_compiler import LoadingDict
from .attrs import EMPTY_ATTRS, Attrs
from .types import (
    FuncType,
    ObjectType,
    PrimType,
    ShapeType,
    TensorType,
    Type,
    check_dtype,
)


@dataclass(frozen=True, slots=True)
class Span:
    """Where a node came from: a source name, a line and column, and a free note
    (for example the ONNX node name the binding was imported from)."""

    source: str = ""
    line: int = 0
    col: int = 0
    note: str = ""

    def __str__(self) -> str:
        parts = []
        if self.source:
            parts.append(self.source)
        if self.line:
            parts.append(f"line {self.line}, column {self.col}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)


_NODE = dict(frozen=True, eq=False, slots=True, repr=False)

_DEFERRED_LOCK = threading.Lock()


class DeferredArray:
    """The data of a :class:`Constant` not computed yet: ``make(source)``, of ``shape``
    and ``dtype`` (:mod:`plait.ir.deferred`).  :meth:`materialize` computes it once and
    forgets ``source``."""

    __slots__ = ("shape", "dtype", "_source", "_make", "inverse", "_value", "__weakref__")

    def __init__(self, source: np.ndarray, make: Callable[[np.ndarray], np.ndarray],
                 shape: tuple[int, ...], dtype: Any,
                 inverse: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._source: np.ndarray | None = source
        self._make: Callable[[np.ndarray], np.ndarray] | None = make
        self.inverse = inverse
        self._value: np.ndarray | None = None

    @property
    def source(self) -> np.ndarray | None:
        """The array the data is computed from (None once computed)."""
        return self._source

    def materialize(self) -> np.ndarray:
        """The data (read-only), computed on the first call; ``source`` is dropped then."""
        with _DEFERRED_LOCK:
            if self._value is None:
                assert self._source is not None and self._make is not None
                out = np.asarray(self._make(self._source))
                if out.shape != self.shape or out.dtype != self.dtype:
                    raise ValueError(
                        f"a deferred constant computed an array of shape {out.shape} and "
                        f"dtype {out.dtype}, but was declared {self.shape} {self.dtype} "
                        f"(its function {getattr(self._make, '__qualname__', self._make)!r} "
                        "and the declared shape disagree: fix the declaration)")
                if out.flags.writeable:
                    out = out.view()
                    out.flags.writeable = False
                self._value = out
                self._source = None
                self._make = None
            return self._value


@dataclass(**_NODE)
class Node:
    """Base of every IR node."""

    def __repr__(self) -> str:
        from .printer import node_repr

        return node_repr(self)


@dataclass(**_NODE)
class Expr(Node):
    """Base of expressions.  ``ty`` is the checked type, ``span`` the origin."""

    ty: Type | None = field(default=None, kw_only=True)
    span: Span | None = field(default=None, kw_only=True)


@dataclass(**_NODE, init=False)
class Var(Expr):
    """A variable bound by a function parameter or a binding: ``Var(name, ty)``."""

    name_hint: str = "v"

    def __init__(self, name_hint: str = "v", ty: Type | None = None, span: Span | None = None):
        _SET_NAME_HINT(self, name_hint)
        _SET_TY(self, ty)
        _SET_SPAN(self, span)


@dataclass(**_NODE, init=False)
class DataflowVar(Var):
    """A variable local to a dataflow block (not visible after it)."""


@dataclass(**_NODE)
class Constant(Expr):
    """A constant tensor.  The array is kept read-only; ``ty`` is derived from it."""

    data: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        data = _CONSTANT_DATA.__get__(self)
        if type(data) is DeferredArray:  # computed when first read (plait.ir.deferred)
            if self.ty is None:
                object.__setattr__(self, "ty", TensorType(data.shape, data.dtype.name))
            return
        if not isinstance(data, np.ndarray):
            data = np.asarray(data)
        if data.flags.writeable:
            data = data.view()
            data.flags.writeable = False
        object.__setattr__(self, "data", data)
        if self.ty is None:
            object.__setattr__(self, "ty", TensorType(tuple(data.shape), data.dtype.name))


_CONSTANT_DATA = Constant.__dict__["data"]   # the slot itself


def _constant_data(self: Constant) -> np.ndarray:
    data = _CONSTANT_DATA.__get__(self)
    if type(data) is DeferredArray:
        data = data.materialize()
        _CONSTANT_DATA.__set__(self, data)
    return data


Constant.data = property(  # type: ignore[assignment,method-assign]
    _constant_data, _CONSTANT_DATA.__set__,
    doc="The constant's array (read-only); a deferred one is computed when first read.")


def constant_raw_data(const: Constant) -> Any:
    """What ``const`` holds without computing it: its array, or the
    :class:`~plait.ir.deferred.DeferredArray` it will compute it from."""
    return _CONSTANT_DATA.__get__(const)


@dataclass(**_NODE)
class Op(Expr):
    """A registered operator used as the callee of a :class:`Call`.

    Op nodes are interned: ``Op.get(name)`` always returns the same object.  The
    definitions (attribute schema, type inference, ...) live in
    :mod:`plait.op.registry`, which fills ``Op.definitions``.
    """

    name: str = ""

    definitions: ClassVar[dict[str, Any]] = LoadingDict()  # loads the compiler on a miss
    _interned: ClassVar[dict[str, Op]] = {}

    @staticmethod
    def get(name: str) -> Op:
        op = Op._interned.get(name)
        if op is None:
            op = Op(name)
            Op._interned[name] = op
        return op

    @property
    def is_registered(self) -> bool:
        return self.name in Op.definitions

    @property
    def definition(self) -> Any:
        """The registered ``OpDef``; raises a ``KeyError`` with close matches if unknown."""
        d = Op.definitions.get(self.name)
        if d is None:
            import difflib

            close = difflib.get_close_matches(self.name, list(Op.definitions), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"operator {self.name!r} is not registered{hint}")
        return d


@dataclass(**_NODE)
class GlobalVar(Expr):
    """A reference to a function or kernel of the module, by name."""

    name_hint: str = ""


@dataclass(**_NODE)
class ExternFunc(Expr):
    """A packed function of the runtime, by its global symbol."""

    symbol: str = ""

    def __post_init__(self) -> None:
        if self.ty is None:
            object.__setattr__(self, "ty", ObjectType())


@dataclass(**_NODE, init=False)
class Call(Expr):
    """A call of an op, a global function/kernel, an extern function or a variable."""

    op: Expr = None  # type: ignore[assignment]
    args: tuple[Expr, ...] = ()
    attrs: Attrs = EMPTY_ATTRS

    def __init__(self, op: Expr = None, args: tuple[Expr, ...] = (),  # type: ignore[assignment]
                 attrs: Attrs = EMPTY_ATTRS, ty: Type | None = None,
                 span: Span | None = None) -> None:
        # (``ty`` and ``span`` may come by position too: a keyword argument costs a
        # few hundred nanoseconds per node, in passes that make one per binding)
        _SET_OP(self, op)
        _SET_ARGS(self, args if type(args) is tuple or isinstance(args, tuple) else tuple(args))
        _SET_ATTRS(self, attrs if type(attrs) is Attrs or isinstance(attrs, Attrs)
                   else Attrs(attrs))
        _SET_TY(self, ty)
        _SET_SPAN(self, span)


@dataclass(**_NODE, init=False)
class Tuple(Expr):
    """A tuple of values."""

    fields: tuple[Expr, ...] = ()

    def __init__(self, fields: tuple[Expr, ...] = (), ty: Type | None = None,
                 span: Span | None = None) -> None:
        _SET_FIELDS(self, fields if type(fields) is tuple or isinstance(fields, tuple)
                    else tuple(fields))
        _SET_TY(self, ty)
        _SET_SPAN(self, span)


@dataclass(**_NODE)
class TupleGetItem(Expr):
    """Field ``index`` of a tuple value."""

    tuple_value: Expr = None  # type: ignore[assignment]
    index: int = 0


@dataclass(**_NODE)
class ShapeExpr(Expr):
    """A shape value: a tuple of ints and symbolic sizes."""

    values: tuple[int | str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.values, tuple):
            object.__setattr__(self, "values", tuple(self.values))
        if self.ty is None:
            object.__setattr__(self, "ty", ShapeType(len(self.values)))


@dataclass(**_NODE)
class PrimValue(Expr):
    """A scalar value outside any tensor."""

    value: int | float | bool = 0
    dtype: str = "int64"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", check_dtype(self.dtype))
        if self.ty is None:
            object.__setattr__(self, "ty", PrimType(self.dtype))


@dataclass(**_NODE)
class StringImm(Expr):
    """A string value."""

    value: str = ""

    def __post_init__(self) -> None:
        if self.ty is None:
            object.__setattr__(self, "ty", ObjectType())


# ---------------------------------------------------------------- bindings


@dataclass(**_NODE)
class Binding(Node):
    """Base of bindings: ``var`` is bound to the value of the binding."""

    var: Var = None  # type: ignore[assignment]
    value: Expr = None  # type: ignore[assignment]


@dataclass(**_NODE, init=False)
class VarBinding(Binding):
    """``var = value``."""

    def __init__(self, var: Var = None, value: Expr = None) -> None:  # type: ignore[assignment]
        _SET_VAR(self, var)
        _SET_VALUE(self, value)


@dataclass(**_NODE)
class MatchCast(Binding):
    """``var = match_cast(value, ty)``: binds ``var`` with the refined type ``ty``,
    checked at run time."""

    cast_ty: Type = None  # type: ignore[assignment]


@dataclass(**_NODE)
class BindingBlock(Node):
    """A sequence of bindings, which may have side effects."""

    bindings: tuple[Binding, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.bindings, tuple):
            object.__setattr__(self, "bindings", tuple(self.bindings))


@dataclass(**_NODE)
class DataflowBlock(BindingBlock):
    """A block of pure, control-free bindings."""


@dataclass(**_NODE)
class SeqExpr(Expr):
    """Blocks of bindings followed by a result expression."""

    blocks: tuple[BindingBlock, ...] = ()
    body: Expr = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, tuple):
            object.__setattr__(self, "blocks", tuple(self.blocks))


@dataclass(**_NODE)
class If(Expr):
    """``then_branch`` if ``cond`` (a boolean scalar tensor or prim) else ``else_branch``."""

    cond: Expr = None  # type: ignore[assignment]
    then_branch: Expr = None  # type: ignore[assignment]
    else_branch: Expr = None  # type: ignore[assignment]


# ---------------------------------------------------------------- functions


@dataclass(**_NODE)
class BaseFunc(Expr):
    """Base of everything an IRModule holds by name: graph functions and kernels."""

    attrs: Attrs = field(default=EMPTY_ATTRS, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    def with_attrs(self, **kwargs: Any) -> BaseFunc:
        """A copy with the given attributes set (a value of None removes the key)."""
        import dataclasses

        attrs = dict(self.attrs)
        for k, v in kwargs.items():
            if v is None:
                attrs.pop(k, None)
            else:
                attrs[k] = v
        return dataclasses.replace(self, attrs=Attrs(attrs))


@dataclass(**_NODE)
class Function(BaseFunc):
    """A graph function: parameters, a body (normally a :class:`SeqExpr`) and the
    declared return type.  ``pure`` is False for functions with side effects."""

    params: tuple[Var, ...] = ()
    body: Expr = None  # type: ignore[assignment]
    ret_ty: Type | None = None
    pure: bool = True

    def __post_init__(self) -> None:
        BaseFunc.__post_init__(self)
        if not isinstance(self.params, tuple):
            object.__setattr__(self, "params", tuple(self.params))
        if self.ty is None and all(p.ty is not None for p in self.params):
            ret = self.ret_ty if self.ret_ty is not None else getattr(self.body, "ty", None)
            if ret is not None:
                object.__setattr__(self, "ty", FuncType(tuple(p.ty for p in self.params), ret))

    @property
    def compiler(self) -> str | None:
        """The external codegen this function belongs to, if any."""
        return self.attrs.get("compiler")


# The initializers of the most often built nodes (Var, Call, Tuple, VarBinding) store
# their fields through the slots' own setters: a frozen dataclass's generated
# ``__init__`` goes through ``object.__setattr__`` by name for each field, which made
# building a node about half of what the passes spend per binding.  The nodes stay
# frozen (assigning a field raises as before).
_SET_TY = Expr.ty.__set__  # type: ignore[attr-defined]
_SET_SPAN = Expr.span.__set__  # type: ignore[attr-defined]
_SET_NAME_HINT = Var.name_hint.__set__  # type: ignore[attr-defined]
_SET_OP = Call.op.__set__  # type: ignore[attr-defined]
_SET_ARGS = Call.args.__set__  # type: ignore[attr-defined]
_SET_ATTRS = Call.attrs.__set__  # type: ignore[attr-defined]
_SET_FIELDS = Tuple.fields.__set__  # type: ignore[attr-defined]
_SET_VAR = Binding.var.__set__  # type: ignore[attr-defined]
_SET_VALUE = Binding.value.__set__  # type: ignore[attr-defined]



# Nodes built per binding by the passes.  Each is the node its class's constructor makes
# from the same arguments, for arguments of the types the constructor would convert
# them to (a tuple of arguments or fields, an Attrs).  A constructor call goes through
# the class's __init__ and each slot's setter; these build the node as an instance of a
# private writable twin of its class (the same slots, object's __setattr__), so that
# each field is a plain attribute store, then give it its class: about half the time
# (Call: 5 fields).  The node is as frozen as any (assigning a field raises).


def _writable_twin(cls: type) -> type:
    """A subclass of node class ``cls`` with its layout, object's initializer and plain
    attribute stores; an instance has it only while one of the functions below fills
    it in."""
    return type(cls.__name__, (cls,), {
        "__slots__": (), "__init__": object.__init__, "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__, "__module__": cls.__module__,
        "__qualname__": f"{cls.__qualname__} (being built)"})


_BUILDING_VAR = _writable_twin(Var)
_BUILDING_CALL = _writable_twin(Call)
_BUILDING_TUPLE = _writable_twin(Tuple)
_BUILDING_VAR_BINDING = _writable_twin(VarBinding)


def new_var(name_hint: str, ty: Type | None, span: Span | None) -> Var:
    """``Var(name_hint, ty, span)``."""
    n = _BUILDING_VAR()
    n.name_hint = name_hint
    n.ty = ty
    n.span = span
    n.__class__ = Var
    return n


def new_call(op: Expr, args: tuple[Expr, ...], attrs: Attrs, ty: Type | None,
             span: Span | None) -> Call:
    """``Call(op, args, attrs, ty, span)`` for a tuple ``args`` and an Attrs ``attrs``."""
    n = _BUILDING_CALL()
    n.op = op
    n.args = args
    n.attrs = attrs
    n.ty = ty
    n.span = span
    n.__class__ = Call
    return n


def new_tuple(fields: tuple[Expr, ...], ty: Type | None, span: Span | None) -> Tuple:
    """``Tuple(fields, ty, span)`` for a tuple ``fields``."""
    n = _BUILDING_TUPLE()
    n.fields = fields
    n.ty = ty
    n.span = span
    n.__class__ = Tuple
    return n


def new_var_binding(var: Var, value: Expr) -> VarBinding:
    """``VarBinding(var, value)``."""
    n = _BUILDING_VAR_BINDING()
    n.var = var
    n.value = value
    n.__class__ = VarBinding
    return n


def const(value: Any, dtype: str | None = None) -> Constant:
    """A :class:`Constant` from a Python or numpy value."""
    return Constant(np.asarray(value, dtype=dtype))
