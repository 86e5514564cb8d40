"""Nodes of the kernel IR: a small, loop-level language like C.

A :class:`Kernel` takes buffers (``params``) and runs a statement (``body``) over them.
Outputs are ordinary parameters written by the body (destination-passing style); the
last ``num_outputs`` parameters are the outputs.  Buffer dimensions are ints or
*size variables* (int64 :class:`Var`); the size variables of a kernel are those that
appear in its parameter shapes, in order of first appearance (``Kernel.size_vars``).

Statements: :class:`For` (serial, parallel, vectorized or unrolled loops from 0 to
``extent``), :class:`BufferStore`, :class:`Let` (binds a scalar for its body),
:class:`IfThenElse`, :class:`Allocate` (a local scratch buffer for its body),
:class:`Seq` and :class:`Evaluate`.

Scalar expressions (:class:`PrimExpr`): :class:`Var`, :class:`IntImm`,
:class:`FloatImm`, :class:`BufferLoad`, arithmetic (:class:`Add`, :class:`Sub`,
:class:`Mul`, :class:`Div`, :class:`FloorDiv`, :class:`FloorMod`, :class:`Min`,
:class:`Max`), comparisons (:class:`EQ`, :class:`NE`, :class:`LT`, :class:`LE`,
:class:`GT`, :class:`GE`), :class:`And`, :class:`Or`, :class:`Not`, :class:`Select`,
:class:`Cast` and :class:`Call` (a math intrinsic, see :mod:`plait.kernel.intrin`).
Every scalar expression has a dtype (``expr.dtype``; its ``ty`` is ``PrimType(dtype)``).

All nodes are frozen dataclasses deriving from :class:`plait.ir.Node`, so
:func:`plait.ir.structural_equal` and :func:`plait.ir.structural_hash` work on kernels:
loop variables, let variables, size variables and buffers are compared up to renaming.
Python ``==`` is identity; the arithmetic operators (``+``, ``*``, ``<``...) build nodes,
converting Python numbers to constants of the other operand's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from plait.ir.attrs import Attrs
from plait.ir.expr import BaseFunc, Expr, Node, Span
from plait.ir.types import PrimType, check_dtype

from .dispatch import TypeTable

NODE_OPTIONS = dict(frozen=True, eq=False, slots=True, repr=False)
"""The ``dataclass`` options of every kernel IR node (immutable, compared by identity)."""

INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")
"""The kinds of :class:`For` loops."""


def is_int_dtype(dtype: str) -> bool:
    """True for the signed and unsigned integer dtypes (not bool)."""
    return dtype in INT_DTYPES


def is_float_dtype(dtype: str) -> bool:
    """True for float16, float32 and float64."""
    return dtype in FLOAT_DTYPES


_PRINTERS: dict[str, Callable[..., str]] = {}
"""The text format's printers of a node and of a kernel: :mod:`plait.kernel.text`
(which imports this module) registers them when :mod:`plait.kernel` is imported."""


def register_printers(node: Callable[[Node], str], kernel: Callable[[str, Kernel], str]) -> None:
    """Print nodes with ``node`` and kernels with ``kernel`` (``repr``, ``script()`` and
    the error messages that show an expression)."""
    _PRINTERS["node"] = node
    _PRINTERS["kernel"] = kernel


def _text(node: Node) -> str:
    printer = _PRINTERS.get("node")
    return printer(node) if printer is not None else f"<{type(node).__name__}>"


# ---------------------------------------------------------------- expressions


@dataclass(**NODE_OPTIONS)
class PrimExpr(Expr):
    """Base of scalar expressions.  ``ty`` is always ``PrimType(dtype)``."""

    @property
    def dtype(self) -> str:
        """The dtype of the value (a numpy dtype name)."""
        return self.ty.dtype  # type: ignore[union-attr]

    def _set_dtype(self, dtype: str) -> None:
        object.__setattr__(self, "ty", PrimType(dtype))

    def __repr__(self) -> str:
        return _text(self)

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of the kernel expression `{_text(self)}` is not known at "
            "compile time; use select(), logical_and()/logical_or()/logical_not() or an "
            "if statement in the kernel instead of Python's if/and/or/not"
        )

    # Operators build nodes; Python numbers become constants of the other operand's dtype.
    def __add__(self, other: Any) -> PrimExpr:
        return binary_op(Add, self, other)

    def __radd__(self, other: Any) -> PrimExpr:
        return binary_op(Add, other, self)

    def __sub__(self, other: Any) -> PrimExpr:
        return binary_op(Sub, self, other)

    def __rsub__(self, other: Any) -> PrimExpr:
        return binary_op(Sub, other, self)

    def __mul__(self, other: Any) -> PrimExpr:
        return binary_op(Mul, self, other)

    def __rmul__(self, other: Any) -> PrimExpr:
        return binary_op(Mul, other, self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return binary_op(Div, self, other)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        return binary_op(Div, other, self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return binary_op(FloorDiv, self, other)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        return binary_op(FloorDiv, other, self)

    def __mod__(self, other: Any) -> PrimExpr:
        return binary_op(FloorMod, self, other)

    def __rmod__(self, other: Any) -> PrimExpr:
        return binary_op(FloorMod, other, self)

    def __neg__(self) -> PrimExpr:
        return binary_op(Sub, 0, self)

    def __lt__(self, other: Any) -> PrimExpr:
        return binary_op(LT, self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return binary_op(LE, self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return binary_op(GT, self, other)

    def __ge__(self, other: Any) -> PrimExpr:
        return binary_op(GE, self, other)



@dataclass(**NODE_OPTIONS, init=False)
class Var(PrimExpr):
    """A scalar variable: a loop variable, a let variable or a size variable.

    ``Var("i")`` is an int64 variable; ``Var("x", "float32")`` a float one.  Variables
    are compared up to renaming by the structural equality.
    """

    name_hint: str = "v"
    _var_class: ClassVar[bool] = True

    def __init__(self, name_hint: str = "v", dtype: str = "int64", *, span: Span | None = None):
        object.__setattr__(self, "name_hint", name_hint)
        object.__setattr__(self, "ty", PrimType(check_dtype(dtype, f"variable {name_hint!r}")))
        object.__setattr__(self, "span", span)

    @property
    def name(self) -> str:
        return self.name_hint


@dataclass(**NODE_OPTIONS, init=False)
class IntImm(PrimExpr):
    """An integer (or bool) constant: ``IntImm(3)``, ``IntImm(1, "int32")``,
    ``IntImm(True, "bool")``."""

    value: int = 0

    def __init__(self, value: int | bool = 0, dtype: str = "int64", *, span: Span | None = None):
        dtype = check_dtype(dtype, "integer constant")
        if not (is_int_dtype(dtype) or dtype == "bool"):
            raise TypeError(f"IntImm needs an integer or bool dtype, got {dtype!r}")
        if isinstance(value, float) and not value.is_integer():
            raise TypeError(f"IntImm value must be an integer, got {value!r}")
        v = int(value)
        if dtype == "bool":
            v = 1 if v else 0
        object.__setattr__(self, "value", v)
        object.__setattr__(self, "ty", PrimType(dtype))
        object.__setattr__(self, "span", span)


@dataclass(**NODE_OPTIONS, init=False)
class FloatImm(PrimExpr):
    """A floating-point constant: ``FloatImm(0.5)`` (float32), ``FloatImm(1, "float64")``."""

    value: float = 0.0

    def __init__(self, value: float = 0.0, dtype: str = "float32", *, span: Span | None = None):
        dtype = check_dtype(dtype, "float constant")
        if not is_float_dtype(dtype):
            raise TypeError(f"FloatImm needs a float dtype, got {dtype!r}")
        object.__setattr__(self, "value", float(value))
        object.__setattr__(self, "ty", PrimType(dtype))
        object.__setattr__(self, "span", span)


@dataclass(**NODE_OPTIONS)
class BufferLoad(PrimExpr):
    """``buffer[indices]``: an element of a buffer."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "indices", _index_tuple(self.indices))
        self._set_dtype(self.buffer.dtype)


@dataclass(**NODE_OPTIONS)
class BinaryOp(PrimExpr):
    """Base of two-operand expressions.  Arithmetic keeps the operands' dtype
    (they must agree; the verifier checks); comparisons produce bool."""

    a: PrimExpr
    b: PrimExpr
    symbol: ClassVar[str] = "?"

    def __post_init__(self) -> None:
        self._set_dtype(self.a.dtype)


@dataclass(**NODE_OPTIONS)
class Add(BinaryOp):
    """``a + b``."""

    symbol: ClassVar[str] = "+"


@dataclass(**NODE_OPTIONS)
class Sub(BinaryOp):
    """``a - b``."""

    symbol: ClassVar[str] = "-"


@dataclass(**NODE_OPTIONS)
class Mul(BinaryOp):
    """``a * b``."""

    symbol: ClassVar[str] = "*"


@dataclass(**NODE_OPTIONS)
class Div(BinaryOp):
    """``a / b``: true division for floats; for integers, division truncating toward
    zero (C semantics)."""

    symbol: ClassVar[str] = "/"


@dataclass(**NODE_OPTIONS)
class FloorDiv(BinaryOp):
    """``a // b``: division rounding toward minus infinity (numpy semantics)."""

    symbol: ClassVar[str] = "//"


@dataclass(**NODE_OPTIONS)
class FloorMod(BinaryOp):
    """``a % b``: the remainder of :class:`FloorDiv`, with the sign of ``b`` (numpy
    semantics)."""

    symbol: ClassVar[str] = "%"


@dataclass(**NODE_OPTIONS)
class Min(BinaryOp):
    """``min(a, b)``; a NaN operand gives NaN (like ``np.minimum``)."""

    symbol: ClassVar[str] = "min"


@dataclass(**NODE_OPTIONS)
class Max(BinaryOp):
    """``max(a, b)``; a NaN operand gives NaN (like ``np.maximum``)."""

    symbol: ClassVar[str] = "max"


@dataclass(**NODE_OPTIONS)
class CmpOp(BinaryOp):
    """Base of comparisons; the result is bool."""

    def __post_init__(self) -> None:
        self._set_dtype("bool")


@dataclass(**NODE_OPTIONS)
class EQ(CmpOp):
    """``a == b``."""

    symbol: ClassVar[str] = "=="


@dataclass(**NODE_OPTIONS)
class NE(CmpOp):
    """``a != b``."""

    symbol: ClassVar[str] = "!="


@dataclass(**NODE_OPTIONS)
class LT(CmpOp):
    """``a < b``."""

    symbol: ClassVar[str] = "<"


@dataclass(**NODE_OPTIONS)
class LE(CmpOp):
    """``a <= b``."""

    symbol: ClassVar[str] = "<="


@dataclass(**NODE_OPTIONS)
class GT(CmpOp):
    """``a > b``."""

    symbol: ClassVar[str] = ">"


@dataclass(**NODE_OPTIONS)
class GE(CmpOp):
    """``a >= b``."""

    symbol: ClassVar[str] = ">="


@dataclass(**NODE_OPTIONS)
class And(BinaryOp):
    """Logical ``a and b`` of two bools."""

    symbol: ClassVar[str] = "and"

    def __post_init__(self) -> None:
        self._set_dtype("bool")


@dataclass(**NODE_OPTIONS)
class Or(BinaryOp):
    """Logical ``a or b`` of two bools."""

    symbol: ClassVar[str] = "or"

    def __post_init__(self) -> None:
        self._set_dtype("bool")


@dataclass(**NODE_OPTIONS)
class Not(PrimExpr):
    """Logical ``not a`` of a bool."""

    a: PrimExpr

    def __post_init__(self) -> None:
        self._set_dtype("bool")


@dataclass(**NODE_OPTIONS)
class Select(PrimExpr):
    """``true_value if cond else false_value``; only the chosen value is evaluated."""

    cond: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr

    def __post_init__(self) -> None:
        self._set_dtype(self.true_value.dtype)


@dataclass(**NODE_OPTIONS, init=False)
class Cast(PrimExpr):
    """``value`` converted to ``dtype`` (C conversion rules; to bool means ``!= 0``)."""

    value: PrimExpr = None  # type: ignore[assignment]

    def __init__(self, dtype: str, value: PrimExpr, *, span: Span | None = None):
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "ty", PrimType(check_dtype(dtype, "cast")))
        object.__setattr__(self, "span", span)


@dataclass(**NODE_OPTIONS, init=False)
class Call(PrimExpr):
    """A math intrinsic by name, e.g. ``Call("exp", (x,), "float32")``; the names and
    their signatures are listed in :data:`plait.kernel.intrin.INTRINSICS`.  Prefer the
    helper functions there (``exp(x)``), which infer the dtype."""

    name: str = ""
    args: tuple[PrimExpr, ...] = ()

    def __init__(
        self, name: str, args: tuple[PrimExpr, ...] | list[PrimExpr], dtype: str,
        *, span: Span | None = None,
    ):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "args", tuple(args))
        object.__setattr__(self, "ty", PrimType(check_dtype(dtype, f"call of {name}")))
        object.__setattr__(self, "span", span)


# ---------------------------------------------------------------- buffers


@dataclass(**NODE_OPTIONS, init=False)
class Buffer(Node):
    """A typed, C-contiguous n-d array: ``Buffer("a", (4, n), "float32")``.

    Each dimension is an int or an int64 size :class:`Var`.  Buffers are kernel
    parameters or local scratch (:class:`Allocate`); like variables they are compared up
    to renaming.
    """

    name_hint: str = "buf"
    shape: tuple[int | Var, ...] = ()
    dtype: str = "float32"
    _var_class: ClassVar[bool] = True

    def __init__(self, name_hint: str, shape: tuple[int | Var, ...] | list[int | Var], dtype: str):
        shape = tuple(shape)
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, int | Var):
                raise TypeError(
                    f"buffer {name_hint!r}: a dimension must be an int or a size Var, got {d!r}"
                )
            if isinstance(d, int) and d < 0:
                raise TypeError(f"buffer {name_hint!r}: negative dimension {d}")
            if isinstance(d, Var) and d.dtype != "int64":
                raise TypeError(
                    f"buffer {name_hint!r}: size variable {d.name_hint!r} must be int64, "
                    f"got {d.dtype}"
                )
        object.__setattr__(self, "name_hint", name_hint)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", check_dtype(dtype, f"buffer {name_hint!r}"))

    @property
    def name(self) -> str:
        return self.name_hint

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is an int."""
        return all(isinstance(d, int) for d in self.shape)

    def __getitem__(self, indices: Any) -> BufferLoad:
        """``buf[i, j]`` builds a :class:`BufferLoad` (ints become int64 constants)."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(as_expr(i, "int64") for i in indices))

    def store(self, indices: Any, value: Any) -> BufferStore:
        """A :class:`BufferStore` of ``value`` (numbers become constants of the buffer's
        dtype) at ``indices``."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferStore(
            self, tuple(as_expr(i, "int64") for i in indices), as_expr(value, self.dtype)
        )

    def __repr__(self) -> str:
        dims = ", ".join(d.name_hint if isinstance(d, Var) else str(d) for d in self.shape)
        return f"Buffer({self.name_hint!r}, ({dims}{',' if len(self.shape) == 1 else ''}), " \
            f"{self.dtype!r})"



# ---------------------------------------------------------------- statements


@dataclass(**NODE_OPTIONS)
class Stmt(Node):
    """Base of statements.  ``span`` says where a parsed statement came from."""

    span: Span | None = field(default=None, kw_only=True)

    def __repr__(self) -> str:
        return _text(self)


@dataclass(**NODE_OPTIONS)
class For(Stmt):
    """``for var in kind(extent): body``: ``var`` (int64) runs from 0 to ``extent - 1``.

    ``kind`` is ``serial``, ``parallel`` (iterations may run on different threads: they
    must be independent), ``vectorized`` (iterations may run in SIMD lanes: no
    loop-carried dependences) or ``unrolled``.
    """

    var: Var
    extent: PrimExpr
    body: Stmt
    kind: str = "serial"
    _def_fields: ClassVar[tuple[str, ...]] = ("var",)

    def __post_init__(self) -> None:
        if self.kind not in LOOP_KINDS:
            raise ValueError(f"unknown loop kind {self.kind!r}; expected one of {LOOP_KINDS}")
        if isinstance(self.extent, int):
            object.__setattr__(self, "extent", IntImm(self.extent))


@dataclass(**NODE_OPTIONS)
class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]
    value: PrimExpr

    def __post_init__(self) -> None:
        object.__setattr__(self, "indices", _index_tuple(self.indices))
        if not isinstance(self.value, PrimExpr):
            object.__setattr__(self, "value", as_expr(self.value, self.buffer.dtype))


@dataclass(**NODE_OPTIONS)
class Let(Stmt):
    """``var = value`` for the statement ``body`` (the variable is immutable)."""

    var: Var
    value: PrimExpr
    body: Stmt
    _def_fields: ClassVar[tuple[str, ...]] = ("var",)


@dataclass(**NODE_OPTIONS)
class IfThenElse(Stmt):
    """``if cond: then_body else: else_body`` (``else_body`` may be None)."""

    cond: PrimExpr
    then_body: Stmt
    else_body: Stmt | None = None


@dataclass(**NODE_OPTIONS)
class Allocate(Stmt):
    """A local scratch ``buffer`` that exists during ``body``.  Inside a parallel loop
    each iteration gets its own."""

    buffer: Buffer
    body: Stmt
    _def_fields: ClassVar[tuple[str, ...]] = ("buffer",)


@dataclass(**NODE_OPTIONS)
class Seq(Stmt):
    """Statements run in order.  Nested sequences are flattened on construction."""

    stmts: tuple[Stmt, ...] = ()

    def __post_init__(self) -> None:
        flat: list[Stmt] = []
        for s in self.stmts:
            if isinstance(s, Seq):
                flat.extend(s.stmts)
            else:
                flat.append(s)
        object.__setattr__(self, "stmts", tuple(flat))


@dataclass(**NODE_OPTIONS)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (for example an intrinsic call)."""

    value: PrimExpr


def seq(*stmts: Stmt) -> Stmt:
    """The canonical sequence of ``stmts``: nested sequences flattened, a single
    statement returned as is, none as an empty :class:`Seq`."""
    flat = Seq(tuple(stmts)).stmts
    return flat[0] if len(flat) == 1 else Seq(flat)


# ---------------------------------------------------------------- kernels


def _collect_size_vars(params: tuple[Buffer, ...]) -> tuple[Var, ...]:
    seen: dict[int, Var] = {}
    for p in params:
        if isinstance(p, Buffer):
            for d in p.shape:
                if isinstance(d, Var) and id(d) not in seen:
                    seen[id(d)] = d
    return tuple(seen.values())


@dataclass(**NODE_OPTIONS)
class Kernel(BaseFunc):
    """A loop-level function over buffers, held in an IRModule by name.

    ``params`` are the buffers (inputs first, then the ``num_outputs`` outputs, which the
    body writes: destination-passing style); ``body`` the statement.  ``size_vars`` is
    derived: the size variables of the parameter shapes in order of first appearance
    (in C they are passed as int64 values, see ``docs/kernels.md``).
    """

    size_vars: tuple[Var, ...] = field(default=(), kw_only=True)
    params: tuple[Buffer, ...] = ()
    body: Stmt = None  # type: ignore[assignment]
    num_outputs: int = 1
    _def_fields: ClassVar[tuple[str, ...]] = ("size_vars", "params")

    def __post_init__(self) -> None:
        BaseFunc.__post_init__(self)
        if not isinstance(self.params, tuple):
            object.__setattr__(self, "params", tuple(self.params))
        if self.body is None:
            object.__setattr__(self, "body", Seq(()))
        object.__setattr__(self, "size_vars", _collect_size_vars(self.params))

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        """The input buffers (all parameters but the last ``num_outputs``)."""
        return self.params[: len(self.params) - self.num_outputs]

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        """The output buffers (the last ``num_outputs`` parameters)."""
        return self.params[len(self.params) - self.num_outputs :]

    def script(self, name: str = "kernel") -> str:
        """The kernel in the text format, as ``@kernel def <name>(...)``."""
        return _PRINTERS["kernel"](name, self)

    def __repr__(self) -> str:
        return self.script(str(self.attrs.get("global_symbol", "kernel")))

    def __str__(self) -> str:
        return self.__repr__()


def make_kernel(
    params: list[Buffer] | tuple[Buffer, ...],
    body: Stmt,
    num_outputs: int = 1,
    attrs: Attrs | dict[str, Any] | None = None,
) -> Kernel:
    """Build a :class:`Kernel` (``attrs`` optional)."""
    return Kernel(tuple(params), body, num_outputs, attrs=Attrs(attrs or {}))


# ---------------------------------------------------------------- helpers


def as_expr(value: Any, dtype: str | None = None) -> PrimExpr:
    """``value`` as a :class:`PrimExpr`: expressions pass through; Python and numpy
    numbers become constants of ``dtype`` (default int64 for ints, float32 for floats,
    bool for bools)."""
    if isinstance(value, PrimExpr):
        return value
    if hasattr(value, "item") and not isinstance(value, Node):  # numpy scalar
        value = value.item()
    if isinstance(value, bool):
        if dtype is not None and dtype != "bool":
            return const(int(value), dtype)
        return IntImm(value, "bool")
    if isinstance(value, int):
        return const(value, dtype or "int64")
    if isinstance(value, float):
        if dtype is not None and not is_float_dtype(dtype):
            if value.is_integer() and dtype != "bool":
                return IntImm(int(value), dtype)
            raise TypeError(f"float constant {value!r} used where {dtype} is expected; cast it")
        return FloatImm(value, dtype or "float32")
    raise TypeError(f"cannot use {value!r} ({type(value).__name__}) as a kernel expression")


def const(value: int | float | bool, dtype: str) -> PrimExpr:
    """A constant of ``dtype``: an :class:`IntImm` or a :class:`FloatImm`."""
    dtype = check_dtype(dtype, "constant")  # type: ignore[assignment]
    if is_float_dtype(dtype):
        return FloatImm(float(value), dtype)
    if isinstance(value, float) and not value.is_integer():
        raise TypeError(f"constant {value!r} is not an integer but dtype is {dtype}")
    return IntImm(int(value), dtype)


def _index_tuple(indices: Any) -> tuple[PrimExpr, ...]:
    if not isinstance(indices, tuple | list):
        indices = (indices,)
    return tuple(i if isinstance(i, PrimExpr) else as_expr(i, "int64") for i in indices)


def binary_op(cls: type[BinaryOp], a: Any, b: Any) -> PrimExpr:
    """``cls(a, b)``, a Python number on either side taking the other's dtype; a dtype
    mismatch is a ``TypeError`` naming the expression."""
    if not isinstance(a, PrimExpr):
        a = as_expr(a, b.dtype)
    elif not isinstance(b, PrimExpr):
        b = as_expr(b, a.dtype)
    if a.dtype != b.dtype and cls not in (And, Or):
        raise TypeError(
            f"dtype mismatch in `{_text(a)} {cls.symbol} {_text(b)}`: {a.dtype} vs {b.dtype}; "
            "use cast() to convert one side"
        )
    return cls(a, b)


def _no_children(x: Any) -> tuple:
    return ()


_EXPR_CHILDREN: TypeTable[Callable[[Any], tuple[PrimExpr, ...]]] = TypeTable(
    "kernel expression children", PrimExpr, {
        BinaryOp: lambda e: (e.a, e.b), BufferLoad: lambda e: e.indices,
        Call: lambda e: e.args, Not: lambda e: (e.a,),
        Select: lambda e: (e.cond, e.true_value, e.false_value), Cast: lambda e: (e.value,),
        (Var, IntImm, FloatImm): _no_children,
    }, fallback=_no_children)

_STMT_CHILDREN: TypeTable[Callable[[Any], tuple[Stmt, ...]]] = TypeTable(
    "kernel statement children", Stmt, {
        Seq: lambda s: s.stmts, (For, Let, Allocate): lambda s: (s.body,),
        IfThenElse: lambda s: (s.then_body,) if s.else_body is None
        else (s.then_body, s.else_body),
        (BufferStore, Evaluate): _no_children,
    }, fallback=_no_children)

_STMT_EXPRS: TypeTable[Callable[[Any], tuple[PrimExpr, ...]]] = TypeTable(
    "kernel statement expressions", Stmt, {
        For: lambda s: (s.extent,), Let: lambda s: (s.value,), IfThenElse: lambda s: (s.cond,),
        BufferStore: lambda s: (*s.indices, s.value), Evaluate: lambda s: (s.value,),
        (Seq, Allocate): _no_children,
    }, fallback=_no_children)


def expr_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The operand expressions of ``e`` (none for a leaf), for iterative walks."""
    return _EXPR_CHILDREN[type(e)](e)


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside ``s``, for iterative walks."""
    return _STMT_CHILDREN[type(s)](s)


def stmt_exprs(s: Stmt) -> tuple[PrimExpr, ...]:
    """The expressions ``s`` holds itself (a loop's extent, a store's indices and
    value...; not those of the statements inside it), for iterative walks."""
    return _STMT_EXPRS[type(s)](s)
