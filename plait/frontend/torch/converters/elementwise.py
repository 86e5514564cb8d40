"""Elementwise ATen ops: arithmetic, comparisons, logic, math functions, activations."""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext
from ..dtypes import is_float
from ..registry import converter

UNARY = {
    "abs": "abs", "neg": "neg", "exp": "exp", "log": "log", "log1p": "log1p",
    "expm1": "expm1", "log2": "log2", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh",
    "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
    "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sigmoid": "sigmoid",
    "relu": "relu", "erf": "erf", "floor": "floor", "ceil": "ceil", "trunc": "trunc",
    "sign": "sign", "sgn": "sign", "silu": "silu", "square": "square",
}  # fmt: skip
"""ATen ``<name>.default`` -> the plait op of the same meaning."""

_INT_KEEPING = {"abs", "neg", "sign", "sgn", "relu", "floor", "ceil", "trunc", "square"}
"""Ops that keep an integer input's dtype (the others compute in float)."""


def _unary(name: str, op: str):  # noqa: ANN202
    def convert(ctx: NodeContext) -> Expr:
        out = ctx.out_dtype()
        x = ctx.x(0)
        if name in _INT_KEEPING and not is_float(ctx.dtype(x)):
            if ctx.dtype(x) == "bool" and name in ("abs", "relu", "floor", "ceil", "trunc",
                                                   "sign", "sgn"):
                return x
            if name in ("floor", "ceil", "trunc"):
                return ctx.cast(x, out)
        x = ctx.cast(x, out)
        return ctx.call(op, x)

    convert.__name__ = f"convert_{name}"
    convert.__doc__ = f"{op}"
    return convert


for _name, _op in UNARY.items():
    converter(f"aten.{_name}.default")(_unary(_name, _op))


@converter("aten.round.default")
def round_(ctx: NodeContext) -> Expr:
    """round (half to even, like torch)"""
    x = ctx.x(0)
    return ctx.call("round", x) if is_float(ctx.dtype(x)) else x


@converter("aten.round.decimals")
def round_decimals(ctx: NodeContext) -> Expr:
    """round(x * 10**decimals) / 10**decimals"""
    x = ctx.x(0)
    scale = ctx.scalar(10.0 ** ctx.int_arg("decimals"), ctx.dtype(x))
    return ctx.call("divide", ctx.call("round", ctx.call("multiply", x, scale)), scale)


@converter("aten.log10.default")
def log10(ctx: NodeContext) -> Expr:
    """log(x) / log(10)"""
    out = ctx.out_dtype()
    x = ctx.operand(0, out)
    return ctx.call("divide", ctx.call("log", x), ctx.scalar(math.log(10.0), out))


@converter("aten.exp2.default")
def exp2(ctx: NodeContext) -> Expr:
    """power(2, x)"""
    out = ctx.out_dtype()
    return ctx.call("power", ctx.scalar(2.0, out), ctx.operand(0, out))


@converter(["aten.isnan.default", "aten.isinf.default"])
def isnan_isinf(ctx: NodeContext) -> Expr:
    """isnan / isinf (false for integers)"""
    x = ctx.x(0)
    if not is_float(ctx.dtype(x)):
        return ctx.call("zeros_like", x, dtype="bool")
    return ctx.call("isnan" if ctx.op == "aten.isnan.default" else "isinf", x)


def _binary_dtype(ctx: NodeContext) -> str:
    """The dtype both operands are computed in: PyTorch's type promotion."""
    import torch

    from ..dtypes import to_dtype

    a, b = ctx.val(0), ctx.val(1)
    a = 1 if isinstance(a, torch.SymInt) else 1.0 if isinstance(a, torch.SymFloat) else a
    b = 1 if isinstance(b, torch.SymInt) else 1.0 if isinstance(b, torch.SymFloat) else b
    d = to_dtype(torch.result_type(a, b))
    if d is None:
        ctx.fail("the operands promote to a dtype plait does not support")
    return d


def _scaled(ctx: NodeContext, y: Expr, dtype: str) -> Expr:
    alpha = ctx.arg("alpha", 1)
    if alpha == 1:
        return y
    return ctx.call("multiply", y, ctx.scalar(alpha, dtype))


@converter(["aten.add.Tensor", "aten.add.Scalar"])
def add(ctx: NodeContext) -> Expr:
    """add (other * alpha)"""
    out = ctx.out_dtype()
    if out == "bool":
        return ctx.call("logical_or", ctx.operand(0, out), ctx.operand(1, out))
    return ctx.call("add", ctx.operand(0, out), _scaled(ctx, ctx.operand(1, out), out))


@converter(["aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Tensor", "aten.rsub.Scalar"])
def sub(ctx: NodeContext) -> Expr:
    """subtract (other * alpha); rsub swaps the operands"""
    out = ctx.out_dtype()
    a, b = ctx.operand(0, out), _scaled(ctx, ctx.operand(1, out), out)
    if ctx.op.startswith("aten.rsub"):
        return ctx.call("subtract", b, a)
    return ctx.call("subtract", a, b)


@converter(["aten.mul.Tensor", "aten.mul.Scalar"])
def mul(ctx: NodeContext) -> Expr:
    """multiply (logical_and for bool)"""
    out = ctx.out_dtype()
    op = "logical_and" if out == "bool" else "multiply"
    return ctx.call(op, ctx.operand(0, out), ctx.operand(1, out))


@converter(["aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode",
            "aten.div.Scalar_mode"])
def div(ctx: NodeContext) -> Expr:
    """divide; rounding_mode 'trunc' and 'floor' as trunc/floor of the quotient (floor_divide
    for integers)"""
    out = ctx.out_dtype()
    mode = ctx.arg("rounding_mode", None) if ctx.op.endswith("_mode") else None
    a, b = ctx.operand(0, out), ctx.operand(1, out)
    if mode is None:
        return ctx.call("divide", a, b)
    if is_float(out):
        q = ctx.call("divide", a, b)
        return ctx.call("trunc" if mode == "trunc" else "floor", q)
    if mode == "trunc":
        return ctx.call("divide", a, b)  # integer divide truncates toward zero
    return ctx.call("floor_divide", a, b)


@converter("aten.floor_divide.default")
def floor_divide(ctx: NodeContext) -> Expr:
    """floor_divide (floor of the quotient)"""
    out = ctx.out_dtype()
    a, b = ctx.operand(0, out), ctx.operand(1, out)
    if is_float(out):
        return ctx.call("floor", ctx.call("divide", a, b))
    return ctx.call("floor_divide", a, b)


@converter(["aten.remainder.Tensor", "aten.remainder.Scalar", "aten.fmod.Tensor",
            "aten.fmod.Scalar"])
def remainder(ctx: NodeContext) -> Expr:
    """mod (remainder: sign of the divisor; fmod: sign of the dividend)"""
    out = ctx.out_dtype()
    a, b = ctx.operand(0, out), ctx.operand(1, out)
    return ctx.call("mod", a, b, fmod=ctx.op.startswith("aten.fmod"))


@converter(["aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar"])
def pow_(ctx: NodeContext) -> Expr:
    """power (square, sqrt, reciprocal for the exponents 2, 0.5, -1)"""
    out = ctx.out_dtype()
    if ctx.op == "aten.pow.Tensor_Scalar":
        e = ctx.arg(1)
        x = ctx.operand(0, out)
        if e == 1:
            return x
        if e == 2:
            return ctx.call("multiply", x, x)
        if e == 0.5 and is_float(out):
            return ctx.call("sqrt", x)
        if e == -1 and is_float(out):
            return ctx.call("reciprocal", x)
        if not is_float(out) and isinstance(e, int) and e < 0:
            ctx.unsupported("an integer tensor to a negative integer power")
    return ctx.call("power", ctx.operand(0, out), ctx.operand(1, out))


@converter(["aten.maximum.default", "aten.minimum.default"])
def maximum(ctx: NodeContext) -> Expr:
    """maximum / minimum (NaN propagates)"""
    out = ctx.out_dtype()
    op = "maximum" if ctx.op == "aten.maximum.default" else "minimum"
    return ctx.call(op, ctx.operand(0, out), ctx.operand(1, out))


_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}


def _compare(op: str):  # noqa: ANN202
    def convert(ctx: NodeContext) -> Expr:
        dt = _binary_dtype(ctx)
        return ctx.call(op, ctx.operand(0, dt), ctx.operand(1, dt))

    convert.__name__ = f"convert_{op}"
    convert.__doc__ = op
    return convert


for _name, _op in _COMPARE.items():
    converter([f"aten.{_name}.Tensor", f"aten.{_name}.Scalar"])(_compare(_op))


@converter(["aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default"])
def logical(ctx: NodeContext) -> Expr:
    """logical_and / or / xor (operands tested for nonzero)"""
    op = ctx.op.split(".")[1]
    out = ctx.call(op, ctx.operand(0, "bool"), ctx.operand(1, "bool"))
    return ctx.cast(out, ctx.out_dtype())


@converter("aten.logical_not.default")
def logical_not(ctx: NodeContext) -> Expr:
    """logical_not (operand tested for nonzero)"""
    return ctx.cast(ctx.call("logical_not", ctx.operand(0, "bool")), ctx.out_dtype())


@converter(["aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor",
            "aten.bitwise_and.Scalar", "aten.bitwise_or.Scalar", "aten.bitwise_xor.Scalar"])
def bitwise(ctx: NodeContext) -> Expr:
    """bitwise_and / or / xor (logical_* for bool)"""
    out = ctx.out_dtype()
    op = ctx.op.split(".")[1]
    if out == "bool":
        op = op.replace("bitwise", "logical")
    return ctx.call(op, ctx.operand(0, out), ctx.operand(1, out))


@converter("aten.bitwise_not.default")
def bitwise_not(ctx: NodeContext) -> Expr:
    """bitwise_not (logical_not for bool)"""
    x = ctx.x(0)
    return ctx.call("logical_not" if ctx.dtype(x) == "bool" else "bitwise_not", x)


@converter(["aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
            "aten.where.Scalar"])
def where(ctx: NodeContext) -> Expr:
    """where (condition tested for nonzero)"""
    out = ctx.out_dtype()
    return ctx.call("where", ctx.operand(0, "bool"), ctx.operand(1, out), ctx.operand(2, out))


def _bound(ctx: NodeContext, key: str, dtype: str) -> float | None:
    v = ctx.arg(key, None)
    if v is None:
        return None
    if isinstance(v, Expr):
        ctx.fail(f"a tensor {key} is handled by aten.clamp.Tensor")
    return float(v)


@converter(["aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default",
            "aten.hardtanh.default"])
def clamp(ctx: NodeContext) -> Expr:
    """clip (NaN bounds give NaN, like torch)"""
    out = ctx.out_dtype()
    x = ctx.operand(0, out)
    if ctx.op == "aten.hardtanh.default":
        lo, hi = float(ctx.arg("min_val", -1.0)), float(ctx.arg("max_val", 1.0))
    elif ctx.op == "aten.clamp_min.default":
        lo, hi = _bound(ctx, "min", out), None
    elif ctx.op == "aten.clamp_max.default":
        lo, hi = None, _bound(ctx, "max", out)
    else:
        lo, hi = _bound(ctx, "min", out), _bound(ctx, "max", out)
    if (lo is not None and math.isnan(lo)) or (hi is not None and math.isnan(hi)):
        return ctx.call("full_like", x, fill_value=float("nan"))
    if lo is not None and hi is not None and lo > hi:
        return ctx.call("full_like", x, fill_value=hi)  # torch: max wins
    if not is_float(out):
        # integer clamps: bounds rounded inward, and beyond-range bounds dropped
        info = np.iinfo(out) if out != "bool" else None
        if info is not None:
            lo = None if lo is None or lo <= info.min else float(math.ceil(lo))
            hi = None if hi is None or hi >= info.max else float(math.floor(hi))
    if lo is None and hi is None:
        return x
    return ctx.call("clip", x, min=lo, max=hi)


@converter(["aten.clamp.Tensor", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor"])
def clamp_tensor(ctx: NodeContext) -> Expr:
    """maximum with min, then minimum with max"""
    out = ctx.out_dtype()
    x = ctx.operand(0, out)
    if ctx.op != "aten.clamp_max.Tensor" and ctx.has("min"):
        x = ctx.call("maximum", x, ctx.operand("min", out))
    if ctx.op != "aten.clamp_min.Tensor" and ctx.has("max"):
        x = ctx.call("minimum", x, ctx.operand("max", out))
    return x


@converter("aten.gelu.default")
def gelu(ctx: NodeContext) -> Expr:
    """gelu (exact or tanh approximation)"""
    approximate = ctx.arg("approximate", "none")
    if approximate not in ("none", "tanh"):
        ctx.unsupported(f"approximate={approximate!r}")
    return ctx.call("gelu", ctx.x(0), approximate=approximate)


@converter("aten.leaky_relu.default")
def leaky_relu(ctx: NodeContext) -> Expr:
    """leaky_relu"""
    return ctx.call("leaky_relu", ctx.x(0), alpha=float(ctx.arg("negative_slope", 0.01)))


@converter("aten.elu.default")
def elu(ctx: NodeContext) -> Expr:
    """scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1))"""
    x = ctx.x(0)
    dt = ctx.dtype(x)
    alpha, scale = float(ctx.arg("alpha", 1.0)), float(ctx.arg("scale", 1.0))
    in_scale = float(ctx.arg("input_scale", 1.0))
    xs = x if in_scale == 1.0 else ctx.call("multiply", x, ctx.scalar(in_scale, dt))
    neg = ctx.call("multiply", ctx.call("expm1", xs), ctx.scalar(alpha, dt))
    y = ctx.call("where", ctx.call("greater", x, ctx.scalar(0, dt)), x, neg)
    return y if scale == 1.0 else ctx.call("multiply", y, ctx.scalar(scale, dt))


@converter("aten.hardsigmoid.default")
def hardsigmoid(ctx: NodeContext) -> Expr:
    """hard_sigmoid (alpha 1/6, beta 1/2)"""
    return ctx.call("hard_sigmoid", ctx.x(0), alpha=1.0 / 6.0, beta=0.5)


@converter("aten.softplus.default")
def softplus(ctx: NodeContext) -> Expr:
    """softplus"""
    return ctx.call("softplus", ctx.x(0), beta=float(ctx.arg("beta", 1.0)),
                    threshold=float(ctx.arg("threshold", 20.0)))
