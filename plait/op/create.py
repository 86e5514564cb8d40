"""Operators that create tensors: ``full`` and friends, ``arange`` and ``one_hot``."""

from __future__ import annotations

import math

from ..ir.types import TensorType, Type
from ..runtime import numpy_ops as npo
from .define import op_definer
from .infer import INT_DTYPES, check_dtype_class, normalize_axis, shape_str, tensor_arg
from .registry import AttrSpec, InferContext

define = op_definer(__name__)


def scalar_dtype(value: object) -> str:
    """The dtype a fill value implies: bool, int64 or float32."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    return "float32"


def check_fill_value(ctx: InferContext, value: object, dtype: str | None) -> None:
    """Fail unless ``value`` is a bool, int or float that ``dtype`` represents."""
    if not isinstance(value, bool | int | float):
        ctx.fail(f"{ctx.op.name}: fill_value must be a bool, int or float, got {value!r}")
    if dtype in INT_DTYPES and not (isinstance(value, int) or float(value).is_integer()):
        ctx.fail(
            f"{ctx.op.name}: fill_value {value!r} is not an integer but dtype is {dtype} "
            "(pass a float dtype)"
        )


def infer_full(ctx: InferContext) -> Type:
    """The attribute shape and dtype (from fill_value when dtype is None)."""
    shape, value = ctx.attrs["shape"], ctx.attrs["fill_value"]
    if any(isinstance(d, int) and d < 0 for d in shape):
        ctx.fail(f"full: negative size in shape {shape_str(shape)}")
    dtype = ctx.attrs["dtype"] or scalar_dtype(value)
    check_fill_value(ctx, value, dtype)
    return TensorType(tuple(shape), dtype)


_FILL = AttrSpec("any", doc="a bool, int or float")
_DTYPE_OR_NONE = AttrSpec("dtype", default=None, doc="result dtype; None: see the op")

define(
    "full",
    inputs=(),
    attrs={
        "shape": AttrSpec("dims", doc="the result shape"),
        "fill_value": _FILL,
        "dtype": AttrSpec(
            "dtype", default=None, doc="None: bool, int64 or float32 by fill_value's type"
        ),
    },
    infer_type=infer_full,
    pattern="elemwise",
    reference=npo.full,
    doc="a tensor of the given shape filled with one value",
)


def infer_like(ctx: InferContext) -> Type:
    """x's shape; the attribute dtype or x's."""
    x = tensor_arg(ctx, 0)
    dtype = ctx.attrs["dtype"] or x.dtype
    if "fill_value" in ctx.attrs:
        check_fill_value(ctx, ctx.attrs["fill_value"], dtype)
    return TensorType(x.shape, dtype)


define(
    "full_like",
    inputs=("x",),
    attrs={"fill_value": _FILL, "dtype": _DTYPE_OR_NONE},
    infer_type=infer_like,
    pattern="elemwise",
    reference=npo.full_like,
    doc="a tensor shaped like x (dtype: x's unless given) filled with one value",
)

for _name, _v in (("zeros_like", "zeros"), ("ones_like", "ones")):
    define(
        _name,
        inputs=("x",),
        attrs={"dtype": _DTYPE_OR_NONE},
        infer_type=infer_like,
        pattern="elemwise",
        reference=npo.IMPLS[_name],
        doc=f"{_v} shaped like x (dtype: x's unless given)",
    )


def infer_arange(ctx: InferContext) -> Type:
    """A 1-D tensor of ceil((end - start) / step) elements (at least 0)."""
    start, end, step = ctx.attrs["start"], ctx.attrs["end"], ctx.attrs["step"]
    dtype = ctx.attrs["dtype"]
    if step == 0:
        ctx.fail("arange: step cannot be 0")
    if not all(math.isfinite(v) for v in (start, end, step)):
        ctx.fail(f"arange: start, end and step must be finite, got {start}, {end}, {step}")
    if dtype in INT_DTYPES and not (float(start).is_integer() and float(step).is_integer()):
        ctx.fail(f"arange: start {start} and step {step} must be integers for dtype {dtype}")
    if dtype == "bool":
        ctx.fail("arange: dtype bool makes no sense; use an integer or float dtype")
    return TensorType((npo.arange_length(start, end, step),), dtype)


define(
    "arange",
    inputs=(),
    attrs={
        "start": AttrSpec("float", default=0.0, doc="first value"),
        "end": AttrSpec("float", doc="bound, excluded"),
        "step": AttrSpec("float", default=1.0, doc="increment (not 0)"),
        "dtype": AttrSpec("dtype", default="int64"),
    },
    infer_type=infer_arange,
    pattern="injective",
    reference=npo.arange,
    doc="start, start + step, ... up to end, excluded (ONNX Range)",
)


def infer_one_hot(ctx: InferContext) -> Type:
    """The shape of indices with ``depth`` inserted at ``axis`` (of the result)."""
    idx = tensor_arg(ctx, 0)
    check_dtype_class(ctx, 0, idx, "int")
    depth = ctx.attrs["depth"]
    if depth < 0:
        ctx.fail(f"one_hot: depth must not be negative, got {depth}")
    dtype = ctx.attrs["dtype"]
    if idx.shape is None:
        return TensorType(None, dtype)
    a = normalize_axis(ctx, ctx.attrs["axis"], len(idx.shape) + 1)
    return TensorType(idx.shape[:a] + (depth,) + idx.shape[a:], dtype)


define(
    "one_hot",
    inputs=("indices",),
    attrs={
        "depth": AttrSpec("int", doc="number of classes"),
        "axis": AttrSpec("int", default=-1, doc="position of the new axis in the result"),
        "on_value": AttrSpec("float", default=1.0),
        "off_value": AttrSpec("float", default=0.0),
        "dtype": AttrSpec("dtype", default="float32"),
    },
    infer_type=infer_one_hot,
    pattern="injective",
    reference=npo.one_hot,
    doc="on_value at each index along a new axis, off_value elsewhere (negative indices "
    "count from depth)",
)
