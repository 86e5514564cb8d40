"""Shape-manipulating operators."""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType, Type
from .infer import normalize_axis, tensor_arg, tuple_arg
from .registry import AttrSpec, InferContext, register_op


def _split_dims(dims) -> tuple[int, list[str]]:
    static, names = 1, []
    for d in dims:
        if isinstance(d, int):
            static *= d
        else:
            names.append(d)
    return static, names


def infer_reshape(ctx: InferContext) -> Type:
    x = tensor_arg(ctx, 0)
    shape = list(ctx.attrs["shape"])
    if shape.count(-1) > 1:
        ctx.fail(f"reshape: at most one -1 in shape {tuple(shape)}")
    if any(isinstance(d, int) and d < -1 for d in shape):
        ctx.fail(f"reshape: negative size in shape {tuple(shape)}")
    if x.shape is None:
        if -1 in shape:
            return TensorType(None, x.dtype)
        return TensorType(tuple(shape), x.dtype)
    in_static, in_names = _split_dims(x.shape)
    out_static, out_names = _split_dims(d for d in shape if d != -1)
    for n in list(out_names):
        if n in in_names:
            in_names.remove(n)
            out_names.remove(n)
    if -1 in shape:
        if out_names or out_static == 0 or in_static % out_static:
            if not out_names and not in_names:
                ctx.fail(f"reshape: cannot reshape {x.shape} into {tuple(shape)}")
            return TensorType(None, x.dtype)
        ratio = in_static // out_static
        if not in_names:
            fill: int | str = ratio
        elif len(in_names) == 1 and ratio == 1:
            fill = in_names[0]
        else:
            return TensorType(None, x.dtype)
        shape[shape.index(-1)] = fill
    elif not in_names and not out_names and in_static != out_static:
        ctx.fail(
            f"reshape: cannot reshape {x.shape} ({in_static} elements) into "
            f"{tuple(shape)} ({out_static} elements)"
        )
    return TensorType(tuple(shape), x.dtype)


register_op(
    "reshape",
    inputs=("x",),
    attrs={"shape": AttrSpec("dims", doc="the new shape; one entry may be -1")},
    infer_type=infer_reshape,
    pattern="injective",
    reference=lambda x, shape: np.reshape(x, shape),
    doc="the same elements in a new shape",
)


def infer_permute_dims(ctx: InferContext) -> Type:
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


register_op(
    "permute_dims",
    inputs=("x",),
    attrs={"axes": AttrSpec("ints", default=None, doc="the permutation; None reverses")},
    infer_type=infer_permute_dims,
    pattern="injective",
    reference=lambda x, axes: np.transpose(x, axes),
    doc="permute the axes (transpose)",
)


def infer_concat(ctx: InferContext) -> Type:
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
    total: int | str = 0
    for i, t in enumerate(ts):
        if len(t.shape) != nd:
            ctx.fail(f"concat: tensor {i} has rank {len(t.shape)}, tensor 0 has rank {nd}", arg=0)
        for k in range(nd):
            if k != axis and isinstance(t.shape[k], int) and isinstance(out[k], int):
                if t.shape[k] != out[k]:
                    ctx.fail(
                        f"concat: tensor {i} has shape {t.shape}, which differs from "
                        f"{ts[0].shape} outside axis {axis}",
                        arg=0,
                    )
        d = t.shape[axis]
        if isinstance(total, int) and isinstance(d, int):
            total += d
        else:
            total = "?"
    if total == "?":
        return TensorType(None, dtype)
    out[axis] = total
    return TensorType(tuple(out), dtype)


register_op(
    "concat",
    inputs=("tensors",),
    attrs={"axis": AttrSpec("int", default=0)},
    infer_type=infer_concat,
    pattern="injective",
    reference=lambda tensors, axis: np.concatenate(tensors, axis=axis),
    doc="join a tuple of tensors along an axis",
)
