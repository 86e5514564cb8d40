"""Numpy implementations of the core operators.

Every core operator has two forms here:

* a value-returning function named like the op, ``conv2d(data, weight, *, strides=(1, 1),
  ...) -> np.ndarray``: inputs are positional, attributes keyword-only with the op's
  attribute names and defaults; an op with several outputs returns a tuple.  The result
  is always a fresh, writeable array that shares no memory with the inputs (inputs may be
  read-only), and its dtype is the dtype the op's type inference promises.
* a destination-passing packed function ``numpy.<op>`` registered in the runtime's
  packed-function registry, called as ``fn(*inputs, *outputs, **attrs)``; it writes the
  result into the given output arrays and returns ``None``.

This module depends on numpy only (it is part of the runtime, which runs a built model
without the compiler); the op registry of :mod:`plait.op` points each op's ``reference``
at the value-returning function here.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .call_schema import register_keyword_check, signature_check
from .special import erf_erfc
from .window import expand_ints, expand_padding

try:  # the packed-function registry of the runtime
    from .packed import register_func
except ImportError:  # pragma: no cover - only while the runtime is being assembled
    register_func = None

IMPLS: dict[str, Callable[..., Any]] = {}
"""The value-returning implementation of each op, by op name."""

_UFUNC_DPS: dict[str, np.ufunc] = {}
"""Ops whose destination-passing form is a single ufunc call with ``out=``."""

_N_OUTPUTS: dict[str, Callable[[dict[str, Any]], int]] = {}
"""For ops with several outputs: the number of outputs given the attributes."""


def _impl(
    name: str | None = None, *, ufunc: np.ufunc | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Record the decorated function as the implementation of op ``name`` (default: the
    function's name); ``ufunc`` marks an op that is exactly that ufunc."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        op = name or fn.__name__
        IMPLS[op] = fn
        if ufunc is not None:
            _UFUNC_DPS[op] = ufunc
        return fn

    return deco


def _fresh(a: Any) -> np.ndarray:
    """``a`` as a new C-contiguous array (never a view of an input)."""
    return np.array(a, order="C", copy=True)


def _acc_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to compute in: float16 is computed in float32."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _axis_tuple(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        axis = (int(axis),)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axis))


def _static_shape(shape: Sequence[Any], op: str) -> tuple[int, ...]:
    for d in shape:
        if not isinstance(d, int | np.integer):
            raise ValueError(
                f"{op}: the shape ({', '.join(map(str, shape))}) has the symbolic size "
                f"{d!r}; the numpy implementation needs static sizes"
            )
    return tuple(int(d) for d in shape)


# =============================================================== elementwise: unary


def _unary(name: str, ufunc: np.ufunc, doc: str) -> Callable[[np.ndarray], np.ndarray]:
    def fn(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(x))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return _impl(name, ufunc=ufunc)(fn)


abs = _unary("abs", np.absolute, "|x|")  # noqa: A001
neg = _unary("neg", np.negative, "-x")
sign = _unary("sign", np.sign, "-1, 0 or 1 (NaN for NaN)")
exp = _unary("exp", np.exp, "e**x")
expm1 = _unary("expm1", np.expm1, "e**x - 1")
log = _unary("log", np.log, "natural logarithm")
log2 = _unary("log2", np.log2, "base-2 logarithm")
log1p = _unary("log1p", np.log1p, "log(1 + x)")
sqrt = _unary("sqrt", np.sqrt, "square root")
square = _unary("square", np.square, "x * x")
sin = _unary("sin", np.sin, "sine")
cos = _unary("cos", np.cos, "cosine")
tan = _unary("tan", np.tan, "tangent")
asin = _unary("asin", np.arcsin, "inverse sine")
acos = _unary("acos", np.arccos, "inverse cosine")
atan = _unary("atan", np.arctan, "inverse tangent")
sinh = _unary("sinh", np.sinh, "hyperbolic sine")
cosh = _unary("cosh", np.cosh, "hyperbolic cosine")
tanh = _unary("tanh", np.tanh, "hyperbolic tangent")
asinh = _unary("asinh", np.arcsinh, "inverse hyperbolic sine")
acosh = _unary("acosh", np.arccosh, "inverse hyperbolic cosine")
atanh = _unary("atanh", np.arctanh, "inverse hyperbolic tangent")
floor = _unary("floor", np.floor, "round down")
ceil = _unary("ceil", np.ceil, "round up")
trunc = _unary("trunc", np.trunc, "round toward zero")
round = _unary("round", np.rint, "round half to even")  # noqa: A001
reciprocal = _unary("reciprocal", np.reciprocal, "1 / x")
isnan = _unary("isnan", np.isnan, "x is NaN")
isinf = _unary("isinf", np.isinf, "x is +inf or -inf")
isfinite = _unary("isfinite", np.isfinite, "x is neither infinite nor NaN")
logical_not = _unary("logical_not", np.logical_not, "not x")
bitwise_not = _unary("bitwise_not", np.invert, "~x")


@_impl()
def rsqrt(x: np.ndarray) -> np.ndarray:
    """1 / sqrt(x)."""
    with np.errstate(all="ignore"):
        return np.reciprocal(np.sqrt(x))


@_impl()
def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0); NaN stays NaN."""
    return np.maximum(x, np.zeros((), x.dtype))


@_impl()
def leaky_relu(x: np.ndarray, *, alpha: float = 0.01) -> np.ndarray:
    """x where x >= 0, alpha * x elsewhere."""
    return np.where(x >= 0, x, x * np.asarray(alpha, x.dtype))


@_impl()
def hard_sigmoid(x: np.ndarray, *, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    """clip(alpha * x + beta, 0, 1)."""
    y = x * np.asarray(alpha, x.dtype) + np.asarray(beta, x.dtype)
    return np.clip(y, np.zeros((), x.dtype), np.ones((), x.dtype))


@_impl()
def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), computed without overflow."""
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


@_impl()
def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    with np.errstate(all="ignore"):
        return (x * sigmoid(x)).astype(x.dtype, copy=False)


@_impl()
def softplus(x: np.ndarray, *, beta: float = 1.0, threshold: float = 20.0) -> np.ndarray:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    with np.errstate(all="ignore"):
        bx = x * np.asarray(beta, x.dtype)
        soft = (np.log1p(np.exp(-np.abs(bx))) + np.maximum(bx, 0)) / np.asarray(beta, x.dtype)
        return np.where(bx > threshold, x, soft).astype(x.dtype, copy=False)


@_impl()
def erf(x: np.ndarray) -> np.ndarray:
    """The Gauss error function (float64 rational approximation, then rounded)."""
    return erf_erfc(x)[0].astype(x.dtype)


@_impl()
def gelu(x: np.ndarray, *, approximate: str = "none") -> np.ndarray:
    """x * Phi(x), exactly (``"none"``) or with the tanh approximation."""
    xd = np.asarray(x, dtype=np.float64)
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (xd + 0.044715 * xd * xd * xd)
        y = 0.5 * xd * (1.0 + np.tanh(inner))
    elif approximate == "none":
        # 0.5 * x * (1 + erf(x / sqrt2)) == 0.5 * x * erfc(-x / sqrt2), without cancellation
        y = 0.5 * xd * erf_erfc(-xd / math.sqrt(2.0))[1]
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return y.astype(x.dtype)


@_impl()
def clip(x: np.ndarray, *, min: float | None = None, max: float | None = None) -> np.ndarray:  # noqa: A002
    """Clamp to [min, max] (either bound may be None); for integers the bounds are rounded
    inward and saturated to the dtype's range."""
    lo: Any = min
    hi: Any = max
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        lo = None if lo is None else builtins.min(builtins.max(math.ceil(lo), info.min), info.max)
        hi = None if hi is None else builtins.max(builtins.min(math.floor(hi), info.max), info.min)
    if lo is None and hi is None:
        return _fresh(x)
    lo = None if lo is None else np.asarray(lo, x.dtype)
    hi = None if hi is None else np.asarray(hi, x.dtype)
    if lo is None:
        return np.minimum(x, hi)
    if hi is None:
        return np.maximum(x, lo)
    return np.minimum(np.maximum(x, lo), hi)


@_impl()
def cast(x: np.ndarray, *, dtype: str) -> np.ndarray:
    """Convert to ``dtype`` (numpy's conversion rules; float to int truncates)."""
    with np.errstate(all="ignore"):
        return x.astype(dtype, copy=True)


# ============================================================== elementwise: binary


def _binary(name: str, ufunc: np.ufunc, doc: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def fn(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(ufunc(x, y))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return _impl(name, ufunc=ufunc)(fn)


add = _binary("add", np.add, "x + y")
subtract = _binary("subtract", np.subtract, "x - y")
multiply = _binary("multiply", np.multiply, "x * y")
floor_divide = _binary("floor_divide", np.floor_divide, "floor(x / y)")
power = _binary("power", np.power, "x ** y")
maximum = _binary("maximum", np.maximum, "elementwise maximum (NaN propagates)")
minimum = _binary("minimum", np.minimum, "elementwise minimum (NaN propagates)")
equal = _binary("equal", np.equal, "x == y")
not_equal = _binary("not_equal", np.not_equal, "x != y")
less = _binary("less", np.less, "x < y")
less_equal = _binary("less_equal", np.less_equal, "x <= y")
greater = _binary("greater", np.greater, "x > y")
greater_equal = _binary("greater_equal", np.greater_equal, "x >= y")
logical_and = _binary("logical_and", np.logical_and, "x and y")
logical_or = _binary("logical_or", np.logical_or, "x or y")
logical_xor = _binary("logical_xor", np.logical_xor, "x xor y")
bitwise_and = _binary("bitwise_and", np.bitwise_and, "x & y")
bitwise_or = _binary("bitwise_or", np.bitwise_or, "x | y")
bitwise_xor = _binary("bitwise_xor", np.bitwise_xor, "x ^ y")


@_impl()
def divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y: true division for floats, division truncating toward zero for integers."""
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu":
            q = np.floor_divide(x, y)
            r = np.remainder(x, y)
            # floor and trunc differ when the remainder is non-zero and the signs differ
            fix = (r != 0) & ((x < 0) != (y < 0))
            return np.asarray(q + fix.astype(q.dtype))
        return np.asarray(np.true_divide(x, y))


@_impl()
def mod(x: np.ndarray, y: np.ndarray, *, fmod: bool = False) -> np.ndarray:
    """Remainder: with the sign of y (Python ``%``), or with the sign of x when ``fmod``
    (C ``fmod``, ONNX Mod with fmod=1)."""
    with np.errstate(all="ignore"):
        return np.asarray(np.fmod(x, y) if fmod else np.remainder(x, y))


@_impl()
def where(condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x where condition is true, else y (broadcasting)."""
    return np.asarray(np.where(condition, x, y))


# ======================================================================= reductions


def _reduce_out(r: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(r).astype(dtype, copy=False)


@_impl()
def sum(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:  # noqa: A001
    """Sum over ``axis`` (all axes when None); float16 accumulates in float32."""
    return _reduce_out(np.sum(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x.dtype)), x.dtype)


@_impl()
def prod(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """Product over ``axis``."""
    return _reduce_out(np.prod(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x.dtype)), x.dtype)


@_impl()
def mean(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """Arithmetic mean over ``axis``."""
    with np.errstate(all="ignore"):
        r = np.mean(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x.dtype))
    return _reduce_out(r, x.dtype)


def _lowest(dtype: np.dtype, highest: bool = False) -> Any:
    """-inf (+inf with ``highest``) for floats, else the dtype's smallest (largest) value:
    the maximum (minimum) of no elements, as ONNX defines it."""
    if dtype.kind == "f":
        return np.inf if highest else -np.inf
    if dtype.kind == "b":
        return highest
    info = np.iinfo(dtype)
    return info.max if highest else info.min


@_impl()
def max(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:  # noqa: A001
    """Maximum over ``axis`` (NaN propagates; over no elements: -inf, or the dtype's
    smallest value)."""
    if x.size == 0:
        return _reduce_out(np.max(x, axis=axis, keepdims=keepdims, initial=_lowest(x.dtype)),
                           x.dtype)
    return _reduce_out(np.max(x, axis=axis, keepdims=keepdims), x.dtype)


@_impl()
def min(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:  # noqa: A001
    """Minimum over ``axis`` (NaN propagates; over no elements: +inf, or the dtype's
    largest value)."""
    if x.size == 0:
        return _reduce_out(np.min(x, axis=axis, keepdims=keepdims,
                                  initial=_lowest(x.dtype, highest=True)), x.dtype)
    return _reduce_out(np.min(x, axis=axis, keepdims=keepdims), x.dtype)


@_impl()
def variance(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """Population variance (divides by the count) over ``axis``."""
    with np.errstate(all="ignore"):
        r = np.var(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x.dtype))
    return _reduce_out(r, x.dtype)


@_impl()
def l2_norm(x: np.ndarray, *, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    """sqrt(sum(x * x)) over ``axis``."""
    xa = x.astype(_acc_dtype(x.dtype), copy=False)
    with np.errstate(all="ignore"):
        r = np.sqrt(np.sum(xa * xa, axis=axis, keepdims=keepdims))
    return _reduce_out(r, x.dtype)


def _arg_reduce(
    fn: Callable[..., Any], x: np.ndarray, axis: int | None, keepdims: bool, last: bool
) -> np.ndarray:
    if (x.size if axis is None else x.shape[axis]) == 0:
        where = "the tensor" if axis is None else f"axis {axis}"
        raise ValueError(f"{fn.__name__} over {where} of a tensor of shape {x.shape}: there "
                         "are no elements, so there is no index to return")
    if axis is None:
        flat = x.reshape(-1)
        i = fn(flat[::-1]) if last else fn(flat)
        i = flat.size - 1 - i if last else i
        shape = (1,) * x.ndim if keepdims else ()
        return np.full(shape, i, dtype=np.int64)
    if last:
        n = x.shape[axis]
        i = n - 1 - fn(np.flip(x, axis), axis=axis, keepdims=keepdims)
    else:
        i = fn(x, axis=axis, keepdims=keepdims)
    return np.asarray(i, dtype=np.int64)


@_impl()
def argmax(
    x: np.ndarray, *, axis: int | None = None, keepdims: bool = False,
    select_last_index: bool = False,
) -> np.ndarray:  # fmt: skip
    """Index (int64) of the maximum along ``axis`` (of the flattened tensor when None); the
    first maximum, or the last with ``select_last_index``."""
    return _arg_reduce(np.argmax, x, axis, keepdims, select_last_index)


@_impl()
def argmin(
    x: np.ndarray, *, axis: int | None = None, keepdims: bool = False,
    select_last_index: bool = False,
) -> np.ndarray:  # fmt: skip
    """Index (int64) of the minimum along ``axis``."""
    return _arg_reduce(np.argmin, x, axis, keepdims, select_last_index)


@_impl()
def cumsum(
    x: np.ndarray, *, axis: int | None = None, exclusive: bool = False, reverse: bool = False
) -> np.ndarray:
    """Running sum along ``axis`` (of the flattened tensor when None); ``exclusive`` leaves
    out the element itself, ``reverse`` sums from the end."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    a = np.flip(x, axis) if reverse else x
    c = np.cumsum(a, axis=axis, dtype=_acc_dtype(x.dtype))
    if exclusive and c.shape[axis]:
        # shift by one along the axis: 0, c[0], c[1], ...
        head = np.zeros_like(np.take(c, [0], axis=axis))
        c = np.concatenate([head, np.take(c, np.arange(c.shape[axis] - 1), axis=axis)], axis=axis)
    if reverse:
        c = np.flip(c, axis)
    return _fresh(c.astype(x.dtype, copy=False))


# ===================================================================== manipulation


@_impl()
def reshape(x: np.ndarray, *, shape: Sequence[int]) -> np.ndarray:
    """The same elements in a new shape (one entry may be -1)."""
    return _fresh(np.reshape(x, _static_shape(shape, "reshape")))


@_impl()
def permute_dims(x: np.ndarray, *, axes: Sequence[int] | None = None) -> np.ndarray:
    """Transpose (reverse the axes when ``axes`` is None)."""
    return _fresh(np.transpose(x, axes))


@_impl()
def concat(tensors: Sequence[np.ndarray], *, axis: int = 0) -> np.ndarray:
    """Join the tensors along ``axis``."""
    return np.concatenate(tuple(tensors), axis=axis)


@_impl()
def flatten(x: np.ndarray, *, start_dim: int = 0, end_dim: int = -1) -> np.ndarray:
    """Merge the axes ``start_dim..end_dim`` (inclusive) into one, like ``torch.flatten``."""
    if x.ndim == 0:
        return x.reshape(1).copy()
    s, e = start_dim % x.ndim, end_dim % x.ndim
    shape = x.shape[:s] + (math.prod(x.shape[s : e + 1]),) + x.shape[e + 1 :]
    return _fresh(x.reshape(shape))


@_impl()
def squeeze(x: np.ndarray, *, axis: int | Sequence[int] | None = None) -> np.ndarray:
    """Drop the given size-1 axes (all size-1 axes when None)."""
    return _fresh(np.squeeze(x, axis=None if axis is None else _axis_tuple(axis, x.ndim)))


@_impl()
def expand_dims(x: np.ndarray, *, axis: int | Sequence[int]) -> np.ndarray:
    """Insert size-1 axes at the given positions of the result."""
    return _fresh(np.expand_dims(x, axis if isinstance(axis, int) else tuple(axis)))


@_impl()
def broadcast_to(x: np.ndarray, *, shape: Sequence[int]) -> np.ndarray:
    """Broadcast to ``shape`` with numpy rules."""
    return _fresh(np.broadcast_to(x, _static_shape(shape, "broadcast_to")))


@_impl()
def tile(x: np.ndarray, *, repeats: Sequence[int]) -> np.ndarray:
    """Repeat the whole tensor ``repeats[i]`` times along axis i (numpy ``tile``)."""
    return _fresh(np.tile(x, tuple(repeats)))


@_impl()
def repeat(x: np.ndarray, *, repeats: int, axis: int | None = None) -> np.ndarray:
    """Repeat each element ``repeats`` times along ``axis`` (flattened when None)."""
    return _fresh(np.repeat(x, repeats, axis=axis))


def _split_points(size: int, indices_or_sections: int | Sequence[int]) -> list[int]:
    if isinstance(indices_or_sections, int | np.integer):
        n = int(indices_or_sections)
        chunk = -(-size // n)
        return [builtins.min(chunk * i, size) for i in range(1, n)]
    return [int(i) for i in indices_or_sections]


@_impl()
def split(
    x: np.ndarray, *, indices_or_sections: int | Sequence[int], axis: int = 0
) -> tuple[np.ndarray, ...]:
    """Split along ``axis``: into n chunks of ceil(size / n) (the last may be smaller), or
    at the given indices."""
    points = _split_points(x.shape[axis], indices_or_sections)
    return tuple(_fresh(p) for p in np.split(x, points, axis=axis))


_N_OUTPUTS["split"] = lambda attrs: (
    attrs["indices_or_sections"]
    if isinstance(attrs["indices_or_sections"], int)
    else len(attrs["indices_or_sections"]) + 1
)


@_impl()
def pad(
    x: np.ndarray, *, pad_width: Sequence[int], pad_mode: str = "constant",
    pad_value: float = 0.0,
) -> np.ndarray:  # fmt: skip
    """Pad each axis by ``pad_width = (before_0, after_0, before_1, after_1, ...)``; a
    negative width crops.  Modes: constant, reflect, edge, wrap."""
    pw = [(int(pad_width[2 * i]), int(pad_width[2 * i + 1])) for i in range(x.ndim)]
    grow = [(builtins.max(b, 0), builtins.max(a, 0)) for b, a in pw]
    if pad_mode == "constant":
        y = np.pad(x, grow, mode="constant", constant_values=np.asarray(pad_value).astype(x.dtype))
    elif pad_mode in ("reflect", "edge", "wrap"):
        y = np.pad(x, grow, mode=pad_mode)
    else:
        raise ValueError(f"pad: unknown pad_mode {pad_mode!r}")
    crop = tuple(
        slice(builtins.max(-b, 0), y.shape[i] - builtins.max(-a, 0)) for i, (b, a) in enumerate(pw)
    )
    return _fresh(y[crop])


# ========================================================================= indexing


@_impl()
def strided_slice(
    x: np.ndarray, *, axes: Sequence[int], begin: Sequence[int], end: Sequence[int],
    strides: Sequence[int] | None = None,
) -> np.ndarray:  # fmt: skip
    """Python-slice ``x[begin:end:stride]`` on each axis of ``axes`` (out-of-range bounds
    are clamped, negative ones count from the end)."""
    index = [slice(None)] * x.ndim
    strides = strides or (1,) * len(axes)
    for a, b, e, s in zip(axes, begin, end, strides):
        index[a % x.ndim] = slice(int(b), int(e), int(s))
    return _fresh(x[tuple(index)])


@_impl()
def take(x: np.ndarray, indices: np.ndarray, *, axis: int | None = None) -> np.ndarray:
    """Select along ``axis`` (of the flattened tensor when None) by integer indices; a
    negative index counts from the end."""
    return np.asarray(np.take(x, indices, axis=axis))


def _element_index(
    x_shape: tuple[int, ...], indices: np.ndarray, axis: int
) -> tuple[np.ndarray, ...]:
    """The advanced index selecting ``x[..., indices[i, j, ...], ...]`` element by element
    (for gather/scatter_elements); negative indices count from the end."""
    size = x_shape[axis]
    idx = np.where(indices < 0, indices + size, indices)
    if np.any((idx < 0) | (idx >= size)):
        bad = indices[(idx < 0) | (idx >= size)].reshape(-1)[0]
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {size}")
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


@_impl()
def gather_elements(x: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """``out[i][j][k] = x[indices[i][j][k]][j][k]`` for axis 0 (``torch.gather``)."""
    return np.asarray(x[_element_index(x.shape, indices, axis % x.ndim)])


@_impl()
def scatter_elements(
    x: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0,
    reduction: str = "update",
) -> np.ndarray:  # fmt: skip
    """A copy of x with ``out[indices[i][j]][j] (op)= updates[i][j]`` for axis 0; reduction
    is update (the last write wins), add, mul, min or max."""
    out = _fresh(x)
    index = _element_index(x.shape, indices, axis % x.ndim)
    if reduction == "update":
        out[index] = updates
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}[reduction]
        ufunc.at(out, index, updates)
    return out


@_impl()
def topk(
    x: np.ndarray,
    *,
    k: int = 1,
    axis: int = -1,
    largest: bool = True,
    sorted: bool = True,  # noqa: A002
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (or smallest) elements along ``axis`` and their int64 indices, in
    sorted order (also when ``sorted`` is False); ties keep the lower index first, NaN
    counts as the largest value."""
    axis = axis % x.ndim
    if largest:
        # a stable ascending sort of the reversed axis, reversed back: descending values
        # with ties in ascending index order
        n = x.shape[axis]
        order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


_N_OUTPUTS["topk"] = lambda attrs: 2


@_impl()
def one_hot(
    indices: np.ndarray, *, depth: int, axis: int = -1, on_value: float = 1.0,
    off_value: float = 0.0, dtype: str = "float32",
) -> np.ndarray:  # fmt: skip
    """A new axis of size ``depth`` at ``axis`` holding on_value at the index and
    off_value elsewhere; negative indices count from depth, others out of range give an
    all-off row."""
    idx = np.where(indices < 0, indices + depth, indices)
    hot = idx[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on_value).astype(dtype), np.asarray(off_value).astype(dtype))
    return _fresh(np.moveaxis(out, -1, axis % out.ndim))


# ========================================================================= creation


@_impl()
def full(*, shape: Sequence[int], fill_value: Any, dtype: str | None = None) -> np.ndarray:
    """A tensor of ``shape`` filled with ``fill_value``."""
    if dtype is None:
        dtype = _scalar_dtype(fill_value)
    return np.full(_static_shape(shape, "full"), fill_value, dtype=dtype)


def _scalar_dtype(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return "bool"
    if isinstance(v, int | np.integer):
        return "int64"
    return "float32"


@_impl()
def full_like(x: np.ndarray, *, fill_value: Any, dtype: str | None = None) -> np.ndarray:
    """A tensor shaped like x filled with ``fill_value`` (x's dtype when dtype is None)."""
    return np.full(x.shape, fill_value, dtype=dtype or x.dtype)


@_impl()
def zeros_like(x: np.ndarray, *, dtype: str | None = None) -> np.ndarray:
    """Zeros shaped like x."""
    return np.zeros(x.shape, dtype=dtype or x.dtype)


@_impl()
def ones_like(x: np.ndarray, *, dtype: str | None = None) -> np.ndarray:
    """Ones shaped like x."""
    return np.ones(x.shape, dtype=dtype or x.dtype)


def arange_length(start: float, end: float, step: float) -> int:
    """The number of elements of ``arange(start, end, step)`` (ONNX Range)."""
    return builtins.max(math.ceil((end - start) / step), 0)


@_impl()
def arange(
    *, start: float = 0.0, end: float, step: float = 1.0, dtype: str = "int64"
) -> np.ndarray:
    """``start, start + step, ...`` up to (excluding) ``end``."""
    n = arange_length(start, end, step)
    if np.dtype(dtype).kind in "iu":
        return int(start) + np.arange(n, dtype=dtype) * np.asarray(int(step), dtype)
    return (start + np.arange(n, dtype=np.float64) * step).astype(dtype)


@_impl()
def shape_of(x: np.ndarray) -> np.ndarray:
    """The shape of x as a 1-D int64 tensor."""
    return np.array(x.shape, dtype=np.int64)


# =========================================================================== linalg


def matmul_into(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None,
                **kwargs: Any) -> np.ndarray:
    """``np.matmul(x, y, out=out, **kwargs)``, but a stack of matrices times one matrix
    — ``(..., M, K) @ (K, N)`` — is computed as a single ``(prod(...) * M, K) @ (K, N)``
    product.  numpy would call BLAS once per leading index instead: for a
    ``(128, 1, 256) @ (256, 768)`` projection, 128 matrix-vector products, ~4x slower
    than one matrix product."""
    if x.ndim > 2 and y.ndim == 2 and (out is None or out.flags.c_contiguous):
        m = math.prod(x.shape[:-1])
        x2 = x.reshape(m, x.shape[-1])
        shape = x.shape[:-1] + y.shape[-1:]
        if out is None:
            return np.matmul(x2, y, **kwargs).reshape(shape)
        if out.shape == shape:
            np.matmul(x2, y, out=out.reshape(m, y.shape[-1]), **kwargs)
            return out
    return np.matmul(x, y, out=out, **kwargs)


@_impl(ufunc=np.matmul)
def matmul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Matrix product with numpy semantics."""
    return np.asarray(matmul_into(np.asarray(x), np.asarray(y)))


@_impl()
def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """``x @ weight.T + bias`` with weight of shape (out_features, in_features)."""
    y = matmul_into(np.asarray(x), np.asarray(weight).T)
    if bias is not None:
        y = y + bias
    return np.asarray(y)


def _windows(
    xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int]
) -> np.ndarray:
    """A (N, C, *out, *kernel) view of the windows of the padded channels-first ``xp``."""
    nd = len(kernel)
    eff = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    win = sliding_window_view(xp, eff, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None))
    index += tuple(slice(None, None, s) for s in strides)
    index += tuple(slice(None, None, d) for d in dilation)
    return win[index]


def _conv_nd(
    x: np.ndarray, w: np.ndarray, strides: Sequence[int], padding: Sequence[int],
    dilation: Sequence[int], groups: int,
) -> np.ndarray:  # fmt: skip
    """Channels-first convolution (cross-correlation) by im2col and batched matmul:
    x (N, C, *S), w (O, C / groups, *K), padding (befores..., afters...)."""
    nd = x.ndim - 2
    acc = _acc_dtype(x.dtype)
    x, w = x.astype(acc, copy=False), w.astype(acc, copy=False)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(padding[i], padding[i + nd]) for i in range(nd)])
    kernel = w.shape[2:]
    win = _windows(xp, kernel, strides, dilation)
    n, c = x.shape[:2]
    out_sp = win.shape[2 : 2 + nd]
    g, cg, o = groups, c // groups, w.shape[0]
    og, kprod, pprod = o // g, math.prod(kernel), math.prod(out_sp)
    win = win.reshape((n, g, cg) + out_sp + tuple(kernel))
    # -> (G, N, *out, Cg, *K) -> (G, N * P, Cg * K)
    perm = (1, 0) + tuple(range(3, 3 + nd)) + (2,) + tuple(range(3 + nd, 3 + 2 * nd))
    cols = win.transpose(perm).reshape(g, n * pprod, cg * kprod)
    wm = w.reshape(g, og, cg * kprod).transpose(0, 2, 1)
    y = np.matmul(cols, wm)  # (G, N * P, Og)
    y = y.reshape((g, n) + out_sp + (og,))
    perm = (1, 0, 2 + nd) + tuple(range(2, 2 + nd))
    return np.ascontiguousarray(y.transpose(perm)).reshape((n, o) + out_sp)


def _conv_transpose_nd(
    x: np.ndarray, w: np.ndarray, strides: Sequence[int], padding: Sequence[int],
    output_padding: Sequence[int], dilation: Sequence[int], groups: int,
) -> np.ndarray:  # fmt: skip
    """Channels-first transposed convolution: x (N, C, *S), w (C, O / groups, *K).  Each
    input pixel's contribution ``x @ w`` is computed with one matmul, then added into the
    output at every kernel tap."""
    nd = x.ndim - 2
    acc = _acc_dtype(x.dtype)
    x, w = x.astype(acc, copy=False), w.astype(acc, copy=False)
    n, c = x.shape[:2]
    sp, kernel = x.shape[2:], w.shape[2:]
    g, cg, og = groups, c // groups, w.shape[1]
    pprod, kprod = math.prod(sp), math.prod(kernel)
    xm = x.reshape(n, g, cg, pprod).transpose(1, 0, 3, 2).reshape(g, n * pprod, cg)
    wm = w.reshape(g, cg, og * kprod)
    cols = np.matmul(xm, wm).reshape((g, n) + tuple(sp) + (og,) + tuple(kernel))
    full_sp = [
        (s_in - 1) * s + d * (k - 1) + 1 + op
        for s_in, s, d, k, op in zip(sp, strides, dilation, kernel, output_padding)
    ]
    buf = np.zeros((n, g, og) + tuple(full_sp), dtype=acc)
    # contribution of one tap: (G, N, *S, Og) -> (N, G, Og, *S)
    perm = (1, 0, 2 + nd) + tuple(range(2, 2 + nd))
    for tap in np.ndindex(*kernel):
        contrib = cols[(slice(None),) * (3 + nd) + tap].transpose(perm)
        dest = tuple(
            slice(t * d, t * d + (s_in - 1) * s + 1, s)
            for t, d, s_in, s in zip(tap, dilation, sp, strides)
        )
        buf[(slice(None),) * 3 + dest] += contrib
    crop = tuple(slice(padding[i], full_sp[i] - padding[i + nd]) for i in range(nd))
    out = buf[(slice(None),) * 3 + crop]
    return out.reshape((n, g * og) + out.shape[3:])


_TO_CHANNELS_FIRST = {"NCW": None, "NWC": (0, 2, 1), "NCHW": None, "NHWC": (0, 3, 1, 2)}
_FROM_CHANNELS_FIRST = {"NCW": None, "NWC": (0, 2, 1), "NCHW": None, "NHWC": (0, 2, 3, 1)}
_KERNEL_TO_OI = {"OIW": None, "WIO": (2, 1, 0), "OIHW": None, "HWIO": (3, 2, 0, 1)}


def _to_cf(x: np.ndarray, layout: str) -> np.ndarray:
    perm = _TO_CHANNELS_FIRST[layout]
    return x if perm is None else x.transpose(perm)


def _from_cf(y: np.ndarray, layout: str, dtype: np.dtype) -> np.ndarray:
    perm = _FROM_CHANNELS_FIRST[layout]
    y = y if perm is None else y.transpose(perm)
    return np.ascontiguousarray(y).astype(dtype, copy=False)


def _conv(
    data: np.ndarray, weight: np.ndarray, strides: Any, padding: Any, dilation: Any,
    groups: int, data_layout: str, kernel_layout: str, nd: int,
) -> np.ndarray:  # fmt: skip
    """An ``nd``-dimensional convolution in any supported layout."""
    x = _to_cf(data, data_layout)
    perm = _KERNEL_TO_OI[kernel_layout]
    w = weight if perm is None else weight.transpose(perm)
    y = _conv_nd(
        x, w, expand_ints(strides, nd), expand_padding(padding, nd), expand_ints(dilation, nd),
        groups,
    )
    return _fresh(_from_cf(y, data_layout, data.dtype))


@_impl()
def conv1d(
    data: np.ndarray, weight: np.ndarray, *, strides: Any = (1,), padding: Any = (0, 0),
    dilation: Any = (1,), groups: int = 1, data_layout: str = "NCW", kernel_layout: str = "OIW",
) -> np.ndarray:  # fmt: skip
    """1-D convolution (cross-correlation); padding is (left, right)."""
    return _conv(data, weight, strides, padding, dilation, groups, data_layout, kernel_layout, 1)


@_impl()
def conv2d(
    data: np.ndarray, weight: np.ndarray, *, strides: Any = (1, 1), padding: Any = (0, 0, 0, 0),
    dilation: Any = (1, 1), groups: int = 1, data_layout: str = "NCHW",
    kernel_layout: str = "OIHW",
) -> np.ndarray:  # fmt: skip
    """2-D convolution (cross-correlation); padding is (top, left, bottom, right)."""
    return _conv(data, weight, strides, padding, dilation, groups, data_layout, kernel_layout, 2)


def _conv_t(
    data: np.ndarray, weight: np.ndarray, strides: Any, padding: Any, output_padding: Any,
    dilation: Any, groups: int, data_layout: str, nd: int,
) -> np.ndarray:  # fmt: skip
    """An ``nd``-dimensional transposed convolution in any supported data layout."""
    y = _conv_transpose_nd(
        _to_cf(data, data_layout), weight, expand_ints(strides, nd), expand_padding(padding, nd),
        expand_ints(output_padding, nd), expand_ints(dilation, nd), groups,
    )  # fmt: skip
    return _fresh(_from_cf(y, data_layout, data.dtype))


@_impl()
def conv_transpose1d(
    data: np.ndarray, weight: np.ndarray, *, strides: Any = (1,), padding: Any = (0, 0),
    output_padding: Any = (0,), dilation: Any = (1,), groups: int = 1, data_layout: str = "NCW",
) -> np.ndarray:  # fmt: skip
    """1-D transposed convolution; weight is (in_channels, out_channels / groups, W)."""
    return _conv_t(data, weight, strides, padding, output_padding, dilation, groups, data_layout, 1)


@_impl()
def conv_transpose2d(
    data: np.ndarray, weight: np.ndarray, *, strides: Any = (1, 1), padding: Any = (0, 0, 0, 0),
    output_padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1,
    data_layout: str = "NCHW",
) -> np.ndarray:  # fmt: skip
    """2-D transposed convolution; weight is (in_channels, out_channels / groups, H, W)
    like torch, padding (top, left, bottom, right)."""
    return _conv_t(data, weight, strides, padding, output_padding, dilation, groups, data_layout, 2)


# =============================================================================== nn


@_impl()
def softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """exp(x) / sum(exp(x)) along ``axis``."""
    if x.size == 0:
        return np.empty_like(x)
    xa = x.astype(_acc_dtype(x.dtype), copy=False)
    with np.errstate(all="ignore"):
        e = np.exp(xa - np.max(xa, axis=axis, keepdims=True))
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)


@_impl()
def log_softmax(x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """x - log(sum(exp(x))) along ``axis``."""
    if x.size == 0:
        return np.empty_like(x)
    xa = x.astype(_acc_dtype(x.dtype), copy=False)
    with np.errstate(all="ignore"):
        s = xa - np.max(xa, axis=axis, keepdims=True)
        return (s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))).astype(x.dtype)


def _normalize(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    xa = x.astype(_acc_dtype(x.dtype), copy=False)
    m = np.mean(xa, axis=axes, keepdims=True)
    v = np.mean(np.square(xa - m), axis=axes, keepdims=True)
    return (xa - m) / np.sqrt(v + epsilon)


def _channel_shape(ndim: int, axis: int, size: int) -> tuple[int, ...]:
    shape = [1] * ndim
    shape[axis] = size
    return tuple(shape)


@_impl()
def layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, axes: Sequence[int] = (-1,),
    epsilon: float = 1e-5,
) -> np.ndarray:  # fmt: skip
    """Normalize over ``axes`` to zero mean and unit variance, then ``* gamma + beta``
    (gamma and beta have the shape of x on ``axes``)."""
    ax = _axis_tuple(axes, x.ndim)
    pshape = tuple(x.shape[i] if i in ax else 1 for i in range(x.ndim))
    y = _normalize(x, ax, epsilon) * gamma.reshape(pshape) + beta.reshape(pshape)
    return y.astype(x.dtype, copy=False)


@_impl()
def batch_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, moving_mean: np.ndarray,
    moving_var: np.ndarray, *, axis: int = 1, epsilon: float = 1e-5,
) -> np.ndarray:  # fmt: skip
    """Inference batch normalization with the running statistics, along channel ``axis``."""
    ps = _channel_shape(x.ndim, axis % x.ndim, x.shape[axis])
    acc = _acc_dtype(x.dtype)
    scale = gamma.astype(acc) / np.sqrt(moving_var.astype(acc) + epsilon)
    y = (x.astype(acc) - moving_mean.astype(acc).reshape(ps)) * scale.reshape(ps)
    return (y + beta.astype(acc).reshape(ps)).astype(x.dtype, copy=False)


@_impl()
def group_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, num_groups: int,
    channel_axis: int = 1, epsilon: float = 1e-5,
) -> np.ndarray:  # fmt: skip
    """Split the channels into ``num_groups`` groups and normalize each group of each
    sample (over its channels and all other non-batch axes); then per-channel affine."""
    ca = channel_axis % x.ndim
    xc = np.moveaxis(x, ca, 1)
    n, c = xc.shape[:2]
    grouped = xc.reshape((n, num_groups, -1))
    y = _normalize(grouped, (2,), epsilon).reshape(xc.shape)
    ps = _channel_shape(x.ndim, 1, c)
    y = y * gamma.reshape(ps) + beta.reshape(ps)
    return _fresh(np.moveaxis(y, 1, ca).astype(x.dtype, copy=False))


@_impl()
def instance_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, channel_axis: int = 1,
    epsilon: float = 1e-5,
) -> np.ndarray:  # fmt: skip
    """Normalize each channel of each sample over the spatial axes (all axes but the batch
    axis 0 and ``channel_axis``), then per-channel affine."""
    ca = channel_axis % x.ndim
    axes = tuple(i for i in range(x.ndim) if i not in (0, ca))
    ps = _channel_shape(x.ndim, ca, x.shape[ca])
    y = _normalize(x, axes, epsilon) * gamma.reshape(ps) + beta.reshape(ps)
    return y.astype(x.dtype, copy=False)


def pool_out_size(
    size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int,
    ceil_mode: bool,
) -> int:  # fmt: skip
    """Output length of a pooling window along one axis (torch's rule for ceil_mode: the
    last window must start inside the input or the leading padding)."""
    eff = dilation * (kernel - 1) + 1
    num = size + pad_before + pad_after - eff
    if not ceil_mode:
        return num // stride + 1
    out = -(-num // stride) + 1
    if (out - 1) * stride >= size + pad_before:
        out -= 1
    return out


def reachable_taps(size: int, kernel: int, dilation: int, pad_before: int,
                   pad_after: int) -> int:
    """How many leading taps of a pooling window can ever reach the input or its
    padding: a tap at or beyond ``size + pad_after`` is neither data nor counted padding
    for any window (each window starts at or after ``-pad_before``).  A ``ceil_mode``
    window may be far larger than the input (EfficientNet's 1280-wide pooler over 7x7);
    the kernels loop over these taps only."""
    return builtins.min(kernel, -(-(size + pad_before + pad_after) // dilation))


def _pool_geometry(
    x: np.ndarray,
    pool_size: Any,
    strides: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    nd: int,
) -> tuple[
    tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], list[int], list[int]
]:
    """Kernel, strides, dilation, padding, output sizes and the trailing padding needed
    for the last window, for channels-first ``x``."""
    if x.ndim != nd + 2:
        raise ValueError(f"{nd}-d pooling takes a tensor of rank {nd + 2} (batch, channels "
                         f"and {nd} spatial axes), got one of shape {x.shape}")
    k, s = expand_ints(pool_size, nd), expand_ints(strides, nd)
    d, p = expand_ints(dilation, nd), expand_padding(padding, nd)
    sizes = x.shape[2:]
    outs = [
        pool_out_size(sizes[i], k[i], s[i], p[i], p[i + nd], d[i], ceil_mode) for i in range(nd)
    ]
    k = tuple(reachable_taps(sizes[i], k[i], d[i], p[i], p[i + nd]) for i in range(nd))
    # pad after: enough for the last window (ceil mode may need more than padding)
    after = [
        builtins.max((outs[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - sizes[i] - p[i], p[i + nd])
        for i in range(nd)
    ]
    return k, s, d, p, outs, after


def _max_pool(
    x: np.ndarray, pool_size: Any, strides: Any, padding: Any, dilation: Any, ceil_mode: bool,
    layout: str, nd: int,
) -> np.ndarray:  # fmt: skip
    """``nd``-dimensional max pooling; padding holds the dtype's lowest value."""
    xc = _to_cf(x, layout)
    geometry = _pool_geometry(xc, pool_size, strides, padding, dilation, ceil_mode, nd)
    k, s, d, p, outs, after = geometry
    if xc.dtype.kind == "f":
        low: Any = -np.inf
    else:
        low = np.iinfo(xc.dtype).min if xc.dtype.kind in "iu" else False
    xp = np.pad(xc, [(0, 0), (0, 0)] + [(p[i], after[i]) for i in range(nd)], constant_values=low)
    win = _windows(xp, k, s, d)
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
    y = np.max(win, axis=tuple(range(-nd, 0)))
    return _fresh(_from_cf(y, layout, x.dtype))


def _avg_pool(
    x: np.ndarray, pool_size: Any, strides: Any, padding: Any, dilation: Any, ceil_mode: bool,
    count_include_pad: bool, layout: str, nd: int,
) -> np.ndarray:  # fmt: skip
    """``nd``-dimensional average pooling."""
    xc = _to_cf(x, layout)
    geometry = _pool_geometry(xc, pool_size, strides, padding, dilation, ceil_mode, nd)
    k, s, d, p, outs, after = geometry
    acc = _acc_dtype(xc.dtype)
    xp = np.pad(xc.astype(acc), [(0, 0), (0, 0)] + [(p[i], after[i]) for i in range(nd)])
    win = _windows(xp, k, s, d)
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in outs)]
    total = np.sum(win, axis=tuple(range(-nd, 0)))
    # the divisor is separable: per axis, count the window taps that are inside the input
    # (or inside input + padding with count_include_pad); multiply the counts
    divisor = np.ones((), dtype=acc)
    for i in range(nd):
        size = xc.shape[2 + i]
        pos = np.arange(outs[i])[:, None] * s[i] + np.arange(k[i])[None, :] * d[i] - p[i]
        hi = size + p[i + nd] if count_include_pad else size
        lo = -p[i] if count_include_pad else 0
        count = np.sum((pos >= lo) & (pos < hi), axis=1).astype(acc)
        divisor = np.multiply.outer(divisor, count)
    with np.errstate(all="ignore"):
        y = total / divisor
    return _fresh(_from_cf(y, layout, x.dtype))


@_impl()
def max_pool1d(
    x: np.ndarray, *, pool_size: Any = (1,), strides: Any = (1,), padding: Any = (0, 0),
    dilation: Any = (1,),
    ceil_mode: bool = False, layout: str = "NCW",
) -> np.ndarray:  # fmt: skip
    """1-D max pooling; padding (left, right) never wins the maximum."""
    return _max_pool(x, pool_size, strides, padding, dilation, ceil_mode, layout, 1)


@_impl()
def max_pool2d(
    x: np.ndarray, *, pool_size: Any = (1, 1), strides: Any = (1, 1),
    padding: Any = (0, 0, 0, 0), dilation: Any = (1, 1), ceil_mode: bool = False,
    layout: str = "NCHW",
) -> np.ndarray:  # fmt: skip
    """2-D max pooling; padding (top, left, bottom, right) never wins the maximum."""
    return _max_pool(x, pool_size, strides, padding, dilation, ceil_mode, layout, 2)


@_impl()
def avg_pool1d(
    x: np.ndarray, *, pool_size: Any = (1,), strides: Any = (1,), padding: Any = (0, 0),
    dilation: Any = (1,),
    ceil_mode: bool = False, count_include_pad: bool = False, layout: str = "NCW",
) -> np.ndarray:  # fmt: skip
    """1-D average pooling."""
    return _avg_pool(
        x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad, layout, 1
    )


@_impl()
def avg_pool2d(
    x: np.ndarray, *, pool_size: Any = (1, 1), strides: Any = (1, 1),
    padding: Any = (0, 0, 0, 0), dilation: Any = (1, 1), ceil_mode: bool = False,
    count_include_pad: bool = False, layout: str = "NCHW",
) -> np.ndarray:  # fmt: skip
    """2-D average pooling; the divisor counts the padding only with count_include_pad
    (and never the extra cells of ceil_mode)."""
    return _avg_pool(
        x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad, layout, 2
    )


@_impl()
def adaptive_avg_pool2d(
    x: np.ndarray, *, output_size: Any = None, layout: str = "NCHW"
) -> np.ndarray:
    """Average over the cells ``[floor(i * H / oh), ceil((i + 1) * H / oh))`` (torch's
    bins); output_size None keeps the input size."""
    xc = _to_cf(x, layout)
    h, w = xc.shape[2:]
    oh, ow = (h, w) if output_size is None else expand_ints(output_size, 2)
    acc = np.float64
    # an integral image makes every bin sum O(1)
    ii = np.zeros(xc.shape[:2] + (h + 1, w + 1), dtype=acc)
    ii[:, :, 1:, 1:] = np.cumsum(np.cumsum(xc.astype(acc), axis=2), axis=3)
    hs = np.arange(oh) * h // oh
    he = -((-(np.arange(oh) + 1) * h) // oh)
    ws = np.arange(ow) * w // ow
    we = -((-(np.arange(ow) + 1) * w) // ow)
    total = (
        ii[:, :, he[:, None], we[None, :]] - ii[:, :, hs[:, None], we[None, :]]
        - ii[:, :, he[:, None], ws[None, :]] + ii[:, :, hs[:, None], ws[None, :]]
    )  # fmt: skip
    y = total / ((he - hs)[:, None] * (we - ws)[None, :])
    return _fresh(_from_cf(y, layout, x.dtype))


@_impl()
def global_avg_pool2d(x: np.ndarray, *, layout: str = "NCHW") -> np.ndarray:
    """Mean over the spatial axes, kept as size-1 axes."""
    axes = (2, 3) if layout == "NCHW" else (1, 2)
    return _reduce_out(np.mean(x, axis=axes, keepdims=True, dtype=_acc_dtype(x.dtype)), x.dtype)


def _source_coords(out_len: int, in_len: int, mode: str) -> np.ndarray:
    """The input coordinate of every output index along one axis (ONNX Resize)."""
    o = np.arange(out_len, dtype=np.float64)
    scale = out_len / in_len
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return o * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    raise ValueError(f"resize2d: unknown coordinate_transformation_mode {mode!r}")


def _round_coords(c: np.ndarray, method: str) -> np.ndarray:
    if method == "round":  # half away from zero
        return np.sign(c) * np.floor(np.abs(c) + 0.5)
    if method == "round_prefer_floor":
        return np.ceil(c - 0.5)
    if method == "round_prefer_ceil":
        return np.floor(c + 0.5)
    if method == "floor":
        return np.floor(c)
    if method == "ceil":
        return np.ceil(c)
    raise ValueError(f"resize2d: unknown rounding_method {method!r}")


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at offsets -1, 0, 1, 2."""

    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _resize_axis(
    x: np.ndarray, axis: int, out_len: int, method: str, mode: str, rounding: str,
    cubic_alpha: float, cubic_exclude: bool,
) -> np.ndarray:  # fmt: skip
    """Resize one axis of ``x`` to ``out_len``."""
    in_len = x.shape[axis]
    c = _source_coords(out_len, in_len, mode)
    if method == "nearest":
        idx = np.clip(_round_coords(c, rounding), 0, in_len - 1).astype(np.int64)
        return np.take(x, idx, axis=axis)
    if method == "linear":
        i0 = np.floor(c)
        offsets, weights = np.array([0, 1]), np.stack([1 - (c - i0), c - i0], axis=-1)
    elif method == "cubic":
        i0 = np.floor(c)
        offsets, weights = np.array([-1, 0, 1, 2]), _cubic_weights(c - i0, cubic_alpha)
    else:
        raise ValueError(f"resize2d: unknown method {method!r}")
    taps = i0[:, None].astype(np.int64) + offsets[None, :]
    if method == "cubic" and cubic_exclude:
        weights = np.where((taps >= 0) & (taps < in_len), weights, 0.0)
        weights = weights / np.sum(weights, axis=1, keepdims=True)
    taps = np.clip(taps, 0, in_len - 1)
    gathered = np.take(x, taps, axis=axis)  # axis -> (out, tap)
    wshape = [1] * gathered.ndim
    wshape[axis], wshape[axis + 1] = out_len, weights.shape[1]
    return np.sum(gathered * weights.astype(x.dtype).reshape(wshape), axis=axis + 1)


@_impl()
def resize2d(
    x: np.ndarray, *, size: Sequence[int], layout: str = "NCHW", method: str = "linear",
    coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "round",
    cubic_alpha: float = -0.75, cubic_exclude: bool = False,
) -> np.ndarray:  # fmt: skip
    """Resize the spatial axes to ``size`` (ONNX Resize semantics: each output index maps to
    an input coordinate by the coordinate transformation, then nearest / linear / cubic
    interpolation with edge clamping)."""
    xc = _to_cf(x, layout)
    # interpolate in the input's float type (float32 for float16, float64 for integers)
    work_dtype = _acc_dtype(x.dtype) if x.dtype.kind == "f" else np.dtype(np.float64)
    work = xc if method == "nearest" else xc.astype(work_dtype)
    oh, ow = expand_ints(size, 2)
    for axis, n_out in ((2, oh), (3, ow)):
        work = _resize_axis(
            work, axis, n_out, method, coordinate_transformation_mode, rounding_method,
            cubic_alpha, cubic_exclude,
        )  # fmt: skip
    if method != "nearest" and x.dtype.kind in "iub":
        if x.dtype.kind == "b":
            work = work >= 0.5
        else:
            info = np.iinfo(x.dtype)
            work = np.clip(np.rint(work), info.min, info.max)
    return _fresh(_from_cf(work, layout, x.dtype))


# ============================================================ destination passing


def _n_outputs(name: str, attrs: dict[str, Any]) -> int:
    f = _N_OUTPUTS.get(name)
    return 1 if f is None else f(attrs)


def _check_out(name: str, i: int, out: Any, shape: tuple[int, ...]) -> None:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"numpy.{name}: output {i} must be a numpy array, got {type(out).__name__}")
    if out.shape != tuple(shape):
        raise ValueError(
            f"numpy.{name}: output {i} has shape {out.shape}, but the result has shape "
            f"{tuple(shape)}"
        )


def make_dps(name: str, fn: Callable[..., Any]) -> Callable[..., None]:
    """The destination-passing form of the value-returning ``fn`` of op ``name``:
    ``dps(*inputs, *outputs, **attrs)`` writes the result(s) into the outputs."""

    def dps(*args: Any, **attrs: Any) -> None:
        n_out = _n_outputs(name, attrs)
        if len(args) < n_out:
            raise TypeError(f"numpy.{name}: expected {n_out} output arrays after the inputs")
        inputs, outputs = args[: len(args) - n_out], args[len(args) - n_out :]
        result = fn(*inputs, **attrs)
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != n_out:
            raise ValueError(f"numpy.{name}: produced {len(results)} results for {n_out} outputs")
        for i, (out, r) in enumerate(zip(outputs, results)):
            _check_out(name, i, out, r.shape)
            np.copyto(out, r, casting="same_kind")

    dps.__name__ = dps.__qualname__ = f"dps_{name}"
    dps.__doc__ = f"Destination-passing form of :func:`{name}`: ``(*inputs, *outputs, **attrs)``."
    return dps


def make_ufunc_dps(name: str, ufunc: np.ufunc) -> Callable[..., None]:
    """Destination-passing form of an op that is exactly ``ufunc``: computes straight
    into the output with ``out=`` (no temporary)."""
    nin = ufunc.nin

    def dps(*args: Any, **attrs: Any) -> None:
        if attrs:
            raise TypeError(f"numpy.{name}: takes no attributes, got {', '.join(sorted(attrs))}")
        if len(args) != nin + 1:
            raise TypeError(
                f"numpy.{name}: expected {nin} inputs and 1 output, got {len(args)} arrays"
            )
        out = args[-1]
        ins = [np.asarray(a) for a in args[:-1]]
        if ufunc is np.matmul:
            shape = _matmul_shape(ins[0].shape, ins[1].shape)
        else:
            shape = np.broadcast_shapes(*(a.shape for a in ins))
        _check_out(name, 0, out, shape)
        with np.errstate(all="ignore"):
            if ufunc is np.matmul:
                matmul_into(ins[0], ins[1], out, casting="same_kind")
            else:
                ufunc(*ins, out=out, casting="same_kind")

    dps.__name__ = dps.__qualname__ = f"dps_{name}"
    dps.__doc__ = f"Destination-passing ``{ufunc.__name__}(*inputs, out=output)``."
    return dps


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    sa = (1,) + a if len(a) == 1 else a
    sb = b + (1,) if len(b) == 1 else b
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    return batch + (sa[-2],) * (len(a) > 1) + (sb[-1],) * (len(b) > 1)


DPS: dict[str, Callable[..., None]] = {}
"""The destination-passing form of each op, by op name."""

KEYWORD_MINIMUMS = {"strides": 1, "dilation": 1, "groups": 1, "pool_size": 1,
                    "num_groups": 1, "output_size": 1, "repeats": 0}
"""The least value of the attributes the implementations divide or step by (checked
with the keywords of every call: :mod:`plait.runtime.call_schema`)."""
SIGNED_KEYWORDS = {"strided_slice": ("strides",)}
"""Keywords of :data:`KEYWORD_MINIMUMS` that an op takes with any sign (a slice steps
backwards with a negative stride)."""


def _minimums(name: str) -> dict[str, int]:
    return {k: v for k, v in KEYWORD_MINIMUMS.items() if k not in SIGNED_KEYWORDS.get(name, ())}


for _name, _fn in IMPLS.items():
    _uf = _UFUNC_DPS.get(_name)
    DPS[_name] = make_ufunc_dps(_name, _uf) if _uf is not None else make_dps(_name, _fn)
    if register_func is not None:
        register_func(f"numpy.{_name}", DPS[_name], override=True)
        # value-returning form, for results whose shape is only known at run time
        register_func(f"numpy.{_name}@alloc", _fn, override=True)
    # a ufunc's destination-passing form takes no keywords at all
    register_keyword_check(f"numpy.{_name}", signature_check(
        f"numpy.{_name}", _fn if _uf is None else (lambda: None), _minimums(_name)))
    register_keyword_check(f"numpy.{_name}@alloc",
                           signature_check(f"numpy.{_name}@alloc", _fn, _minimums(_name)))
