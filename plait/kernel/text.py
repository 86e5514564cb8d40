"""Text format of kernels: Python syntax, printed here and parsed with ``ast`` (never
executed).  A kernel is a decorated function inside an ``@module`` class or on its own::

    @kernel
    def add(a: Buffer((4, n), "float32"), b: Buffer((4, n), "float32"),
            out: Buffer((4, n), "float32", output=True)):
        for i in parallel(4):
            for j in range(n):
                out[i, j] = a[i, j] + b[i, j]

Syntax (see ``docs/kernels.md`` for the full reference):

* parameters are ``Buffer(shape, dtype)`` annotations; names in shapes are int64 size
  variables; ``output=True`` marks the trailing output buffers;
* ``for v in range(e)`` / ``parallel(e)`` / ``vectorized(e)`` / ``unrolled(e)``;
* ``buf[i, j] = value`` stores (``buf[i] += v`` is shorthand for ``buf[i] = buf[i] + v``);
  ``x = value`` binds an immutable scalar for the rest of the block;
  ``tmp = alloc((16,), "float32")`` allocates scratch for the rest of the block;
  ``with scope():`` limits such a binding to its own block; ``if``/``elif``/``else``;
  ``pass``; an expression on its own line is evaluated;
* expressions: ``+ - * / // %``, comparisons, ``and or not``, ``min(a, b)``,
  ``max(a, b)``, ``select(c, a, b)`` (or ``a if c else b``), ``float32(x)`` (a cast, or a
  typed constant when ``x`` is a number), ``cast(x, "float32")``, intrinsics such as
  ``exp(x)``, loads ``buf[i, j]``;
* a bare number takes the dtype of the other operand (of the stored buffer for a store),
  else int64 / float32 / bool; ``inf`` and ``nan`` are float literals.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from collections.abc import Callable
from typing import Any, NoReturn

from plait.errors import PlaitError
from plait.ir.attrs import Attrs
from plait.ir.expr import Node, Span
from plait.ir.types import DTYPES

from .dispatch import TypeTable
from .intrin import INTRINSICS
from .ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    Allocate,
    And,
    BinaryOp,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    CmpOp,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Kernel,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    Seq,
    Stmt,
    Sub,
    Var,
    is_float_dtype,
    is_int_dtype,
    seq,
)

_LOOP_FUNCS = {"range": "serial", "serial": "serial", "parallel": "parallel",
               "vectorized": "vectorized", "unrolled": "unrolled"}
_KIND_FUNC = {"serial": "range", "parallel": "parallel", "vectorized": "vectorized",
              "unrolled": "unrolled"}
RESERVED_NAMES = frozenset(
    set(keyword.kwlist) | set(_LOOP_FUNCS) | set(INTRINSICS) | set(DTYPES)
    | {"min", "max", "select", "cast", "alloc", "scope", "Buffer", "kernel", "inf", "nan",
       "output", "module", "function"}
)
"""Names the printer never gives to a variable or buffer."""

_ARITH_PREC = {Add: 6, Sub: 6, Mul: 7, Div: 7, FloorDiv: 7, FloorMod: 7}
_ATOM = 10
MAX_LINE = 100
"""Signatures longer than this print one parameter per line."""
_NEG = 8
_DEFAULT_BY_KIND = {"int": "int64", "float": "float32", "bool": "bool"}


# ================================================================ printing


class _Namer:
    """Printed names of variables and buffers: unique per kernel (``unique=True``) or
    the bare name hints (for messages)."""

    def __init__(self, unique: bool) -> None:
        self.unique = unique
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def name(self, node: Var | Buffer) -> str:
        got = self.names.get(id(node))
        if got is not None:
            return got
        base = re.sub(r"\W", "_", node.name_hint) or "v"
        if base[0].isdigit():
            base = "v_" + base
        if not self.unique:
            return base
        if base in RESERVED_NAMES:
            base = base + "_"
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        self.names[id(node)] = name
        return name


def _float_text(v: float) -> str:
    return repr(v)  # 'inf', '-inf', 'nan' print as the literal names the parser knows


def _lit_kind(e: PrimExpr) -> str:
    if isinstance(e, FloatImm):
        return "float"
    return "bool" if e.dtype == "bool" else "int"


class _Printer:
    def __init__(self, namer: _Namer) -> None:
        self.namer = namer

    # ------------------------------------------------------------ expressions
    def expr(self, e: PrimExpr, expect: str | None = None) -> str:
        return self._expr(e, expect)[0]

    def _imm(self, e: IntImm | FloatImm, expect: str | None) -> tuple[str, int]:
        if isinstance(e, FloatImm):
            text = _float_text(e.value)
        elif e.dtype == "bool":
            text = "True" if e.value else "False"
        else:
            text = str(e.value)
        bare = e.dtype == expect or (expect is None and e.dtype == _DEFAULT_BY_KIND[_lit_kind(e)])
        if bare:
            return text, (_NEG if text.startswith("-") else _ATOM)
        return f"{e.dtype}({text})", _ATOM

    def _pair(self, a: PrimExpr, b: PrimExpr, expect: str | None) -> tuple[
        tuple[str, int], tuple[str, int]
    ]:
        a_imm, b_imm = isinstance(a, IntImm | FloatImm), isinstance(b, IntImm | FloatImm)
        if a_imm and not b_imm:
            return self._expr(a, b.dtype), self._expr(b, expect)
        if b_imm and not a_imm:
            return self._expr(a, expect), self._expr(b, a.dtype)
        return self._expr(a, expect), self._expr(b, expect)

    def _expr(self, e: PrimExpr, expect: str | None) -> tuple[str, int]:
        return _EXPR_TEXT[type(e)](self, e, expect)

    def _var(self, e: Var, expect: str | None) -> tuple[str, int]:
        return self.namer.name(e), _ATOM

    def _buffer_load(self, e: BufferLoad, expect: str | None) -> tuple[str, int]:
        return self._load(e.buffer, e.indices), _ATOM

    def _min_max(self, e: Min | Max, expect: str | None) -> tuple[str, int]:
        (a, _), (b, _) = self._pair(e.a, e.b, expect)
        return f"{'min' if isinstance(e, Min) else 'max'}({a}, {b})", _ATOM

    def _compare(self, e: CmpOp, expect: str | None) -> tuple[str, int]:
        (a, pa), (b, pb) = self._pair(e.a, e.b, None)
        a = f"({a})" if pa <= 4 else a
        b = f"({b})" if pb <= 4 else b
        return f"{a} {e.symbol} {b}", 4

    def _logic(self, e: And | Or, expect: str | None) -> tuple[str, int]:
        prec = 2 if isinstance(e, And) else 1
        (a, pa), (b, pb) = self._pair(e.a, e.b, "bool")
        a = f"({a})" if pa < prec else a
        b = f"({b})" if pb <= prec else b
        return f"{a} {e.symbol} {b}", prec

    def _arith(self, e: BinaryOp, expect: str | None) -> tuple[str, int]:
        prec = _ARITH_PREC[type(e)]
        (a, pa), (b, pb) = self._pair(e.a, e.b, expect)
        a = f"({a})" if pa < prec else a
        b = f"({b})" if pb <= prec else b
        return f"{a} {e.symbol} {b}", prec

    def _not(self, e: Not, expect: str | None) -> tuple[str, int]:
        a, pa = self._expr(e.a, "bool")
        return f"not {f'({a})' if pa < 3 else a}", 3

    def _select(self, e: Select, expect: str | None) -> tuple[str, int]:
        c = self.expr(e.cond, "bool")
        (t, _), (f, _) = self._pair(e.true_value, e.false_value, expect)
        return f"select({c}, {t}, {f})", _ATOM

    def _cast(self, e: Cast, expect: str | None) -> tuple[str, int]:
        if isinstance(e.value, IntImm | FloatImm):
            return f'cast({self.expr(e.value, None)}, "{e.dtype}")', _ATOM
        return f"{e.dtype}({self.expr(e.value, None)})", _ATOM

    def _call(self, e: Call, expect: str | None) -> tuple[str, int]:
        d = INTRINSICS.get(e.name)
        inner = None if d is None or d.kind == "predicate" else expect
        if len(e.args) == 2:
            (a, _), (b, _) = self._pair(e.args[0], e.args[1], inner)
            args = f"{a}, {b}"
        else:
            args = ", ".join(self.expr(a, inner) for a in e.args)
        return f"{e.name}({args})", _ATOM

    def _foreign(self, e: Any, expect: str | None) -> tuple[str, int]:
        return f"<{type(e).__name__}>", _ATOM

    def _load(self, buf: Buffer, indices: tuple[PrimExpr, ...]) -> str:
        idx = ", ".join(self.expr(i, None) for i in indices) if indices else "()"
        return f"{self.namer.name(buf)}[{idx}]"

    def shape(self, shape: tuple[int | Var, ...]) -> str:
        dims = [str(d) if isinstance(d, int) else self.namer.name(d) for d in shape]
        return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"

    # ------------------------------------------------------------ statements
    def stmt(self, s: Stmt, indent: int, out: list[str], tail: bool = True) -> None:
        pad = "    " * indent
        if not tail and type(s) in _SCOPED:
            out.append(pad + "with scope():")
            self.stmt(s, indent + 1, out)
            return
        _STMT_TEXT[type(s)](self, s, indent, pad, out)

    def _for(self, s: For, indent: int, pad: str, out: list[str]) -> None:
        var = self.namer.name(s.var)
        out.append(f"{pad}for {var} in {_KIND_FUNC[s.kind]}({self.expr(s.extent)}):")
        self.stmt(s.body, indent + 1, out)

    def _store(self, s: BufferStore, indent: int, pad: str, out: list[str]) -> None:
        value = self.expr(s.value, s.buffer.dtype)
        out.append(f"{pad}{self._load(s.buffer, s.indices)} = {value}")

    def _let(self, s: Let, indent: int, pad: str, out: list[str]) -> None:
        out.append(f"{pad}{self.namer.name(s.var)} = {self.expr(s.value)}")
        self._tail_body(s.body, indent, out)

    def _allocate(self, s: Allocate, indent: int, pad: str, out: list[str]) -> None:
        b = s.buffer
        out.append(f'{pad}{self.namer.name(b)} = alloc({self.shape(b.shape)}, "{b.dtype}")')
        self._tail_body(s.body, indent, out)

    def _if_stmt(self, s: IfThenElse, indent: int, pad: str, out: list[str]) -> None:
        self._if(s, indent, out, "if")

    def _evaluate(self, s: Evaluate, indent: int, pad: str, out: list[str]) -> None:
        out.append(pad + self.expr(s.value))

    def _seq_stmt(self, s: Seq, indent: int, pad: str, out: list[str]) -> None:
        if not s.stmts:
            out.append(pad + "pass")
        for k, child in enumerate(s.stmts):
            self.stmt(child, indent, out, tail=k == len(s.stmts) - 1)

    def _foreign_stmt(self, s: Any, indent: int, pad: str, out: list[str]) -> None:
        out.append(f"{pad}<{type(s).__name__}>")

    def _tail_body(self, body: Stmt, indent: int, out: list[str]) -> None:
        if isinstance(body, Seq) and not body.stmts:
            return  # nothing follows the binding
        self.stmt(body, indent, out)

    def _if(self, s: IfThenElse, indent: int, out: list[str], word: str) -> None:
        pad = "    " * indent
        out.append(f"{pad}{word} {self.expr(s.cond, 'bool')}:")
        self.stmt(s.then_body, indent + 1, out)
        if s.else_body is None:
            return
        if isinstance(s.else_body, IfThenElse):
            self._if(s.else_body, indent, out, "elif")
            return
        out.append(pad + "else:")
        self.stmt(s.else_body, indent + 1, out)


_EXPR_TEXT: TypeTable[Callable[..., tuple[str, int]]] = TypeTable(
    "kernel text printer", PrimExpr, {
        Var: _Printer._var, (IntImm, FloatImm): _Printer._imm,
        BufferLoad: _Printer._buffer_load, (Min, Max): _Printer._min_max,
        CmpOp: _Printer._compare, (And, Or): _Printer._logic,
        (Add, Sub, Mul, Div, FloorDiv, FloorMod): _Printer._arith, Not: _Printer._not,
        Select: _Printer._select, Cast: _Printer._cast, Call: _Printer._call,
    }, fallback=_Printer._foreign)
"""How each expression prints: (text, precedence)."""

_STMT_TEXT: TypeTable[Callable[..., None]] = TypeTable(
    "kernel text printer", Stmt, {
        Seq: _Printer._seq_stmt, For: _Printer._for, BufferStore: _Printer._store,
        Let: _Printer._let, Allocate: _Printer._allocate, IfThenElse: _Printer._if_stmt,
        Evaluate: _Printer._evaluate,
    }, fallback=_Printer._foreign_stmt)
"""How each statement prints (appending lines to ``out``)."""

_SCOPED = frozenset({Let, Allocate})
"""Statements that bind a name for the rest of their body: one that is not last in
its sequence prints inside ``with scope():``."""


def _literal(value: Any) -> str:
    """A Python literal for an attribute value."""
    if isinstance(value, Attrs | dict):
        items = ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, tuple | list):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, int | float | bool) or value is None:
        return repr(value)
    raise TypeError(f"kernel attribute value {value!r} cannot be printed as a literal")


def print_kernel(name: str, k: Kernel, indent: int = 0) -> str:
    """The kernel ``k`` as ``@kernel def name(...)``, indented by ``indent`` levels.

    Variables and buffers get unique names, so the text parses back to a structurally
    equal kernel.
    """
    p = _Printer(_Namer(unique=True))
    for v in k.size_vars:
        p.namer.name(v)
    params = []
    n_in = len(k.params) - k.num_outputs
    for i, b in enumerate(k.params):
        out_flag = ", output=True" if i >= n_in else ""
        params.append(
            f'{p.namer.name(b)}: Buffer({p.shape(b.shape)}, "{b.dtype}"{out_flag})'
        )
    pad = "    " * indent
    deco = "@kernel" if not k.attrs else f"@kernel(attrs={_literal(k.attrs)})"
    one_line = f"{pad}def {name}({', '.join(params)}):"
    if len(one_line) <= MAX_LINE or not params:
        lines = [pad + deco, one_line]
    else:  # one parameter per line
        lines = [pad + deco, f"{pad}def {name}("]
        lines += [f"{pad}    {p}," for p in params]
        lines.append(f"{pad}):")
    p.stmt(k.body, indent + 1, lines)
    return "\n".join(lines)


def node_text(node: Node) -> str:
    """A short text of a kernel node (expression, statement, buffer or kernel), using
    the variables' name hints; for messages and ``repr``."""
    p = _Printer(_Namer(unique=False))
    if isinstance(node, Kernel):
        return print_kernel("kernel", node)
    if isinstance(node, PrimExpr):
        return p.expr(node)
    if isinstance(node, Stmt):
        out: list[str] = []
        p.stmt(node, 0, out)
        return "\n".join(out)
    if isinstance(node, Buffer):
        return repr(node)
    return f"<{type(node).__name__}>"


def stmt_summary(s: Stmt) -> str:
    """The first line of a statement's text (for error messages), with its line number
    when it was parsed."""
    out: list[str] = []
    _Printer(_Namer(unique=False)).stmt(s, 0, out)
    first = out[0] if out else type(s).__name__
    if isinstance(s, For | IfThenElse) and first.endswith(":"):
        first += " ..."
    where = f" (line {s.span.line})" if s.span is not None and s.span.line else ""
    return f"`{first}`{where}"


# ================================================================ parsing


class KernelParseError(PlaitError, ValueError):
    """A syntax or meaning error in kernel text; names the line and column."""

    def __init__(self, message: str, line: int = 0, col: int = 0, source_line: str = "") -> None:
        self.message, self.line, self.col = message, line, col
        text = f"line {line}, column {col}: {message}" if line else message
        if source_line:
            text += f"\n    {source_line}\n    {' ' * max(col - 1, 0)}^"
        super().__init__(text)


ErrorFn = Callable[[ast.AST, str], NoReturn]


class _Scope:
    """Names visible at a point: a chain of dicts."""

    def __init__(self, names: dict[str, Var | Buffer], parent: _Scope | None = None) -> None:
        self.names, self.parent = names, parent

    def lookup(self, name: str) -> Var | Buffer | None:
        s: _Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def child(self, **names: Var | Buffer) -> _Scope:
        return _Scope(dict(names), self)


_CMP = {ast.Eq: EQ, ast.NotEq: NE, ast.Lt: LT, ast.LtE: LE, ast.Gt: GT, ast.GtE: GE}
_BINOP = {ast.Add: Add, ast.Sub: Sub, ast.Mult: Mul, ast.Div: Div, ast.FloorDiv: FloorDiv,
          ast.Mod: FloorMod}
_NO_VALUE = object()


class _Parser:
    def __init__(
        self,
        error: ErrorFn,
        source_name: str,
        span: Callable[[ast.AST], Span] | None = None,
        literal: Callable[[ast.AST], Any] | None = None,
    ) -> None:
        self.error = error
        self.source_name = source_name
        self._span = span
        self._literal = literal or ast.literal_eval

    def span(self, node: ast.AST) -> Span:
        if self._span is not None:
            return self._span(node)
        return Span(self.source_name, getattr(node, "lineno", 0),
                    getattr(node, "col_offset", -1) + 1)

    # ------------------------------------------------------------ signature
    def kernel(self, fdef: ast.FunctionDef) -> Kernel:
        attrs = self.decorator(fdef)
        if fdef.returns is not None and not (
            isinstance(fdef.returns, ast.Constant) and fdef.returns.value is None
        ):
            self.error(fdef.returns, "a kernel returns nothing: it writes its output buffers")
        a = fdef.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            self.error(fdef, "kernel parameters are plain `name: Buffer(shape, dtype)` entries")
        names: dict[str, Var | Buffer] = {}
        params: list[Buffer] = []
        flags: list[bool] = []
        for arg in a.args:
            if arg.arg in names:
                self.error(arg, f"parameter {arg.arg!r} is declared twice")
            buf, is_out = self.param(arg, names)
            names[arg.arg] = buf
            params.append(buf)
            flags.append(is_out)
        num_out = sum(flags)
        if any(flags[: len(flags) - num_out]):
            first = a.args[flags.index(True)]
            self.error(first, "output buffers (output=True) must come after all inputs")
        body = self.block(fdef.body, _Scope(names), fdef)
        return Kernel(tuple(params), body, num_out, attrs=attrs, span=self.span(fdef))

    def decorator(self, fdef: ast.FunctionDef) -> Attrs:
        for d in fdef.decorator_list:
            if isinstance(d, ast.Name) and d.id == "kernel":
                return Attrs()
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "kernel":
                if d.args:
                    self.error(d, "use @kernel or @kernel(attrs={...})")
                attrs: dict[str, Any] = {}
                for kw in d.keywords:
                    if kw.arg != "attrs":
                        self.error(kw, f"unknown @kernel argument {kw.arg!r}; expected attrs")
                    try:
                        value = self._literal(kw.value)
                    except (ValueError, TypeError, SyntaxError):
                        self.error(kw.value, "kernel attrs must be a literal dict")
                    if not isinstance(value, dict):
                        self.error(kw.value, "kernel attrs must be a literal dict")
                    attrs.update(value)
                return Attrs(attrs)
        self.error(fdef, f"{fdef.name!r} is not decorated with @kernel")

    def param(self, arg: ast.arg, names: dict[str, Var | Buffer]) -> tuple[Buffer, bool]:
        ann = arg.annotation
        if not (isinstance(ann, ast.Call) and isinstance(ann.func, ast.Name)
                and ann.func.id == "Buffer"):
            self.error(arg, f"parameter {arg.arg!r} needs a `Buffer(shape, dtype)` annotation")
        if len(ann.args) != 2:
            self.error(ann, "Buffer takes a shape and a dtype: Buffer((4, n), \"float32\")")
        shape = self.shape(ann.args[0], lambda n, node: self._size_var(n, node, names))
        dtype = self.dtype_str(ann.args[1])
        is_out = False
        for kw in ann.keywords:
            if kw.arg != "output" or not isinstance(kw.value, ast.Constant) \
                    or not isinstance(kw.value.value, bool):
                self.error(kw, "the only Buffer keyword is output=True or output=False")
            is_out = kw.value.value
        return Buffer(arg.arg, shape, dtype), is_out

    def _size_var(self, name: str, node: ast.AST, names: dict[str, Var | Buffer]) -> Var:
        got = names.get(name)
        if got is None:
            got = names[name] = Var(name, "int64")
        if not isinstance(got, Var):
            self.error(node, f"{name!r} is a buffer, not a size")
        return got

    def shape(self, node: ast.AST, resolve: Callable[[str, ast.AST], Var]) -> tuple[int | Var, ...]:
        elts = node.elts if isinstance(node, ast.Tuple | ast.List) else [node]
        dims: list[int | Var] = []
        for e in elts:
            if isinstance(e, ast.Constant) and type(e.value) is int and e.value >= 0:
                dims.append(e.value)
            elif isinstance(e, ast.Name):
                dims.append(resolve(e.id, e))
            else:
                self.error(e, "a dimension is a non-negative int or a size variable name")
        return tuple(dims)

    def dtype_str(self, node: ast.AST) -> str:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            self.error(node, 'a dtype is a string such as "float32"')
        if node.value not in DTYPES:
            self.error(node, f"unknown dtype {node.value!r}; expected one of {', '.join(DTYPES)}")
        return node.value

    # ------------------------------------------------------------ statements
    def block(self, body: list[ast.stmt], scope: _Scope, owner: ast.AST) -> Stmt:
        stmts: list[Stmt] = []
        for k, node in enumerate(body):
            if isinstance(node, ast.Pass):
                continue
            if k == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                continue  # docstring
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                stmts.append(self.binding(node, body[k + 1 :], scope, owner))
                return seq(*stmts)
            if isinstance(node, ast.AnnAssign):
                self.error(node, "write `x = value` without annotation (the dtype comes "
                                 "from the value)")
            stmts.append(self.stmt(node, scope))
        return seq(*stmts)

    def binding(self, node: ast.Assign, rest: list[ast.stmt], scope: _Scope,
                owner: ast.AST) -> Stmt:
        name = node.targets[0].id
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                and value.func.id == "alloc":
            if len(value.args) != 2 or value.keywords:
                self.error(value, 'alloc takes a shape and a dtype: alloc((16,), "float32")')
            shape = self.shape(value.args[0], lambda n, nd: self.index_var(n, nd, scope))
            buf = Buffer(name, shape, self.dtype_str(value.args[1]))
            inner = scope.child(**{name: buf})
            return Allocate(buf, self.block(rest, inner, owner), span=self.span(node))
        e = self.expr(value, None, scope)
        var = Var(name, e.dtype)
        inner = scope.child(**{name: var})
        return Let(var, e, self.block(rest, inner, owner), span=self.span(node))

    def index_var(self, name: str, node: ast.AST, scope: _Scope) -> Var:
        got = scope.lookup(name)
        if not isinstance(got, Var):
            self.error(node, f"{name!r} is not a variable in scope")
        return got

    def stmt(self, node: ast.stmt, scope: _Scope) -> Stmt:
        rule = _PARSE_STMT.get(type(node))
        if rule is None:
            self.error(node, f"{type(node).__name__} statements are not part of the kernel "
                             "syntax")
        return rule(self, node, scope)

    def _store(self, node: ast.Assign, scope: _Scope) -> Stmt:
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Subscript):
            self.error(node, "assign to one buffer element `buf[i] = v` or bind `x = v`")
        buf, idx = self.subscript(node.targets[0], scope)
        value = self.expr(node.value, buf.dtype, scope)
        return BufferStore(buf, idx, value, span=self.span(node))

    def _update(self, node: ast.AugAssign, scope: _Scope) -> Stmt:
        if not isinstance(node.target, ast.Subscript):
            self.error(node, "variables are immutable; accumulate into a buffer element "
                             "(for example a 1-element alloc)")
        op = _BINOP.get(type(node.op))
        if op is None:
            self.error(node, f"unsupported operator {type(node.op).__name__}")
        buf, idx = self.subscript(node.target, scope)
        value = self.expr(node.value, buf.dtype, scope)
        old = BufferLoad(buf, idx)
        return BufferStore(buf, idx, op(old, value), span=self.span(node))

    def _if(self, node: ast.If, scope: _Scope) -> Stmt:
        cond = self.expr(node.test, "bool", scope)
        then = self.block(node.body, scope, node)
        other = self.block(node.orelse, scope, node) if node.orelse else None
        return IfThenElse(cond, then, other, span=self.span(node))

    def _with(self, node: ast.With, scope: _Scope) -> Stmt:
        item = node.items[0] if len(node.items) == 1 else None
        if item is None or item.optional_vars is not None or not (
            isinstance(item.context_expr, ast.Call)
            and isinstance(item.context_expr.func, ast.Name)
            and item.context_expr.func.id == "scope"
            and not item.context_expr.args
        ):
            self.error(node, "the only `with` statement in a kernel is `with scope():`")
        return self.block(node.body, scope, node)

    def _evaluate(self, node: ast.Expr, scope: _Scope) -> Stmt:
        return Evaluate(self.expr(node.value, None, scope), span=self.span(node))

    def _return(self, node: ast.Return, scope: _Scope) -> Stmt:
        self.error(node, "a kernel returns nothing: it writes its output buffers")

    def for_loop(self, node: ast.For, scope: _Scope) -> Stmt:
        if node.orelse:
            self.error(node, "for ... else is not supported")
        if not isinstance(node.target, ast.Name):
            self.error(node.target, "the loop variable must be a single name")
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id in _LOOP_FUNCS):
            self.error(it, "iterate over range(n), parallel(n), vectorized(n) or unrolled(n)")
        if it.keywords or len(it.args) not in (1, 2):
            self.error(it, f"{it.func.id} takes the extent: {it.func.id}(n)")
        if len(it.args) == 2:
            if not (isinstance(it.args[0], ast.Constant) and it.args[0].value == 0):
                self.error(it.args[0], "loops start at 0; write range(n) and offset the index")
            extent_node = it.args[1]
        else:
            extent_node = it.args[0]
        extent = self.expr(extent_node, None, scope)
        var = Var(node.target.id, "int64")
        body = self.block(node.body, scope.child(**{var.name_hint: var}), node)
        return For(var, extent, body, _LOOP_FUNCS[it.func.id], span=self.span(node))

    def subscript(self, node: ast.Subscript, scope: _Scope) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        if not isinstance(node.value, ast.Name):
            self.error(node, "index a buffer by name: buf[i, j]")
        buf = scope.lookup(node.value.id)
        if buf is None:
            self.error(node.value, f"unknown buffer {node.value.id!r}")
        if not isinstance(buf, Buffer):
            self.error(node.value, f"{node.value.id!r} is a scalar variable, not a buffer")
        sl = node.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        for e in elts:
            if isinstance(e, ast.Slice):
                self.error(e, "slices are not supported; index one element")
        return buf, tuple(self.expr(e, None, scope) for e in elts)

    # ------------------------------------------------------------ expressions
    def literal(self, node: ast.AST, scope: _Scope) -> Any:
        """The Python number of a bare literal, or _NO_VALUE."""
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.Name) and node.id in ("inf", "nan") and scope.lookup(node.id) \
                is None:
            return float(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.literal(node.operand, scope)
            if v is not _NO_VALUE and not isinstance(v, bool):
                return -v
        return _NO_VALUE

    def make_literal(self, node: ast.AST, value: Any, expect: str | None) -> PrimExpr:
        if isinstance(value, bool):
            if expect not in (None, "bool"):
                self.error(node, f"bool literal where {expect} is expected")
            return IntImm(value, "bool")
        if expect is None:
            return IntImm(value, "int64") if isinstance(value, int) else FloatImm(value)
        if is_float_dtype(expect):
            return FloatImm(float(value), expect)
        if isinstance(value, int) and is_int_dtype(expect):
            return IntImm(value, expect)
        self.error(node, f"literal {value!r} where {expect} is expected; "
                         "write a typed constant such as float32(1.0), or cast")

    def pair(self, left: ast.AST, right: ast.AST, expect: str | None,
             scope: _Scope) -> tuple[PrimExpr, PrimExpr]:
        lv, rv = self.literal(left, scope), self.literal(right, scope)
        if lv is not _NO_VALUE and rv is _NO_VALUE:
            r = self.expr(right, expect, scope)
            return self.make_literal(left, lv, r.dtype), r
        if rv is not _NO_VALUE and lv is _NO_VALUE:
            lhs = self.expr(left, expect, scope)
            return lhs, self.make_literal(right, rv, lhs.dtype)
        return self.expr(left, expect, scope), self.expr(right, expect, scope)

    def expr(self, node: ast.AST, expect: str | None, scope: _Scope) -> PrimExpr:
        value = self.literal(node, scope)
        if value is not _NO_VALUE:
            return self.make_literal(node, value, expect)
        rule = _PARSE_EXPR.get(type(node))
        if rule is None:
            self.error(node, f"{type(node).__name__} is not part of the kernel expression "
                             "syntax")
        return rule(self, node, expect, scope)

    def _name(self, node: ast.Name, expect: str | None, scope: _Scope) -> PrimExpr:
        got = scope.lookup(node.id)
        if got is None:
            if node.id in ("True", "False"):
                return IntImm(node.id == "True", "bool")
            self.error(node, f"unknown name {node.id!r}")
        if isinstance(got, Buffer):
            self.error(node, f"{node.id!r} is a buffer; load an element: {node.id}[...]")
        return got

    def _load(self, node: ast.Subscript, expect: str | None, scope: _Scope) -> PrimExpr:
        buf, idx = self.subscript(node, scope)
        return BufferLoad(buf, idx)

    def _binary(self, node: ast.BinOp, expect: str | None, scope: _Scope) -> PrimExpr:
        op = _BINOP.get(type(node.op))
        if op is None:
            self.error(node, f"unsupported operator {type(node.op).__name__}"
                             " (use pow(a, b) for powers)")
        a, b = self.pair(node.left, node.right, expect, scope)
        return op(a, b)

    def _unary(self, node: ast.UnaryOp, expect: str | None, scope: _Scope) -> PrimExpr:
        if isinstance(node.op, ast.Not):
            return Not(self.expr(node.operand, "bool", scope))
        if isinstance(node.op, ast.USub):
            operand = self.expr(node.operand, expect, scope)
            return Sub(self.make_literal(node, 0, operand.dtype), operand)
        self.error(node, f"unsupported unary operator {type(node.op).__name__}")

    def _logic(self, node: ast.BoolOp, expect: str | None, scope: _Scope) -> PrimExpr:
        cls = And if isinstance(node.op, ast.And) else Or
        acc = self.expr(node.values[0], "bool", scope)
        for v in node.values[1:]:
            acc = cls(acc, self.expr(v, "bool", scope))
        return acc

    def _compare(self, node: ast.Compare, expect: str | None, scope: _Scope) -> PrimExpr:
        if len(node.ops) != 1:
            self.error(node, "chained comparisons are not supported; use `and`")
        cls = _CMP.get(type(node.ops[0]))
        if cls is None:
            self.error(node, f"unsupported comparison {type(node.ops[0]).__name__}")
        a, b = self.pair(node.left, node.comparators[0], None, scope)
        return cls(a, b)

    def _select(self, node: ast.IfExp, expect: str | None, scope: _Scope) -> PrimExpr:
        cond = self.expr(node.test, "bool", scope)
        t, f = self.pair(node.body, node.orelse, expect, scope)
        return Select(cond, t, f)

    def _constant(self, node: ast.Constant, expect: str | None, scope: _Scope) -> PrimExpr:
        self.error(node, f"{node.value!r} is not a kernel value")

    def call(self, node: ast.Call, expect: str | None, scope: _Scope) -> PrimExpr:
        if not isinstance(node.func, ast.Name):
            self.error(node, "call intrinsics by name, e.g. exp(x)")
        name = node.func.id
        if node.keywords:
            self.error(node, f"{name}() takes no keyword arguments")
        args = node.args

        def need(n: int) -> None:
            if len(args) != n:
                self.error(node, f"{name}() takes {n} argument(s), got {len(args)}")

        if name in ("min", "max"):
            need(2)
            a, b = self.pair(args[0], args[1], expect, scope)
            return (Min if name == "min" else Max)(a, b)
        if name == "select":
            need(3)
            cond = self.expr(args[0], "bool", scope)
            t, f = self.pair(args[1], args[2], expect, scope)
            return Select(cond, t, f)
        if name == "cast":
            need(2)
            return Cast(self.dtype_str(args[1]), self.expr(args[0], None, scope))
        if name in DTYPES:
            need(1)
            value = self.literal(args[0], scope)
            if value is not _NO_VALUE:
                if name == "bool":
                    return IntImm(bool(value), "bool")
                if not is_float_dtype(name) and isinstance(value, float) \
                        and not value.is_integer():
                    self.error(args[0], f"{value!r} is not an integer constant of {name}")
                return FloatImm(value, name) if is_float_dtype(name) else IntImm(int(value), name)
            if isinstance(args[0], ast.Constant) and isinstance(args[0].value, bool):
                return IntImm(args[0].value, name)
            return Cast(name, self.expr(args[0], None, scope))
        d = INTRINSICS.get(name)
        if d is None:
            if name == "alloc":
                self.error(node, 'alloc is a statement: `tmp = alloc((16,), "float32")`')
            self.error(node, f"unknown function {name!r}; intrinsics are "
                             f"{', '.join(sorted(INTRINSICS))}")
        need(d.arity)
        inner = None if d.kind == "predicate" else expect
        if d.arity == 2:
            exprs = list(self.pair(args[0], args[1], inner, scope))
        else:
            exprs = [self.expr(a, inner, scope) for a in args]
        try:
            dtype = d.result_dtype([e.dtype for e in exprs])
        except TypeError as exc:
            self.error(node, str(exc))
        return Call(name, tuple(exprs), dtype)


_PARSE_STMT: dict[type, Callable[..., Stmt]] = {
    ast.For: _Parser.for_loop, ast.Assign: _Parser._store, ast.AugAssign: _Parser._update,
    ast.If: _Parser._if, ast.With: _Parser._with, ast.Expr: _Parser._evaluate,
    ast.Return: _Parser._return,
}
"""The statement each Python statement of a kernel body becomes (any other: an error)."""

_PARSE_EXPR: dict[type, Callable[..., PrimExpr]] = {
    ast.Name: _Parser._name, ast.Subscript: _Parser._load, ast.BinOp: _Parser._binary,
    ast.UnaryOp: _Parser._unary, ast.BoolOp: _Parser._logic, ast.Compare: _Parser._compare,
    ast.IfExp: _Parser._select, ast.Call: _Parser.call, ast.Constant: _Parser._constant,
}
"""The expression each Python expression of a kernel becomes (after literals; any
other: an error)."""


def parse_kernel(fdef: ast.FunctionDef, error: ErrorFn | None = None,
                 source_name: str = "") -> Kernel:
    """The :class:`Kernel` of a ``@kernel``-decorated function definition.

    ``error(node, message)`` must raise; by default a :class:`KernelParseError` naming
    the line and column is raised.
    """

    def default_error(node: ast.AST, message: str) -> NoReturn:
        raise KernelParseError(message, getattr(node, "lineno", 0),
                               getattr(node, "col_offset", -1) + 1)

    return _Parser(error or default_error, source_name).kernel(fdef)


def parse_kernels(source: str, source_name: str = "<kernel>") -> dict[str, Kernel]:
    """Every ``@kernel`` function of ``source`` (top level, or inside ``class`` bodies)
    by name; raises :class:`KernelParseError` with the line, column and source line."""
    lines = source.splitlines()

    def error(node: ast.AST, message: str) -> NoReturn:
        line = getattr(node, "lineno", 0)
        col = getattr(node, "col_offset", -1) + 1
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        raise KernelParseError(message, line, col, src)

    try:
        tree = ast.parse(source, filename=source_name)
    except SyntaxError as exc:
        raise KernelParseError(f"syntax error: {exc.msg}", exc.lineno or 0,
                               exc.offset or 0, (exc.text or "").rstrip("\n")) from None
    out: dict[str, Kernel] = {}
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in reversed(getattr(node, "body", [])):
            if isinstance(child, ast.ClassDef):
                stack.append(child)
            elif isinstance(child, ast.FunctionDef) and _is_kernel_def(child):
                if child.name in out:
                    error(child, f"kernel {child.name!r} is defined twice")
                out[child.name] = _Parser(error, source_name).kernel(child)
    return dict(sorted(out.items(), key=lambda kv: kv[1].span.line if kv[1].span else 0))


def parse_kernel_source(source: str, source_name: str = "<kernel>") -> Kernel:
    """The single ``@kernel`` function of ``source``."""
    kernels = parse_kernels(source, source_name)
    if len(kernels) != 1:
        raise KernelParseError(f"expected exactly one @kernel function, found {len(kernels)}")
    return next(iter(kernels.values()))


def _is_kernel_def(fdef: ast.FunctionDef) -> bool:
    for d in fdef.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Name) and target.id == "kernel":
            return True
    return False


# ================================================================ module text hooks


def _print_hook(name: str, func: Kernel, printer: Any) -> str:
    return print_kernel(name, func)


def _parse_hook(node: ast.FunctionDef, ctx: Any) -> Kernel:
    return _Parser(ctx.error, getattr(ctx, "source", ""), span=ctx.span,
                   literal=ctx.literal).kernel(node)


def register_text_hooks() -> None:
    """Make ``@kernel`` definitions print and parse inside ``@module`` text (through
    :func:`plait.ir.printer.register_func_printer` and
    :func:`plait.ir.parser.register_func_parser`).  Done when :mod:`plait.kernel` is
    imported."""
    from plait.ir.parser import register_func_parser
    from plait.ir.printer import register_func_printer

    from .ir import register_printers

    register_printers(node_text, print_kernel)
    register_func_printer(Kernel, _print_hook)
    register_func_parser("kernel", _parse_hook)
