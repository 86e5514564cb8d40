"""The text parser: Python-syntax text to an :class:`~plait.ir.module.IRModule`.

The text is read with :func:`ast.parse` and the syntax tree is walked; nothing is
ever executed or evaluated.  Functions are built through the
:class:`~plait.ir.builder.BlockBuilder`, so every type is inferred exactly as when a
module is built in Python, and annotations written on bindings
(``z: Tensor((1, n), "float32") = relu(y)``) are checked against inference.  The
format is the one :mod:`plait.ir.printer` prints; ``docs/ir.md`` describes it.

Name resolution inside a function body follows Python: a variable shadows an op of
the same name.  Callees are variables, registered ops (any registered name, dotted
dialect names such as ``qnn.quantize`` included, or ``ops["any name"]``), functions
of the module (``cls.name``) and extern functions (``extern("symbol")(...)``).
Positional arguments of a call are its inputs; keyword arguments are attributes.

Errors: every problem raises :class:`ParseError` (a ``ValueError``) whose message
starts with ``source:line:col:``, gives the reason (unknown op with close matches,
unknown attribute, undefined variable, type error from the builder naming the
function and binding, misuse of ``dataflow``/``output``...) and shows the source
line with a caret under the offending column.

Limits: statements are processed iteratively and expressions are converted with an
explicit stack, so the parser never recurses on the length of a function or the
depth of an expression.  Python's own :func:`ast.parse` still applies its limits
(about 200 nested parentheses, 100 levels of indentation); hitting them is
reported as a ``ParseError`` too.  The garbage collector is paused while parsing,
which makes large texts several times faster.

Extension hook: entries of the module class other than graph functions (the
kernels of ``plait.kernel``) are parsed by a function registered with
:func:`register_func_parser` under the name of their decorator::

    def parse_kernel(node: ast.FunctionDef, ctx: ParseContext) -> Kernel: ...

    register_func_parser("kernel", parse_kernel)    # for  @kernel def add(...): ...

The function receives the ``def`` node and a :class:`ParseContext` offering
``error(node, message)`` (raises a positioned :class:`ParseError`),
``source_line(node)``, ``span(node)``, ``parse_type(node)`` and ``literal(node)``
(attribute-style values); it returns the finished
:class:`~plait.ir.expr.BaseFunc`.  Hook entries are parsed before the graph
functions' bodies, so graph functions can call them through ``cls.name``.  The
matching printer hook is :func:`plait.ir.printer.register_func_printer`.
"""

from __future__ import annotations

import ast
import base64
import binascii
import difflib
import gc
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np

from plait.errors import PlaitError

from ..runtime.lazy_compiler import LoadingDict
from .builder import BlockBuilder, IRTypeError
from .expr import (
    BaseFunc,
    Call,
    Constant,
    Expr,
    ExternFunc,
    GlobalVar,
    If,
    Op,
    PrimValue,
    SeqExpr,
    ShapeExpr,
    Span,
    StringImm,
    Tuple,
    TupleGetItem,
    Var,
)
from .expr import BindingBlock as _BindingBlock
from .module import IRModule
from .printer import FORMAT_WORDS
from .symbolic import SymbolicError, from_ast
from .types import (
    DTYPES,
    FuncType,
    ObjectType,
    PrimType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
    check_dtype,
)


class ParseError(PlaitError, ValueError):
    """An error in the text: ``source``, ``line``, ``col`` (1-based), the
    ``reason`` and the offending ``source_line``."""

    def __init__(
        self,
        reason: str,
        *,
        source: str,
        line: int,
        col: int,
        source_line: str = "",
        caret: int = 0,
    ) -> None:
        self.reason = reason
        self.source = source
        self.line = line
        self.col = col
        self.source_line = source_line
        text = f"{source}:{line}:{col}: {reason}"
        shown = source_line.rstrip()
        if shown.strip():
            lead = len(shown) - len(shown.lstrip())
            text += f"\n    {shown[lead:]}\n    {' ' * max(caret - lead, 0)}^"
        super().__init__(text)


FuncParser = Callable[[ast.FunctionDef, "ParseContext"], BaseFunc]
_FUNC_PARSERS: dict[str, FuncParser] = LoadingDict()  # loads the compiler on a miss


VALUE_CONSTRUCTORS: dict[str, Callable[..., Any]] = LoadingDict()
"""Constructors allowed in attribute values, by name (``Target("c", opt=3)``)."""


def register_value_constructor(name: str, ctor: Callable[..., Any]) -> None:
    """Allow ``name(literal args...)`` in attribute values of the text format; the
    parser calls ``ctor`` with the literal arguments (it never evaluates code).  The
    printer side is :func:`plait.ir.printer.register_value_printer`."""
    VALUE_CONSTRUCTORS[name] = ctor


def register_func_parser(decorator_name: str, fn: FuncParser) -> None:
    """Parse ``def``s of a module class decorated with ``@decorator_name`` (or
    ``@decorator_name(...)``) with ``fn(node, ctx) -> BaseFunc``."""
    if decorator_name in ("function", "module"):
        raise ValueError(f"decorator name {decorator_name!r} is taken by the graph IR")
    _FUNC_PARSERS[decorator_name] = fn


# Evaluation modes of the expression walker.
_EXPR, _VALUE, _TYPE, _SHAPE, _DIM = range(5)
_LEAF = object()
_TYPE_NAMES = frozenset({"Tensor", "Tuple", "Shape", "Prim", "Object", "Callable"})
_PY_OPERATORS = {
    ast.Add: "add",
    ast.Sub: "subtract",
    ast.Mult: "multiply",
    ast.Div: "divide",
    ast.MatMult: "matmul",
}


class ParseContext:
    """What the parser offers to code that parses part of the text (the hooks
    registered with :func:`register_func_parser`)."""

    def __init__(self, text: str, source: str, first_line: int = 1, col_offset: int = 0) -> None:
        self.source = source
        self.lines = text.splitlines()
        self.line_shift = first_line - 1
        self.col_shift = col_offset

    # ------------------------------------------------------------ positions
    def source_line(self, node: ast.AST) -> str:
        """The text of the line where ``node`` starts."""
        i = getattr(node, "lineno", 0) - 1
        return self.lines[i] if 0 <= i < len(self.lines) else ""

    def _char_col(self, node: ast.AST) -> int:
        """0-based character column of ``node`` (ast gives a UTF-8 byte offset)."""
        off = getattr(node, "col_offset", 0) or 0
        line = self.source_line(node)
        if line.isascii():
            return off
        return len(line.encode("utf-8")[:off].decode("utf-8", errors="ignore"))

    def span(self, node: ast.AST) -> Span:
        """The span (source, line, 1-based column) of ``node``."""
        line = node.lineno + self.line_shift  # type: ignore[attr-defined]
        col = node.col_offset + 1 + self.col_shift  # type: ignore[attr-defined]
        return Span(self.source, line, col)

    def error(self, node: ast.AST | None, message: str) -> NoReturn:
        """Raise a :class:`ParseError` at ``node``."""
        if node is None or not hasattr(node, "lineno"):
            raise ParseError(message, source=self.source, line=1 + self.line_shift, col=1)
        col = self._char_col(node)
        raise ParseError(
            message,
            source=self.source,
            line=node.lineno + self.line_shift,  # type: ignore[attr-defined]
            col=col + 1 + self.col_shift,
            source_line=self.source_line(node),
            caret=col,
        ) from None

    # ------------------------------------------------------------ values
    def parse_type(self, node: ast.AST) -> Type:
        """A type written as ``Tensor((1, n), "float32")``, ``Tuple(...)``, ..."""
        return self._eval(node, _TYPE)

    def literal(self, node: ast.AST) -> Any:
        """An attribute-style value: numbers, strings, None, tuples, dicts, types,
        ``float("nan")``, ``const(...)`` arrays."""
        return self._eval(node, _VALUE)

    def _eval(self, root: ast.AST, mode: int) -> Any:
        """Convert ``root`` in ``mode`` with an explicit stack (post-order)."""
        vals: list[Any] = []
        stack: list[tuple[ast.AST, int, Any]] = [(root, mode, None)]
        pop, push = stack.pop, stack.append
        while stack:
            node, m, plan = pop()
            if plan is None:
                plan = self._plan(node, m)
                if plan[0] is _LEAF:
                    vals.append(plan[1])
                    continue
                kids = plan[0]
                if not kids:
                    vals.append(self._finish(node, plan[1], []))
                    continue
                push((node, m, plan))
                for k in reversed(kids):
                    push((k[0], k[1], None))
                continue
            n = len(plan[0])
            args = vals[len(vals) - n :]
            del vals[len(vals) - n :]
            vals.append(self._finish(node, plan[1], args))
        return vals[0]

    def _finish(self, node: ast.AST, fn: Callable[[list[Any]], Any], args: list[Any]) -> Any:
        try:
            return fn(args)
        except ParseError:
            raise
        except (TypeError, ValueError, OverflowError) as e:
            self.error(node, str(e))

    def _plan(self, node: ast.AST, mode: int) -> tuple:
        if mode == _VALUE:
            return self._plan_value(node)
        if mode == _TYPE:
            return self._plan_type(node)
        if mode == _SHAPE:
            return self._plan_shape(node)
        if mode == _DIM:
            return self._plan_dim(node)
        return self._plan_expr(node)

    def _plan_expr(self, node: ast.AST) -> tuple:
        self.error(node, "expressions are not allowed here")

    # ---- attribute values
    def _plan_value(self, node: ast.AST) -> tuple:
        t = type(node)
        if t is ast.Constant:
            v = node.value  # type: ignore[attr-defined]
            if v is ... or isinstance(v, bytes | complex):
                self.error(node, f"unsupported literal {v!r}")
            return (_LEAF, v)
        if t is ast.UnaryOp and isinstance(node.op, ast.USub | ast.UAdd):  # type: ignore[attr-defined]
            operand = node.operand  # type: ignore[attr-defined]
            if type(operand) is ast.Constant and type(operand.value) in (int, float):
                v = operand.value
                return (_LEAF, -v if isinstance(node.op, ast.USub) else v)  # type: ignore[attr-defined]
            if _is_float_call(operand):
                neg = isinstance(node.op, ast.USub)  # type: ignore[attr-defined]
                return ([(operand, _VALUE)], lambda a: -a[0] if neg else a[0])
            self.error(node, "a sign applies to a number literal only")
        if t is ast.Tuple or t is ast.List:
            return ([(e, _VALUE) for e in node.elts], tuple)  # type: ignore[attr-defined]
        if t is ast.Dict:
            keys = []
            for k in node.keys:  # type: ignore[attr-defined]
                if k is None:
                    self.error(node, "** is not allowed in a dict literal")
                if type(k) is not ast.Constant or not isinstance(k.value, str):
                    self.error(k, "dict keys must be string literals")
                keys.append(k.value)
            return (
                [(v, _VALUE) for v in node.values],  # type: ignore[attr-defined]
                lambda a: dict(zip(keys, a)),
            )
        if t is ast.Name:
            if node.id in _TYPE_NAMES:  # type: ignore[attr-defined]
                return self._plan_type(node)
            self.error(
                node,
                f"bare name {node.id!r} in a value; write strings in quotes "  # type: ignore[attr-defined]
                f'("{node.id}")',  # type: ignore[attr-defined]
            )
        if t is ast.Call and type(node.func) is ast.Name:  # type: ignore[attr-defined]
            fname = node.func.id  # type: ignore[attr-defined]
            if fname == "float":
                return self._plan_float(node)
            if fname in _TYPE_NAMES:
                return self._plan_type(node)
            if fname == "const":
                return self._plan_const(node, as_expr=False)
            ctor = VALUE_CONSTRUCTORS.get(fname)
            if ctor is not None:
                return self._plan_constructor(node, fname, ctor)
            if fname == "opaque":
                self.error(
                    node,
                    "opaque(...) marks a value that the text format cannot represent "
                    "(it was printed from an object of Python); replace it by a literal",
                )
        self.error(node, "expected a literal value (number, string, None, tuple, dict or type)")

    def _plan_constructor(self, node: ast.Call, fname: str, ctor: Callable[..., Any]) -> tuple:
        names = [kw.arg for kw in node.keywords]
        if None in names:
            self.error(node, f"** is not allowed in {fname}(...)")
        nargs = len(node.args)
        kids = [(a, _VALUE) for a in node.args] + [(kw.value, _VALUE) for kw in node.keywords]

        def build(vals: list[Any]) -> Any:
            return ctor(*vals[:nargs], **dict(zip(names, vals[nargs:])))  # type: ignore[arg-type]

        return (kids, build)

    def _plan_float(self, node: ast.Call) -> tuple:
        if (
            len(node.args) != 1
            or node.keywords
            or type(node.args[0]) is not ast.Constant
            or not isinstance(node.args[0].value, str)
        ):
            self.error(node, 'float(...) takes one string: float("nan"), float("inf")')
        text = node.args[0].value
        try:
            return (_LEAF, float(text))
        except ValueError:
            self.error(node.args[0], f"float({text!r}) is not a number")

    # ---- types
    def _plan_type(self, node: ast.AST) -> tuple:
        t = type(node)
        if t is ast.Name:
            name = node.id  # type: ignore[attr-defined]
            if name == "Object":
                return (_LEAF, ObjectType())
            if name == "Tensor":
                return (_LEAF, TensorType())
            if name == "Shape":
                return (_LEAF, ShapeType())
            self.error(node, _type_hint(name))
        if t is ast.Constant and node.value is None:  # type: ignore[attr-defined]
            self.error(node, "None is not a type; an unknown tensor is Tensor(None, None)")
        if t is not ast.Call or type(node.func) is not ast.Name:  # type: ignore[attr-defined]
            self.error(node, 'expected a type such as Tensor((1, n), "float32")')
        name = node.func.id  # type: ignore[attr-defined]
        args, kws = node.args, {k.arg: k.value for k in node.keywords}  # type: ignore[attr-defined]
        if None in kws:
            self.error(node, "** is not allowed in a type")
        if name == "Tensor":
            shape, dtype = _bind_args(self, node, args, kws, ("shape", "dtype"))
            has_shape, has_dtype = shape is not None, dtype is not None
            present = ([(shape, _SHAPE)] if has_shape else []) + (
                [(dtype, _VALUE)] if has_dtype else []
            )

            def make_tensor(a: list[Any]) -> TensorType:
                it = iter(a)
                s = next(it) if has_shape else None
                d = next(it) if has_dtype else None
                if d is not None and not isinstance(d, str):
                    raise TypeError(f'a dtype is a string such as "float32", got {d!r}')
                return TensorType(s, d)

            return (present, make_tensor)
        if name == "Tuple":
            if kws:
                self.error(node, "Tuple(...) takes only field types")
            return ([(a, _TYPE) for a in args], lambda a: TupleType(tuple(a)))
        if name == "Shape":
            (ndim,) = _bind_args(self, node, args, kws, ("ndim",))
            if ndim is None:
                return ([], lambda a: ShapeType())
            return ([(ndim, _VALUE)], lambda a: ShapeType(_check_ndim(a[0])))
        if name == "Prim":
            (dtype,) = _bind_args(self, node, args, kws, ("dtype",))
            if dtype is None:
                return ([], lambda a: PrimType())
            return ([(dtype, _VALUE)], lambda a: PrimType(_check_str(a[0], "a dtype")))
        if name == "Object":
            if args or kws:
                self.error(node, "Object takes no arguments")
            return (_LEAF, ObjectType())
        if name == "Callable":
            params, ret = _bind_args(self, node, args, kws, ("params", "ret"))
            if type(params) not in (ast.Tuple, ast.List) or ret is None:
                self.error(node, "write a function type as Callable((param types...), result type)")
            n = len(params.elts)  # type: ignore[union-attr]
            kids = [(p, _TYPE) for p in params.elts] + [(ret, _TYPE)]  # type: ignore[union-attr]
            return (kids, lambda a: FuncType(tuple(a[:n]), a[n]))
        self.error(node, _type_hint(name))

    def _plan_shape(self, node: ast.AST) -> tuple:
        t = type(node)
        if t is ast.Constant and node.value is None:  # type: ignore[attr-defined]
            return (_LEAF, None)
        if t is ast.Tuple or t is ast.List:
            return ([(e, _DIM) for e in node.elts], tuple)  # type: ignore[attr-defined]
        self.error(node, "a shape is a tuple of sizes such as (1, n), or None when unknown")

    def _plan_dim(self, node: ast.AST) -> tuple:
        t = type(node)
        if t is ast.Name:
            return (_LEAF, node.id)  # type: ignore[attr-defined]
        if t is ast.Constant:
            v = node.value  # type: ignore[attr-defined]
            if type(v) is int and v >= 0:
                return (_LEAF, v)
            if type(v) is str and v.isidentifier():
                return (_LEAF, v)
        if t is ast.BinOp or t is ast.UnaryOp or t is ast.Call:
            try:
                d = from_ast(node)
            except SymbolicError as e:
                self.error(node, str(e))
            if type(d) is not int or d >= 0:
                return (_LEAF, d)
        self.error(node, "a dimension is a non-negative int or a symbolic size name such as n "
                   "(or a size expression such as n * 12 or (h - 3) // 2 + 1)")

    # ---- constants
    def _plan_const(self, node: ast.Call, as_expr: bool) -> tuple:
        kws = {k.arg: k.value for k in node.keywords}
        if None in kws:
            self.error(node, "** is not allowed in const(...)")
        unknown = set(kws) - {"value", "dtype", "base64", "shape", "ref"}
        if unknown:
            self.error(node, f"const(...) has no argument {sorted(unknown)[0]!r}")
        value, dtype = _bind_args(self, node, node.args, kws, ("value", "dtype"))
        b64, shape, ref = kws.get("base64"), kws.get("shape"), kws.get("ref")
        if dtype is None:
            self.error(node, 'const(...) needs a dtype: const(1.0, "float32")')
        if sum(x is not None for x in (value, b64, ref)) != 1:
            self.error(node, "const(...) takes either a value, base64= data or a ref= to a "
                             "constant kept outside the text")
        if (b64 is not None or ref is not None) and shape is None:
            self.error(node, f"const({'base64' if ref is None else 'ref'}=...) needs shape=")
        if ref is not None:
            return self._plan_const_ref(node, ref, dtype, shape, as_expr)
        kids = [(value if value is not None else b64, _VALUE), (dtype, _VALUE)]
        if shape is not None:
            kids.append((shape, _VALUE))
        encoded = b64 is not None

        def make(a: list[Any]) -> Any:
            data = _make_array(a[0], a[1], a[2] if len(a) > 2 else None, encoded)
            return Constant(data) if as_expr else data

        return (kids, make)

    def _plan_const_ref(self, node: ast.Call, ref: ast.expr, dtype: ast.expr,
                        shape: ast.expr, as_expr: bool) -> tuple:
        table = self.constants

        def make(a: list[Any]) -> Any:
            data = _referenced_array(table, a[0], a[1], a[2])
            return Constant(data) if as_expr else data

        return ([(ref, _VALUE), (dtype, _VALUE), (shape, _VALUE)], make)


def _referenced_array(table: Mapping[str, Any] | None, key: Any, dtype: Any,
                      shape: Any) -> np.ndarray:
    """The constant ``const(ref=key, shape=..., dtype=...)`` names in ``table``."""
    key = _check_str(key, "ref=")
    dtype = _check_str(dtype, "the dtype")
    check_dtype(dtype)
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise TypeError(f"shape= must be a tuple of non-negative ints, got {shape!r}")
    if table is None:
        raise ValueError(f"const(ref={key!r}) names a constant kept outside the text: parse "
                         "the text with the table it was printed with (parse(text, "
                         "constants=...); an executable's graph: plait.graph_module(exe))")
    try:
        data = table[key]
    except KeyError:
        raise ValueError(f"const(ref={key!r}): the table of constants has no such entry "
                         f"({len(table)} entries)") from None
    data = np.asarray(data)
    if data.dtype.name != dtype or tuple(data.shape) != shape:
        raise ValueError(f"const(ref={key!r}) says {shape} {dtype}, but the table holds "
                         f"{tuple(data.shape)} {data.dtype.name}")
    return data


def _make_array(value: Any, dtype: Any, shape: Any, encoded: bool) -> np.ndarray:
    dtype = _check_str(dtype, "the dtype")
    if dtype not in DTYPES:
        check_dtype(dtype)
    if shape is not None:
        if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
            raise TypeError(f"shape= must be a tuple of non-negative ints, got {shape!r}")
    if encoded:
        if not isinstance(value, str):
            raise TypeError("base64= must be a string")
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("base64= is not valid base64 data") from None
        le = np.dtype(dtype).newbyteorder("<")
        need = int(np.prod(shape, dtype=np.int64)) * le.itemsize  # type: ignore[arg-type]
        if len(raw) != need:
            raise ValueError(
                f"base64= holds {len(raw)} bytes, but shape {shape} of {dtype} needs {need}"
            )
        return np.frombuffer(raw, dtype=le).reshape(shape).astype(dtype)
    kind = np.dtype(dtype).kind
    leaves, depths, stack = [], set(), [(value, 0)]
    while stack:  # the numbers of the nested tuples, checked before numpy sees them
        v, depth = stack.pop()
        if isinstance(v, tuple):
            if not v:
                depths.add(depth + 1)
            stack.extend((x, depth + 1) for x in v)
        else:
            depths.add(depth)
            leaves.append(v)
    if any(type(v) not in (int, float, bool) for v in leaves):
        raise TypeError("const(...) takes a number or nested lists of numbers")
    if kind in "iub" and any(type(v) is float for v in leaves):
        raise ValueError(f"const(...) of dtype {dtype} needs whole numbers, got {value!r}")
    if kind in "iu":
        info = np.iinfo(dtype)
        if any(not info.min <= v <= info.max for v in leaves):
            raise ValueError(f"a value of const(...) is out of range for {dtype}")
    if len(depths) > 1:
        raise ValueError("const(...) needs a number or nested lists of numbers of equal lengths")
    try:
        data = np.array(value, dtype=dtype)
    except ValueError:
        raise ValueError(
            "const(...) needs a number or nested lists of numbers of equal lengths"
        ) from None
    if shape is not None and data.shape != shape:
        raise ValueError(f"const(...) value has shape {data.shape}, shape= says {shape}")
    return data


def _is_float_call(node: ast.AST) -> bool:
    return type(node) is ast.Call and type(node.func) is ast.Name and node.func.id == "float"  # type: ignore[attr-defined]


def _check_ndim(v: Any) -> int | None:
    if v is not None and (type(v) is not int or v < 0):
        raise TypeError(f"Shape(ndim) needs a non-negative int, got {v!r}")
    return v


def _check_str(v: Any, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a string, got {v!r}")
    return v


def _type_hint(name: str) -> str:
    close = difflib.get_close_matches(name, sorted(_TYPE_NAMES), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return (
        f"unknown type {name!r}{hint} (types are Tensor(shape, dtype), Tuple(...), "
        "Shape(ndim), Prim(dtype), Object, Callable((params...), ret))"
    )


def _bind_args(
    ctx: ParseContext,
    node: ast.Call,
    args: list[ast.expr],
    kws: Mapping[str, ast.expr],
    names: tuple,
) -> list[ast.expr | None]:
    """Match positional and keyword arguments of a format builtin to ``names``."""
    fname = getattr(node.func, "id", "call")
    if len(args) > len(names):
        ctx.error(node, f"{fname}(...) takes at most {len(names)} positional arguments")
    out: list[ast.expr | None] = list(args) + [None] * (len(names) - len(args))
    for k, v in kws.items():
        if k not in names:
            if fname == "const" and k in ("base64", "shape", "ref"):
                continue
            ctx.error(v, f"{fname}(...) has no argument {k!r}; it takes {', '.join(names)}")
        i = names.index(k)
        if out[i] is not None:
            ctx.error(v, f"{fname}(...) got {k!r} twice")
        out[i] = v
    return out


def _decorator_name(dec: ast.expr) -> str | None:
    node = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _shared_attrs(callee: Any, attrs: dict[str, Any]) -> Any:
    """The attributes of a call of a registered op as the op layer checks and shares
    them (one object per distinct value, as :func:`plait.op.make_call` gives the
    builder): type inference and the passes key their caches on that object, so a
    parsed module builds at the speed of a built one (the scaling chain: 79 -> 29 us per
    binding).  Attributes the op refuses stay as written: the builder reports them with
    the binding's location."""
    if type(callee) is not Op:
        return attrs
    opdef = Op.definitions.get(callee.name)  # type: ignore[attr-defined]
    if opdef is None:
        return attrs
    try:
        return opdef.normalize_attrs(attrs)
    except Exception:  # noqa: BLE001 (reported where the binding is built)
        return attrs


class _Parser(ParseContext):
    """Parses one text into a module."""

    def __init__(
        self,
        text: str,
        source: str,
        first_line: int = 1,
        col_offset: int = 0,
        module_attrs: Mapping[str, Any] | None = None,
        constants: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(text, source, first_line, col_offset)
        self.text = text
        self.module_attrs = module_attrs
        self.constants = constants
        self.bb = BlockBuilder()
        self.scopes: list[dict[str, Var]] = [{}]
        self.func_names: dict[str, ast.FunctionDef] = {}
        self.hidden: dict[str, int] = {}
        self.ops = Op.definitions
        self._pending: tuple[str, Type, ast.stmt] | None = None

    # ------------------------------------------------------------ module
    def parse_module(self) -> IRModule:
        try:
            tree = ast.parse(self.text, filename=self.source)
        except SyntaxError as e:
            line = e.lineno or 1
            col = (e.offset or 1) - 1
            src = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            raise ParseError(
                f"syntax error: {e.msg}",
                source=self.source,
                line=line + self.line_shift,
                col=col + 1 + self.col_shift,
                source_line=src,
                caret=col,
            ) from None
        except (RecursionError, MemoryError):
            raise ParseError(
                "the text is nested too deeply for Python's parser; bind inner "
                "expressions to variables",
                source=self.source,
                line=1 + self.line_shift,
                col=1,
            ) from None
        except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 text can hold it
            before = self.text[: e.start]
            line = before.count("\n") + 1
            col = len(before) - (before.rfind("\n") + 1)
            raise ParseError(
                f"character {self.text[e.start]!r} cannot be encoded as UTF-8 (a lone "
                "surrogate: the text was decoded wrongly)",
                source=self.source,
                line=line + self.line_shift,
                col=col + 1 + self.col_shift,
            ) from None
        classes = []
        defs = []
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                classes.append(stmt)
            elif isinstance(stmt, ast.FunctionDef):
                defs.append(stmt)
            elif isinstance(stmt, ast.Import | ast.ImportFrom) or _is_docstring(stmt):
                continue
            else:
                self.error(stmt, "expected a @module class (or @function definitions)")
        if len(classes) > 1:
            self.error(classes[1], "the text holds more than one @module class")
        if classes and defs:
            self.error(defs[0], "put this function inside the @module class")
        attrs: dict[str, Any] = {}
        if classes:
            cls_node = classes[0]
            attrs = self._module_decorator(cls_node)
            body = [s for s in cls_node.body if not _is_docstring(s)]
            for s in body:
                if isinstance(s, ast.Pass):
                    continue
                if not isinstance(s, ast.FunctionDef):
                    self.error(s, "a module class holds only @function (or kernel) definitions")
                defs.append(s)
        elif not defs:
            self.error(None, "the text holds no @module class and no @function")
        if self.module_attrs is not None:
            attrs = dict(self.module_attrs)
        return self._parse_defs(defs, attrs, classes[0] if classes else None)

    def _module_decorator(self, cls_node: ast.ClassDef) -> dict[str, Any]:
        decs = [d for d in cls_node.decorator_list if _decorator_name(d) == "module"]
        if len(decs) != 1 or len(cls_node.decorator_list) != 1:
            self.error(cls_node, f"class {cls_node.name} must be decorated with @module (only)")
        dec = decs[0]
        if not isinstance(dec, ast.Call) or self.module_attrs is not None:
            return {}
        if dec.args:
            self.error(dec.args[0], "@module takes only attrs={...}")
        attrs: dict[str, Any] = {}
        for kw in dec.keywords:
            if kw.arg != "attrs":
                self.error(kw, f"@module has no argument {kw.arg!r}; it takes attrs={{...}}")
            value = self.literal(kw.value)
            if not isinstance(value, dict):
                self.error(kw.value, "attrs= must be a dict")
            attrs = value
        phase = attrs.get("phase")
        if phase is not None:
            from .module import PHASES

            if phase not in PHASES:
                self.error(dec, f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
        return attrs

    def _parse_defs(
        self, defs: list[ast.FunctionDef], attrs: dict[str, Any], cls_node: ast.ClassDef | None
    ) -> IRModule:
        kinds: dict[str, str] = {}
        for d in defs:
            if d.name in self.func_names:
                self.error(d, f"the module defines {d.name!r} twice")
            self.func_names[d.name] = d
            if len(d.decorator_list) != 1:
                self.error(d, f"{d.name!r} needs exactly one decorator: @function or a kernel's")
            kind = _decorator_name(d.decorator_list[0])
            if kind != "function" and kind not in _FUNC_PARSERS:
                known = ", ".join(["@function"] + [f"@{k}" for k in sorted(_FUNC_PARSERS)])
                self.error(d.decorator_list[0], f"unknown decorator; expected one of {known}")
            kinds[d.name] = kind  # type: ignore[assignment]
        signatures = {}
        for d in defs:
            if kinds[d.name] == "function":
                signatures[d.name] = self._signature(d)
                params, ret_ty = signatures[d.name][0], signatures[d.name][1]
                if ret_ty is not None and all(p.ty is not None for p in params):
                    self.bb.declare_function(d.name, FuncType(tuple(p.ty for p in params), ret_ty))
            else:
                func = _FUNC_PARSERS[kinds[d.name]](d, self)
                if not isinstance(func, BaseFunc):
                    self.error(d, f"the @{kinds[d.name]} parser returned {type(func).__name__}")
                self.bb.update_func(d.name, func)
        for d in defs:
            if kinds[d.name] == "function":
                self._function(d, signatures[d.name])
        built = self.bb.get()
        return IRModule({d.name: built[d.name] for d in defs}, attrs)

    # ------------------------------------------------------------ functions
    def _signature(self, d: ast.FunctionDef) -> tuple[list[Var], Type | None, dict, bool]:
        a = d.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            self.error(d, f"parameters of {d.name!r} must be plain names (name: Type)")
        names = [arg.arg for arg in a.args]
        dup = sorted(n for n, k in Counter(names).items() if k > 1)
        if dup:
            self.error(
                a.args[len(names) - 1 - names[::-1].index(dup[0])],
                f"{d.name!r} has more than one parameter named {', '.join(map(repr, dup))}: "
                "parameter names must be unique (they name the arguments of the function)",
            )
        params = []
        for arg in a.args:
            self._check_bindable(arg.arg, arg)
            ty = self.parse_type(arg.annotation) if arg.annotation is not None else None
            params.append(Var(arg.arg, ty, span=self.span(arg)))
        ret_ty = self.parse_type(d.returns) if d.returns is not None else None
        attrs: dict[str, Any] = {}
        pure = True
        for dec in d.decorator_list:
            if isinstance(dec, ast.Call):
                if dec.args:
                    self.error(dec.args[0], "@function takes only attrs={...} and pure=")
                for kw in dec.keywords:
                    if kw.arg == "attrs":
                        attrs = self.literal(kw.value)
                        if not isinstance(attrs, dict):
                            self.error(kw.value, "attrs= must be a dict")
                    elif kw.arg == "pure":
                        pure = self.literal(kw.value)
                        if not isinstance(pure, bool):
                            self.error(kw.value, "pure= must be True or False")
                    else:
                        self.error(
                            kw, f"@function has no argument {kw.arg!r}; it takes attrs=, pure="
                        )
        return params, ret_ty, attrs, pure

    def _function(self, d: ast.FunctionDef, sig: tuple) -> None:
        """Build function ``d`` into ``self.bb`` under its name."""
        params, ret_ty, attrs, pure = sig
        bb = self.bb
        saved_scopes, saved_hidden = self.scopes, self.hidden
        self.scopes = [*self.scopes, {p.name_hint: p for p in params}]
        self.hidden = {}
        try:
            with bb.function(
                d.name, params, attrs=attrs, pure=pure, ret_ty=ret_ty, span=self.span(d)
            ):
                ret_node = self._body(d)
                ret = self._expr(ret_node.value)  # type: ignore[arg-type]
                try:
                    bb.emit_func_output(ret)
                except IRTypeError as e:
                    self._type_error(e, ret_node)
        finally:
            self.scopes, self.hidden = saved_scopes, saved_hidden

    def _body(self, d: ast.FunctionDef) -> ast.Return:
        stmts = d.body[1:] if d.body and _is_docstring(d.body[0]) else d.body
        if not stmts or not isinstance(stmts[-1], ast.Return):
            self.error(stmts[-1] if stmts else d, f"function {d.name!r} must end with a return")
        ret = stmts[-1]
        if ret.value is None:
            self.error(ret, "return needs a value")
        stmt = self._stmt
        for s in stmts[:-1]:
            if type(s) is ast.With:
                self._no_pending()
                self._dataflow(s)
            else:
                stmt(s, False, False)
        self._no_pending()
        return ret

    def _nested_function(self, d: ast.FunctionDef, is_output: bool) -> Var:
        for dec in d.decorator_list:
            if _decorator_name(dec) != "function":
                self.error(dec, "a nested function takes only the @function decorator")
        sig = self._signature(d)
        outer = self.bb
        sub = BlockBuilder()
        sub.global_types = outer.global_types
        self.bb = sub
        try:
            self._function(d, sig)
        finally:
            self.bb = outer
        func = sub.get()[d.name]
        try:
            var = outer.emit(func, d.name, is_output=is_output, span=self.span(d))
        except IRTypeError as e:
            self._type_error(e, d)
        return var

    # ------------------------------------------------------------ statements
    def _check_bindable(self, name: str, node: ast.AST) -> None:
        if name in FORMAT_WORDS:
            self.error(node, f"{name!r} is a word of the text format; choose another name")

    def _no_pending(self) -> None:
        pending = self._pending
        if pending is not None:
            self._pending = None
            self.error(
                pending[2],
                f"a bare annotation must be followed by an if that assigns {pending[0]!r}",
            )

    def _stmt(self, s: ast.stmt, in_dataflow: bool, is_output: bool) -> None:
        t = type(s)
        pending = self._pending
        if pending is not None and t is not ast.If:
            self._no_pending()
        if t is ast.Assign:
            targets = s.targets  # type: ignore[attr-defined]
            if len(targets) != 1 or type(targets[0]) is not ast.Name:
                self.error(s, "a binding assigns a single name: y = op(x)")
            if not self._simple_assign(targets[0].id, s.value, is_output):  # type: ignore[attr-defined]
                self._bind(targets[0].id, s.value, None, s, is_output)  # type: ignore[attr-defined]
            return
        if t is ast.AnnAssign:
            target = s.target  # type: ignore[attr-defined]
            if type(target) is not ast.Name:
                self.error(s, "a binding assigns a single name: y: Type = op(x)")
            declared = self.parse_type(s.annotation)  # type: ignore[attr-defined]
            if s.value is None:  # type: ignore[attr-defined]
                self._pending = (target.id, declared, s)
                return
            self._bind(target.id, s.value, declared, s, is_output)  # type: ignore[attr-defined]
            return
        if t is ast.If:
            if in_dataflow:
                self.error(
                    s, "if is not allowed in a dataflow block (dataflow blocks are control-free)"
                )
            self._pending = None
            self._if(s, pending)  # type: ignore[arg-type]
            return
        if t is ast.FunctionDef:
            self._check_bindable(s.name, s)  # type: ignore[attr-defined]
            var = self._nested_function(s, is_output)  # type: ignore[arg-type]
            self.scopes[-1][s.name] = var  # type: ignore[attr-defined]
            return
        if t is ast.Pass:
            return
        if t is ast.With:
            if in_dataflow:
                self.error(s, "dataflow blocks cannot be nested")
            self.error(s, "with dataflow(): is only allowed at the top level of a function body")
        if t is ast.Return:
            self.error(s, "return must be the last statement of the function")
        if t is ast.Expr:
            v = s.value  # type: ignore[attr-defined]
            if type(v) is ast.Call and getattr(v.func, "id", None) == "output":
                where = (
                    "last statement"
                    if in_dataflow
                    else "last statement of a with dataflow(): block"
                )
                self.error(s, f"output(...) must be the {where}")
            self.error(s, "an expression statement has no effect; bind its value to a name")
        self.error(s, f"unsupported statement ({t.__name__}) in the text format")

    def _simple_assign(self, name: str, value: ast.expr, is_output: bool) -> bool:
        """Fast path for the most common statement, ``name = op(var, ...)``.
        Returns False (having done nothing) for anything else."""
        if type(value) is not ast.Call or value.keywords:  # type: ignore[attr-defined]
            return False
        f = value.func  # type: ignore[attr-defined]
        if type(f) is not ast.Name or name in FORMAT_WORDS:
            return False
        fname = f.id
        if fname not in self.ops:
            return False
        scopes = self.scopes
        for sc in scopes:
            if fname in sc:
                return False
        top = scopes[-1]
        args = []
        for a in value.args:  # type: ignore[attr-defined]
            if type(a) is not ast.Name:
                return False
            v = top.get(a.id)
            if v is None:
                v = self._var(a)
            args.append(v)
        span = Span(
            self.source,
            value.lineno + self.line_shift,
            value.col_offset + 1 + self.col_shift,
        )
        try:
            op = Op.get(fname)
            var = self.bb.emit(
                Call(op, tuple(args), _shared_attrs(op, {}), span=span), name,
                is_output=is_output, span=span
            )
        except IRTypeError as e:
            self._type_error(e, value)
        top[name] = var
        return True

    def _bind(
        self, name: str, value: ast.expr, declared: Type | None, stmt: ast.stmt, is_output: bool
    ) -> Var:
        self._check_bindable(name, stmt)
        bb = self.bb
        if (
            type(value) is ast.Call
            and type(value.func) is ast.Name
            and value.func.id == "match_cast"
        ):
            if len(value.args) != 2 or value.keywords:
                self.error(value, "match_cast takes a value and a type: match_cast(x, Tensor(...))")
            v = self._expr(value.args[0])
            ty = self.parse_type(value.args[1])
            if declared is not None and declared != ty:
                self.error(stmt, f"the annotation {declared} differs from the match_cast type {ty}")
            try:
                var = bb.emit_match_cast(v, ty, name, is_output=is_output)
            except IRTypeError as e:
                self._type_error(e, value)
        else:
            expr = self._expr(value)
            if declared is not None and type(expr) is Call and type(expr.op) is not Op:
                expr = Call(expr.op, expr.args, expr.attrs, ty=declared, span=expr.span)
            try:
                var = bb.emit(
                    expr, name, ty=declared, is_output=is_output, span=expr.span or self.span(stmt)
                )
            except IRTypeError as e:
                self._type_error(e, value)
        self.scopes[-1][name] = var
        return var

    def _dataflow(self, w: ast.With) -> None:
        item = w.items[0] if len(w.items) == 1 else None
        ce = item.context_expr if item is not None else None
        if (
            item is None
            or item.optional_vars is not None
            or type(ce) is not ast.Call
            or getattr(ce.func, "id", None) != "dataflow"
            or ce.args
            or ce.keywords
        ):
            self.error(w, "the only with-statement of the format is `with dataflow():`")
        body = w.body
        last = body[-1]
        if not (
            type(last) is ast.Expr
            and type(last.value) is ast.Call
            and getattr(last.value.func, "id", None) == "output"
        ):
            self.error(
                last,
                "a dataflow block must end with output(...) naming the variables used after it",
            )
        call = last.value
        if call.keywords:
            self.error(call.keywords[0], "output(...) takes variable names only")
        last_assign: dict[str, int] = {}
        for i, s in enumerate(body[:-1]):
            t = type(s)
            if t is ast.Assign and len(s.targets) == 1 and type(s.targets[0]) is ast.Name:
                last_assign[s.targets[0].id] = i
            elif t is ast.AnnAssign and type(s.target) is ast.Name:
                last_assign[s.target.id] = i
            elif t is ast.FunctionDef:
                last_assign[s.name] = i
        out_at: dict[int, str] = {}
        outs: list[str] = []
        for a in call.args:
            if type(a) is not ast.Name:
                self.error(a, "output(...) takes variable names only")
            if a.id in outs:
                self.error(a, f"output(...) lists {a.id!r} twice")
            if a.id not in last_assign:
                self.error(a, f"output({a.id}): {a.id!r} is not bound in this dataflow block")
            outs.append(a.id)
            out_at[last_assign[a.id]] = a.id
        scope: dict[str, Var] = {}
        self.scopes.append(scope)
        stmt = self._stmt
        with self.bb.dataflow():
            for i, s in enumerate(body[:-1]):
                stmt(s, True, i in out_at)
        self.scopes.pop()
        outer = self.scopes[-1]
        for name in outs:
            outer[name] = scope[name]
        hidden = self.hidden
        for name in scope:
            if name not in outer:
                hidden[name] = w.lineno + self.line_shift

    def _if(self, s: ast.If, pending: tuple | None) -> str:
        """Bind the variable an if statement assigns; return its name."""
        cond = self._expr(s.test)
        if not s.orelse:
            self.error(s, "an if needs an else: both branches assign the result variable")
        then_seq, name, then_last = self._branch(s.body, s)
        else_seq, else_name, else_last = self._branch(s.orelse, s)
        if else_name != name:
            self.error(
                else_last,
                f"both branches must assign the same variable: the then-branch assigns "
                f"{name!r}, the else-branch {else_name!r}",
            )
        declared = None
        if pending is not None:
            if pending[0] != name:
                self.error(
                    pending[2],
                    f"this annotation declares {pending[0]!r}, but the if assigns {name!r}",
                )
            declared = pending[1]
        self._check_bindable(name, s)
        try:
            var = self.bb.emit(
                If(cond, then_seq, else_seq, span=self.span(s)),
                name,
                ty=declared,
                span=self.span(s),
            )
        except IRTypeError as e:
            self._type_error(e, s)
        self.scopes[-1][name] = var
        return name

    def _branch(self, stmts: list[ast.stmt], if_node: ast.If) -> tuple[SeqExpr, str, ast.stmt]:
        last = stmts[-1]
        bb = self.bb
        self.scopes.append({})
        bb.begin_scope(False)
        try:
            if (
                type(last) is ast.Assign
                and len(last.targets) == 1
                and type(last.targets[0]) is ast.Name
            ):
                name = last.targets[0].id
                for st in stmts[:-1]:
                    self._stmt(st, False, False)
                self._no_pending()
                try:
                    body = bb.normalize_arg(self._expr(last.value))
                except IRTypeError as e:
                    self._type_error(e, last.value)
            elif type(last) is ast.If:
                for st in stmts[:-1]:
                    self._stmt(st, False, False)
                pending, self._pending = self._pending, None
                name = self._if(last, pending)
                body = self.scopes[-1][name]
            else:
                self.error(last, "each branch of an if must end by assigning the result variable")
        finally:
            bindings = bb.end_scope()
            self.scopes.pop()
        blocks = (_BindingBlock(tuple(bindings)),) if bindings else ()
        return SeqExpr(blocks, body, ty=body.ty), name, last

    # ------------------------------------------------------------ expressions
    def _var(self, node: ast.Name) -> Var:
        name = node.id
        scopes = self.scopes
        v = scopes[-1].get(name)
        if v is not None:
            return v
        for sc in reversed(scopes):
            v = sc.get(name)
            if v is not None:
                return v
        self._undefined(node)

    def _undefined(self, node: ast.Name) -> NoReturn:
        name = node.id
        if name in self.hidden:
            self.error(
                node,
                f"{name!r} is local to the dataflow block at line {self.hidden[name]}; "
                f"list it in that block's output(...) to use it here",
            )
        if name in self.func_names:
            self.error(node, f"undefined variable {name!r}; the module function is cls.{name}")
        if name in self.ops:
            self.error(node, f"{name!r} is an operator, not a variable; call it: {name}(...)")
        if name in _TYPE_NAMES:
            self.error(node, f"{name} is a type, not a value")
        visible = sorted({k for sc in self.scopes for k in sc})
        close = difflib.get_close_matches(name, visible, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        self.error(node, f"undefined variable {name!r}{hint}")

    def _global(self, node: ast.Attribute) -> GlobalVar:
        if type(node.value) is not ast.Name or node.value.id != "cls":
            self.error(node, "only module functions (cls.name) are referenced with a dot")
        name = node.attr
        if name not in self.func_names:
            close = difflib.get_close_matches(name, list(self.func_names), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            self.error(
                node,
                f"the module has no function {name!r}{hint} "
                f"(it has {', '.join(self.func_names) or 'none'})",
            )
        return GlobalVar(name)

    def _op(self, name: str, node: ast.AST) -> Op:
        if name in self.ops:
            return Op.get(name)
        locals_ = [k for sc in self.scopes for k in sc]
        close = difflib.get_close_matches(name, list(self.ops) + locals_, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        self.error(node, f"unknown operator {name!r}{hint}")

    def _callee(self, f: ast.expr) -> tuple[str, Any]:
        t = type(f)
        if t is ast.Name:
            name = f.id  # type: ignore[attr-defined]
            v = self.scopes[-1].get(name)
            if v is None:
                for sc in self.scopes:
                    if name in sc:
                        v = sc[name]
            if v is not None:
                if isinstance(v.ty, TensorType | TupleType | ShapeType | PrimType):
                    shadow = (
                        f" (it shadows the operator {name!r}; rename it)"
                        if name in self.ops
                        else ""
                    )
                    self.error(f, f"{name!r} is a variable of type {v.ty}, not a function{shadow}")
                return "var", v
            if name in _BUILTIN_CALLS:
                return "builtin", name
            return "op", self._op(name, f)
        if t is ast.Attribute:
            parts = []
            node: ast.expr = f
            while type(node) is ast.Attribute:
                parts.append(node.attr)  # type: ignore[attr-defined]
                node = node.value  # type: ignore[attr-defined]
            if type(node) is not ast.Name:
                self.error(f, "a callee is an op name, cls.function, a variable or extern(...)")
            if node.id == "cls" and len(parts) == 1:  # type: ignore[attr-defined]
                return "gv", self._global(f)  # type: ignore[arg-type]
            parts.append(node.id)  # type: ignore[attr-defined]
            return "op", self._op(".".join(reversed(parts)), f)
        if t is ast.Subscript:
            base, key = f.value, f.slice  # type: ignore[attr-defined]
            if (
                type(base) is ast.Name
                and base.id == "ops"
                and type(key) is ast.Constant
                and isinstance(key.value, str)
            ):
                return "op", self._op(key.value, f)
        if t is ast.Call and getattr(f.func, "id", None) == "extern":  # type: ignore[attr-defined]
            return "extern", self._extern(f)  # type: ignore[arg-type]
        self.error(f, "a callee is an op name, cls.function, a variable or extern(...)")

    def _extern(self, node: ast.Call) -> ExternFunc:
        if len(node.args) != 1 or node.keywords or type(node.args[0]) is not ast.Constant:
            self.error(node, 'extern takes the symbol as a string: extern("name")')
        sym = node.args[0].value
        if not isinstance(sym, str):
            self.error(node, 'extern takes the symbol as a string: extern("name")')
        return ExternFunc(sym)

    def _expr(self, node: ast.expr) -> Expr:
        """Convert an expression; nested calls stay nested (the builder binds them)."""
        t = type(node)
        if t is ast.Name:
            return self._var(node)  # type: ignore[arg-type]
        if t is ast.Call and not node.keywords:  # type: ignore[attr-defined]
            args = node.args  # type: ignore[attr-defined]
            if all(type(a) is ast.Name for a in args):
                kind, callee = self._callee(node.func)  # type: ignore[attr-defined]
                if kind == "op" or kind == "gv":
                    var = self._var
                    return Call(callee, tuple([var(a) for a in args]), span=self.span(node))
        return self._eval(node, _EXPR)

    def _plan_expr(self, node: ast.AST) -> tuple:
        t = type(node)
        if t is ast.Name:
            return (_LEAF, self._var(node))  # type: ignore[arg-type]
        if t is ast.Call:
            return self._plan_call(node)  # type: ignore[arg-type]
        if t is ast.Tuple:
            elts = node.elts  # type: ignore[attr-defined]
            for e in elts:
                if type(e) is ast.Starred:
                    self.error(e, "* is not allowed in a tuple")
            span = self.span(node)
            return ([(e, _EXPR) for e in elts], lambda a: Tuple(tuple(a), span=span))
        if t is ast.Subscript:
            index = self._int_literal(node.slice)  # type: ignore[attr-defined]
            span = self.span(node)
            return (
                [(node.value, _EXPR)],  # type: ignore[attr-defined]
                lambda a: TupleGetItem(a[0], index, span=span),
            )
        if t is ast.Attribute:
            return (_LEAF, self._global(node))  # type: ignore[arg-type]
        if t is ast.Constant:
            v = node.value  # type: ignore[attr-defined]
            if isinstance(v, str):
                return (_LEAF, StringImm(v))
            self.error(
                node,
                f"a bare {type(v).__name__} is not a value of the IR: write "
                f'const({v!r}, "float32") for a tensor or prim({v!r}, "int64") for a scalar',
            )
        if t is ast.BinOp:
            name = _PY_OPERATORS.get(type(node.op))  # type: ignore[attr-defined]
            hint = f"; write {name}(a, b)" if name else ""
            self.error(node, f"Python operators are not part of the format{hint}")
        if t is ast.List:
            self.error(node, "a list is not a value of the IR; write a tuple (a, b)")
        self.error(node, f"unsupported expression ({t.__name__}) in the text format")

    def _int_literal(self, node: ast.expr) -> int:
        if type(node) is ast.Constant and type(node.value) is int:
            return node.value
        if (
            type(node) is ast.UnaryOp
            and isinstance(node.op, ast.USub)
            and type(node.operand) is ast.Constant
            and type(node.operand.value) is int
        ):
            return -node.operand.value
        self.error(node, "a tuple index must be an integer literal: t[0]")

    def _plan_call(self, node: ast.Call) -> tuple:
        kind, callee = self._callee(node.func)
        if kind == "builtin":
            return self._plan_builtin(callee, node)
        for a in node.args:
            if type(a) is ast.Starred:
                self.error(a, "* is not allowed in a call")
        keys = []
        for kw in node.keywords:
            if kw.arg is None:
                self.error(kw, "** is not allowed in a call")
            keys.append(kw.arg)
        n = len(node.args)
        kids = [(a, _EXPR) for a in node.args] + [(kw.value, _VALUE) for kw in node.keywords]
        span = self.span(node)

        def make(a: list[Any]) -> Call:
            attrs = dict(zip(keys, a[n:])) if keys else {}
            return Call(callee, tuple(a[:n]), _shared_attrs(callee, attrs), span=span)

        return (kids, make)

    def _plan_builtin(self, name: str, node: ast.Call) -> tuple:
        if name == "const":
            return self._plan_const(node, as_expr=True)
        if name == "prim":
            kws = {k.arg: k.value for k in node.keywords}
            value, dtype = _bind_args(self, node, node.args, kws, ("value", "dtype"))
            if value is None:
                self.error(node, 'prim(...) needs a value: prim(3, "int64")')
            kids = [(value, _VALUE)] + ([(dtype, _VALUE)] if dtype is not None else [])
            return (kids, lambda a: _make_prim(*a))
        if name == "shape":
            if len(node.args) != 1 or node.keywords:
                self.error(node, "shape takes one tuple of sizes: shape((n, 4))")
            arg = node.args[0]
            if type(arg) is ast.Constant and arg.value is None:
                self.error(arg, "a shape value needs its sizes: shape((n, 4))")
            return ([(arg, _SHAPE)], lambda a: ShapeExpr(a[0]))
        if name == "extern":
            return (_LEAF, self._extern(node))
        if name == "match_cast":
            self.error(
                node, "match_cast must be the whole value of a binding: y = match_cast(x, T)"
            )
        if name == "output":
            self.error(node, "output(...) must be the last statement of a with dataflow(): block")
        if name in _TYPE_NAMES:
            self.error(node, f"{name}(...) is a type, not a value")
        if name == "float":
            self.error(
                node, 'float(...) is only allowed in attribute values; use const(..., "float32")'
            )
        if name == "opaque":
            self._plan_value(node)
        self.error(node, f"{name}(...) cannot be used here")

    # ------------------------------------------------------------ errors
    def _type_error(self, err: IRTypeError, node: ast.AST) -> NoReturn:
        target = node
        if err.span is not None and err.span.line:
            # the innermost expression the builder was typing when it failed
            want = (err.span.line - self.line_shift, err.span.col - 1 - self.col_shift)
            for sub in ast.walk(node):
                if (getattr(sub, "lineno", None), getattr(sub, "col_offset", None)) == want:
                    target = sub
                    if isinstance(sub, ast.Call):
                        break
        where = []
        if err.function:
            where.append(f"function {err.function!r}")
        if err.binding:
            where.append(f"binding {err.binding!r}")
        reason = ("in " + ", ".join(where) + ": " if where else "") + err.detail
        if isinstance(target, ast.Call):
            m = re.search(r"attribute '(\w+)'", err.detail)
            if m:
                for kw in target.keywords:
                    if kw.arg == m.group(1):
                        self.error(kw, reason)
            m = re.search(r"\bargument (\d+)\b", err.detail)
            if m and int(m.group(1)) < len(target.args):
                self.error(target.args[int(m.group(1))], reason)
        self.error(target, reason)


_BUILTIN_CALLS = frozenset(
    {"const", "prim", "shape", "extern", "match_cast", "output", "float", "opaque", "dataflow"}
    | _TYPE_NAMES
)


def _make_prim(value: Any, dtype: Any = "int64") -> PrimValue:
    if type(value) not in (int, float, bool):
        raise TypeError(f"prim(...) takes a number or True/False, got {value!r}")
    return PrimValue(value, _check_str(dtype, "the dtype"))


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def parse(
    text: str,
    source_name: str = "<string>",
    *,
    first_line: int = 1,
    col_offset: int = 0,
    module_attrs: Mapping[str, Any] | None = None,
    constants: Mapping[str, Any] | None = None,
) -> IRModule:
    """Parse a module written in the text format.

    ``source_name`` names the text in error messages; ``first_line`` and
    ``col_offset`` shift reported positions (for text cut out of a larger file);
    ``module_attrs``, when given, replaces the attributes written in ``@module(...)``
    (whose arguments are then not read); ``constants`` is the table of the constants
    the text refers to (``const(ref=...)``; see ``IRModule.script(constants=...)``).
    Raises :class:`ParseError`."""
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Parser(text, source_name, first_line, col_offset, module_attrs,
                       constants).parse_module()
    finally:
        if gc_was_enabled:
            gc.enable()


__all__ = ["ParseContext", "ParseError", "parse", "register_func_parser"]
