"""Indexing operators: slicing, gathering, scattering and ``topk``."""

from __future__ import annotations

from ..ir import symbolic as sym
from ..ir.types import Dim, TensorType, TupleType, Type
from ..runtime import numpy_ops as npo
from .define import op_definer
from .infer import check_dtype_class, normalize_axis, shape_or_none, shape_str, tensor_arg
from .registry import AttrSpec, InferContext

define = op_definer(__name__)

TO_END = 2**31 - 1
"""A slice bound at least this large (or this negative) means "to the end" (ONNX
exporters write INT64_MAX or INT32_MAX); a symbolic size is assumed to be smaller."""


def _sign(b: Dim) -> int | None:
    """-1 for a bound that counts from the end, 1 for one that does not, None when a
    symbolic bound may be either (its bounds straddle 0)."""
    lo, hi = sym.bounds(b)
    return 1 if lo >= 0 else -1 if hi < 0 else None


def _slice_len(d: Dim, b: Dim, e: Dim, s: int) -> Dim | None:
    """The length of ``range(d)[b:e:s]``: exact for every value of the symbolic sizes
    among ``d``, ``b`` and ``e`` (``x[1:]`` of ``n`` rows has ``max(0, n - 1)``,
    ``x[:k]`` has ``min(k, n)``, ``x[::-1]`` has ``n``, ``x[k::-1]`` has
    ``min(k, n - 1) + 1``).  None (unknown) for a symbolic bound that may count from
    either end."""
    if type(d) is int and type(b) is int and type(e) is int:
        return len(range(*slice(b, e, s).indices(d)))
    sb, se = _sign(b), _sign(e)
    if sb is None or se is None:
        return None
    if s < 0:
        return _backward_len(d, b, e, sb, se, -s)
    # the clamped bounds b', e' of Python's slice.indices, then max(0, e' - b')
    b_end = type(b) is int and b <= -TO_END
    e_end = type(e) is int and e >= TO_END
    if sb > 0 and e_end:
        n: Dim = sym.maximum(0, sym.sub(d, b))     # the same, in fewer atoms
    elif sb < 0 and not b_end and e_end:
        n = sym.minimum(d, sym.neg(b))
    else:
        lo = 0 if b_end else sym.maximum(0, sym.add(d, b)) if sb < 0 else sym.minimum(b, d)
        hi = d if e_end else sym.maximum(0, sym.add(d, e)) if se < 0 else sym.minimum(e, d)
        n = sym.maximum(0, sym.sub(hi, lo))
    return n if s == 1 else sym.floordiv(sym.add(n, s - 1), s)


def _backward_len(d: Dim, b: Dim, e: Dim, sb: int, se: int, k: int) -> Dim:
    """The length of ``range(d)[b:e:-k]``: Python clamps a backward slice's bounds to
    ``[-1, d - 1]`` (``b'``, ``e'``), then takes ``ceil((b' - e') / k)`` of them, at
    least 0."""
    def clamp(v: Dim, sign: int) -> Dim:
        if type(v) is int and v >= TO_END:
            return sym.sub(d, 1)
        if type(v) is int and v <= -TO_END:
            return -1
        if sign > 0:
            return sym.minimum(v, sym.sub(d, 1))
        return sym.maximum(-1, sym.add(d, v))

    n = sym.maximum(0, sym.sub(clamp(b, sb), clamp(e, se)))
    return n if k == 1 else sym.floordiv(sym.add(n, k - 1), k)


def infer_strided_slice(ctx: InferContext) -> Type:
    """Python-slice sizes on the given axes (size expressions on symbolic axes)."""
    x = tensor_arg(ctx, 0)
    axes, begin, end = ctx.attrs["axes"], ctx.attrs["begin"], ctx.attrs["end"]
    strides = ctx.attrs["strides"] or (1,) * len(axes)
    if not len(axes) == len(begin) == len(end) == len(strides):
        ctx.fail(
            f"strided_slice: axes, begin, end and strides must have the same length, got "
            f"{len(axes)}, {len(begin)}, {len(end)} and {len(strides)}"
        )
    if 0 in strides:
        ctx.fail(f"strided_slice: a stride cannot be 0, got strides {tuple(strides)}")
    if x.shape is None:
        return x
    dims: list[Dim | None] = list(x.shape)
    seen = set()
    for a, b, e, s in zip(axes, begin, end, strides):
        ax = normalize_axis(ctx, a, len(x.shape))
        if ax in seen:
            ctx.fail(f"strided_slice: axis {a} appears twice in axes {tuple(axes)}")
        seen.add(ax)
        dims[ax] = _slice_len(x.shape[ax], b, e, s)
    return TensorType(shape_or_none(dims), x.dtype)


define(
    "strided_slice",
    inputs=("x",),
    attrs={
        "axes": AttrSpec("ints", doc="the sliced axes"),
        "begin": AttrSpec("dims", doc="start per axis (negative counts from the end); "
                          "a size such as k or k + 4 allowed"),
        "end": AttrSpec("dims", doc="stop per axis, exclusive; clamped to the axis; sizes "
                        "allowed"),
        "strides": AttrSpec("ints", default=None, doc="step per axis; None for all 1"),
    },
    infer_type=infer_strided_slice,
    pattern="injective",
    reference=npo.strided_slice,
    doc="x[begin:end:stride] on the given axes (Python slicing, ONNX Slice)",
)


def _index_arg(ctx: InferContext, i: int) -> TensorType:
    t = tensor_arg(ctx, i)
    check_dtype_class(ctx, i, t, "int")
    return t


def infer_take(ctx: InferContext) -> Type:
    """x's shape with ``axis`` replaced by the shape of indices."""
    x, idx = tensor_arg(ctx, 0), _index_arg(ctx, 1)
    axis = ctx.attrs["axis"]
    if idx.shape is None or (x.shape is None and axis is not None):
        return TensorType(None, x.dtype)
    if axis is None:
        return TensorType(idx.shape, x.dtype)
    assert x.shape is not None
    a = normalize_axis(ctx, axis, len(x.shape))
    if x.shape[a] == 0:
        ctx.fail(
            f"take: axis {a} of x (shape {shape_str(x.shape)}) is empty; no index is valid", arg=0
        )
    return TensorType(x.shape[:a] + idx.shape + x.shape[a + 1 :], x.dtype)


define(
    "take",
    inputs=("x", "indices"),
    attrs={"axis": AttrSpec("int", default=None, doc="axis; None for the flattened tensor")},
    infer_type=infer_take,
    pattern="injective",
    reference=npo.take,
    doc="select along an axis by integer indices (ONNX Gather)",
)


def _check_elements(ctx: InferContext, x: TensorType, idx: TensorType) -> int | None:
    """Check indices against x for gather/scatter_elements; the normalized axis."""
    if x.shape is None or idx.shape is None:
        return None
    if len(x.shape) != len(idx.shape):
        ctx.fail(
            f"{ctx.op.name}: indices must have the rank of x (shape {shape_str(x.shape)}), "
            f"got shape {shape_str(idx.shape)}",
            arg=1,
        )
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(x.shape))
    for i, (d, k) in enumerate(zip(x.shape, idx.shape)):
        if i != axis and isinstance(d, int) and isinstance(k, int) and k > d:
            ctx.fail(
                f"{ctx.op.name}: indices (shape {shape_str(idx.shape)}) is larger than x "
                f"(shape {shape_str(x.shape)}) along axis {i}",
                arg=1,
            )
    return axis


def infer_gather_elements(ctx: InferContext) -> Type:
    """The shape of indices, the dtype of x."""
    x, idx = tensor_arg(ctx, 0), _index_arg(ctx, 1)
    _check_elements(ctx, x, idx)
    return TensorType(idx.shape, x.dtype)


define(
    "gather_elements",
    inputs=("x", "indices"),
    attrs={"axis": AttrSpec("int", default=0)},
    infer_type=infer_gather_elements,
    pattern="injective",
    reference=npo.gather_elements,
    doc="out[i][j] = x[indices[i][j]][j] for axis 0 (torch.gather, ONNX GatherElements)",
)


def infer_scatter_elements(ctx: InferContext) -> Type:
    """The type of x; updates must have the shape of indices and the dtype of x."""
    x, idx, upd = tensor_arg(ctx, 0), _index_arg(ctx, 1), tensor_arg(ctx, 2)
    if ctx.attrs["reduction"] != "update":
        check_dtype_class(ctx, 0, x, "numeric")
    if x.dtype is not None and upd.dtype is not None and x.dtype != upd.dtype:
        ctx.fail(f"scatter_elements: updates has dtype {upd.dtype}, x has {x.dtype}", arg=2)
    _check_elements(ctx, x, idx)
    if idx.shape is not None and upd.shape is not None:
        differ = any(
            isinstance(a, int) and isinstance(b, int) and a != b
            for a, b in zip(idx.shape, upd.shape)
        )
        if len(idx.shape) != len(upd.shape) or differ:
            ctx.fail(
                f"scatter_elements: updates (shape {shape_str(upd.shape)}) must have the shape "
                f"of indices ({shape_str(idx.shape)})",
                arg=2,
            )
    return x


define(
    "scatter_elements",
    inputs=("x", "indices", "updates"),
    attrs={
        "axis": AttrSpec("int", default=0),
        "reduction": AttrSpec(
            "str",
            default="update",
            choices=("update", "add", "mul", "min", "max"),
            doc="how an update combines with the value there",
        ),  # fmt: skip
    },
    infer_type=infer_scatter_elements,
    pattern="opaque",
    reference=npo.scatter_elements,
    doc="a copy of x with out[indices[i][j]][j] (op)= updates[i][j] for axis 0 "
    "(ONNX ScatterElements)",
)


def infer_topk(ctx: InferContext) -> Type:
    """(values, int64 indices), both shaped like x with ``k`` along ``axis``."""
    x = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, x, "numeric")
    k = ctx.attrs["k"]
    if k < 0:
        ctx.fail(f"topk: k must not be negative, got {k}")
    if x.shape is None:
        return TupleType((TensorType(None, x.dtype), TensorType(None, "int64")))
    if not x.shape:
        ctx.fail("topk: x must have at least one axis, got a scalar", arg=0)
    a = normalize_axis(ctx, ctx.attrs["axis"], len(x.shape))
    if isinstance(x.shape[a], int) and k > x.shape[a]:
        ctx.fail(f"topk: k={k} is larger than axis {a} of x (shape {shape_str(x.shape)})", arg=0)
    shape = x.shape[:a] + (k,) + x.shape[a + 1 :]
    return TupleType((TensorType(shape, x.dtype), TensorType(shape, "int64")))


define(
    "topk",
    inputs=("x",),
    attrs={
        "k": AttrSpec("int", default=1, doc="how many"),
        "axis": AttrSpec("int", default=-1),
        "largest": AttrSpec("bool", default=True, doc="largest (else smallest) values"),
        "sorted": AttrSpec("bool", default=True, doc="sorted output (always sorted here)"),
    },
    infer_type=infer_topk,
    pattern="opaque",
    reference=npo.topk,
    doc="the k largest (or smallest) values along an axis and their int64 indices",
)
