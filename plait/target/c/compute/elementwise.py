"""Computes of the elementwise and broadcasting ops: arithmetic, comparisons, logic,
math functions, activations, ``clip``, ``cast`` and ``where``.

Each follows the numpy reference of :mod:`plait.runtime.numpy_ops` operation by
operation, so float results agree to the last bit where the C math library and numpy
agree (``exp``, ``log``... may differ by an ulp).  ``erf`` and ``gelu`` of float32 are
computed in float32 with plait's vectorizable ``erf``/``tanh`` (within 3 ulp, like
onnxruntime's): the reference's float64 detour made GELU a scalar libm call per element,
75% of a ConvNeXt's time; other dtypes go through float64 like the reference.  Integer
division and remainder by zero give 0 as numpy does (instead of trapping)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from plait.ir.attrs import Attrs
from plait.ir.types import Type
from plait.kernel import intrin as I
from plait.kernel.dsl import Tensor
from plait.kernel.ir import (
    Div,
    FloorDiv,
    FloorMod,
    PrimExpr,
    const,
    is_float_dtype,
    is_int_dtype,
)

from .common import (
    bload,
    elementwise,
    is_signed_int,
    out_dtype,
    out_shape,
    require_float,
    to_dtype,
)
from .registry import ComputeUnsupported, register_compute

# ---------------------------------------------------------------- unary

UnaryFn = Callable[[PrimExpr, str, Attrs], PrimExpr]


def _unary(name: str, fn: UnaryFn, note: str = "") -> None:
    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        (x,) = inputs
        shape, dtype = out_shape(out_ty), out_dtype(out_ty)
        return elementwise(shape, lambda *i: fn(x[i], dtype, attrs), name)

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = f"The compute of ``{name}``."
    register_compute(name, compute, note=note)


def _float_intrinsic(name: str, intrinsic: str) -> None:
    def fn(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
        require_float(x.dtype, name)
        return I.call_intrin(intrinsic, x)

    _unary(name, fn)


for _op in ("exp expm1 log log2 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh "
            "asinh acosh atanh floor ceil trunc round isnan isinf isfinite").split():
    _float_intrinsic(_op, _op)


def _abs(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if dtype.startswith("uint"):
        return x
    return I.abs(x)


def _neg(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if is_float_dtype(dtype):
        return x * const(-1.0, dtype)
    return const(0, dtype) - x


def _sign(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    one, zero = const(1, dtype), const(0, dtype)
    if dtype.startswith("uint"):
        return I.select(x > zero, one, zero)
    rest = x if is_float_dtype(dtype) else zero  # keeps NaN (and -0.0) like np.sign
    return I.select(x > zero, one, I.select(x < zero, const(-1, dtype), rest))


def _relu(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if dtype.startswith("uint"):
        return x
    return I.maximum(x, const(0, dtype))


def _reciprocal(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "reciprocal")
    return const(1, dtype) / x


def _erf(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "erf")
    if dtype == "float32":
        return I.erf(x)
    return to_dtype(I.erf(to_dtype(x, "float64")), dtype)


def stable_sigmoid(x: PrimExpr) -> PrimExpr:
    """``1 / (1 + exp(-x))`` without overflow, as the numpy reference computes it."""
    one = const(1, x.dtype)
    e = I.exp(const(0, x.dtype) - I.abs(x))
    return I.select(x >= const(0, x.dtype), one / (one + e), e / (one + e))


def _sigmoid(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "sigmoid")
    return stable_sigmoid(x)


def _silu(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "silu")
    return x * stable_sigmoid(x)


def _logical_not(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    return I.logical_not(x) if x.dtype == "bool" else I.eq(x, const(0, x.dtype))


def _bitwise_not(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if dtype == "bool":
        return I.logical_not(x)
    if dtype.startswith("uint"):
        return const(int(np.iinfo(dtype).max), dtype) - x
    return const(-1, dtype) - x  # two's complement: ~x == -1 - x


def _leaky_relu(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "leaky_relu")
    return I.select(x >= const(0, dtype), x, x * const(attrs["alpha"], dtype))


def _hard_sigmoid(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "hard_sigmoid")
    y = x * const(attrs["alpha"], dtype) + const(attrs["beta"], dtype)
    return I.minimum(I.maximum(y, const(0, dtype)), const(1, dtype))


def _softplus(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "softplus")
    beta = const(attrs["beta"], dtype)
    bx = x * beta
    soft = (I.log1p(I.exp(const(0, dtype) - I.abs(bx))) + I.maximum(bx, const(0, dtype))) / beta
    return I.select(bx > const(attrs["threshold"], dtype), x, soft)


def _gelu(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "gelu")
    wide = "float32" if dtype == "float32" else "float64"
    xd = to_dtype(x, wide)

    def c(v: float) -> PrimExpr:
        return const(v, wide)

    if attrs["approximate"] == "tanh":
        inner = c(math.sqrt(2.0 / math.pi)) * (xd + c(0.044715) * xd * xd * xd)
        y = c(0.5) * xd * (c(1.0) + I.tanh(inner))
    else:
        y = c(0.5) * xd * (c(1.0) + I.erf(xd * c(1.0 / math.sqrt(2.0))))
    return to_dtype(y, dtype)


def _clip(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    lo, hi = attrs["min"], attrs["max"]
    if is_int_dtype(dtype):
        info = np.iinfo(dtype)
        lo = None if lo is None else min(max(math.ceil(lo), info.min), info.max)
        hi = None if hi is None else max(min(math.floor(hi), info.max), info.min)
    elif not is_float_dtype(dtype):
        raise ComputeUnsupported(f"clip of {dtype}")
    y = x
    if lo is not None:
        y = I.maximum(y, const(lo, dtype))
    if hi is not None:
        y = I.minimum(y, const(hi, dtype))
    return y


def _cast(x: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    return to_dtype(x, dtype)


_unary("abs", _abs)
_unary("neg", _neg)
_unary("sign", _sign)
_unary("square", lambda x, dtype, attrs: x * x)
_unary("relu", _relu)
_unary("reciprocal", _reciprocal)
_unary("erf", _erf)
_unary("sigmoid", _sigmoid)
_unary("silu", _silu)
_unary("logical_not", _logical_not)
_unary("bitwise_not", _bitwise_not)
_unary("leaky_relu", _leaky_relu)
_unary("hard_sigmoid", _hard_sigmoid)
_unary("softplus", _softplus)
_unary("gelu", _gelu)
_unary("clip", _clip)
_unary("cast", _cast)

# ---------------------------------------------------------------- binary

BinaryFn = Callable[[PrimExpr, PrimExpr, str, Attrs], PrimExpr]


def _binary(name: str, fn: BinaryFn, note: str = "") -> None:
    def compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
        x, y = inputs
        shape = out_shape(out_ty)
        out_dtype(out_ty)
        return elementwise(
            shape, lambda *i: fn(bload(x, i, shape), bload(y, i, shape), x.dtype, attrs), name
        )

    compute.__name__ = compute.__qualname__ = f"{name}_compute"
    compute.__doc__ = f"The compute of ``{name}`` (numpy broadcasting)."
    register_compute(name, compute, note=note)


def _add(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    return I.logical_or(a, b) if dtype == "bool" else a + b


def _multiply(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    return I.logical_and(a, b) if dtype == "bool" else a * b


def _maximum(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    return I.logical_or(a, b) if dtype == "bool" else I.maximum(a, b)


def _minimum(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    return I.logical_and(a, b) if dtype == "bool" else I.minimum(a, b)


def _int_guard(a: PrimExpr, b: PrimExpr, dtype: str, value: PrimExpr,
               by_minus_one: PrimExpr) -> PrimExpr:
    """``value`` unless ``b`` is 0 (then 0, as numpy gives) or, for signed ints, -1
    (then ``by_minus_one``: C traps on INT_MIN / -1)."""
    zero = const(0, dtype)
    if is_signed_int(dtype):
        value = I.select(I.eq(b, const(-1, dtype)), by_minus_one, value)
    return I.select(I.eq(b, zero), zero, value)


def _divide(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if is_float_dtype(dtype):
        return a / b
    return _int_guard(a, b, dtype, Div(a, b), const(0, dtype) - a)


def _floor_divide(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if is_float_dtype(dtype):
        return FloorDiv(a, b)
    return _int_guard(a, b, dtype, FloorDiv(a, b), const(0, dtype) - a)


def _mod(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    if is_float_dtype(dtype):
        return I.fmod(a, b) if attrs["fmod"] else FloorMod(a, b)
    rem = a - Div(a, b) * b if attrs["fmod"] else FloorMod(a, b)
    return _int_guard(a, b, dtype, rem, const(0, dtype))


def _power(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
    require_float(dtype, "power")
    return I.pow(a, b)


def _bool_only(name: str, fn: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> BinaryFn:
    def f(a: PrimExpr, b: PrimExpr, dtype: str, attrs: Attrs) -> PrimExpr:
        if dtype != "bool":
            raise ComputeUnsupported(f"{name} of {dtype} (the kernel IR has no bit operations)")
        return fn(a, b)

    return f


def _as_bool(e: PrimExpr) -> PrimExpr:
    return e if e.dtype == "bool" else I.ne(e, const(0, e.dtype))


_binary("add", _add)
_binary("subtract", lambda a, b, dtype, attrs: a - b)
_binary("multiply", _multiply)
_binary("divide", _divide)
_binary("floor_divide", _floor_divide)
_binary("mod", _mod)
_binary("power", _power, note="integer power is a library call")
_binary("maximum", _maximum)
_binary("minimum", _minimum)
_binary("equal", lambda a, b, dtype, attrs: I.eq(a, b))
_binary("not_equal", lambda a, b, dtype, attrs: I.ne(a, b))
_binary("less", lambda a, b, dtype, attrs: a < b)
_binary("less_equal", lambda a, b, dtype, attrs: a <= b)
_binary("greater", lambda a, b, dtype, attrs: a > b)
_binary("greater_equal", lambda a, b, dtype, attrs: a >= b)
_binary("logical_and", lambda a, b, dtype, attrs: I.logical_and(_as_bool(a), _as_bool(b)))
_binary("logical_or", lambda a, b, dtype, attrs: I.logical_or(_as_bool(a), _as_bool(b)))
_binary("logical_xor", lambda a, b, dtype, attrs: I.ne(_as_bool(a), _as_bool(b)))
_binary("bitwise_and", _bool_only("bitwise_and", I.logical_and),
        note="integers are a library call (no bit operations in the kernel IR)")
_binary("bitwise_or", _bool_only("bitwise_or", I.logical_or),
        note="integers are a library call (no bit operations in the kernel IR)")
_binary("bitwise_xor", _bool_only("bitwise_xor", I.ne),
        note="integers are a library call (no bit operations in the kernel IR)")


@register_compute("where")
def where_compute(inputs: list[Any], attrs: Attrs, out_ty: Type) -> Tensor:
    """``select(condition, x, y)`` with numpy broadcasting of all three."""
    c, x, y = inputs
    shape = out_shape(out_ty)
    return elementwise(
        shape,
        lambda *i: I.select(_as_bool(bload(c, i, shape)), bload(x, i, shape), bload(y, i, shape)),
        "where",
    )


