"""Views and shape manipulation: view, permute, expand, squeeze, slice, cat, split, ..."""

from __future__ import annotations

from ....ir import symbolic as sym
from ....ir.expr import Expr
from ....ir.types import Dim
from ..context import NodeContext, normalize_dim
from ..registry import converter
from ..symbolic import SymValue

INT_MAX = 2**63 - 1


def _target_shape(ctx: NodeContext) -> tuple[int | str, ...]:
    """The result's shape as a reshape target: ints and symbolic names, -1 for one size
    plait has no name for yet (the importer then binds it)."""
    shape = ctx.out_shape()
    unknown = [i for i, d in enumerate(shape) if d is None]
    if len(unknown) > 1:
        ctx.fail(f"the target shape {tuple(ctx.out_val().shape)} has {len(unknown)} sizes "
                 "computed from symbolic sizes; plait can leave only one to -1")
    return tuple(-1 if d is None else d for d in shape)


@converter(["aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
            "aten.view_copy.default"])
def view(ctx: NodeContext) -> Expr:
    """reshape (to the shape PyTorch inferred: -1 and symbolic sizes resolved)"""
    x = ctx.x(0)
    target = _target_shape(ctx)
    if ctx.ty(x).shape == target:
        return x
    return ctx.call("reshape", x, shape=target)


@converter(["aten.permute.default", "aten.permute_copy.default"])
def permute(ctx: NodeContext) -> Expr:
    """permute_dims"""
    x = ctx.x(0)
    r = ctx.rank(x)
    axes = tuple(normalize_dim(d, r) for d in ctx.ints("dims"))
    if axes == tuple(range(r)):
        return x
    return ctx.call("permute_dims", x, axes=axes)


@converter(["aten.t.default", "aten.numpy_T.default"])
def transpose_2d(ctx: NodeContext) -> Expr:
    """permute_dims (reversed axes)"""
    x = ctx.x(0)
    r = ctx.rank(x)
    return x if r < 2 else ctx.call("permute_dims", x, axes=tuple(reversed(range(r))))


@converter("aten.transpose.int")
def transpose(ctx: NodeContext) -> Expr:
    """permute_dims (two axes swapped)"""
    x = ctx.x(0)
    r = ctx.rank(x)
    if r < 2:
        return x
    a, b = normalize_dim(ctx.int_arg("dim0"), r), normalize_dim(ctx.int_arg("dim1"), r)
    axes = list(range(r))
    axes[a], axes[b] = axes[b], axes[a]
    return ctx.call("permute_dims", x, axes=tuple(axes))


@converter(["aten.expand.default", "aten.expand_copy.default"])
def expand(ctx: NodeContext) -> Expr:
    """broadcast_to (to the shape PyTorch inferred)"""
    x = ctx.x(0)
    target = ctx.out_shape()
    if any(d is None for d in target):
        ctx.fail(f"the target shape {tuple(ctx.out_val().shape)} has sizes computed from "
                 "symbolic sizes")
    if ctx.ty(x).shape == tuple(target):
        return x
    return ctx.call("broadcast_to", x, shape=tuple(target))  # type: ignore[arg-type]


@converter(["aten.unsqueeze.default", "aten.unsqueeze_copy.default"])
def unsqueeze(ctx: NodeContext) -> Expr:
    """expand_dims"""
    x = ctx.x(0)
    return ctx.call("expand_dims", x, axis=normalize_dim(ctx.int_arg("dim"), ctx.rank(x) + 1))


@converter(["aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
            "aten.squeeze_copy.dims", "aten.squeeze_copy.dim"])
def squeeze(ctx: NodeContext) -> Expr:
    """squeeze (only the given axes of size 1, like torch)"""
    x = ctx.x(0)
    shape = ctx.ty(x).shape
    assert shape is not None
    r = len(shape)
    if r == 0:
        return x
    if ctx.op.endswith(".default"):
        dims = list(range(r))
    else:
        dims = ctx.ints(1)
    axes = tuple(sorted({normalize_dim(d, r) for d in dims if shape[normalize_dim(d, r)] == 1}))
    if not axes:
        return x
    return ctx.call("squeeze", x, axis=axes)


def _bound(ctx: NodeContext, v: object, size: object) -> Dim:
    """A slice bound: an int, or a size expression over the model's symbolic sizes (a
    bound equal to the axis' size is the end)."""
    if v is None:
        return 0
    if isinstance(v, SymValue):
        dim = ctx.importer.dim_of(v.expr)
        if dim is None:
            ctx.unsupported(f"the symbolic slice bound {v.expr} (a size computed from tensor "
                            "data, or an operation plait's size expressions do not have)")
        return INT_MAX if dim == size else _from_start(ctx, dim, size)
    return int(v)  # type: ignore[call-overload]


def _from_start(ctx: NodeContext, bound: Dim, size: object) -> Dim:
    """A symbolic bound that PyTorch's ranges prove >= 0 (``n - 2`` with ``n >= 4``), in
    a form plait's slice inference reads as counting from the start: ``size - 2`` as
    ``-2``, otherwise ``max(0, bound)`` (the same value, visibly >= 0)."""
    ranges = ctx.importer.range_facts
    if sym.bounds(bound)[0] >= 0 or sym.bounds(bound, ranges)[0] < 0:
        return bound
    if isinstance(size, int | str | sym.SymExpr):
        offset = sym.sub(bound, size)
        if isinstance(offset, int) and offset < 0:
            return offset
    return sym.maximum(0, bound)


@converter(["aten.slice.Tensor", "aten.slice_copy.Tensor"])
def slice_(ctx: NodeContext) -> Expr:
    """strided_slice"""
    x = ctx.x(0)
    shape = ctx.ty(x).shape
    assert shape is not None
    dim = normalize_dim(ctx.int_arg("dim", 0), len(shape))
    start = ctx.arg("start", None)
    end = ctx.arg("end", None)
    step = ctx.int_arg("step", 1)
    b = _bound(ctx, start, shape[dim])
    e = INT_MAX if end is None else _bound(ctx, end, shape[dim])
    if isinstance(e, int):
        e = min(e, INT_MAX)
    if b == 0 and e == INT_MAX and step == 1:
        return x
    return ctx.call("strided_slice", x, axes=(dim,), begin=(b,), end=(e,), strides=(step,))


@converter(["aten.select.int", "aten.select_copy.int"])
def select(ctx: NodeContext) -> Expr:
    """take with a scalar index (a SymInt index computed at run time)"""
    x = ctx.x(0)
    index = ctx.arg("index")
    dim = normalize_dim(ctx.int_arg("dim"), ctx.rank(x))
    if isinstance(index, SymValue):  # x[:, n - 1]: the index computed at run time
        return ctx.call("take", x, ctx.importer.sym_tensor(index.expr, ctx.span), axis=dim)
    return ctx.call("take", x, ctx.scalar(int(index), "int64"), axis=dim)


@converter("aten.cat.default")
def cat(ctx: NodeContext) -> Expr:
    """concat (legacy empty 1-D operands dropped)"""
    tensors = [t for t in ctx.tensors(0) if ctx.ty(t).shape != (0,)]
    out = ctx.out_dtype()
    tensors = [ctx.cast(t, out) for t in tensors]
    if not tensors:
        return ctx.call("full", shape=(0,), fill_value=0, dtype=out)
    if len(tensors) == 1:
        return tensors[0]
    dim = normalize_dim(ctx.int_arg("dim", 0), ctx.rank(tensors[0]))
    return ctx.call("concat", tensors, axis=dim)


def _split(ctx: NodeContext, x: Expr, sizes: list[int], dim: int) -> list:
    if len(sizes) == 1:
        return [x]
    idx, acc = [], 0
    for s in sizes[:-1]:
        acc += s
        idx.append(acc)
    parts = ctx.call("split", x, indices_or_sections=tuple(idx), axis=dim)
    return [ctx.item(parts, i) for i in range(len(sizes))]


@converter(["aten.split_with_sizes.default", "aten.split_with_sizes_copy.default"])
def split_with_sizes(ctx: NodeContext) -> list:
    """split at the cumulative sizes"""
    x = ctx.x(0)
    dim = normalize_dim(ctx.int_arg("dim", 0), ctx.rank(x))
    return _split(ctx, x, ctx.ints("split_sizes"), dim)


@converter(["aten.split.Tensor", "aten.split_copy.Tensor"])
def split(ctx: NodeContext) -> list:
    """split into pieces of split_size (the last one smaller)"""
    x = ctx.x(0)
    dim = normalize_dim(ctx.int_arg("dim", 0), ctx.rank(x))
    sizes = [int(v.shape[dim]) for v in ctx.out_val()]
    return _split(ctx, x, sizes, dim)


@converter(["aten.unbind.int", "aten.unbind_copy.int"])
def unbind(ctx: NodeContext) -> list:
    """take of each index along dim"""
    x = ctx.x(0)
    dim = normalize_dim(ctx.int_arg("dim", 0), ctx.rank(x))
    n = len(ctx.out_val())
    return [ctx.call("take", x, ctx.scalar(i, "int64"), axis=dim) for i in range(n)]


@converter("aten.flip.default")
def flip(ctx: NodeContext) -> Expr:
    """strided_slice with step -1"""
    x = ctx.x(0)
    r = ctx.rank(x)
    dims = sorted({normalize_dim(d, r) for d in ctx.ints("dims")})
    if not dims:
        return x
    n = len(dims)
    return ctx.call("strided_slice", x, axes=tuple(dims), begin=(-1,) * n,
                    end=(-INT_MAX,) * n, strides=(-1,) * n)


@converter("aten.repeat.default")
def repeat(ctx: NodeContext) -> Expr:
    """tile (leading axes added); a repeat may be a symbolic size (``x.repeat(b, 1)``)."""
    x = ctx.x(0)
    reps = ctx.dims("repeats")
    if None in reps:
        ctx.fail(f"the repeats {reps} hold a symbolic size plait has no name for")
    r = ctx.rank(x)
    if len(reps) > r:
        x = ctx.call("reshape", x, shape=(1,) * (len(reps) - r) + tuple(ctx.ty(x).shape or ()))
    return ctx.call("tile", x, repeats=tuple(reps))
