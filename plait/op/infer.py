"""Shared type-inference helpers: broadcasting, dtype rules, axes."""

from __future__ import annotations

from ..ir import symbolic as sym
from ..ir.types import Dim, TensorType, TupleType, Type
from .registry import InferContext, InferFn

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


def broadcast_dim(a: Dim, b: Dim, ranges: sym.Ranges | None = None) -> Dim | None:
    """The broadcast of two dimensions, or None if they can never broadcast.  Two sizes
    that are provably different and provably never 1 (by their bounds in ``ranges``,
    every size ``>= 0`` without them) never broadcast: ``n + 2`` against ``n + 3``."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if type(a) is int and type(b) is int:
        return None
    if sym.prove_ne(a, b, ranges) and sym.prove_ne(a, 1, ranges) and sym.prove_ne(b, 1, ranges):
        return None
    # A symbolic size against a different size: the program is only valid where they
    # agree (or one of them is 1 at run time); keep the static or the first name.
    return b if type(b) is int else a


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
    """The product of dims (a size expression when some are symbolic)."""
    return sym.product(dims)


# ------------------------------------------------------------------ dtype classes

NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES

DTYPE_CLASSES: dict[str, tuple[str, ...]] = {
    "any": ("bool",) + NUMERIC_DTYPES,
    "numeric": NUMERIC_DTYPES,
    "float": FLOAT_DTYPES,
    "int": INT_DTYPES,
    "bool": ("bool",),
    "int_or_bool": ("bool",) + INT_DTYPES,
}
"""Named sets of dtypes an op argument may have."""

_DTYPE_CLASS_TEXT = {
    "any": "any dtype",
    "numeric": "a numeric dtype (an int or float type, not bool)",
    "float": "a floating-point dtype (float16, float32, float64)",
    "int": "an integer dtype",
    "bool": "dtype bool",
    "int_or_bool": "an integer or bool dtype",
}


def check_dtype_class(ctx: InferContext, i: int, t: TensorType, cls: str) -> None:
    """Fail unless argument ``i`` (of type ``t``) has a dtype of class ``cls`` (a key of
    :data:`DTYPE_CLASSES`); an unknown dtype passes."""
    if t.dtype is not None and t.dtype not in DTYPE_CLASSES[cls]:
        ctx.fail(
            f"{ctx.op.name}: argument {i} ({ctx.op.input_name(i)}) must have "
            f"{_DTYPE_CLASS_TEXT[cls]}, got {t.dtype}",
            arg=i,
        )


def infer_elemwise(cls: str = "any", out_dtype: str | None = None) -> InferFn:
    """An inference function for a unary elementwise op: the argument must have a dtype
    of class ``cls``; the result has its shape and ``out_dtype`` (default: its dtype)."""

    def infer(ctx: InferContext) -> Type:
        t = tensor_arg(ctx, 0)
        check_dtype_class(ctx, 0, t, cls)
        return TensorType(t.shape, out_dtype or t.dtype)

    infer.__doc__ = f"Unary elementwise over {_DTYPE_CLASS_TEXT[cls]}."
    return infer


def infer_broadcast_of(cls: str = "any", out_dtype: str | None = None) -> InferFn:
    """An inference function for a broadcasting op over arguments of one dtype of class
    ``cls``; the result dtype is ``out_dtype`` (default: the arguments' dtype)."""

    def infer(ctx: InferContext) -> Type:
        ts = [tensor_arg(ctx, i) for i in range(len(ctx.types))]
        for i, t in enumerate(ts):
            check_dtype_class(ctx, i, t, cls)
        dtype = same_dtype(ctx, ts)
        return TensorType(broadcast_shapes(ctx, [t.shape for t in ts]), out_dtype or dtype)

    infer.__doc__ = f"Broadcasting over {_DTYPE_CLASS_TEXT[cls]}."
    return infer


# ------------------------------------------------------------- attribute helpers


def attr_ints(ctx: InferContext, key: str, n: int, minimum: int | None = None) -> tuple[int, ...]:
    """An ``int_or_ints`` attribute as exactly ``n`` ints (an int or a 1-tuple is
    repeated); each must be at least ``minimum`` if given."""
    v = ctx.attrs[key]
    if isinstance(v, int):
        out = (v,) * n
    elif len(v) == 1:
        out = tuple(v) * n
    elif len(v) == n:
        out = tuple(v)
    else:
        ctx.fail(f"{ctx.op.name}: attribute {key!r} must have 1 or {n} values, got {v}")
    if minimum is not None and any(x < minimum for x in out):
        ctx.fail(f"{ctx.op.name}: attribute {key!r} must be >= {minimum}, got {v}")
    return out


def attr_padding(ctx: InferContext, key: str, n: int) -> tuple[int, ...]:
    """A padding attribute as ``2n`` non-negative ints, the ``n`` befores then the ``n``
    afters (``(top, left, bottom, right)`` in 2-D): an int or 1-tuple pads every side,
    ``n`` values pad both sides of each axis."""
    v = ctx.attrs[key]
    if isinstance(v, int):
        out = (v,) * (2 * n)
    elif len(v) == 2 * n:
        out = tuple(v)
    elif len(v) == 1:
        out = tuple(v) * (2 * n)
    elif len(v) == n:
        out = tuple(v) * 2
    else:
        ctx.fail(f"{ctx.op.name}: attribute {key!r} must have 1, {n} or {2 * n} values, got {v}")
    if any(x < 0 for x in out):
        ctx.fail(f"{ctx.op.name}: attribute {key!r} must not be negative, got {v}")
    return out


# ------------------------------------------------------------ symbolic dimensions


def add_dim(d: Dim, delta: Dim) -> Dim:
    """``d + delta`` in canonical form."""
    return sym.add(d, delta)


def mul_dim(d: Dim, k: Dim) -> Dim:
    """``d * k`` in canonical form."""
    return sym.mul(d, k)


def merge_dims(dims: tuple[Dim, ...] | list[Dim]) -> Dim:
    """The product of dims: an int if all are static, else a size expression."""
    return sym.product(dims)


def window_out_dim(
    d: Dim, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int,
    ceil_mode: bool = False,
) -> Dim:  # fmt: skip
    """Output length of a sliding window (convolution or pooling) along one axis:
    ``(d + pads - eff) // stride + 1`` with ``eff = dilation * (kernel - 1) + 1``, a size
    expression for a symbolic ``d``.  A static result may be < 1: the caller reports
    that the window does not fit.  With ``ceil_mode`` a window larger than the padded
    input still gives one output when it starts inside it (ONNX and torch:
    ``ceil((d + pads - eff) / stride) + 1``, less one when the last window would start
    in the end padding; EfficientNet's pooler is a 1280-wide window over 7x7)."""
    eff = dilation * (kernel - 1) + 1
    num = sym.add(d, pad_before + pad_after - eff)
    if not ceil_mode:
        return sym.add(sym.floordiv(num, stride), 1)
    out = sym.add(sym.floordiv(sym.add(num, stride - 1), stride), 1)
    if type(out) is int:
        assert type(d) is int
        if (out - 1) * stride >= d + pad_before:
            out -= 1
        return out
    # one less when the last window starts in the end padding, (out - 1) * stride >=
    # d + pad_before, i.e. when out exceeds last = ceil((d + pad_before) / stride)
    last = sym.add(sym.floordiv(sym.add(d, pad_before - 1), stride), 1)
    return sym.sub(out, sym.minimum(1, sym.maximum(0, sym.sub(out, last))))


def shape_or_none(dims: list[Dim | None]) -> tuple[Dim, ...] | None:
    """``tuple(dims)``, or None (rank unknown) if any dim is not representable."""
    if any(d is None for d in dims):
        return None
    return tuple(dims)  # type: ignore[arg-type]


# ------------------------------------------------------------------ convenience


def infer_op_type(name: str, *arg_types: Type, **attrs: object) -> Type:
    """The result type of a call of op ``name`` on arguments of the given types (checks
    arity and attributes like :func:`~plait.op.registry.make_call`).  Handy for
    frontends and tests that have types but no expressions."""
    from ..ir.expr import Var
    from .registry import check_arity, get_op, normalize_attrs

    opdef = get_op(name)
    check_arity(opdef, len(arg_types))
    args = tuple(Var(f"arg{i}", ty=t) for i, t in enumerate(arg_types))
    ctx = InferContext(opdef, args, tuple(arg_types), normalize_attrs(opdef, attrs))
    return opdef.infer_type(ctx)


# ------------------------------------------------------------------------ layouts


def split_layout(
    shape: tuple[Dim, ...], layout: str, first: str = "N", second: str = "C"
) -> tuple[Dim, Dim, list[Dim]]:
    """The dims of ``shape`` at the letters ``first`` and ``second`` of ``layout``, and the
    other (spatial) dims in layout order: ``split_layout((1, 8, 8, 3), "NHWC")`` is
    ``(1, 3, [8, 8])``."""
    spatial = [shape[i] for i, ch in enumerate(layout) if ch not in (first, second)]
    return shape[layout.index(first)], shape[layout.index(second)], spatial


def join_layout(
    a: Dim | None, b: Dim | None, spatial: list[Dim | None], layout: str,
    first: str = "N", second: str = "C",
) -> list[Dim | None]:  # fmt: skip
    """The inverse of :func:`split_layout`: dims in ``layout`` order."""
    rest = iter(spatial)
    return [a if ch == first else b if ch == second else next(rest) for ch in layout]


def shape_str(shape: tuple[Dim, ...] | None) -> str:
    """A shape as written in the IR text, for messages: ``(n, 3, 224, 224)``."""
    if shape is None:
        return "(unknown rank)"
    inner = ", ".join(str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"
