"""Shared type-inference helpers: broadcasting, dtype rules, axes."""

from __future__ import annotations

from ..ir.types import Dim, TensorType, TupleType, Type
from .registry import InferContext

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def tensor_arg(ctx: InferContext, i: int) -> TensorType:
    """Argument ``i`` as a tensor type, or a clear error."""
    t = ctx.types[i]
    if not isinstance(t, TensorType):
        ctx.fail(
            f"argument {i} ({ctx.op.input_name(i)}) of {ctx.op.name} must be a tensor, got {t}",
            arg=i,
        )
    return t


def tuple_arg(ctx: InferContext, i: int) -> TupleType:
    t = ctx.types[i]
    if not isinstance(t, TupleType):
        ctx.fail(
            f"argument {i} ({ctx.op.input_name(i)}) of {ctx.op.name} must be a tuple, got {t}",
            arg=i,
        )
    return t


def broadcast_dim(a: Dim, b: Dim) -> Dim | None:
    """The broadcast of two dimensions, or None if they can never broadcast."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return None
    # A symbolic size against a different size: the program is only valid where they
    # agree (or one of them is 1 at run time); keep the static or the first name.
    return b if isinstance(b, int) else a


def broadcast_shapes(
    ctx: InferContext, shapes: list[tuple[Dim, ...] | None]
) -> tuple[Dim, ...] | None:
    """Numpy-style broadcast of several shapes; None if any rank is unknown."""
    if any(s is None for s in shapes):
        return None
    ndim = max(len(s) for s in shapes)  # type: ignore[arg-type]
    out: list[Dim] = []
    for k in range(ndim):
        dim: Dim = 1
        for idx, s in enumerate(shapes):
            assert s is not None
            j = k - (ndim - len(s))
            if j < 0:
                continue
            nd = broadcast_dim(dim, s[j])
            if nd is None:
                ctx.fail(
                    f"{ctx.op.name}: cannot broadcast dimension {s[j]} of argument {idx} "
                    f"(shape {tuple(s)}) against {dim}; the shapes are "
                    + ", ".join(str(tuple(x)) for x in shapes if x is not None),
                    arg=idx,
                )
            dim = nd
        out.append(dim)
    return tuple(out)


def same_dtype(ctx: InferContext, types: list[TensorType], first: int = 0) -> str | None:
    """The common dtype of the tensors (arguments ``first``...), or an error naming the
    argument that differs."""
    dtype = None
    for i, t in enumerate(types):
        if t.dtype is None:
            continue
        if dtype is None:
            dtype = t.dtype
        elif t.dtype != dtype:
            ctx.fail(
                f"{ctx.op.name}: argument {first + i} ({ctx.op.input_name(first + i)}) has dtype "
                f"{t.dtype}, expected {dtype} like the arguments before it (insert a cast)",
                arg=first + i,
            )
    return dtype


def normalize_axis(ctx: InferContext, axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        ctx.fail(f"{ctx.op.name}: {what} {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0


def normalize_axes(ctx: InferContext, axes: tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    """Sorted non-negative axes (all axes if ``axes`` is None); duplicates rejected."""
    if axes is None:
        return tuple(range(ndim))
    out = sorted(normalize_axis(ctx, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        ctx.fail(f"{ctx.op.name}: repeated axis in {axes}")
    return tuple(out)


def infer_unary(ctx: InferContext) -> Type:
    """Same type as the single tensor argument."""
    return tensor_arg(ctx, 0)


def infer_float_unary(ctx: InferContext) -> Type:
    """Same type as the argument, which must be floating point."""
    t = tensor_arg(ctx, 0)
    if t.dtype is not None and t.dtype not in FLOAT_DTYPES:
        ctx.fail(f"{ctx.op.name} needs a floating-point tensor, got {t.dtype}", arg=0)
    return t


def infer_broadcast(ctx: InferContext) -> Type:
    """Elementwise over broadcast arguments of one dtype."""
    ts = [tensor_arg(ctx, i) for i in range(len(ctx.types))]
    return TensorType(broadcast_shapes(ctx, [t.shape for t in ts]), same_dtype(ctx, ts))


def infer_compare(ctx: InferContext) -> Type:
    """Broadcast arguments of one dtype, boolean result."""
    t = infer_broadcast(ctx)
    assert isinstance(t, TensorType)
    return TensorType(t.shape, "bool")


def reduce_shape(
    shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool
) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def dim_product(dims: tuple[Dim, ...]) -> Dim:
    """Product of dims: an int if all are static, else a string product is not
    representable, so None is returned by callers that need it static."""
    p = 1
    for d in dims:
        if not isinstance(d, int):
            return "?"
        p *= d
    return p
