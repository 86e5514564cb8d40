"""Elementwise ONNX ops: math functions, arithmetic, comparisons, logic, activations,
``Cast``, ``Clip``, ``Where``."""

from __future__ import annotations

import numpy as np

from ....ir.expr import Expr
from ..context import NodeContext
from ..registry import converter
from ..values import SYM_BINOPS, Value
from .common import FLOATS, cast, dtype_of, fold_binary, onnx_dtype, scalar

_UNARY = {
    "Abs": "abs",
    "Neg": "neg",
    "Sign": "sign",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Tanh": "tanh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
    "Erf": "erf",
    "Sigmoid": "sigmoid",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "IsNaN": "isnan",
    "Not": "logical_not",
    "BitwiseNot": "bitwise_not",
    "Relu": "relu",
}


def _unary(op: str):
    def convert(ctx: NodeContext) -> Expr:
        return ctx.call(op, ctx.x(0))

    convert.__doc__ = f"``{op}``"
    convert.__name__ = f"convert_{op}"
    return convert


for _onnx, _op in _UNARY.items():
    converter(_onnx)(_unary(_op))


# ------------------------------------------------------------------------ binary

_BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
    "Equal": "equal",
    "Greater": "greater",
    "Less": "less",
    "GreaterOrEqual": "greater_equal",
    "LessOrEqual": "less_equal",
}

_SYM_OPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "equal",
            "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
            "GreaterOrEqual": "greater_equal"}
_SYM_COMPARE = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}


def _binary(onnx_op: str, op: str):
    sym_op = _SYM_OPS.get(onnx_op)

    def convert(ctx: NodeContext) -> Expr | Value:
        if sym_op is not None:
            a, b = ctx.sym(0), ctx.sym(1)
            if a is not None and b is not None and (a.dtype == object or b.dtype == object):
                if ctx.dtype(0) in ("int32", "int64"):
                    out = SYM_BINOPS[sym_op](a, b)
                    if onnx_op in _SYM_COMPARE:  # proved 1/0 entries; else at run time
                        if all(v is not None for v in np.asarray(out).reshape(-1)):
                            return ctx.symbolic(out, "bool")
                    else:
                        return ctx.symbolic(out, ctx.dtype(0))
        return ctx.call(op, ctx.x(0), ctx.x(1))

    convert.__doc__ = f"``{op}`` (numpy broadcasting)"
    convert.__name__ = f"convert_{op}"
    return convert


for _onnx, _op in _BINARY.items():
    converter(_onnx, since=7)(_binary(_onnx, _op))


@converter("Pow", since=7)
def convert_pow(ctx: NodeContext) -> Expr:
    """``power``; a base and exponent of different dtypes are computed in the wider type
    and cast back to the base's dtype."""
    x, y = ctx.x(0), ctx.x(1)
    dx, dy = ctx.dtype(0), ctx.dtype(1)
    if dx == dy:
        return ctx.call("power", x, y)
    if dx in FLOATS and dy not in FLOATS:
        return ctx.call("power", x, cast(ctx, y, dx))
    wide = "float64" if dx in FLOATS or dy in FLOATS else "int64"
    return cast(ctx, ctx.call("power", cast(ctx, x, wide), cast(ctx, y, wide)), dx)


@converter("Mod", since=10)
def convert_mod(ctx: NodeContext) -> Expr | Value:
    """``mod`` (``fmod`` selects C fmod; Python's sign rule otherwise); on integer
    shape values a size expression (``(7 - h % 7) % 7``: padding to a multiple of a
    window), unknown until run time where the divisor may be below 1."""
    fmod = bool(ctx.attr_int("fmod", 0))
    out = _symbolic_fold(ctx, "mod") if not fmod else None
    if out is not None:
        return out
    return ctx.call("mod", ctx.x(0), ctx.x(1), fmod=fmod)


def _symbolic_fold(ctx: NodeContext, sym_op: str) -> Value | None:
    """The inputs folded by ``SYM_BINOPS[sym_op]`` when they are integer shape values
    (constants or symbolic) and one at least is symbolic; None otherwise."""
    if ctx.dtype(0) not in ("int32", "int64"):
        return None
    syms = [ctx.sym(i) for i in range(ctx.n_inputs)]
    if any(s is None for s in syms) or all(s.dtype != object for s in syms):  # type: ignore[union-attr]
        return None
    acc = syms[0]
    for s in syms[1:]:
        acc = SYM_BINOPS[sym_op](acc, s)
    return ctx.symbolic(acc, ctx.dtype(0))


@converter("BitShift", since=11, attr_choices={"direction": ("LEFT", "RIGHT")})
def convert_bitshift(ctx: NodeContext) -> Expr:
    """``x * 2**y`` (LEFT) or ``floor(x / 2**y)`` (RIGHT, arithmetic for signed types);
    a shift amount out of range (negative, or at least the bit width) shifts everything
    out: 0, or -1 for a right shift of a negative value."""
    x, y = ctx.x(0), ctx.x(1)
    dtype = ctx.dtype(0)
    bits = np.dtype(dtype).itemsize * 8
    signed = np.dtype(dtype).kind == "i"
    left = ctx.attr_str("direction") == "LEFT"
    limit = bits - 1 if signed and not left else bits
    zero = scalar(ctx, 0, dtype)
    ok = ctx.call("less", y, scalar(ctx, limit, dtype))
    if signed:
        ok = ctx.call("logical_and", ok, ctx.call("greater_equal", y, zero))
    p = ctx.call("power", scalar(ctx, 2, dtype), ctx.call("where", ok, y, zero))
    if left:
        return ctx.call("where", ok, ctx.call("multiply", x, p), zero)
    full = (
        ctx.call("where", ctx.call("less", x, zero), scalar(ctx, -1, dtype), zero)
        if signed
        else zero
    )
    return ctx.call("where", ok, ctx.call("floor_divide", x, p), full)


def _variadic(op: str, doc: str, sym_op: str | None = None):
    def convert(ctx: NodeContext) -> Expr | Value:
        if sym_op is not None:
            out = _symbolic_fold(ctx, sym_op)
            if out is not None:
                return out
        xs = [ctx.x(i) for i in range(ctx.n_inputs)]
        if len(xs) == 1:
            return xs[0]
        return fold_binary(ctx, op, xs)

    convert.__doc__ = doc
    convert.__name__ = f"convert_variadic_{op}"
    return convert


converter("Max", since=6)(_variadic("maximum", "``maximum`` folded over the inputs (a size "
                                   "expression on integer shape values)", "max"))
converter("Min", since=6)(_variadic("minimum", "``minimum`` folded over the inputs (a size "
                                   "expression on integer shape values)", "min"))
converter("Sum", since=6)(_variadic("add", "``add`` folded over the inputs"))


@converter("Mean", since=6)
def convert_mean(ctx: NodeContext) -> Expr:
    """The sum of the inputs divided by their number."""
    xs = [ctx.x(i) for i in range(ctx.n_inputs)]
    total = fold_binary(ctx, "add", xs) if len(xs) > 1 else xs[0]
    return ctx.call("divide", total, scalar(ctx, len(xs), ctx.dtype(0)))


@converter("Where", since=9)
def convert_where(ctx: NodeContext) -> Expr | Value:
    """``where``; on shape values with a condition known at import time (the exporters'
    ``Where(Equal(shape, -1), ones, shape)`` before an ``Expand``), the chosen sizes."""
    c, a, b = ctx.sym(0), ctx.sym(1), ctx.sym(2)
    if c is not None and a is not None and b is not None and \
            (a.dtype == object or b.dtype == object) and ctx.dtype(1) in ("int32", "int64") \
            and all(v is not None for v in c.reshape(-1)):
        try:
            cond, x, y = np.broadcast_arrays(c, a, b)
        except ValueError:
            ctx.fail(f"the shapes {c.shape}, {a.shape} and {b.shape} do not broadcast")
        picked = np.where(cond.astype(bool), x, y)
        return ctx.symbolic(picked, ctx.dtype(1))
    return ctx.call("where", ctx.x(0), ctx.x(1), ctx.x(2))


@converter("IsInf", since=10)
def convert_isinf(ctx: NodeContext) -> Expr:
    """``isinf``, restricted to one sign by ``detect_positive`` / ``detect_negative``."""
    x = ctx.x(0)
    pos, neg = ctx.attr_int("detect_positive", 1), ctx.attr_int("detect_negative", 1)
    inf = ctx.call("isinf", x)
    if pos and neg:
        return inf
    zero = scalar(ctx, 0, ctx.dtype(0))
    if pos:
        return ctx.call("logical_and", inf, ctx.call("greater", x, zero))
    if neg:
        return ctx.call("logical_and", inf, ctx.call("less", x, zero))
    return ctx.call("zeros_like", x, dtype="bool")


# ------------------------------------------------------------------------ casts


@converter("Cast", since=6)
def convert_cast(ctx: NodeContext) -> Expr | Value:
    """``cast`` (string, bfloat16, float8 and 4-bit types are not supported)."""
    dtype = onnx_dtype(ctx, ctx.attr_int("to"))
    s = ctx.sym(0)
    if s is not None and s.dtype == object and dtype in ("int32", "int64"):
        return ctx.symbolic(s, dtype)
    return cast(ctx, ctx.x(0), dtype)


@converter("CastLike", since=15)
def convert_castlike(ctx: NodeContext) -> Expr:
    """``cast`` to the dtype of the second input."""
    return cast(ctx, ctx.x(0), ctx.dtype(1))


# ------------------------------------------------------------------------- clip


@converter("Clip", since=6, until=10)
def convert_clip_attrs(ctx: NodeContext) -> Expr:
    """``clip`` with the ``min``/``max`` attributes."""
    lo = ctx.attr_float("min", float(np.finfo(np.float32).min))
    hi = ctx.attr_float("max", float(np.finfo(np.float32).max))
    return ctx.call("clip", ctx.x(0), min=lo, max=hi)


@converter("Clip", since=11)
def convert_clip(ctx: NodeContext) -> Expr:
    """``clip`` with constant bounds, ``maximum``/``minimum`` with run-time ones."""
    x = ctx.x(0)
    y = x
    for i, op in ((1, "maximum"), (2, "minimum")):
        if not ctx.has(i):
            continue
        c = ctx.maybe_const(i)
        if c is not None and ctx.dtype(0) in FLOATS + ("int8", "uint8", "int16", "uint16", "int32"):
            bound = float(c.reshape(-1)[0])
            y = ctx.call("clip", y, **{"min" if i == 1 else "max": bound})
        else:
            y = ctx.call(op, y, ctx.x(i))
    return y if y is not x else ctx.call("clip", x)


# ------------------------------------------------------------------ activations


@converter("LeakyRelu", since=6)
def convert_leaky_relu(ctx: NodeContext) -> Expr:
    """``leaky_relu``."""
    return ctx.call("leaky_relu", ctx.x(0), alpha=ctx.attr_float("alpha", 0.01))


@converter("PRelu", since=7)
def convert_prelu(ctx: NodeContext) -> Expr:
    """``where(x < 0, slope * x, x)``."""
    x, slope = ctx.x(0), ctx.x(1)
    zero = scalar(ctx, 0, ctx.dtype(0))
    return ctx.call("where", ctx.call("less", x, zero), ctx.call("multiply", x, slope), x)


@converter("Elu", since=6)
def convert_elu(ctx: NodeContext) -> Expr:
    """``where(x < 0, alpha * expm1(x), x)``."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    alpha = scalar(ctx, ctx.attr_float("alpha", 1.0), dt)
    neg = ctx.call("multiply", alpha, ctx.call("expm1", x))
    return ctx.call("where", ctx.call("less", x, scalar(ctx, 0, dt)), neg, x)


@converter("Selu", since=6)
def convert_selu(ctx: NodeContext) -> Expr:
    """``gamma * where(x > 0, x, alpha * expm1(x))``."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    alpha = scalar(ctx, ctx.attr_float("alpha", 1.67326319217681884765625), dt)
    gamma = scalar(ctx, ctx.attr_float("gamma", 1.05070102214813232421875), dt)
    neg = ctx.call("multiply", alpha, ctx.call("expm1", x))
    inner = ctx.call("where", ctx.call("greater", x, scalar(ctx, 0, dt)), x, neg)
    return ctx.call("multiply", gamma, inner)


@converter("Celu", since=12)
def convert_celu(ctx: NodeContext) -> Expr:
    """``max(0, x) + min(0, alpha * expm1(x / alpha))``."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    a = ctx.attr_float("alpha", 1.0)
    e = ctx.call(
        "multiply", scalar(ctx, a, dt), ctx.call("expm1", ctx.call("divide", x, scalar(ctx, a, dt)))
    )
    zero = scalar(ctx, 0, dt)
    return ctx.call("add", ctx.call("maximum", x, zero), ctx.call("minimum", e, zero))


@converter("ThresholdedRelu", since=10)
def convert_thresholded_relu(ctx: NodeContext) -> Expr:
    """``where(x > alpha, x, 0)``."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    cond = ctx.call("greater", x, scalar(ctx, ctx.attr_float("alpha", 1.0), dt))
    return ctx.call("where", cond, x, scalar(ctx, 0, dt))


@converter("HardSigmoid", since=6)
def convert_hard_sigmoid(ctx: NodeContext) -> Expr:
    """``hard_sigmoid``."""
    return ctx.call(
        "hard_sigmoid",
        ctx.x(0),
        alpha=ctx.attr_float("alpha", 0.2),
        beta=ctx.attr_float("beta", 0.5),
    )


@converter("HardSwish", since=14)
def convert_hard_swish(ctx: NodeContext) -> Expr:
    """``x * hard_sigmoid(x, 1/6, 1/2)``."""
    x = ctx.x(0)
    return ctx.call("multiply", x, ctx.call("hard_sigmoid", x, alpha=1.0 / 6.0, beta=0.5))


@converter("Softplus", since=1)
def convert_softplus(ctx: NodeContext) -> Expr:
    """``softplus``."""
    return ctx.call("softplus", ctx.x(0))


@converter("Softsign", since=1)
def convert_softsign(ctx: NodeContext) -> Expr:
    """``x / (1 + |x|)``."""
    x = ctx.x(0)
    one = scalar(ctx, 1, ctx.dtype(0))
    return ctx.call("divide", x, ctx.call("add", one, ctx.call("abs", x)))


@converter("Mish", since=18)
def convert_mish(ctx: NodeContext) -> Expr:
    """``x * tanh(softplus(x))``."""
    x = ctx.x(0)
    return ctx.call("multiply", x, ctx.call("tanh", ctx.call("softplus", x)))


@converter("Gelu", since=20, attr_choices={"approximate": ("none", "tanh")})
def convert_gelu(ctx: NodeContext) -> Expr:
    """``gelu`` (exact or tanh approximation)."""
    return ctx.call("gelu", ctx.x(0), approximate=ctx.attr_str("approximate", "none"))


@converter("Swish", since=24)
def convert_swish(ctx: NodeContext) -> Expr:
    """``x * sigmoid(alpha * x)`` (``silu`` for alpha = 1)."""
    x = ctx.x(0)
    alpha = ctx.attr_float("alpha", 1.0)
    if alpha == 1.0:
        return ctx.call("silu", x)
    ax = ctx.call("multiply", x, scalar(ctx, alpha, ctx.dtype(0)))
    return ctx.call("multiply", x, ctx.call("sigmoid", ax))


@converter("Shrink", since=9)
def convert_shrink(ctx: NodeContext) -> Expr:
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, 0 between."""
    x = ctx.x(0)
    dt = ctx.dtype(0)
    lambd, bias = ctx.attr_float("lambd", 0.5), ctx.attr_float("bias", 0.0)
    work = x if dt in FLOATS else cast(ctx, x, "float64")
    wdt = dtype_of(ctx, work)
    lo = ctx.call("less", work, scalar(ctx, -lambd, wdt))
    hi = ctx.call("greater", work, scalar(ctx, lambd, wdt))
    above = ctx.call("subtract", work, scalar(ctx, bias, wdt))
    inner = ctx.call("where", hi, above, scalar(ctx, 0, wdt))
    y = ctx.call("where", lo, ctx.call("add", work, scalar(ctx, bias, wdt)), inner)
    return cast(ctx, y, dt)


@converter("Identity", since=1)
def convert_identity(ctx: NodeContext) -> Value:
    """The input itself (tensors, sequences and symbolic values alike)."""
    return ctx.value(0)


@converter("Dropout", since=7)
def convert_dropout(ctx: NodeContext) -> list[Expr | Value | None]:
    """Inference: the input itself, and an all-true mask (training mode with a nonzero
    ratio is random and not supported)."""
    if ctx.has(2) and bool(ctx.const(2, "training_mode").reshape(-1)[0]):
        ratio = ctx.const(1, "the ratio") if ctx.has(1) else np.asarray(0.5)
        if float(ratio) != 0.0:
            ctx.unsupported("training mode with a nonzero ratio (random dropout)")
    out: list[Expr | Value | None] = [ctx.value(0)]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        out.append(ctx.call("ones_like", ctx.x(0), dtype="bool"))
    return out
