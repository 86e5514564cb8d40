"""Indexing ops: ``GatherElements``, ``GatherND``, ``ScatterElements``, ``ScatterND``,
``TopK``, ``OneHot``, ``ReverseSequence``, and the data-dependent ops that plait can
only take when their input is a constant (``NonZero``, ``Compress``, ``Unique``)."""

from __future__ import annotations

import math

import numpy as np

from ....ir import symbolic
from ....ir.expr import Expr, Tuple
from ..context import NodeContext
from ..registry import converter
from ..values import Value
from .common import cast, norm_axis, reshape, scalar, select

_REDUCTIONS = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@converter("GatherElements", since=11)
def convert_gather_elements(ctx: NodeContext) -> Expr:
    """``gather_elements``."""
    axis = norm_axis(ctx, ctx.attr_int("axis", 0), ctx.rank(0))
    return ctx.call("gather_elements", ctx.x(0), ctx.x(1), axis=axis)


@converter(
    ("ScatterElements", "Scatter"), since=9,
    attr_choices={"reduction": ("none", "add", "mul", "max", "min")},
)  # fmt: skip
def convert_scatter_elements(ctx: NodeContext) -> Expr:
    """``scatter_elements`` (reductions none, add, mul, max, min)."""
    axis = norm_axis(ctx, ctx.attr_int("axis", 0), ctx.rank(0))
    red = _REDUCTIONS[ctx.attr_str("reduction", "none")]
    return ctx.call("scatter_elements", ctx.x(0), ctx.x(1), ctx.x(2), axis=axis, reduction=red)


def _flat_index(ctx: NodeContext, idx: Expr, dims: list[int], batch: list[int]) -> Expr:
    """The row-major linear index of ``idx[..., k]`` over ``dims`` (negative entries
    count from the end); with batch axes, offset by each batch element's block."""
    k = len(dims)
    idx = cast(ctx, idx, "int64")
    sizes = ctx.constant(np.asarray(dims, np.int64))
    neg = ctx.call("less", idx, scalar(ctx, 0, "int64"))
    idx = ctx.call("where", neg, ctx.call("add", idx, sizes), idx)
    strides = [math.prod(dims[i + 1 :]) for i in range(k)]
    flat = ctx.call(
        "sum", ctx.call("multiply", idx, ctx.constant(np.asarray(strides, np.int64))), axis=-1
    )
    if batch:
        ishape = ctx.type_of(flat).shape
        assert ishape is not None
        block = math.prod(dims)
        offs = np.arange(math.prod(batch), dtype=np.int64).reshape(batch) * block
        offs = offs.reshape(batch + [1] * (len(ishape) - len(batch)))
        flat = ctx.call("add", flat, ctx.constant(offs))
    return flat


@converter("GatherND", since=11)
def convert_gather_nd(ctx: NodeContext) -> Expr:
    """``take`` of linear indices from the data with the batch and indexed axes merged;
    symbolic sizes (batch or indexed axes) are read when the model runs."""
    dshape, ishape = ctx.shape(0), ctx.shape(1)
    b = ctx.attr_int("batch_dims", 0)
    k = ishape[-1]
    if not isinstance(k, int):
        ctx.fail(f"the last index size must be static (data {dshape}, indices {ishape}); "
                 "fix the input shapes with from_onnx(..., shapes={...})")
    if b + k > len(dshape):
        ctx.fail(f"batch_dims {b} plus the index size {k} exceed the data's rank {len(dshape)}")
    batch, dims = list(dshape[:b]), list(dshape[b : b + k])
    if all(isinstance(d, int) for d in batch + dims):
        flat = _flat_index(ctx, ctx.x(1), dims, batch)  # type: ignore[arg-type]
    else:
        if all(isinstance(d, int) for d in dims):
            flat = _flat_index(ctx, ctx.x(1), dims, [])  # type: ignore[arg-type]
        else:
            flat = _flat_index_at_run_time(ctx, ctx.x(1), k, first=b)
        if batch:
            flat = ctx.call("add", flat, _batch_offsets(ctx, batch, b, k, len(ishape) - 1 - b))
    rest = list(dshape[b + k :])
    data = reshape(ctx, ctx.x(0), [symbolic.product(batch + dims)] + rest)
    return ctx.call("take", data, flat, axis=0)


def _batch_offsets(ctx: NodeContext, batch: list, b: int, k: int, inner: int) -> Expr:
    """Where each batch element's block starts in the data with its first ``b + k``
    axes merged: ``arange(prod(batch)) * block``, shaped ``batch + [1] * inner``; the
    block size (the product of axes ``b .. b + k`` of input 0) is read when the model
    runs if it is symbolic."""
    count = symbolic.product(batch)
    steps = ctx.call("full", shape=(count,), fill_value=1, dtype="int64")
    offs = ctx.call("cumsum", steps, axis=0, exclusive=True)
    block = symbolic.product(ctx.shape(0)[b : b + k])
    if isinstance(block, int):
        size: Expr = scalar(ctx, block, "int64")
    else:
        sizes = ctx.call("strided_slice", ctx.call("shape_of", ctx.x(0)),
                         axes=(0,), begin=(b,), end=(b + k,))  # fmt: skip
        size = ctx.call("prod", sizes)
    offs = ctx.call("multiply", offs, size)
    return reshape(ctx, offs, batch + [1] * inner)


def _flat_index_at_run_time(ctx: NodeContext, idx: Expr, k: int, first: int = 0) -> Expr:
    """The row-major linear index of ``k``-tuples into axes ``first .. first + k`` of
    input 0, whose sizes are read with ``shape_of`` when the model runs (negatives count
    from the end): ``((i0 * d1 + i1) * d2 + i2) ...``."""
    idx = cast(ctx, idx, "int64")
    sizes = ctx.call("strided_slice", ctx.call("shape_of", ctx.x(0)),
                     axes=(0,), begin=(first,), end=(first + k,))  # fmt: skip
    neg = ctx.call("less", idx, scalar(ctx, 0, "int64"))
    idx = ctx.call("where", neg, ctx.call("add", idx, sizes), idx)
    last = len(ctx.shape(1)) - 1
    flat = select(ctx, idx, 0, last)
    for i in range(1, k):
        flat = ctx.call("multiply", flat, select(ctx, sizes, i, 0))
        flat = ctx.call("add", flat, select(ctx, idx, i, last))
    return flat


@converter("ScatterND", since=11, attr_choices={"reduction": ("none", "add", "mul", "max", "min")})
def convert_scatter_nd(ctx: NodeContext) -> Expr:
    """``scatter_elements`` on the data with the indexed axes merged; symbolic sizes of
    the data and the indices are read when the model runs."""
    dshape, ishape = ctx.shape(0), ctx.shape(1)
    k = ishape[-1]
    if not isinstance(k, int):
        ctx.fail(f"the last index size must be static (data {dshape}, indices {ishape}); "
                 "fix the input shapes with from_onnx(..., shapes={...})")
    if k > len(dshape):
        ctx.fail(f"the index size {k} exceeds the data's rank {len(dshape)}")
    dims, rest = list(dshape[:k]), list(dshape[k:])
    n_up, width = symbolic.product(ishape[:-1]), symbolic.product(rest)
    if all(isinstance(d, int) for d in dims):
        flat = _flat_index(ctx, ctx.x(1), dims, [])  # type: ignore[arg-type]
    else:
        flat = _flat_index_at_run_time(ctx, ctx.x(1), k)
    flat = reshape(ctx, flat, [n_up, 1])
    flat = ctx.call("broadcast_to", flat, shape=(n_up, width))
    data = reshape(ctx, ctx.x(0), [symbolic.product(dims), width])
    upd = reshape(ctx, ctx.x(2), [n_up, width])
    red = _REDUCTIONS[ctx.attr_str("reduction", "none")]
    y = ctx.call("scatter_elements", data, flat, upd, axis=0, reduction=red)
    return reshape(ctx, y, list(dshape))


@converter("TopK", since=1)
def convert_topk(ctx: NodeContext) -> list[Expr]:
    """``topk``; k must be known at import time."""
    axis = norm_axis(ctx, ctx.attr_int("axis", -1), ctx.rank(0))
    k = int(ctx.const(1, "k").reshape(-1)[0]) if ctx.opset >= 10 else ctx.attr_int("k")
    y = ctx.call(
        "topk", ctx.x(0), k=k, axis=axis, largest=bool(ctx.attr_int("largest", 1)),
        sorted=bool(ctx.attr_int("sorted", 1)),
    )  # fmt: skip
    return [ctx.item(y, 0), ctx.item(y, 1)]


@converter("OneHot", since=9)
def convert_one_hot(ctx: NodeContext) -> Expr:
    """``one_hot``; depth must be known at import time, the values may come at run time."""
    depth = int(np.asarray(ctx.const(1, "depth")).reshape(-1)[0])
    axis = ctx.attr_int("axis", -1)
    r = ctx.rank(0) + 1
    axis = norm_axis(ctx, axis, r)
    idx = ctx.x(0)
    if ctx.dtype(0) not in ("int32", "int64"):
        idx = cast(ctx, idx, "int64")
    dtype = ctx.dtype(2)
    values = ctx.maybe_const(2)
    exact = values is not None and (
        np.dtype(dtype).kind in "fb" or bool(np.all(np.abs(values.astype(np.float64)) < 2**52))
    )
    if exact:
        assert values is not None
        off, on = values.reshape(-1)[:2].tolist()
        return ctx.call(
            "one_hot",
            idx,
            depth=depth,
            axis=axis,
            on_value=float(on),
            off_value=float(off),
            dtype=dtype,
        )
    mask = ctx.call(
        "one_hot", idx, depth=depth, axis=axis, on_value=1.0, off_value=0.0, dtype="bool"
    )
    vals = ctx.x(2)
    off, on = select(ctx, vals, 0, 0), select(ctx, vals, 1, 0)
    return ctx.call("where", mask, on, off)


@converter("ReverseSequence", since=10)
def convert_reverse_sequence(ctx: NodeContext) -> Expr:
    """``gather_elements`` along the time axis with indices computed from the lengths."""
    shape = ctx.shape(0)
    r = len(shape)
    ta = norm_axis(ctx, ctx.attr_int("time_axis", 0), r, "time_axis")
    ba = norm_axis(ctx, ctx.attr_int("batch_axis", 1), r, "batch_axis")
    t = shape[ta]
    if not isinstance(t, int):
        ctx.fail(f"the time axis size must be static, got {t}")
    steps = np.arange(t, dtype=np.int64).reshape([t if i == ta else 1 for i in range(r)])
    lens = cast(ctx, ctx.x(1), "int64")
    lens = (
        ctx.call("expand_dims", lens, axis=tuple(i for i in range(r) if i != ba)) if r > 1 else lens
    )
    c_steps = ctx.constant(steps)
    rev = ctx.call("subtract", ctx.call("subtract", lens, scalar(ctx, 1, "int64")), c_steps)
    idx = ctx.call("where", ctx.call("less", c_steps, lens), rev, c_steps)
    idx = ctx.call("broadcast_to", idx, shape=tuple(shape))
    return ctx.call("gather_elements", ctx.x(0), idx, axis=ta)


# ---------------------------------------------------- data-dependent output shapes


def _const_input(ctx: NodeContext, i: int, op: str) -> np.ndarray:
    c = ctx.maybe_const(i)
    if c is None:
        ctx.fail(
            f"{op} has an output shape that depends on the input values, so plait supports it "
            "only when the input is a constant"
        )
    return c


@converter("NonZero", since=9)
def convert_nonzero(ctx: NodeContext) -> Value:
    """The indices of a constant input's nonzero elements."""
    return Value.of_const(np.asarray(np.nonzero(_const_input(ctx, 0, "NonZero")), dtype=np.int64))


@converter("Compress", since=9)
def convert_compress(ctx: NodeContext) -> Expr:
    """``take`` of the positions a constant condition selects."""
    cond = _const_input(ctx, 1, "Compress").astype(bool).reshape(-1)
    axis = ctx.attr_int("axis", None)
    x = ctx.x(0)
    if axis is None:
        x = ctx.call("reshape", x, shape=(-1,))
        axis = 0
    else:
        axis = norm_axis(ctx, axis, ctx.rank(0))
    idx = np.nonzero(cond)[0].astype(np.int64)
    return ctx.call("take", x, ctx.constant(idx), axis=axis)


@converter("Unique", since=11)
def convert_unique(ctx: NodeContext) -> list[Value]:
    """The unique elements of a constant input (with indices, inverse and counts)."""
    x = _const_input(ctx, 0, "Unique")
    axis = ctx.attr_int("axis", None)
    sorted_ = ctx.attr_int("sorted", 1)
    y, idx, inv, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, counts, inv = idx[order], counts[order], rank[inv.reshape(-1)]
    outs = [y, idx.astype(np.int64), inv.reshape(-1).astype(np.int64), counts.astype(np.int64)]
    return [Value.of_const(np.asarray(o)) for o in outs]


__all__ = ["Tuple"]


@converter("TensorScatter", since=24, attr_choices={"mode": ("linear", "circular")})
def convert_tensor_scatter(ctx: NodeContext) -> Expr:
    """``scatter_elements`` of the update into the cache at each batch's write index
    (wrapping around in circular mode); static shapes."""
    cshape, ushape = ctx.static_shape(0), ctx.static_shape(1)
    r = len(cshape)
    axis = norm_axis(ctx, ctx.attr_int("axis", -2), r)
    seq, size = ushape[axis], cshape[axis]
    steps = np.arange(seq, dtype=np.int64).reshape([seq if i == axis else 1 for i in range(r)])
    idx: Expr = ctx.constant(steps)
    if ctx.has(2):
        w = ctx.call("reshape", cast(ctx, ctx.x(2), "int64"), shape=(-1,) + (1,) * (r - 1))
        idx = ctx.call("add", w, idx)
    if ctx.attr_str("mode", "linear") == "circular":
        idx = ctx.call("mod", idx, scalar(ctx, size, "int64"))
    idx = ctx.call("broadcast_to", idx, shape=tuple(ushape))
    return ctx.call("scatter_elements", ctx.x(0), idx, ctx.x(1), axis=axis)
