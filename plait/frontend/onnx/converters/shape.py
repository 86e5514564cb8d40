"""Shape ops: ``Shape``, ``Reshape``, ``Concat``, ``Slice``, ``Expand``, ``Pad``, ... and
``Constant``.  Where an input is a symbolic value (computed from shapes) the result is
computed at import time, symbolically if needed, so shape subgraphs fold away."""

from __future__ import annotations

import math

import numpy as np

from ....ir import symbolic
from ....ir.expr import Expr, Tuple
from ....ir.symbolic import is_dim
from ....ir.types import Dim
from ....op.index import TO_END
from ....runtime.limits import LimitExceeded, check_limit
from ..context import NodeContext
from ..registry import converter
from ..values import EMPTY, SYM_BINOPS, Value
from .common import cast, norm_axes, norm_axis, reshape, scalar, select

# ------------------------------------------------------------------------- shape


@converter("Shape", since=1)
def convert_shape(ctx: NodeContext) -> Value | Expr:
    """The input's shape, known at import time (symbolically for symbolic sizes);
    ``shape_of`` only when it is used as data and sizes are unknown."""
    t = ctx.ty(0)
    start, end = ctx.attr_int("start", 0), ctx.attr_int("end", None)
    if t.shape is not None and not ctx.runtime:
        v = ctx.symbolic(list(t.shape)[slice(start, end)])
        v.deps = EMPTY
        if v.const is not None:
            return Value.of_const(v.const)
        return v
    y = ctx.call("shape_of", ctx.x(0))
    if start != 0 or end is not None:
        y = ctx.call(
            "strided_slice", y, axes=(0,), begin=(start,), end=(TO_END if end is None else end,)
        )
    return y


@converter("Size", since=1)
def convert_size(ctx: NodeContext) -> Value | Expr:
    """The number of elements, at import time when the shape is known."""
    t = ctx.ty(0)
    if t.shape is not None and not ctx.runtime:
        acc: object = 1
        for d in t.shape:
            acc = SYM_BINOPS["mul"](acc, d)
        v = ctx.symbolic(np.asarray(acc, dtype=object))
        v.deps = EMPTY
        if v.const is not None:
            return Value.of_const(v.const)
        return v
    return ctx.call("prod", ctx.call("shape_of", ctx.x(0)))


@converter("Constant", since=1)
def convert_constant(ctx: NodeContext) -> Value:
    """The attribute's value as a constant."""
    for key in ("value", "sparse_value"):
        if ctx.has_attr(key):
            return Value.of_const(np.asarray(ctx.attr(key)))
    if ctx.has_attr("value_float"):
        return Value.of_const(np.asarray(ctx.attr_float("value_float"), np.float32))
    if ctx.has_attr("value_floats"):
        return Value.of_const(np.asarray(ctx.attr_floats("value_floats"), np.float32))
    if ctx.has_attr("value_int"):
        return Value.of_const(np.asarray(ctx.attr_int("value_int"), np.int64))
    if ctx.has_attr("value_ints"):
        return Value.of_const(np.asarray(ctx.attr_ints("value_ints"), np.int64))
    if ctx.has_attr("value_string") or ctx.has_attr("value_strings"):
        ctx.unsupported("a string constant")
    ctx.fail("the node has no value attribute")


# ------------------------------------------------------------------------ reshape


@converter("Reshape", since=5)
def convert_reshape(ctx: NodeContext) -> Value | Expr:
    """``reshape``; the target shape must be known at import time (sizes that are only
    known at run time become -1 when there is one)."""
    dims = ctx.dims(1, "the target shape")
    allowzero = ctx.attr_int("allowzero", 0)
    s = ctx.sym(0)
    if s is not None and s.dtype == object and all(isinstance(d, int) for d in dims):
        if not allowzero:
            dims = [s.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return ctx.symbolic(s.reshape(dims), ctx.dtype(0))
    shape = ctx.shape(0) if (0 in dims and not allowzero) else None
    out: list[int | str | None] = []
    for i, d in enumerate(dims):
        if d == 0 and not allowzero:
            assert shape is not None
            if i >= len(shape):
                ctx.fail(
                    f"the target shape {dims} copies axis {i}, but the input has rank {len(shape)}"
                )
            out.append(shape[i])
        else:
            out.append(d)
    unknown = [i for i, d in enumerate(out) if d is None]
    if unknown:
        if len(unknown) > 1 or -1 in out:
            ctx.fail(
                f"the target shape has {len(unknown) + (-1 in out)} sizes that are only known at "
                "run time; plait needs all but one of them at compile time (fix the input "
                "shapes with from_onnx(..., shapes={...}))"
            )
        out[unknown[0]] = -1
    return reshape(ctx, ctx.x(0), out)  # type: ignore[arg-type]


@converter("Flatten", since=1)
def convert_flatten(ctx: NodeContext) -> Expr:
    """A 2-D reshape: the axes before ``axis`` and the axes from it merged."""
    shape = ctx.shape(0)
    r = len(shape)
    axis = ctx.attr_int("axis", 1)
    if not -r <= axis <= r:
        ctx.fail(f"axis {axis} is out of range for rank {r}", "axis")
    axis = axis % r if axis < 0 else axis
    x = ctx.x(0)
    lead, rest = shape[:axis], shape[axis:]
    if all(isinstance(d, int) for d in shape):
        return ctx.call("reshape", x, shape=(math.prod(lead), math.prod(rest)))  # type: ignore[arg-type]
    a, b = _product(lead), _product(rest)
    if a is None and b is not None:  # e.g. (n, 3, 4) with axis 2: (-1, 4), rank kept
        return reshape(ctx, x, [-1, b])
    if b is None and a is not None:
        return reshape(ctx, x, [a, -1])
    if axis == 0:
        return ctx.call("expand_dims", ctx.call("flatten", x), axis=0)
    if axis == r:
        return ctx.call("expand_dims", ctx.call("flatten", x), axis=1)
    y = ctx.call("flatten", x, start_dim=axis, end_dim=-1) if axis < r - 1 else x
    return ctx.call("flatten", y, start_dim=0, end_dim=axis - 1) if axis > 1 else y


def _product(dims: tuple) -> int | str | None:
    """The product of dims as an int, a single symbolic name, or None."""
    static, names = 1, []
    for d in dims:
        if isinstance(d, int):
            static *= d
        else:
            names.append(d)
    if not names:
        return static
    return names[0] if len(names) == 1 and static == 1 else None


@converter("Transpose", since=1)
def convert_transpose(ctx: NodeContext) -> Expr | Value:
    """``permute_dims`` (reversed axes without ``perm``)."""
    perm = ctx.attr_ints("perm", None)
    r = ctx.rank(0)
    if perm is not None:
        if sorted(norm_axes(ctx, perm, r, "perm")) != list(range(r)):
            ctx.fail(f"{perm} is not a permutation of {r} axes", "perm")
    s = ctx.sym(0)
    if s is not None and s.dtype == object:
        return ctx.symbolic(np.transpose(s, perm), ctx.dtype(0))
    if perm == list(range(r)):
        return ctx.x(0)
    return ctx.call("permute_dims", ctx.x(0), axes=None if perm is None else tuple(perm))


def _axes_input_or_attr(ctx: NodeContext, since_input: int) -> list[int] | None:
    if ctx.opset >= since_input:
        if not ctx.has(1):
            return None
        return ctx.const_ints(1, "the axes")
    return ctx.attr_ints("axes", None)


@converter("Squeeze", since=1)
def convert_squeeze(ctx: NodeContext) -> Expr | Value:
    """``squeeze`` (the size-1 axes of a static shape when no axes are given)."""
    shape = ctx.shape(0)
    axes = _axes_input_or_attr(ctx, 13)
    if axes is None:
        if not all(isinstance(d, int) for d in shape):
            ctx.fail(f"squeezing every size-1 axis needs a static shape, got {shape}")
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = norm_axes(ctx, axes, len(shape))
    for a in axes:
        if isinstance(shape[a], int) and shape[a] != 1:
            ctx.fail(f"axis {a} has size {shape[a]}, only size-1 axes can be squeezed")
    s = ctx.sym(0)
    if s is not None and s.dtype == object:
        return ctx.symbolic(np.squeeze(s, axis=tuple(axes)) if axes else s, ctx.dtype(0))
    if not axes:
        return ctx.x(0)
    return ctx.call("squeeze", ctx.x(0), axis=tuple(axes))


@converter("Unsqueeze", since=1)
def convert_unsqueeze(ctx: NodeContext) -> Expr | Value:
    """``expand_dims`` at the given positions of the result."""
    axes = _axes_input_or_attr(ctx, 13)
    if axes is None:
        ctx.fail("the axes are missing")
    r = ctx.rank(0) + len(axes)
    axes = sorted(norm_axes(ctx, axes, r))
    s = ctx.sym(0)
    if s is not None and s.dtype == object:
        out = s
        for a in axes:
            out = np.expand_dims(out, a)
        return ctx.symbolic(out, ctx.dtype(0))
    return ctx.call("expand_dims", ctx.x(0), axis=tuple(axes))


@converter("Concat", since=4)
def convert_concat(ctx: NodeContext) -> Expr | Value:
    """``concat`` (at import time for shape values)."""
    n = ctx.n_inputs
    r = ctx.rank(0)
    axis = norm_axis(ctx, ctx.attr_int("axis"), r)
    syms = [ctx.sym(i) for i in range(n)]
    if all(s is not None for s in syms) and any(s.dtype == object for s in syms):  # type: ignore[union-attr]
        return ctx.symbolic(np.concatenate(syms, axis=axis), ctx.dtype(0))  # type: ignore[arg-type]
    xs = [ctx.x(i) for i in range(n)]
    if len(xs) == 1:
        return xs[0]
    from ....ir.expr import Tuple

    return ctx.call("concat", Tuple(tuple(xs)), axis=axis)


@converter("Split", since=2)
def convert_split(ctx: NodeContext) -> list[Expr | Value]:
    """``split`` into the given sizes, or into equal parts (the last one smaller)."""
    shape = ctx.shape(0)
    axis = norm_axis(ctx, ctx.attr_int("axis", 0), len(shape))
    n_out = len(ctx.node.output)
    if ctx.opset >= 13:
        sizes = ctx.const_ints(1, "the split sizes") if ctx.has(1) else None
    else:
        sizes = ctx.attr_ints("split", None)
    if sizes is None and ctx.opset >= 18 and ctx.has_attr("num_outputs"):
        n_out = ctx.attr_int("num_outputs")
    try:   # before any work: num_outputs=2**31-1 would make as many outputs
        check_limit("max_outputs", n_out, "the number of outputs")
    except LimitExceeded as e:
        ctx.fail(str(e), "num_outputs" if ctx.has_attr("num_outputs") else None)
    if n_out != len(ctx.node.output):  # (onnxruntime refuses it too)
        ctx.fail(f"num_outputs is {n_out}, but the node has {len(ctx.node.output)} "
                 "outputs; they must agree", "num_outputs")
    if sizes is not None:
        if len(sizes) != n_out:
            ctx.fail(f"{len(sizes)} split sizes for {n_out} outputs")
        points = list(np.cumsum(sizes)[:-1]) if sizes else []
        d = shape[axis]
        if isinstance(d, int) and sum(sizes) != d:
            ctx.fail(f"the split sizes {sizes} do not add up to the axis size {d}")
        ios: int | tuple[int, ...] = tuple(int(p) for p in points)
    else:
        ios = n_out
    s = ctx.sym(0)
    if s is not None and s.dtype == object:
        parts = np.split(s, ios if isinstance(ios, int) else list(ios), axis=axis)
        return [ctx.symbolic(p, ctx.dtype(0)) for p in parts]
    if (isinstance(ios, int) and ios == 1) or ios == ():
        return [ctx.x(0)]
    y = ctx.call("split", ctx.x(0), indices_or_sections=ios, axis=axis)
    return [ctx.item(y, i) for i in range(n_out)]


# -------------------------------------------------------------------------- slice


@converter("Slice", since=1)
def convert_slice(ctx: NodeContext) -> Expr | Value:
    """``strided_slice``; starts and ends are ints or size expressions computed from the
    input sizes (bounds read from tensor data must be constants), axes and steps
    constants."""
    shape = ctx.shape(0)
    r = len(shape)
    if ctx.opset < 10:
        starts = ctx.attr_ints("starts")
        ends = ctx.attr_ints("ends")
        axes = ctx.attr_ints("axes", list(range(len(starts))))  # type: ignore[arg-type]
        steps = [1] * len(starts)  # type: ignore[arg-type]
    else:
        starts = ctx.dims(1, "the starts")  # type: ignore[assignment]
        ends = ctx.dims(2, "the ends")  # type: ignore[assignment]
        axes = ctx.const_ints(3, "the axes") if ctx.has(3) else list(range(len(starts)))  # type: ignore[arg-type]
        steps = ctx.const_ints(4, "the steps") if ctx.has(4) else [1] * len(starts)  # type: ignore[arg-type]
    if not len(starts) == len(ends) == len(axes) == len(steps):  # type: ignore[arg-type]
        ctx.fail("starts, ends, axes and steps must have the same length")
    axes = norm_axes(ctx, axes, r)
    begin, end = [], []
    for a, b, e, st in zip(axes, starts, ends, steps):  # type: ignore[arg-type]
        if st == 0:
            ctx.fail("a step cannot be 0")
        begin.append(_bound(ctx, b, shape[a], st, "start"))
        end.append(_bound(ctx, e, shape[a], st, "end"))
    s = ctx.sym(0)
    if s is not None and s.dtype == object and all(type(v) is int for v in begin + end):
        index = [slice(None)] * r
        for a, b, e, st in zip(axes, begin, end, steps):
            index[a] = slice(b, e, st)
        return ctx.symbolic(s[tuple(index)], ctx.dtype(0))
    if not axes:
        return ctx.x(0)
    return ctx.call(
        "strided_slice", ctx.x(0), axes=tuple(axes), begin=tuple(begin), end=tuple(end),
        strides=tuple(int(x) for x in steps),
    )  # fmt: skip


def _bound(ctx: NodeContext, v: Dim | None, dim: Dim, step: int, what: str) -> Dim:
    """A slice bound: an int, or a size expression over the model's symbolic sizes
    (``seq``, ``seq - 1``: strided_slice takes those; its type is exact)."""
    if isinstance(v, int):
        return v
    if v is not None and v == dim:
        # the whole axis length: the end for a forward slice, past the start backward
        return TO_END
    if v is not None and is_dim(v):
        return v
    ctx.fail(f"the slice {what} is only known at run time (it comes from tensor data, not "
             "from the input sizes); plait needs it at compile time: pass the input it "
             "comes from in constants= (--input on the command line)")


# ------------------------------------------------------------------------ gather


@converter("Gather", since=1)
def convert_gather(ctx: NodeContext) -> Expr | Value:
    """``take`` (at import time on shape values)."""
    r = ctx.rank(0)
    axis = norm_axis(ctx, ctx.attr_int("axis", 0), r)
    s = ctx.sym(0)
    idx = ctx.maybe_const(1)
    if s is not None and s.dtype == object and idx is not None:
        return ctx.symbolic(np.take(s, idx.astype(np.int64), axis=axis), ctx.dtype(0))
    if idx is not None and idx.ndim == 0:
        i = int(idx)
        d = ctx.shape(0)[axis]
        if isinstance(d, int) and not -d <= i < d:
            ctx.fail(f"index {i} is out of range for axis {axis} of size {d}")
        return select(ctx, ctx.x(0), i, axis)
    return ctx.call("take", ctx.x(0), ctx.x(1), axis=axis)


# ------------------------------------------------------------------------- expand


@converter("Expand", since=8)
def convert_expand(ctx: NodeContext) -> Expr:
    """``broadcast_to`` the bidirectional broadcast of the input shape and the target."""
    dims = ctx.dims(1, "the target shape")
    shape = ctx.shape(0)
    n = max(len(dims), len(shape))
    a = [1] * (n - len(shape)) + list(shape)
    b = [1] * (n - len(dims)) + list(dims)
    out: list[int | str] = []
    for i, (p, q) in enumerate(zip(a, b)):
        if q is None:
            if p == 1:
                ctx.fail(f"axis {i} of the target shape is only known at run time")
            out.append(p)  # type: ignore[arg-type]
        elif q == 1 or p == q:
            out.append(p)  # type: ignore[arg-type]
        elif p == 1:
            out.append(q)
        elif isinstance(p, int) and isinstance(q, int):
            ctx.fail(f"cannot broadcast shape {tuple(shape)} to {tuple(dims)}")
        else:
            out.append(p if isinstance(p, int) else q)  # type: ignore[arg-type]
    if tuple(out) == tuple(shape):
        return ctx.x(0)
    return ctx.call("broadcast_to", ctx.x(0), shape=tuple(out))


@converter("Tile", since=6)
def convert_tile(ctx: NodeContext) -> Expr:
    """``tile``; the repeats are ints or size expressions (``x.repeat(batch, 1, 1)``
    exports a ``Shape``-``Gather``-``Concat`` chain), read from the input sizes when the
    model runs."""
    reps = ctx.dims(1, "the repeats")
    if len(reps) != ctx.rank(0):
        ctx.fail(f"{len(reps)} repeats for a tensor of rank {ctx.rank(0)}")
    for i, r in enumerate(reps):
        if r is None:
            ctx.fail(f"repeat {i} is computed from the input sizes in a way plait cannot "
                     "write as a size (it may be negative); fix the input shapes with "
                     "from_onnx(..., shapes={...})")
        if type(r) is int and r < 0:
            ctx.fail(f"repeat {i} is {r}; repeats must not be negative")
    return ctx.call("tile", ctx.x(0), repeats=tuple(reps))


@converter("ConstantOfShape", since=9)
def convert_constant_of_shape(ctx: NodeContext) -> Expr:
    """``full`` of the attribute value (float32 0 by default)."""
    dims = ctx.dims(0, "the shape")
    if any(d is None for d in dims):
        ctx.fail("the shape is only known at run time")
    value = ctx.attr("value", None)
    arr = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if arr.size != 1:
        ctx.fail(f"must hold one element, got {arr.size}", "value")
    fill = arr[0].item()
    return ctx.call("full", shape=tuple(dims), fill_value=fill, dtype=arr.dtype.name)


@converter("Range", since=11)
def convert_range(ctx: NodeContext) -> Expr:
    """A constant ``arange`` when start, limit and delta are known at import time; for
    an integer range whose length is a size expression (``Range(0, seq, 1)``,
    ``Range(past, past + seq, 1)``: position ids) a running sum of ``delta`` with that
    length, plus the start."""
    dtype = ctx.dtype(0)
    bounds = [ctx.sym(i) for i in range(3)]
    if dtype in ("int32", "int64") and all(b is not None and b.size == 1 for b in bounds):
        start, limit, delta = (b.reshape(-1)[0] for b in bounds)  # type: ignore[union-attr]
        if isinstance(delta, int) and delta > 0 and (_is_size(start) or _is_size(limit)):
            if start is not None and limit is not None:
                return size_range(ctx, start, limit, delta, dtype)
    start, limit, delta = (
        ctx.const(i, w).reshape(-1)[0] for i, w in enumerate(("start", "limit", "delta"))
    )
    if delta == 0:
        ctx.fail("delta cannot be 0")
    stash = ctx.attr_int("stash_type", None)
    compute = {1: "float32", 11: "float64"}.get(stash, dtype) if dtype == "float16" else dtype
    out = np.arange(
        np.asarray(start).astype(compute).item(), limit.item(), delta.item(), dtype=compute
    ).astype(dtype)
    return ctx.constant(out)


def _is_size(e: object) -> bool:
    """True for a symbolic entry that is a size expression (not an int, not unknown)."""
    return e is not None and not isinstance(e, int) and is_dim(e)


def size_range(ctx: NodeContext, start: Dim, limit: Dim, delta: int, dtype: str) -> Expr:
    """``start, start + delta, ...`` below ``limit`` (a positive ``delta``), its length
    the size expression ``max(0, (limit - start + delta - 1) // delta)``."""
    span = symbolic.add(symbolic.sub(limit, start), delta - 1)
    length = symbolic.maximum(0, symbolic.floordiv(span, delta))
    steps = ctx.call("full", shape=(length,), fill_value=delta, dtype=dtype)
    steps = ctx.call("cumsum", steps, axis=0, exclusive=True)
    if start != 0:
        steps = ctx.call("add", steps, scalar(ctx, start, dtype) if isinstance(start, int)
                         else ctx.x(0))  # fmt: skip
    return steps


@converter("EyeLike", since=9)
def convert_eye_like(ctx: NodeContext) -> Expr:
    """An identity-like matrix with ones on diagonal ``k``: a constant for a static
    shape, else computed from the row and column numbers when the model runs."""
    shape = ctx.shape(0)
    if len(shape) != 2:
        ctx.fail(f"the input must be 2-D, got shape {shape}")
    from .common import onnx_dtype

    dtype = (
        onnx_dtype(ctx, ctx.attr_int("dtype"), "dtype") if ctx.has_attr("dtype") else ctx.dtype(0)
    )
    k = ctx.attr_int("k", 0)
    offset = _diagonal_offsets(ctx, shape)
    if isinstance(offset, np.ndarray):
        return ctx.constant((offset == k).astype(dtype))
    return cast(ctx, ctx.call("equal", offset, scalar(ctx, k, "int64")), dtype)


# ---------------------------------------------------------------------------- pad


@converter("Pad", since=2, attr_choices={"mode": ("constant", "reflect", "edge", "wrap")})
def convert_pad(ctx: NodeContext) -> Expr:
    """``pad`` (constant, reflect, edge, wrap); negative pads crop.  Pads computed from
    the input's sizes (padding to a multiple of a window, ``(7 - h % 7) % 7``, as Swin
    and SegFormer export it) are size expressions: in constant mode the tensor is
    concatenated with blocks of the fill value of those sizes (a size of 0 at run time
    adds nothing)."""
    r = ctx.rank(0)
    mode = ctx.attr_str("mode", "constant")
    if ctx.opset < 11:
        pads: list = ctx.attr_ints("pads" if ctx.has_attr("pads") else "paddings")
        value: float | None = ctx.attr_float("value", 0.0)
        value_expr = None
        axes = list(range(r))
    else:
        pads = ctx.dims(1, "the pads")
        value, value_expr = 0.0, None
        if ctx.has(2):
            c = ctx.maybe_const(2)
            if c is not None:
                value = float(c.reshape(-1)[0]) if c.size else 0.0
            else:
                value, value_expr = None, ctx.x(2)
        axes = norm_axes(ctx, ctx.const_ints(3, "the axes"), r) if ctx.has(3) else list(range(r))
    if len(pads) != 2 * len(axes):
        ctx.fail(f"{len(pads)} pads for {len(axes)} axes (need a begin and an end per axis)")
    width: list[Dim] = [0] * (2 * r)
    for k, a in enumerate(axes):
        width[2 * a] = _pad_width(ctx, pads[k], mode)
        width[2 * a + 1] = _pad_width(ctx, pads[k + len(axes)], mode)
    x = ctx.x(0)
    if all(w == 0 for w in width):
        return x
    if value_expr is None:
        return pad_sizes(ctx, x, width, mode, value or 0.0)
    padded = pad_sizes(ctx, x, width, mode, 0.0)
    inside = pad_sizes(ctx, ctx.call("ones_like", x, dtype="bool"), width, mode, 0.0)
    return ctx.call("where", inside, padded, ctx.call("cast", value_expr, dtype=ctx.dtype(0)))


def _pad_width(ctx: NodeContext, w: Dim | None, mode: str) -> Dim:
    """One pad as an int or a size expression that is never negative."""
    if w is None:
        ctx.fail("the pads are computed from the input sizes in a way plait cannot write "
                 "as a size (they may be negative); fix the input shapes with "
                 "from_onnx(..., shapes={...})")
    if isinstance(w, int):
        return w
    if not symbolic.prove_ge(w, 0, ctx.importer.dim_ranges or None):
        ctx.fail(f"the pad {symbolic.dim_text(w)} may be negative (a crop of a symbolic "
                 "size); fix the input shapes with from_onnx(..., shapes={...})")
    if mode != "constant":
        ctx.fail(f"mode {mode!r} with pads computed from symbolic sizes "
                 f"({symbolic.dim_text(w)}) is not supported (constant mode is); fix the "
                 "input shapes with from_onnx(..., shapes={...})")
    return w


def pad_sizes(ctx: NodeContext, x: Expr, width: list[Dim], mode: str, fill: float) -> Expr:
    """``x`` padded by ``width`` (before, after per axis; a symbolic width never
    negative): the int widths by one ``pad``, the symbolic ones by concatenating blocks
    of ``fill`` of their sizes."""
    static = tuple(w if isinstance(w, int) else 0 for w in width)
    if any(static):
        x = ctx.call("pad", x, pad_width=static, pad_mode=mode, pad_value=fill)
    for axis in range(len(width) // 2):
        before, after = width[2 * axis], width[2 * axis + 1]
        if isinstance(before, int) and isinstance(after, int):
            continue
        shape = list(ctx.type_of(x).shape)  # type: ignore[arg-type]
        dtype = ctx.type_of(x).dtype  # type: ignore[union-attr]
        parts = []
        for w, at_end in ((before, False), (after, True)):
            if isinstance(w, int):
                continue
            block = ctx.call("full", shape=tuple(shape[:axis] + [w] + shape[axis + 1:]),
                             fill_value=fill if dtype != "bool" else bool(fill), dtype=dtype)
            parts.append((at_end, block))
        items = [b for e, b in parts if not e] + [x] + [b for e, b in parts if e]
        x = ctx.call("concat", Tuple(tuple(ctx.atom(i) for i in items)), axis=axis)
    return x


# ------------------------------------------------------------- depth and space


@converter("DepthToSpace", since=1, attr_choices={"mode": ("DCR", "CRD")})
def convert_depth_to_space(ctx: NodeContext) -> Expr:
    """Reshape, transpose and reshape (modes DCR and CRD); batch, height and width may
    be symbolic (the result is ``h * blocksize`` by ``w * blocksize``)."""
    b, c, h, w = _nchw(ctx)
    bs = ctx.attr_int("blocksize")
    if not isinstance(c, int) or c % (bs * bs):
        ctx.fail(f"the channels ({c}) must be a static multiple of blocksize**2 ({bs * bs})")
    x = ctx.x(0)
    if ctx.attr_str("mode", "DCR") == "DCR":
        t = reshape(ctx, x, [b, bs, bs, c // (bs * bs), h, w])
        t = ctx.call("permute_dims", t, axes=(0, 3, 4, 1, 5, 2))
    else:
        t = reshape(ctx, x, [b, c // (bs * bs), bs, bs, h, w])
        t = ctx.call("permute_dims", t, axes=(0, 1, 4, 2, 5, 3))
    return reshape(ctx, t, [b, c // (bs * bs), symbolic.mul(h, bs), symbolic.mul(w, bs)])


@converter("SpaceToDepth", since=1, attr_choices={"mode": ("DCR", "CRD")})
def convert_space_to_depth(ctx: NodeContext) -> Expr:
    """Reshape, transpose and reshape (modes DCR and CRD); batch, channels, height and
    width may be symbolic (a size that is no multiple of the blocksize is refused when
    the model runs, as onnxruntime does)."""
    b, c, h, w = _nchw(ctx)
    bs = ctx.attr_int("blocksize")
    for name, d in (("height", h), ("width", w)):
        if isinstance(d, int) and d % bs:
            ctx.fail(f"the {name} ({d}) must be a multiple of the blocksize {bs}")
    # a symbolic height or width is split with a -1: the reshape refuses a size that
    # no multiple of the blocksize when the model runs, and the number of blocks is
    # bound to a fresh size
    t = reshape(ctx, ctx.x(0), [b, c, h // bs if isinstance(h, int) else -1, bs, w])
    hb = ctx.type_of(t).shape[2]  # type: ignore[index]
    t = reshape(ctx, t, [b, c, hb, bs, w // bs if isinstance(w, int) else -1, bs])
    wb = ctx.type_of(t).shape[4]  # type: ignore[index]
    perm = (0, 3, 5, 1, 2, 4) if ctx.attr_str("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    t = ctx.call("permute_dims", t, axes=perm)
    return reshape(ctx, t, [b, symbolic.mul(c, bs * bs), hb, wb])


def _nchw(ctx: NodeContext) -> tuple:
    shape = ctx.shape(0)
    if len(shape) != 4:
        ctx.fail(f"the input must be 4-D (N, C, H, W), got shape {shape}")
    return shape


# -------------------------------------------------------------------------- trilu


@converter("Trilu", since=14)
def convert_trilu(ctx: NodeContext) -> Expr:
    """``where`` with a triangular mask: a constant for static sizes and a constant
    ``k``; otherwise (a causal mask of ``seq`` by ``seq``, a ``k`` read from a tensor)
    computed when the model runs from the column minus the row number."""
    shape = ctx.shape(0)
    if len(shape) < 2:
        ctx.fail(f"the input must have at least two axes, got shape {shape}")
    upper = ctx.attr_int("upper", 1)
    k_value = ctx.maybe_const(1) if ctx.has(1) else np.zeros(1, np.int64)
    if k_value is not None and k_value.size != 1:
        ctx.fail(f"k must hold one value, got {k_value.size}")
    offset = _diagonal_offsets(ctx, shape)
    if k_value is not None:
        k = int(k_value.reshape(-1)[0])
        if isinstance(offset, np.ndarray):
            ones = np.ones(offset.shape, dtype=bool)
            mask: Expr = ctx.constant(np.triu(ones, k) if upper else np.tril(ones, k))
            return ctx.call("where", mask, ctx.x(0), scalar(ctx, 0, ctx.dtype(0)))
        k_expr: Expr = scalar(ctx, k, "int64")
    else:
        k_expr = cast(ctx, reshape(ctx, ctx.x(1), []), "int64")
    off = ctx.constant(offset) if isinstance(offset, np.ndarray) else offset
    mask = ctx.call("greater_equal" if upper else "less_equal", off, k_expr)
    return ctx.call("where", mask, ctx.x(0), scalar(ctx, 0, ctx.dtype(0)))


def _diagonal_offsets(ctx: NodeContext, shape: tuple) -> np.ndarray | Expr:
    """``column - row`` over the last two axes of input 0 (``(n, m)``, int64): a numpy
    array for static sizes, else computed from the row and column numbers when the model
    runs."""
    n, m = shape[-2], shape[-1]
    if isinstance(n, int) and isinstance(m, int):
        return np.arange(m, dtype=np.int64)[None, :] - np.arange(n, dtype=np.int64)[:, None]
    rows = ctx.call("expand_dims", size_range(ctx, 0, n, 1, "int64"), axis=1)
    return ctx.call("subtract", size_range(ctx, 0, m, 1, "int64"), rows)
