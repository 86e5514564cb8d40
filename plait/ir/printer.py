"""The text printer: a module (or any node) as Python-syntax text.

The output parses back with :func:`plait.ir.parser.parse` to a structurally equal
module (for normalized modules: A-normal form, every type filled in)::

    @module(attrs={"target": "c"})
    class Module:
        @function
        def main(x: Tensor((1, n), "float32")) -> Tensor((1, n), "float32"):
            with dataflow():
                lv = relu(x)
                gv = add(lv, const(1.0, "float32"))
                output(gv)
            return gv

Decisions (see ``docs/ir.md`` for the full format):

* op calls use the registered name (``relu(x)``, ``qnn.quantize(x, ...)``); only
  attributes that differ from the op's defaults are printed, the parser fills the
  defaults back in.  An op whose name is not a dotted identifier, or whose name
  collides with a word of the format, prints as ``ops["name"](...)``;
* functions of the module are referenced as ``cls.name``; extern functions as
  ``extern("symbol")``; shapes as ``shape((n, 4))``; scalars as ``prim(3, "int64")``;
* small constants print inline (``const([1, 2], "int32")``), others as
  ``const(base64="...", shape=(...), dtype="...")`` holding the little-endian raw
  bytes, so every dtype and every value (nan payloads, inf, -0.0) round-trips
  bit-exactly;
* a dataflow block is ``with dataflow():`` ending in ``output(...)``, which lists
  the variables visible after the block;
* ``If`` is an ``if``/``else`` statement whose branches both end by assigning the
  bound variable; a nested function is a nested ``def``;
* a binding carries an annotation (``z: Tensor(...) = ...``) only when the
  variable's type differs from the type of its value;
* variable names keep their hints, made valid and unique per function
  (``lv``, ``lv1``, ...); a name never collides with an op or a word of the format.

Printing is iterative over bindings and expression depth; it only recurses on
statement nesting (``if`` branches, nested functions), which Python's own parser
limits to 100 levels anyway.

Extension hook: a subclass of :class:`~plait.ir.expr.BaseFunc` that is not a graph
:class:`~plait.ir.expr.Function` (the kernels of ``plait.kernel``) prints through
a function registered with :func:`register_func_printer`::

    def print_kernel(name: str, kernel: Kernel, printer: Printer) -> str:
        return "@kernel\\ndef " + name + "(...):\\n    ..."

    register_func_printer(Kernel, print_kernel)

The function returns the complete text of the decorated ``def`` starting at column
0; the module printer indents it into the module class.  ``printer`` offers
:meth:`Printer.type_text` and :meth:`Printer.value_text` for types and attribute
values, so kernels print those exactly like graph functions do.  The matching
parser hook is :func:`plait.ir.parser.register_func_parser`.
"""

from __future__ import annotations

import base64
import hashlib
import keyword
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .attrs import Attrs
from .expr import (
    BaseFunc,
    Binding,
    BindingBlock,
    Call,
    Constant,
    DataflowBlock,
    DataflowVar,
    Expr,
    ExternFunc,
    Function,
    GlobalVar,
    If,
    MatchCast,
    Node,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
)
from .symbolic import SymExpr
from .types import (
    FuncType,
    ObjectType,
    PrimType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
)

FORMAT_WORDS = frozenset(
    {
        "module",
        "function",
        "dataflow",
        "output",
        "match_cast",
        "const",
        "prim",
        "shape",
        "extern",
        "cls",
        "ops",
        "Tensor",
        "Tuple",
        "Shape",
        "Prim",
        "Object",
        "Callable",
        "float",
    }
)
"""Names with a meaning in the text format; no variable is printed with one."""

INLINE_CONSTANT_SIZE = 16
"""Constants with at most this many finite elements print as inline literals."""

FuncPrinter = Callable[[str, BaseFunc, "Printer"], str]
_FUNC_PRINTERS: dict[type, FuncPrinter] = {}


VALUE_PRINTERS: dict[type, Callable[[Any, Any], str]] = {}
"""Printers of attribute values that are objects (a ``Target``), by class."""


def register_value_printer(cls: type, fn: Callable[[Any, Any], str]) -> None:
    """Print attribute values of class ``cls`` as ``fn(value, printer)``: a call of a
    constructor registered with :func:`plait.ir.parser.register_value_constructor`."""
    VALUE_PRINTERS[cls] = fn


def register_func_printer(cls: type, fn: FuncPrinter) -> None:
    """Print module entries of class ``cls`` (a :class:`BaseFunc` subclass) with
    ``fn(name, func, printer) -> str``, the full text of the decorated ``def``."""
    if not (isinstance(cls, type) and issubclass(cls, BaseFunc)):
        raise TypeError(f"register_func_printer needs a BaseFunc subclass, got {cls!r}")
    _FUNC_PRINTERS[cls] = fn


def _func_printer(cls: type) -> FuncPrinter | None:
    for klass in cls.__mro__:
        fn = _FUNC_PRINTERS.get(klass)
        if fn is not None:
            return fn
    return None


def _str_lit(s: str) -> str:
    """A Python string literal, with double quotes when that needs no escapes."""
    if '"' not in s and "\\" not in s and s.isprintable():
        return '"' + s + '"'
    return repr(s)


def _float_text(x: float) -> str:
    if math.isfinite(x):
        return repr(x)
    if x != x:
        return 'float("nan")'
    return 'float("inf")' if x > 0 else 'float("-inf")'


def op_text(name: str) -> str:
    """How the callee of a call of op ``name`` is written."""
    parts = name.split(".")
    if (
        all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)
        and parts[0] not in FORMAT_WORDS
    ):
        return name
    return "ops[" + _str_lit(name) + "]"


def _dim_text(d: int | str) -> str:
    return d if isinstance(d, str) else str(d)


def _shape_text(shape: tuple) -> str:
    if len(shape) == 1:
        return "(" + _dim_text(shape[0]) + ",)"
    return "(" + ", ".join([_dim_text(d) for d in shape]) + ")"


# ---------------------------------------------------------------- constants


def _scalar_texts(flat: np.ndarray) -> list[str] | None:
    """Exact literal texts of the elements, or None if some element has none
    (nan, inf)."""
    kind = flat.dtype.kind
    if kind == "b":
        return ["True" if v else "False" for v in flat.tolist()]
    if kind in "iu":
        return [str(v) for v in flat.tolist()]
    if not np.isfinite(flat).all():
        return None
    out = []
    for v in flat:
        text = str(v)  # numpy's shortest text that round-trips in this dtype
        if np.array(float(text), dtype=flat.dtype).tobytes() != v.tobytes():
            text = repr(float(v))  # exact: every float16/32 value is a float64 value
        out.append(text)
    return out


def const_text(data: np.ndarray) -> str:
    """A constant array as text: inline when small and finite, else base64."""
    dtype = data.dtype.name
    if 0 < data.size <= INLINE_CONSTANT_SIZE:
        texts = _scalar_texts(data.reshape(-1))
        if texts is not None:
            return "const(" + _nest(texts, data.shape) + ", " + _str_lit(dtype) + ")"
    raw = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
    return (
        f'const(base64="{base64.b64encode(raw).decode("ascii")}", '
        f"shape={_shape_text(data.shape)}, dtype={_str_lit(dtype)})"
    )


CONSTANT_REF_BYTES = 4096
"""Constants of at least this many bytes print as references (``const(ref=...)``) when
the printer is given a table to keep them in (:func:`print_module`'s ``constants``)."""


def constant_key(data: np.ndarray) -> str:
    """The key of a constant in a table of constants kept outside the text: the SHA-256
    of its little-endian bytes, so equal arrays share one entry."""
    raw = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    return "sha256:" + hashlib.sha256(memoryview(raw).cast("B")).hexdigest()


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _nest(texts: list[str], shape: tuple[int, ...]) -> str:
    if not shape:
        return texts[0]
    items = texts
    for n in reversed(shape):
        items = ["[" + ", ".join(items[i : i + n]) + "]" for i in range(0, len(items), n)]
    return items[0]


# ---------------------------------------------------------------- the printer


class Printer:
    """Turns nodes into text.  One instance prints one module (or one node); names
    are assigned per top-level function."""

    indent_unit = "    "

    def __init__(self, constants: dict[str, np.ndarray] | None = None) -> None:
        self.constants = constants
        """When given, constants of at least :data:`CONSTANT_REF_BYTES` go into this
        table (by :func:`constant_key`) and print as ``const(ref=...)``."""
        self.lines: list[str] = []
        self._names: dict[Var, str] = {}
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}
        self._type_cache: dict[Type, str] = {}

    # ------------------------------------------------------------ names
    def reset_names(self) -> None:
        """Forget variable names (each top-level function has its own)."""
        self._names = {}
        self._used = set()
        self._counters = {}

    def define(self, var: Var) -> str:
        """Give the variable ``var`` a fresh, valid, unique name and return it."""
        base = var.name_hint
        if not base.isidentifier():
            base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "v"
            if not base.isidentifier():
                base = "v_" + base
        if keyword.iskeyword(base) or base in FORMAT_WORDS or base in Op.definitions:
            base = base + "_"
        used = self._used
        name = base
        if name in used:
            i = self._counters.get(base, 1)
            while f"{base}{i}" in used:
                i += 1
            self._counters[base] = i + 1
            name = f"{base}{i}"
        used.add(name)
        self._names[var] = name
        return name

    def name_of(self, var: Var) -> str:
        """The name of a used variable (a free variable is named on first use)."""
        name = self._names.get(var)
        return name if name is not None else self.define(var)

    # ------------------------------------------------------------ types and values
    def type_text(self, ty: Type | None) -> str:
        """A type as text (``Tensor((1, n), "float32")``, ``Tuple(...)``...)."""
        if ty is None:
            return "None"
        try:
            cached = self._type_cache.get(ty)
        except TypeError:  # an unhashable value inside a type; print without caching
            cached = None
        if cached is not None:
            return cached
        if isinstance(ty, TensorType):
            shape = "None" if ty.shape is None else _shape_text(ty.shape)
            dtype = "None" if ty.dtype is None else '"' + ty.dtype + '"'
            text = f"Tensor({shape}, {dtype})"
        elif isinstance(ty, TupleType):
            text = "Tuple(" + ", ".join(self.type_text(f) for f in ty.fields) + ")"
        elif isinstance(ty, ShapeType):
            text = "Shape()" if ty.ndim is None else f"Shape({ty.ndim})"
        elif isinstance(ty, PrimType):
            text = f'Prim("{ty.dtype}")'
        elif isinstance(ty, ObjectType):
            text = "Object"
        elif isinstance(ty, FuncType):
            params = "".join(self.type_text(p) + ", " for p in ty.params)
            text = f"Callable(({params}), {self.type_text(ty.ret)})"
        else:
            text = str(ty)
        try:
            self._type_cache[ty] = text
        except TypeError:
            pass
        return text

    def value_text(self, v: Any) -> str:
        """An attribute value as a literal: numbers, strings, None, tuples, dicts,
        types and arrays.  Anything else prints as ``opaque("...")``, which the
        parser rejects with a clear message."""
        if v is None or v is True or v is False:
            return str(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return _float_text(v)
        if isinstance(v, str | SymExpr):   # a size expression as its text: "batch * heads"
            return _str_lit(str(v))
        if isinstance(v, tuple):
            if len(v) == 1:
                return "(" + self.value_text(v[0]) + ",)"
            return "(" + ", ".join(self.value_text(x) for x in v) + ")"
        if isinstance(v, Attrs | Mapping):
            return (
                "{"
                + ", ".join(_str_lit(str(k)) + ": " + self.value_text(x) for k, x in v.items())
                + "}"
            )
        if isinstance(v, Type):
            return self.type_text(v)
        if isinstance(v, np.ndarray):
            return self.const_text(v)
        if isinstance(v, np.generic):
            return self.value_text(v.item())
        for cls, fn in VALUE_PRINTERS.items():
            if isinstance(v, cls):
                return fn(v, self)
        return "opaque(" + _str_lit(repr(v)) + ")"

    def const_text(self, data: np.ndarray) -> str:
        """A constant array as text: a reference into :attr:`constants` when it is
        large and a table is given, else :func:`const_text`."""
        if self.constants is None or data.nbytes < CONSTANT_REF_BYTES:
            return const_text(data)
        key = constant_key(data)
        self.constants.setdefault(key, data)
        return (f"const(ref={_str_lit(key)}, shape={_shape_text(data.shape)}, "
                f"dtype={_str_lit(data.dtype.name)})")

    # ------------------------------------------------------------ expressions
    def atom_text(self, e: Expr) -> str | None:
        """Text of a leaf expression, or None if ``e`` has children."""
        t = type(e)
        if t is Var or t is DataflowVar:
            name = self._names.get(e)  # type: ignore[arg-type]
            return name if name is not None else self.define(e)  # type: ignore[arg-type]
        if t is Constant:
            return self.const_text(e.data)  # type: ignore[attr-defined]
        if t is GlobalVar:
            return "cls." + e.name_hint  # type: ignore[attr-defined]
        if t is Op:
            return op_text(e.name)  # type: ignore[attr-defined]
        if t is PrimValue:
            return f"prim({self.value_text(e.value)}, {_str_lit(e.dtype)})"  # type: ignore[attr-defined]
        if t is StringImm:
            return _str_lit(e.value)  # type: ignore[attr-defined]
        if t is ShapeExpr:
            return "shape(" + _shape_text(e.values) + ")"  # type: ignore[attr-defined]
        if t is ExternFunc:
            return "extern(" + _str_lit(e.symbol) + ")"  # type: ignore[attr-defined]
        if isinstance(e, Var):
            return self.name_of(e)
        return None

    def _call_attrs(self, call: Call) -> str:
        attrs = call.attrs
        if not attrs:
            return ""
        specs = None
        if type(call.op) is Op:
            d = Op.definitions.get(call.op.name)
            if d is not None:
                specs = d.attrs
        parts = []
        for k, v in attrs.items():
            if specs is not None:
                spec = specs.get(k)
                if spec is not None:
                    default = spec.default
                    if v is default or (type(v) is type(default) and v == default):
                        continue
            parts.append(k + "=" + self.value_text(v))
        return ", ".join(parts)

    def expr_text(self, root: Expr) -> str:
        """Text of an expression.  Statement-like nodes (``If``, ``Function``,
        ``SeqExpr``) met inside an expression are first printed as bindings of
        their own (in :attr:`lines`) and referenced by name."""
        text = self.atom_text(root)
        if text is not None:
            return text
        t = type(root)
        if t is Call and type(root.op) is Op:  # the common case: op(var, var, ...)
            args = []
            for a in root.args:  # type: ignore[attr-defined]
                at = self.atom_text(a)
                if at is None:
                    break
                args.append(at)
            else:
                attrs = self._call_attrs(root)  # type: ignore[arg-type]
                if attrs:
                    args.append(attrs)
                return op_text(root.op.name) + "(" + ", ".join(args) + ")"  # type: ignore[attr-defined]
        return self._nested_text(root)

    def _nested_text(self, root: Expr) -> str:
        """Text of a nested expression, written token by token from an explicit
        stack (linear in the size of the text, no recursion).  A compound
        subexpression used more than once is first bound to a variable of its own,
        as the builder would, so shared subtrees are printed once."""
        uses: dict[int, int] = {}
        walk = [root]
        while walk:
            e = walk.pop()
            kids = _expr_kids(e)
            if kids is None:
                continue
            n = uses.get(id(e), 0)
            uses[id(e)] = n + 1
            if n == 0:
                walk.extend(kids)
        shared: dict[int, str] = {}
        if any(n > 1 for n in uses.values()):
            order: list[Expr] = []  # compound subexpressions, innermost first
            seen: set[int] = set()
            stack: list[tuple[Expr, bool]] = [(root, False)]
            while stack:
                e, expanded = stack.pop()
                if expanded:
                    order.append(e)
                    continue
                kids = _expr_kids(e)
                if kids is None or id(e) in seen:
                    continue
                seen.add(id(e))
                stack.append((e, True))
                stack.extend((k, False) for k in reversed(kids))
            for e in order:
                if e is not root and uses[id(e)] > 1:
                    text = self._render(e, shared)
                    name = self.define(Var("lv", e.ty))
                    self.emit(f"{name} = {text}")
                    shared[id(e)] = name
        return self._render(root, shared)

    def _render(self, root: Expr, shared: dict[int, str]) -> str:
        out: list[str] = []
        stack: list[Any] = [root]
        while stack:
            e = stack.pop()
            if type(e) is str:
                out.append(e)
                continue
            name = shared.get(id(e))
            if name is not None and e is not root:
                out.append(name)
                continue
            text = self.atom_text(e)
            if text is not None:
                out.append(text)
                continue
            t = type(e)
            parts: list[Any]
            if t is Call:
                op = e.op
                parts = (
                    [op] if isinstance(op, ExternFunc | Op | GlobalVar | Var) else ["(", op, ")"]
                )
                parts.append("(")
                for i, a in enumerate(e.args):
                    if i:
                        parts.append(", ")
                    parts.append(a)
                attrs = self._call_attrs(e)
                if attrs:
                    parts.append(", " + attrs if e.args else attrs)
                parts.append(")")
                stack.extend(reversed(parts))
            elif t is Tuple:
                parts = ["("]
                for i, f in enumerate(e.fields):
                    if i:
                        parts.append(", ")
                    parts.append(f)
                parts.append(",)" if len(e.fields) == 1 else ")")
                stack.extend(reversed(parts))
            elif t is TupleGetItem:
                stack.append(f"[{e.index}]")
                stack.append(e.tuple_value)
            else:
                out.append(self._hoist(e))
        return "".join(out)

    def _hoist(self, e: Expr) -> str:
        """Print a statement-like expression as bindings; return the text of its
        value."""
        if isinstance(e, SeqExpr):
            self.print_seq_blocks(e)
            return self.expr_text(e.body)
        if isinstance(e, If | Function):
            var = Var("lv", e.ty)
            self.print_binding(VarBinding(var, e))
            return self.name_of(var)
        return "opaque(" + _str_lit(type(e).__name__) + ")"

    # ------------------------------------------------------------ statements
    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    indent = ""

    def print_binding(self, b: Binding) -> None:
        """Append the statement(s) of one binding to :attr:`lines`."""
        value = b.value
        vt = type(value)
        if isinstance(b, MatchCast):
            v = self.expr_text(value)
            name = self.define(b.var)
            self.emit(f"{name} = match_cast({v}, {self.type_text(b.cast_ty)})")
            return
        if vt is If:
            self._print_if(b.var, value)  # type: ignore[arg-type]
            return
        if vt is Function or (isinstance(value, BaseFunc) and not isinstance(value, Function)):
            name = self.define(b.var)
            self._print_def(name, value, nested=True)  # type: ignore[arg-type]
            return
        text = self.expr_text(value)
        var = b.var
        name = self.define(var)
        vty = var.ty
        if vty is not None and (vty is not value.ty and vty != value.ty or _needs_call_type(value)):
            self.emit(f"{name}: {self.type_text(vty)} = {text}")
        else:
            self.emit(f"{name} = {text}")

    def _print_if(self, var: Var, node: If) -> None:
        cond = self.expr_text(node.cond)
        declared = var.ty
        saved = self.indent
        then_lines, else_lines = [], []
        results = []
        for branch, sink in ((node.then_branch, then_lines), (node.else_branch, else_lines)):
            outer = self.lines
            self.lines = sink
            self.indent = saved + self.indent_unit
            if isinstance(branch, SeqExpr):
                self.print_seq_blocks(branch)
                results.append(self.expr_text(branch.body))
            else:
                results.append(self.expr_text(branch))
            self.lines = outer
            self.indent = saved
        name = self.define(var)
        if declared is not None and declared != node.ty:
            # a bare annotation before the if declares the variable's own type
            self.emit(f"{name}: {self.type_text(declared)}")
        self.emit(f"if {cond}:")
        self.lines.extend(then_lines)
        self.lines.append(saved + self.indent_unit + f"{name} = {results[0]}")
        self.emit("else:")
        self.lines.extend(else_lines)
        self.lines.append(saved + self.indent_unit + f"{name} = {results[1]}")

    def print_block(self, block: BindingBlock) -> None:
        """Append a binding block (``with dataflow():`` for a dataflow block)."""
        if isinstance(block, DataflowBlock):
            self.emit("with dataflow():")
            saved = self.indent
            self.indent = saved + self.indent_unit
            outputs = []
            for b in block.bindings:
                self.print_binding(b)
                if type(b.var) is not DataflowVar:
                    outputs.append(self._names[b.var])
            self.emit("output(" + ", ".join(outputs) + ")")
            self.indent = saved
            return
        pb = self.print_binding
        for b in block.bindings:
            pb(b)

    def print_seq_blocks(self, seq: SeqExpr) -> None:
        for block in seq.blocks:
            self.print_block(block)

    def _params_text(self, params: tuple[Var, ...]) -> str:
        parts = []
        for p in params:
            name = self.define(p)
            parts.append(name if p.ty is None else f"{name}: {self.type_text(p.ty)}")
        return ", ".join(parts)

    def _print_def(self, name: str, func: BaseFunc, nested: bool) -> None:
        if not isinstance(func, Function):
            fn = _func_printer(type(func))
            if fn is None:
                self.emit(f"{name} = opaque({_str_lit(type(func).__name__)})")
                return
            for line in fn(name, func, self).splitlines():
                self.emit(line)
            return
        opts = []
        if func.attrs:
            opts.append("attrs=" + self.value_text(func.attrs))
        if not func.pure:
            opts.append("pure=False")
        if opts:
            self.emit("@function(" + ", ".join(opts) + ")")
        elif not nested:
            self.emit("@function")
        params = self._params_text(func.params)
        ret = "" if func.ret_ty is None else " -> " + self.type_text(func.ret_ty)
        self.emit(f"def {name}({params}){ret}:")
        saved = self.indent
        self.indent = saved + self.indent_unit
        body = func.body
        if isinstance(body, SeqExpr):
            self.print_seq_blocks(body)
            body = body.body
        self.emit("return " + self.expr_text(body))
        self.indent = saved

    def print_function(self, name: str, func: BaseFunc) -> None:
        """Append a decorated top-level ``def`` of the module class."""
        self.reset_names()
        self._print_def(name, func, nested=False)

    def print_module(self, mod: Any, name: str = "Module") -> str:
        attrs = mod.attrs
        self.emit("@module" if not attrs else "@module(attrs=" + self.value_text(attrs) + ")")
        self.emit(f"class {name}:")
        self.indent = self.indent_unit
        first = True
        for fname, func in mod.items():
            if not first:
                self.lines.append("")
            first = False
            self.print_function(fname, func)
        if first:
            self.emit("pass")
        self.indent = ""
        return "\n".join(self.lines) + "\n"


def _needs_call_type(value: Expr) -> bool:
    """A call whose callee's type does not give the result type (a call of an
    extern function or of an untyped variable): its type must be written."""
    if type(value) is not Call or type(value.op) is Op:  # type: ignore[attr-defined]
        return False
    op = value.op  # type: ignore[attr-defined]
    if isinstance(op.ty, FuncType):
        return False
    return value.ty is not None and not isinstance(value.ty, ObjectType)


def _expr_kids(e: Expr) -> list[Expr] | None:
    t = type(e)
    if t is Call:
        return [e.op, *e.args]  # type: ignore[attr-defined]
    if t is Tuple:
        return list(e.fields)  # type: ignore[attr-defined]
    if t is TupleGetItem:
        return [e.tuple_value]  # type: ignore[attr-defined]
    return None


def print_module(mod: Any, name: str = "Module",
                 constants: dict[str, np.ndarray] | None = None) -> str:
    """The text of an :class:`~plait.ir.module.IRModule` as a ``@module`` class.  With
    ``constants`` (a dict to fill), large constants are kept there instead of in the
    text, which refers to them as ``const(ref="sha256:...", shape=..., dtype=...)``;
    ``parse(text, constants=...)`` reads such a text back."""
    return Printer(constants).print_module(mod, name)


def node_repr(node: Any) -> str:
    """A short readable text for any node (used by ``repr``): expressions as
    expressions, bindings and blocks as statements, functions as ``def``."""
    try:
        return _node_repr(node)
    except Exception as e:  # repr must never raise
        return f"<{type(node).__name__} (unprintable: {e})>"


def _node_repr(node: Any) -> str:
    p = Printer()
    if isinstance(node, Var):
        name = p.define(node)
        return name if node.ty is None else f"{name}: {p.type_text(node.ty)}"
    if isinstance(node, BaseFunc):
        p._print_def(getattr(node, "name_hint", None) or "func", node, nested=False)
        return "\n".join(p.lines)
    if isinstance(node, Binding):
        p.print_binding(node)
        return "\n".join(p.lines)
    if isinstance(node, BindingBlock):
        p.print_block(node)
        return "\n".join(p.lines)
    if isinstance(node, SeqExpr):
        p.print_seq_blocks(node)
        p.emit("return " + p.expr_text(node.body))
        return "\n".join(p.lines)
    if isinstance(node, If):
        p.print_binding(VarBinding(Var("result", node.ty), node))
        return "\n".join(p.lines)
    if isinstance(node, Expr):
        text = p.expr_text(node)
        return "\n".join([*p.lines, text]) if p.lines else text
    if isinstance(node, Node):
        return f"<{type(node).__name__}>"
    return repr(node)


__all__ = [
    "FORMAT_WORDS",
    "Printer",
    "CONSTANT_REF_BYTES",
    "const_text",
    "constant_key",
    "node_repr",
    "print_module",
    "register_func_printer",
]
