"""Helpers shared by the op computes: shapes from graph types, broadcasting, axes,
constants with numpy's conversion rules, and index arithmetic."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from plait.ir.symbolic import SymExpr
from plait.ir.types import TensorType, TupleType, Type
from plait.kernel import dsl
from plait.kernel import intrin as I
from plait.kernel.dsl import Tensor
from plait.kernel.intrin import eq, minimum, select
from plait.kernel.ir import (
    Div,
    IntImm,
    PrimExpr,
    Var,
    as_expr,
    const,
    is_float_dtype,
    is_int_dtype,
)

from .registry import ComputeUnsupported

Dim = int | Var
"""A DSL dimension: a static size or an int64 size variable."""


# ---------------------------------------------------------------- shapes and types


def to_dims(shape: Sequence[Any]) -> tuple[Dim, ...]:
    """A graph shape as DSL dims: ints, and size variables for symbolic sizes (the
    interned variables of :func:`plait.kernel.dsl.size_var`).  A size expression
    (``batch * 12``) is a variable of its own, named after its canonical text
    (:func:`expression_size_name`), that the call binds from its argument's shape like
    a plain name: the same expression is the same variable wherever it appears, so the
    computes that compare sizes (broadcasting, concatenation) see them equal."""
    out: list[Dim] = []
    for d in shape:
        if isinstance(d, str):
            out.append(dsl.size_var(d))
        elif type(d) is int:
            out.append(d)
        elif isinstance(d, SymExpr):
            out.append(dsl.size_var(expression_size_name(d)))
        else:
            raise ComputeUnsupported(f"the size {d!r} is not an int, a name or an expression")
    return tuple(out)


def expression_size_name(d: SymExpr) -> str:
    """The size variable of a size expression: its text made an identifier, and a
    digest of it (``batch * 12`` -> ``batch_12_4d3c``)."""
    import hashlib

    text = str(d)
    stem = re.sub(r"\W+", "_", text).strip("_")[:40]
    if not stem[:1].isalpha():
        stem = "size_" + stem
    return f"{stem}_{hashlib.sha256(text.encode()).hexdigest()[:4]}"


def _tensor_type(out_ty: Type, i: int | None) -> TensorType:
    ty = out_ty
    if i is not None:
        if not isinstance(out_ty, TupleType) or i >= len(out_ty.fields):
            raise ComputeUnsupported(f"the result type {out_ty} has no field {i}")
        ty = out_ty.fields[i]
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
        raise ComputeUnsupported(f"the result type {ty} has no known shape and dtype")
    return ty


def out_shape(out_ty: Type, i: int | None = None) -> tuple[Dim, ...]:
    """The DSL shape of the result (field ``i`` of a tuple result)."""
    return to_dims(_tensor_type(out_ty, i).shape)  # type: ignore[arg-type]


def out_dtype(out_ty: Type, i: int | None = None) -> str:
    """The dtype of the result (field ``i`` of a tuple result)."""
    return _tensor_type(out_ty, i).dtype  # type: ignore[return-value]


def num_fields(out_ty: Type) -> int:
    """The number of results of a tuple-typed op."""
    if not isinstance(out_ty, TupleType):
        raise ComputeUnsupported(f"expected a tuple result type, got {out_ty}")
    return len(out_ty.fields)


def same_dim(a: Dim, b: Dim) -> bool:
    """True when two DSL dims are certainly equal (the same int or size variable)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return a is b


def dim_expr(d: Dim | PrimExpr) -> PrimExpr:
    """A dimension as an int64 expression."""
    return IntImm(d) if isinstance(d, int) else d


def prod_expr(dims: Sequence[Dim]) -> PrimExpr:
    """The product of dims as an int64 expression (static factors folded)."""
    static = math.prod(d for d in dims if isinstance(d, int))
    out: PrimExpr | None = None
    for d in dims:
        if not isinstance(d, int):
            out = d if out is None else out * d
    if out is None:
        return IntImm(static)
    return out if static == 1 else out * static


def static_int(d: Dim, what: str) -> int:
    """``d`` as an int, or :class:`ComputeUnsupported` saying that ``what`` must be
    static."""
    if not isinstance(d, int):
        raise ComputeUnsupported(f"{what} is the symbolic size {d.name_hint}; it must be static")
    return d


# ---------------------------------------------------------------- axes


def norm_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """A possibly negative axis as an index in ``[0, ndim)``."""
    if not -ndim <= axis < max(ndim, 1):
        raise ComputeUnsupported(f"{what} {axis} is out of range for rank {ndim}")
    return axis % ndim if ndim else 0


def norm_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """An axis attribute (None: every axis) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted({norm_axis(int(a), ndim) for a in axis}))


def expand(v: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    """An int-or-ints attribute as exactly ``n`` ints (like the numpy reference)."""
    if isinstance(v, int):
        return (v,) * n
    t = tuple(int(x) for x in v)
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise ComputeUnsupported(f"{what}: expected 1 or {n} values, got {t}")
    return t


def expand_padding(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    """A padding attribute as ``2n`` ints: the befores, then the afters."""
    if isinstance(v, int):
        return (v,) * (2 * n)
    t = tuple(int(x) for x in v)
    if len(t) == 2 * n:
        return t
    if len(t) == 1:
        return t * (2 * n)
    if len(t) == n:
        return t + t
    raise ComputeUnsupported(f"padding: expected 1, {n} or {2 * n} values, got {t}")


# ---------------------------------------------------------------- values


def numpy_const(value: Any, dtype: str) -> PrimExpr:
    """``value`` converted to ``dtype`` the way ``np.asarray(value).astype(dtype)``
    does (floats to ints truncate, anything non-zero to bool is True)."""
    with np.errstate(all="ignore"):
        v = np.asarray(value).astype(dtype).item()
    if dtype == "bool":
        return IntImm(bool(v), "bool")
    return const(v, dtype)


def to_dtype(e: PrimExpr, dtype: str) -> PrimExpr:
    """``e`` cast to ``dtype`` (no node when it already has it)."""
    return dsl.cast(e, dtype)


def is_signed_int(dtype: str) -> bool:
    """True for int8 ... int64."""
    return is_int_dtype(dtype) and not dtype.startswith("uint")


def require_float(dtype: str, what: str) -> None:
    """:class:`ComputeUnsupported` unless ``dtype`` is float32 or float64."""
    if not is_float_dtype(dtype):
        raise ComputeUnsupported(f"{what} is computed for floats only, got {dtype}")


def lowest(dtype: str) -> PrimExpr:
    """The smallest value of ``dtype`` (-inf for floats)."""
    if is_float_dtype(dtype):
        return const(-math.inf, dtype)
    if dtype == "bool":
        return IntImm(False, "bool")
    return const(int(np.iinfo(dtype).min), dtype)


# ---------------------------------------------------------------- indexing


def broadcast_index(t: Tensor, idx: Sequence[PrimExpr],
                    shape: Sequence[Dim]) -> tuple[PrimExpr, ...]:
    """The index into ``t`` of the element broadcast to position ``idx`` of a result of
    ``shape`` (numpy rules: align on the right, size-1 dims repeat).  A symbolic
    dimension that may be 1 at run time is decided at run time."""
    return broadcast_dims_index(t.shape, idx, shape, t.name)


def broadcast_dims_index(dims: Sequence[Dim], idx: Sequence[PrimExpr], shape: Sequence[Dim],
                         what: str = "tensor") -> tuple[PrimExpr, ...]:
    """:func:`broadcast_index` for a tensor of shape ``dims`` (named ``what`` in errors)."""
    off = len(shape) - len(dims)
    if off < 0:
        raise ComputeUnsupported(
            f"cannot broadcast {what} of rank {len(dims)} to rank {len(shape)}"
        )
    out: list[PrimExpr] = []
    for k, d in enumerate(dims):
        od, i = shape[off + k], idx[off + k]
        if same_dim(d, od):
            out.append(i)
        elif isinstance(d, int) and d == 1:
            out.append(IntImm(0))
        elif isinstance(d, Var):
            out.append(select(eq(d, 1), 0, i))
        elif isinstance(od, Var):
            out.append(minimum(i, d - 1))
        else:
            raise ComputeUnsupported(
                f"cannot broadcast dimension {k} of {what} (size {d}) to size {od}"
            )
    return tuple(out)


def bload(t: Tensor, idx: Sequence[PrimExpr], shape: Sequence[Dim]) -> PrimExpr:
    """``t`` read at the broadcast of position ``idx`` of a result of ``shape``."""
    return t[broadcast_index(t, idx, shape)]


def linear_index(idx: Sequence[PrimExpr], shape: Sequence[Dim]) -> PrimExpr:
    """The row-major offset of ``idx`` in ``shape``."""
    if not idx:
        return IntImm(0)
    off = as_expr(idx[0], "int64")
    for k in range(1, len(idx)):
        off = off * dim_expr(shape[k]) + idx[k]
    return off


def unravel(k: PrimExpr, shape: Sequence[Dim]) -> tuple[PrimExpr, ...]:
    """The index of row-major offset ``k`` (non-negative) in ``shape``."""
    n = len(shape)
    if n == 0:
        return ()
    out: list[PrimExpr] = [IntImm(0)] * n
    stride: PrimExpr = IntImm(1)
    for d in range(n - 1, -1, -1):
        q = k if _is_one(stride) else Div(k, stride)
        if d == 0:
            out[d] = q
        else:
            size = dim_expr(shape[d])
            out[d] = q - Div(q, size) * size
            stride = size if _is_one(stride) else stride * size
    return tuple(out)


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def checked_index(i: PrimExpr, size: Dim | PrimExpr) -> PrimExpr:
    """An index (any integer dtype, negative counting from the end) as an int64 index
    inside ``[0, size)``; one out of range fails the kernel's call (the ``checked_index``
    intrinsic, plait.kernel.intrin)."""
    return I.checked_index(to_dtype(i, "int64"), to_dtype(dim_expr(size), "int64"))


def reshape_load(x: Tensor, idx: Sequence[PrimExpr], shape: Sequence[Dim]) -> PrimExpr:
    """``x`` read at the element that position ``idx`` of ``x`` reshaped to ``shape``
    holds (row-major).  Leading and trailing dims the two shapes share map directly."""
    src = x.shape
    lead = 0
    while lead < min(len(src), len(shape)) and same_dim(src[lead], shape[lead]):
        lead += 1
    trail = 0
    while (trail < min(len(src), len(shape)) - lead
           and same_dim(src[len(src) - 1 - trail], shape[len(shape) - 1 - trail])):
        trail += 1
    mid_out = shape[lead: len(shape) - trail]
    mid_in = src[lead: len(src) - trail]
    k = linear_index(idx[lead: len(idx) - trail], mid_out)
    mid = unravel(k, mid_in)
    return x[(*idx[:lead], *mid, *idx[len(idx) - trail:])]


def elementwise(shape: Sequence[Dim], fn: Callable[..., PrimExpr], name: str) -> Tensor:
    """A stage of ``shape`` computing ``fn(i0, i1, ...)``."""
    return dsl.compute(tuple(shape), lambda *i: fn(*i), name)


# ---------------------------------------------------------------- layouts


def split_index(layout: str, idx: Sequence[Any]) -> tuple[Any, Any, tuple[Any, ...]]:
    """(batch, channel, spatial...) of an index in ``layout`` (``NCW``, ``NWC``,
    ``NCHW``, ``NHWC``)."""
    if layout[1] == "C":
        return idx[0], idx[1], tuple(idx[2:])
    if layout[-1] == "C":
        return idx[0], idx[-1], tuple(idx[1:-1])
    raise ComputeUnsupported(f"layout {layout!r}")


def join_index(layout: str, n: Any, c: Any, sp: Sequence[Any]) -> tuple[Any, ...]:
    """The index (or shape) in ``layout`` of batch ``n``, channel ``c`` and the
    spatial entries ``sp``."""
    if layout[1] == "C":
        return (n, c, *sp)
    if layout[-1] == "C":
        return (n, *sp, c)
    raise ComputeUnsupported(f"layout {layout!r}")
