"""Types of the graph IR.

Every expression carries a type after normalization.  Types are immutable values
compared with ``==`` (they hold no variables).  A tensor shape entry is a
:data:`~plait.ir.symbolic.Dim`: an ``int``, a symbolic size written as a string
(``"n"``), or an integer expression over sizes in canonical form (``n * 12``,
``(h + 1) // 2 - 1``; see :mod:`plait.ir.symbolic`); a tensor whose rank or dtype is not
known yet has ``shape=None`` or ``dtype=None``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .symbolic import Dim, SymExpr, bounds, free_symbols

MAX_DIM = 2**63 - 1
"""The largest static dimension and element count of a tensor: sizes are int64 in the
VM, in numpy and in the generated C code."""

DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
"""The element types plait knows; their names are numpy's."""


def check_dtype(dtype: str | None, where: str = "") -> str | None:
    """Return ``dtype`` as a canonical name, or raise a ``TypeError`` naming ``where``."""
    if dtype is None:
        return None
    if not isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            dtype = str(dtype)
    if dtype not in DTYPES:
        place = f" in {where}" if where else ""
        raise TypeError(f"unknown dtype {dtype!r}{place}; expected one of {', '.join(DTYPES)}")
    return dtype


def _too_big(shape: tuple[Dim, ...]) -> None:
    big = [d for d in shape if isinstance(d, int) and d > MAX_DIM]
    if big:
        raise TypeError(f"tensor dimension {big[0]} does not fit in int64 (the largest "
                        f"size is 2**63-1 = {MAX_DIM}); shape {shape}")
    raise TypeError(f"a tensor of shape {shape} has more than 2**63-1 elements (sizes "
                    "are int64)")


class Type:
    """Base class of all graph IR types."""

    __slots__ = ()

    def __str__(self) -> str:  # pragma: no cover - overridden
        return repr(self)


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor: ``shape`` is a tuple of dims (or None if the rank is unknown),
    ``dtype`` a dtype name (or None if unknown)."""

    shape: tuple[Dim, ...] | None = None
    dtype: str | None = None

    def __post_init__(self) -> None:
        if self.shape is not None:
            if not isinstance(self.shape, tuple):
                object.__setattr__(self, "shape", tuple(self.shape))
            count = 1
            for d in self.shape:
                if type(d) is SymExpr:
                    if bounds(d)[1] < 0:
                        raise TypeError(f"tensor dimension {d} is negative for every size")
                    continue
                if isinstance(d, bool) or not isinstance(d, int | str):
                    raise TypeError(f"tensor dimension must be an int or a name (or a size "
                                    f"expression), got {d!r}")
                if isinstance(d, int):
                    if d < 0:
                        raise TypeError(f"tensor dimension must be non-negative, got {d}")
                    if d > MAX_DIM:
                        _too_big(self.shape)
                    count *= d
                elif not d.isidentifier():
                    raise TypeError(f"symbolic dimension must be an identifier, got {d!r}")
            if count > MAX_DIM:
                _too_big(self.shape)
        if self.dtype is not None:
            object.__setattr__(self, "dtype", check_dtype(self.dtype))

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when the rank, every dimension and the dtype are known."""
        return (
            self.shape is not None
            and self.dtype is not None
            and all(isinstance(d, int) for d in self.shape)
        )

    def __str__(self) -> str:
        if self.shape is None:
            shape = "None"
        else:
            inner = ", ".join(str(d) for d in self.shape)
            shape = f"({inner},)" if len(self.shape) == 1 else f"({inner})"
        dtype = "None" if self.dtype is None else f'"{self.dtype}"'
        return f"Tensor({shape}, {dtype})"


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """A tuple of values of the given field types."""

    fields: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.fields, tuple):
            object.__setattr__(self, "fields", tuple(self.fields))

    def __str__(self) -> str:
        return "Tuple(" + ", ".join(str(f) for f in self.fields) + ")"


@dataclass(frozen=True, slots=True)
class ShapeType(Type):
    """A shape value (a tuple of sizes); ``ndim`` is None when unknown."""

    ndim: int | None = None

    def __str__(self) -> str:
        return "Shape()" if self.ndim is None else f"Shape({self.ndim})"


@dataclass(frozen=True, slots=True)
class PrimType(Type):
    """A scalar of the given dtype, held outside any tensor."""

    dtype: str = "int64"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", check_dtype(self.dtype))

    def __str__(self) -> str:
        return f'Prim("{self.dtype}")'


@dataclass(frozen=True, slots=True)
class ObjectType(Type):
    """Any runtime value (strings, opaque handles, values of unknown type)."""

    def __str__(self) -> str:
        return "Object"


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    """The type of a function: its parameter types and its return type."""

    params: tuple[Type, ...] = ()
    ret: Type = ObjectType()

    def __post_init__(self) -> None:
        if not isinstance(self.params, tuple):
            object.__setattr__(self, "params", tuple(self.params))

    def __str__(self) -> str:
        return "Callable((" + "".join(f"{p}, " for p in self.params) + f"), {self.ret})"


OBJECT = ObjectType()


def tensor(
    shape: tuple[Dim, ...] | list[Dim] | None = None, dtype: str | None = None
) -> TensorType:
    """Shorthand for ``TensorType(shape, dtype)``."""
    return TensorType(None if shape is None else tuple(shape), dtype)


def symbolic_dims(ty: Type) -> set[str]:
    """Every symbolic dimension name used anywhere inside ``ty``."""
    out: set[str] = set()
    stack = [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, TensorType) and t.shape is not None:
            for d in t.shape:
                if type(d) is str:
                    out.add(d)
                elif type(d) is SymExpr:
                    out |= free_symbols(d)
        elif isinstance(t, TupleType):
            stack.extend(t.fields)
        elif isinstance(t, FuncType):
            stack.extend(t.params)
            stack.append(t.ret)
    return out
