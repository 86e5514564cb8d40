"""Elementwise and broadcasting operators: arithmetic, comparisons, logic, math
functions, activations, ``clip``, ``cast`` and ``where``."""

from __future__ import annotations

from ..ir.types import TensorType, Type
from ..runtime import numpy_ops as npo
from .define import op_definer
from .infer import (
    broadcast_shapes,
    check_dtype_class,
    infer_broadcast_of,
    infer_elemwise,
    same_dtype,
    tensor_arg,
)
from .registry import AttrSpec, InferContext

define = op_definer(__name__)

# ------------------------------------------------------------------------ binary

# name: (dtype class of the arguments, result dtype or None for theirs, doc)
_BINARY: dict[str, tuple[str, str | None, str]] = {
    "add": ("any", None, "x + y"),
    "subtract": ("numeric", None, "x - y"),
    "multiply": ("any", None, "x * y"),
    "divide": ("numeric", None, "x / y: true division for floats, truncating toward zero for ints"),
    "floor_divide": ("numeric", None, "floor(x / y)"),
    "power": ("numeric", None, "x ** y"),
    "maximum": ("any", None, "elementwise maximum; NaN propagates"),
    "minimum": ("any", None, "elementwise minimum; NaN propagates"),
    "equal": ("any", "bool", "x == y"),
    "not_equal": ("any", "bool", "x != y"),
    "less": ("any", "bool", "x < y"),
    "less_equal": ("any", "bool", "x <= y"),
    "greater": ("any", "bool", "x > y"),
    "greater_equal": ("any", "bool", "x >= y"),
    "logical_and": ("bool", "bool", "x and y"),
    "logical_or": ("bool", "bool", "x or y"),
    "logical_xor": ("bool", "bool", "x xor y"),
    "bitwise_and": ("int_or_bool", None, "x & y"),
    "bitwise_or": ("int_or_bool", None, "x | y"),
    "bitwise_xor": ("int_or_bool", None, "x ^ y"),
}

for _name, (_cls, _out, _doc) in _BINARY.items():
    define(
        _name,
        inputs=("x", "y"),
        infer_type=infer_broadcast_of(_cls, _out),
        pattern="broadcast",
        reference=npo.IMPLS[_name],
        doc=_doc + " (numpy broadcasting)",
    )

define(
    "mod",
    inputs=("x", "y"),
    attrs={
        "fmod": AttrSpec(
            "bool", default=False, doc="sign of x (C fmod) instead of the sign of y (Python %)"
        )
    },
    infer_type=infer_broadcast_of("numeric"),
    pattern="broadcast",
    reference=npo.mod,
    doc="remainder of x / y, with the sign of y (or of x with fmod) (numpy broadcasting)",
)


def infer_where(ctx: InferContext) -> Type:
    """``where(condition, x, y)``: a bool condition, x and y of one dtype, all three
    broadcast together."""
    c, x, y = (tensor_arg(ctx, i) for i in range(3))
    check_dtype_class(ctx, 0, c, "bool")
    dtype = same_dtype(ctx, [x, y], first=1)
    return TensorType(broadcast_shapes(ctx, [c.shape, x.shape, y.shape]), dtype)


define(
    "where",
    inputs=("condition", "x", "y"),
    infer_type=infer_where,
    pattern="broadcast",
    reference=npo.where,
    doc="x where condition is true, else y (numpy broadcasting of all three)",
)

# ------------------------------------------------------------------------- unary

# name: (dtype class of the argument, result dtype or None for its, doc)
_UNARY: dict[str, tuple[str, str | None, str]] = {
    "abs": ("numeric", None, "|x|"),
    "neg": ("numeric", None, "-x"),
    "sign": ("numeric", None, "-1, 0 or 1 by the sign of x"),
    "square": ("numeric", None, "x * x"),
    "relu": ("numeric", None, "max(x, 0)"),
    "exp": ("float", None, "e ** x"),
    "expm1": ("float", None, "e ** x - 1"),
    "log": ("float", None, "natural logarithm"),
    "log2": ("float", None, "base-2 logarithm"),
    "log1p": ("float", None, "log(1 + x)"),
    "sqrt": ("float", None, "square root"),
    "rsqrt": ("float", None, "1 / sqrt(x)"),
    "reciprocal": ("float", None, "1 / x"),
    "sin": ("float", None, "sine"),
    "cos": ("float", None, "cosine"),
    "tan": ("float", None, "tangent"),
    "asin": ("float", None, "inverse sine"),
    "acos": ("float", None, "inverse cosine"),
    "atan": ("float", None, "inverse tangent"),
    "sinh": ("float", None, "hyperbolic sine"),
    "cosh": ("float", None, "hyperbolic cosine"),
    "tanh": ("float", None, "hyperbolic tangent"),
    "asinh": ("float", None, "inverse hyperbolic sine"),
    "acosh": ("float", None, "inverse hyperbolic cosine"),
    "atanh": ("float", None, "inverse hyperbolic tangent"),
    "erf": ("float", None, "Gauss error function"),
    "sigmoid": ("float", None, "1 / (1 + exp(-x))"),
    "silu": ("float", None, "x * sigmoid(x)"),
    "floor": ("float", None, "round down"),
    "ceil": ("float", None, "round up"),
    "trunc": ("float", None, "round toward zero"),
    "round": ("float", None, "round half to even"),
    "isnan": ("float", "bool", "x is NaN"),
    "isinf": ("float", "bool", "x is +inf or -inf"),
    "isfinite": ("float", "bool", "x is neither infinite nor NaN"),
    "logical_not": ("bool", "bool", "not x"),
    "bitwise_not": ("int_or_bool", None, "~x"),
}

for _name, (_cls, _out, _doc) in _UNARY.items():
    define(
        _name,
        inputs=("x",),
        infer_type=infer_elemwise(_cls, _out),
        pattern="elemwise",
        reference=npo.IMPLS[_name],
        doc=_doc,
    )

define(
    "leaky_relu",
    attrs={"alpha": AttrSpec("float", default=0.01, doc="slope for x < 0")},
    infer_type=infer_elemwise("float"),
    pattern="elemwise",
    reference=npo.leaky_relu,
    doc="x for x >= 0, alpha * x otherwise",
)

define(
    "hard_sigmoid",
    attrs={
        "alpha": AttrSpec("float", default=0.2, doc="slope"),
        "beta": AttrSpec("float", default=0.5, doc="offset"),
    },
    infer_type=infer_elemwise("float"),
    pattern="elemwise",
    reference=npo.hard_sigmoid,
    doc="clip(alpha * x + beta, 0, 1)",
)

define(
    "softplus",
    attrs={
        "beta": AttrSpec("float", default=1.0, doc="sharpness"),
        "threshold": AttrSpec("float", default=20.0, doc="linear above beta * x > threshold"),
    },
    infer_type=infer_elemwise("float"),
    pattern="elemwise",
    reference=npo.softplus,
    doc="log(1 + exp(beta * x)) / beta (x itself above the threshold), like torch",
)

define(
    "gelu",
    attrs={
        "approximate": AttrSpec(
            "str", default="none", choices=("none", "tanh"), doc="exact (erf) or tanh formula"
        )
    },
    infer_type=infer_elemwise("float"),
    pattern="elemwise",
    reference=npo.gelu,
    doc="x * Phi(x) with Phi the standard normal CDF (exact or tanh approximation)",
)

define(
    "clip",
    attrs={
        "min": AttrSpec("float", default=None, doc="lower bound; None for none"),
        "max": AttrSpec("float", default=None, doc="upper bound; None for none"),
    },
    infer_type=infer_elemwise("numeric"),
    pattern="elemwise",
    reference=npo.clip,
    doc="clamp to [min, max] (integer tensors round the bounds inward)",
)


def infer_cast(ctx: InferContext) -> Type:
    """The argument's shape with the attribute ``dtype``."""
    t = tensor_arg(ctx, 0)
    return TensorType(t.shape, ctx.attrs["dtype"])


define(
    "cast",
    attrs={"dtype": AttrSpec("dtype", doc="the result dtype")},
    infer_type=infer_cast,
    pattern="elemwise",
    reference=npo.cast,
    doc="convert to another dtype (float to int truncates, nonzero to bool is True)",
)
