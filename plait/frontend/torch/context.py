"""What a converter sees: :class:`NodeContext`, one node of the exported program.

A converter reads the op's arguments by position or schema name (``x(0)`` or
``x("self")`` for a tensor, ``arg("dim", None)`` for anything else, ``operand(i,
dtype)`` for a tensor-or-scalar operand of an elementwise op), what PyTorch inferred for
the result (``out_dtype()``, ``out_shape()``), builds IR with ``call(op, *args,
**attrs)`` and returns the result (a list for several).  The importer checks the result
against PyTorch's shape and dtype, and binds it with a ``match_cast`` when PyTorch
knows more (a symbolic size plait's inference does not derive).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ...ir.builder import IRTypeError, is_atom
from ...ir.expr import Constant, Expr, Tuple, TupleGetItem, Var
from ...ir.types import TensorType
from ...op.registry import OpError, make_call
from ..common import fold
from .dtypes import to_dtype
from .errors import TorchImportError, describe
from .symbolic import SymValue, as_value

if TYPE_CHECKING:
    from .importer import ProgramImporter

_MISSING = object()


class ConversionError(TorchImportError):
    """A node could not be converted (an unsupported argument value, ...)."""


class NodeContext:
    """One call node under conversion, with helpers to read it and to build IR."""

    def __init__(self, importer: ProgramImporter, node: Any, op: str) -> None:
        self.importer = importer
        self.node = node
        self.op = op
        self.name = node.name
        self.source = importer.source_of(node)
        self.span = importer.span_of(node, op, self.source)
        self._schema = getattr(node.target, "_schema", None)
        names = [a.name for a in self._schema.arguments] if self._schema is not None else []
        self._names = names

    # ------------------------------------------------------------------ messages
    def describe(self) -> str:
        return describe(self.name, self.op, self.source)

    def fail(self, message: str) -> NoReturn:
        """Raise a :class:`ConversionError` naming the node."""
        raise ConversionError(f"cannot import the exported program: {self.describe()}: {message}")

    def unsupported(self, what: str) -> NoReturn:
        self.fail(f"{what} is not supported")

    # ------------------------------------------------------------------ arguments
    def _index(self, key: int | str) -> tuple[int, str]:
        if isinstance(key, int):
            return key, self._names[key] if key < len(self._names) else f"arg{key}"
        if key not in self._names:
            raise KeyError(f"{self.op} has no argument {key!r}")
        return self._names.index(key), key

    def raw(self, key: int | str, default: Any = _MISSING) -> Any:
        """The fx argument (nodes unconverted), or the schema default."""
        i, name = self._index(key)
        node = self.node
        if i < len(node.args):
            return node.args[i]
        if name in node.kwargs:
            return node.kwargs[name]
        if default is not _MISSING:
            return default
        if self._schema is not None and i < len(self._schema.arguments):
            a = self._schema.arguments[i]
            if a.has_default_value():
                return a.default_value
        self.fail(f"argument {name!r} is missing")

    def has(self, key: int | str) -> bool:
        """True if argument ``key`` is given and not None."""
        return self.raw(key, None) is not None

    def arg(self, key: int | str, default: Any = _MISSING) -> Any:
        """Argument ``key`` with nodes replaced by their values (IR expressions for
        tensors, ints or :class:`SymValue` for sizes)."""
        return self.importer.resolve(self.raw(key, default))

    def x(self, key: int | str) -> Expr:
        """Tensor argument ``key`` as an IR expression."""
        v = self.arg(key)
        if not isinstance(v, Expr):
            _, name = self._index(key)
            self.fail(f"argument {name!r} is {v!r}, expected a tensor")
        return v

    def int_arg(self, key: int | str, default: Any = _MISSING) -> int:
        v = self.arg(key, default)
        if isinstance(v, SymValue):
            _, name = self._index(key)
            self.fail(f"argument {name!r} is the symbolic size {v.expr}; it must be static")
        return v if v is None else int(v)

    def ints(self, key: int | str, default: Any = _MISSING) -> list[int]:
        """An int-list argument whose entries must be static."""
        v = self.arg(key, default)
        if v is None:
            return None  # type: ignore[return-value]
        v = [v] if isinstance(v, int | SymValue) else list(v)
        if any(isinstance(e, SymValue) for e in v):
            _, name = self._index(key)
            self.fail(f"argument {name!r} ({v}) has symbolic entries; they must be static")
        return [int(e) for e in v]

    def tensors(self, key: int | str) -> list[Expr]:
        """A list-of-tensors argument."""
        v = self.arg(key)
        return [e for e in v]

    # -------------------------------------------------------------------- values
    def ty(self, e: Expr) -> TensorType:
        t = e.ty
        if not isinstance(t, TensorType):
            self.fail(f"expected a tensor, got a value of type {t}")
        return t

    def rank(self, e: Expr) -> int:
        s = self.ty(e).shape
        if s is None:
            self.fail("the rank of an argument is unknown")
        return len(s)

    def dtype(self, e: Expr) -> str:
        d = self.ty(e).dtype
        if d is None:
            self.fail("the dtype of an argument is unknown")
        return d

    def val(self, key: int | str) -> Any:
        """What PyTorch recorded for argument ``key`` (a FakeTensor's metadata, or the
        Python value)."""
        r = self.raw(key)
        return r.meta.get("val") if hasattr(r, "meta") else r

    def out_val(self, i: int | None = None) -> Any:
        v = self.node.meta.get("val")
        return v[i] if i is not None else v

    def out_dtype(self, i: int | None = None) -> str:
        """The dtype PyTorch inferred for the result (``i``: which result)."""
        v = self.out_val(i)
        d = to_dtype(v.dtype)
        if d is None:
            self.fail(f"the result has dtype {v.dtype}, which plait does not support")
        return d

    def out_shape(self, i: int | None = None) -> list[int | str | None]:
        """The result's shape: ints, plait symbolic names, None for a size plait has no
        name for yet."""
        return self.importer.dims_of(self.out_val(i).shape)

    def operand(self, key: int | str, dtype: str) -> Expr:
        """A tensor-or-scalar operand as a tensor of ``dtype`` (a cast if needed; a
        scalar becomes a 0-d constant)."""
        return self.as_tensor(self.arg(key), dtype)

    def as_tensor(self, v: Any, dtype: str) -> Expr:
        if isinstance(v, Expr):
            return self.cast(v, dtype)
        if isinstance(v, SymValue):
            return self.cast(self.importer.sym_tensor(v.expr, self.span), dtype)
        if isinstance(v, bool | int | float | np.number | np.bool_):
            return self.scalar(v, dtype)
        self.fail(f"expected a tensor or a number, got {v!r}")

    # ------------------------------------------------------------------ building
    def scalar(self, value: Any, dtype: str) -> Constant:
        """A 0-d constant of ``dtype``."""
        with np.errstate(all="ignore"):
            return Constant(np.asarray(value).astype(dtype))

    def cast(self, e: Expr, dtype: str) -> Expr:
        if self.dtype(e) == dtype:
            return e
        return self.call("cast", e, dtype=dtype)

    def atom(self, a: Any) -> Expr:
        if isinstance(a, np.ndarray):
            return Constant(a)
        if isinstance(a, list | tuple):
            return self.normalize(Tuple(tuple(self.atom(f) for f in a)))
        if isinstance(a, Tuple):
            fields = tuple(self.atom(f) for f in a.fields)
            if any(x is not y for x, y in zip(fields, a.fields)) or a.ty is None:
                return self.normalize(Tuple(fields))
            return a
        if isinstance(a, Expr):
            return a if is_atom(a) else self.emit(a)
        if isinstance(a, SymValue):
            return self.importer.sym_tensor(a.expr, self.span)
        raise TypeError(f"cannot use {type(a).__name__} as an IR argument")

    def normalize(self, expr: Expr) -> Expr:
        try:
            return self.importer.bb.normalize(expr)
        except IRTypeError as e:
            self.fail(e.detail)
        except (OpError, TypeError, ValueError) as e:
            self.fail(str(e))

    def call(self, op: str, *args: Any, **attrs: Any) -> Expr:
        """A typed call of plait op ``op`` (folded when every argument is a constant),
        bound to a variable."""
        atoms = [self.atom(a) for a in args]
        try:
            c = make_call(op, *atoms, span=self.span, **attrs)
        except (OpError, TypeError, ValueError, KeyError) as e:
            self.fail(f"cannot build {op}: {e}")
        typed = self.normalize(c)
        folded = fold(typed)
        return folded if folded is not None else self.emit(typed)

    def emit(self, expr: Expr) -> Expr:
        """Bind ``expr`` to a fresh variable named after the node."""
        if isinstance(expr, Var | Constant):
            return expr
        return self.importer.emit(expr, self.name, self.span)

    def item(self, expr: Expr, i: int) -> Expr:
        """Field ``i`` of a tuple-valued expression."""
        if isinstance(expr, Tuple):
            return expr.fields[i]
        return self.emit(self.normalize(TupleGetItem(self.atom(expr), i)))

    def dims(self, key: int | str) -> list[int | str | None]:
        """A size-list argument (``view``'s shape, ``full``'s size): ints, plait symbolic
        names, None for a symbolic size plait has no name for."""
        v = self.arg(key)
        v = [v] if isinstance(v, int | SymValue) else list(v)
        return [e if isinstance(e, int) else self.importer.dim_of(e.expr) for e in v]


def normalize_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def normalize_dims(ds: Sequence[int], rank: int) -> list[int]:
    return [normalize_dim(d, max(rank, 1)) for d in ds]


__all__ = ["ConversionError", "NodeContext", "as_value", "normalize_dim", "normalize_dims"]
