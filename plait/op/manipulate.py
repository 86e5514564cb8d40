"""Shape-manipulating operators: reshape, transpose, concatenation and splitting,
flatten/squeeze/expand_dims, broadcasting, tiling, padding and ``shape_of``."""

from __future__ import annotations

from ..ir import symbolic as sym
from ..ir.types import Dim, TensorType, TupleType, Type
from ..runtime import numpy_ops as npo
from ..runtime.limits import LimitExceeded, check_limit
from .define import op_definer
from .infer import (
    add_dim,
    merge_dims,
    mul_dim,
    normalize_axes,
    normalize_axis,
    shape_or_none,
    shape_str,
    tensor_arg,
    tuple_arg,
)
from .registry import AttrSpec, InferContext

define = op_definer(__name__)


def infer_reshape(ctx: InferContext) -> Type:
    """The attribute shape (size expressions allowed), with -1 resolved: the input's
    element count divided by the product of the other sizes, when it divides (as
    integers, or as polynomials: ``batch * seq * 768`` by ``batch * 12``)."""
    x = tensor_arg(ctx, 0)
    shape = list(ctx.attrs["shape"])
    if shape.count(-1) > 1:
        ctx.fail(f"reshape: at most one -1 in shape {shape_str(tuple(shape))}")
    if any(type(d) is int and d < -1 for d in shape):
        ctx.fail(f"reshape: negative size in shape {shape_str(tuple(shape))}")
    if x.shape is None:
        if -1 in shape:
            return TensorType(None, x.dtype)
        return TensorType(tuple(shape), x.dtype)
    count = sym.product(x.shape)
    known = sym.product(d for d in shape if d != -1)
    if -1 in shape:
        fill = None if known == 0 else sym.exact_div(count, known)
        if fill is None:
            if type(count) is int and type(known) is int:
                ctx.fail(
                    f"reshape: cannot reshape {shape_str(x.shape)} into {shape_str(tuple(shape))}"
                )
            return TensorType(None, x.dtype)
        shape[shape.index(-1)] = fill
    elif count != known and sym.prove_ne(count, known):
        ctx.fail(
            f"reshape: cannot reshape {shape_str(x.shape)} ({count} elements) into "
            f"{shape_str(tuple(shape))} ({known} elements)"
        )
    return TensorType(tuple(shape), x.dtype)


define(
    "reshape",
    inputs=("x",),
    attrs={"shape": AttrSpec("dims", doc="the new shape; one entry may be -1")},
    infer_type=infer_reshape,
    pattern="injective",
    reference=npo.reshape,
    doc="the same elements in a new shape",
)


def infer_permute_dims(ctx: InferContext) -> Type:
    """The input dims permuted."""
    x = tensor_arg(ctx, 0)
    axes = ctx.attrs["axes"]
    if x.shape is None:
        return x
    nd = len(x.shape)
    if axes is None:
        axes = tuple(reversed(range(nd)))
    norm = [normalize_axis(ctx, a, nd) for a in axes]
    if sorted(norm) != list(range(nd)):
        ctx.fail(f"permute_dims: axes {axes} are not a permutation of the {nd} axes")
    return TensorType(tuple(x.shape[a] for a in norm), x.dtype)


define(
    "permute_dims",
    inputs=("x",),
    attrs={"axes": AttrSpec("ints", default=None, doc="the permutation; None reverses")},
    infer_type=infer_permute_dims,
    pattern="injective",
    reference=npo.permute_dims,
    doc="permute the axes (transpose)",
)


def infer_concat(ctx: InferContext) -> Type:
    """Tensors of one rank and dtype, equal outside ``axis``; sizes along it add up."""
    tup = tuple_arg(ctx, 0)
    if not tup.fields:
        ctx.fail("concat needs at least one tensor", arg=0)
    ts = []
    for i, f in enumerate(tup.fields):
        if not isinstance(f, TensorType):
            ctx.fail(f"concat: field {i} of the tuple is not a tensor: {f}", arg=0)
        ts.append(f)
    dtypes = {t.dtype for t in ts if t.dtype is not None}
    if len(dtypes) > 1:
        ctx.fail(f"concat: the tensors have different dtypes {sorted(dtypes)}", arg=0)
    dtype = dtypes.pop() if dtypes else None
    if any(t.shape is None for t in ts):
        return TensorType(None, dtype)
    nd = len(ts[0].shape)
    axis = normalize_axis(ctx, ctx.attrs["axis"], nd)
    out = list(ts[0].shape)
    total: Dim = 0
    for i, t in enumerate(ts):
        if len(t.shape) != nd:
            ctx.fail(f"concat: tensor {i} has rank {len(t.shape)}, tensor 0 has rank {nd}", arg=0)
        for k in range(nd):
            if k != axis and isinstance(t.shape[k], int) and isinstance(out[k], int):
                if t.shape[k] != out[k]:
                    ctx.fail(
                        f"concat: tensor {i} has shape {shape_str(t.shape)}, which differs from "
                        f"{shape_str(ts[0].shape)} outside axis {axis}",
                        arg=0,
                    )
        total = sym.add(total, t.shape[axis])
    out[axis] = total
    return TensorType(tuple(out), dtype)


define(
    "concat",
    inputs=("tensors",),
    attrs={"axis": AttrSpec("int", default=0)},
    infer_type=infer_concat,
    pattern="injective",
    reference=npo.concat,
    doc="join a tuple of tensors along an axis",
)


def infer_flatten(ctx: InferContext) -> Type:
    """Axes ``start_dim..end_dim`` merged (their product, an expression when some are
    symbolic)."""
    x = tensor_arg(ctx, 0)
    if x.shape is None:
        return x
    if not x.shape:
        return TensorType((1,), x.dtype)
    nd = len(x.shape)
    s = normalize_axis(ctx, ctx.attrs["start_dim"], nd, "start_dim")
    e = normalize_axis(ctx, ctx.attrs["end_dim"], nd, "end_dim")
    if s > e:
        ctx.fail(
            f"flatten: start_dim {ctx.attrs['start_dim']} comes after end_dim "
            f"{ctx.attrs['end_dim']} (x has shape {shape_str(x.shape)})"
        )
    merged = merge_dims(x.shape[s : e + 1])
    return TensorType(shape_or_none([*x.shape[:s], merged, *x.shape[e + 1 :]]), x.dtype)


define(
    "flatten",
    inputs=("x",),
    attrs={
        "start_dim": AttrSpec("int", default=0, doc="first axis to merge"),
        "end_dim": AttrSpec("int", default=-1, doc="last axis to merge (inclusive)"),
    },
    infer_type=infer_flatten,
    pattern="injective",
    reference=npo.flatten,
    doc="merge the axes start_dim..end_dim into one, like torch.flatten",
)


def infer_squeeze(ctx: InferContext) -> Type:
    """Drop the given axes, which must have size 1 (symbolic sizes are taken to be 1);
    with no axes, drop every static size-1 axis (unknown shape if any size is symbolic)."""
    x = tensor_arg(ctx, 0)
    if x.shape is None:
        return x
    axis = ctx.attrs["axis"]
    if axis is None:
        if any(type(d) is not int for d in x.shape):
            return TensorType(None, x.dtype)
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    axes = normalize_axes(ctx, (axis,) if isinstance(axis, int) else axis, len(x.shape))
    for a in axes:
        if isinstance(x.shape[a], int) and x.shape[a] != 1:
            ctx.fail(
                f"squeeze: axis {a} of x (shape {shape_str(x.shape)}) has size {x.shape[a]}; "
                "only size-1 axes can be squeezed",
                arg=0,
            )
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


define(
    "squeeze",
    inputs=("x",),
    attrs={"axis": AttrSpec("int_or_ints", default=None, doc="size-1 axes; None for all")},
    infer_type=infer_squeeze,
    pattern="injective",
    reference=npo.squeeze,
    doc="remove size-1 axes",
)


def infer_expand_dims(ctx: InferContext) -> Type:
    """Size-1 axes inserted at the given positions of the result."""
    x = tensor_arg(ctx, 0)
    axis = ctx.attrs["axis"]
    axis = (axis,) if isinstance(axis, int) else axis
    if x.shape is None:
        return x
    out_nd = len(x.shape) + len(axis)
    axes = normalize_axes(ctx, axis, out_nd)
    rest = iter(x.shape)
    return TensorType(tuple(1 if i in axes else next(rest) for i in range(out_nd)), x.dtype)


define(
    "expand_dims",
    inputs=("x",),
    attrs={"axis": AttrSpec("int_or_ints", doc="positions of the new axes in the result")},
    infer_type=infer_expand_dims,
    pattern="injective",
    reference=npo.expand_dims,
    doc="insert size-1 axes",
)


def infer_broadcast_to(ctx: InferContext) -> Type:
    """The attribute shape; every dim of x (aligned right) must be 1 or equal to it."""
    x = tensor_arg(ctx, 0)
    shape = ctx.attrs["shape"]
    if any(isinstance(d, int) and d < 0 for d in shape):
        ctx.fail(f"broadcast_to: negative size in shape {shape_str(shape)}")
    if x.shape is not None:
        if len(x.shape) > len(shape):
            ctx.fail(
                f"broadcast_to: x has rank {len(x.shape)} (shape {shape_str(x.shape)}), more than "
                f"{shape_str(shape)}",
                arg=0,
            )
        for i, d in enumerate(x.shape):
            t = shape[len(shape) - len(x.shape) + i]
            if isinstance(d, int) and isinstance(t, int) and d not in (1, t):
                ctx.fail(
                    f"broadcast_to: cannot broadcast x of shape {shape_str(x.shape)} to "
                    f"{shape_str(shape)}",
                    arg=0,
                )
    return TensorType(tuple(shape), x.dtype)


define(
    "broadcast_to",
    inputs=("x",),
    attrs={"shape": AttrSpec("dims", doc="the target shape")},
    infer_type=infer_broadcast_to,
    pattern="broadcast",
    reference=npo.broadcast_to,
    doc="broadcast to a shape with numpy rules",
)


def infer_tile(ctx: InferContext) -> Type:
    """numpy ``tile``: the shorter of shape and repeats is padded with leading 1s; a
    symbolic repeat multiplies the size (``3`` tiled ``batch`` times is ``batch * 3``)."""
    x = tensor_arg(ctx, 0)
    reps = ctx.attrs["repeats"]
    if any(type(r) is int and r < 0 for r in reps):
        ctx.fail(f"tile: repeats must not be negative, got {shape_str(tuple(reps))}")
    if x.shape is None:
        return x
    nd = max(len(x.shape), len(reps))
    shape = (1,) * (nd - len(x.shape)) + x.shape
    reps = (1,) * (nd - len(reps)) + tuple(reps)
    return TensorType(shape_or_none([mul_dim(d, r) for d, r in zip(shape, reps)]), x.dtype)


define(
    "tile",
    inputs=("x",),
    attrs={"repeats": AttrSpec("dims", doc="copies along each axis; a symbolic size "
                                           "such as batch allowed")},
    infer_type=infer_tile,
    pattern="injective",
    reference=npo.tile,
    doc="repeat the whole tensor along each axis (numpy tile, ONNX Tile)",
)


def infer_repeat(ctx: InferContext) -> Type:
    """``repeats`` times the size along ``axis`` (of the flattened tensor when None)."""
    x = tensor_arg(ctx, 0)
    r, axis = ctx.attrs["repeats"], ctx.attrs["axis"]
    if r < 0:
        ctx.fail(f"repeat: repeats must not be negative, got {r}")
    if x.shape is None:
        return x
    if axis is None:
        flat = merge_dims(x.shape)
        return TensorType(shape_or_none([None if flat is None else mul_dim(flat, r)]), x.dtype)
    a = normalize_axis(ctx, axis, len(x.shape))
    dims: list[Dim | None] = list(x.shape)
    dims[a] = mul_dim(x.shape[a], r)
    return TensorType(shape_or_none(dims), x.dtype)


define(
    "repeat",
    inputs=("x",),
    attrs={
        "repeats": AttrSpec("int", doc="copies of each element"),
        "axis": AttrSpec("int", default=None, doc="axis; None flattens first"),
    },
    infer_type=infer_repeat,
    pattern="injective",
    reference=npo.repeat,
    doc="repeat each element along an axis (numpy repeat, torch repeat_interleave)",
)


def infer_split(ctx: InferContext) -> Type:
    """A tuple of the pieces: n chunks of ceil(size / n) (the last smaller), or the pieces
    between the given indices."""
    x = tensor_arg(ctx, 0)
    ios = ctx.attrs["indices_or_sections"]
    if isinstance(ios, int):
        if ios < 1:
            ctx.fail(f"split: the number of sections must be >= 1, got {ios}")
        count = ios
    else:
        if any(i < 0 for i in ios) or any(a > b for a, b in zip(ios, ios[1:])):
            ctx.fail(f"split: indices must be non-negative and non-decreasing, got {ios}")
        count = len(ios) + 1
    try:   # before any work: a count of 2**31 - 1 would build as many types
        check_limit("max_outputs", count, "split: the number of sections")
    except LimitExceeded as e:
        ctx.fail(str(e))
    if x.shape is None:
        return TupleType(tuple(TensorType(None, x.dtype) for _ in range(count)))
    axis = normalize_axis(ctx, ctx.attrs["axis"], len(x.shape))
    d = x.shape[axis]
    sizes: list[Dim]
    if isinstance(ios, int):
        chunk = sym.floordiv(sym.add(d, ios - 1), ios)
        sizes = [sym.sub(sym.minimum(sym.mul(chunk, i + 1), d), sym.minimum(sym.mul(chunk, i), d))
                 for i in range(ios)]
    else:
        cuts = [sym.minimum(b, d) for b in (0, *ios)] + [d]
        sizes = [sym.sub(b, a) for a, b in zip(cuts, cuts[1:])]
    fields = []
    for s in sizes:
        dims = list(x.shape)
        dims[axis] = s  # type: ignore[call-overload]
        fields.append(TensorType(shape_or_none(dims), x.dtype))
    return TupleType(tuple(fields))


define(
    "split",
    inputs=("x",),
    attrs={
        "indices_or_sections": AttrSpec(
            "int_or_ints", doc="number of equal chunks, or the indices to split at"
        ),
        "axis": AttrSpec("int", default=0),
    },
    infer_type=infer_split,
    pattern="injective",
    reference=npo.split,
    doc="split into a tuple of tensors along an axis",
)


def infer_pad(ctx: InferContext) -> Type:
    """Each axis grows by its before + after widths (negative widths crop)."""
    x = tensor_arg(ctx, 0)
    pw = ctx.attrs["pad_width"]
    if len(pw) % 2:
        ctx.fail(f"pad: pad_width must hold (before, after) pairs, got {len(pw)} values {pw}")
    if x.shape is None:
        return x
    nd = len(x.shape)
    if len(pw) != 2 * nd:
        ctx.fail(
            f"pad: pad_width must have 2 values (before, after) per axis, {2 * nd} for x of "
            f"shape {shape_str(x.shape)}, got {len(pw)}: {pw}",
            arg=0,
        )
    for i, d in enumerate(x.shape):
        grows = pw[2 * i] > 0 or pw[2 * i + 1] > 0
        if ctx.attrs["pad_mode"] != "constant" and d == 0 and grows:
            ctx.fail(
                f"pad: mode {ctx.attrs['pad_mode']!r} cannot pad the empty axis {i} "
                f"(shape {shape_str(x.shape)})"
            )
    dims = [add_dim(d, pw[2 * i] + pw[2 * i + 1]) for i, d in enumerate(x.shape)]
    for i, d in enumerate(dims):
        if sym.bounds(d)[1] < 0:
            ctx.fail(
                f"pad: the negative widths of axis {i} crop more than its {x.shape[i]} elements"
            )
    return TensorType(shape_or_none(dims), x.dtype)


define(
    "pad",
    inputs=("x",),
    attrs={
        "pad_width": AttrSpec("ints", doc="(before_0, after_0, before_1, after_1, ...)"),
        "pad_mode": AttrSpec(
            "str", default="constant", choices=("constant", "reflect", "edge", "wrap")
        ),
        "pad_value": AttrSpec("float", default=0.0, doc="fill value of constant mode"),
    },
    infer_type=infer_pad,
    pattern="injective",
    reference=npo.pad,
    doc="pad (or, with negative widths, crop) each axis",
)


def infer_shape_of(ctx: InferContext) -> Type:
    """A 1-D int64 tensor with one entry per axis of x."""
    x = tensor_arg(ctx, 0)
    return TensorType(None if x.shape is None else (len(x.shape),), "int64")


define(
    "shape_of",
    inputs=("x",),
    infer_type=infer_shape_of,
    pattern="opaque",
    reference=npo.shape_of,
    doc="the shape of x as a 1-D int64 tensor (ONNX Shape)",
)
