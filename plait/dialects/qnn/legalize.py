"""qnn.Legalize: every qnn op as core integer and float ops, with the same bits.

For targets without int8 kernels (``numpy``, or ``c`` for the ops its dispatch does not
take) each qnn call becomes core ops that compute exactly what :mod:`.reference` does:

* float32 arithmetic is done one operation at a time in float64 and rounded back to
  float32 after each step (``cast(multiply(cast(a, f64), cast(b, f64)), f32)``): that
  is exactly float32 arithmetic (double rounding is harmless for + - * / when the wider
  format has 2p + 2 bits), and it stays exact when a C compiler contracts a multiply
  and an add into an FMA (products of float32 values are exact in float64);
* a fused multiply-add of onnxruntime (QLinearAdd) is a float64 multiply and add, exact
  for these operands, rounded once;
* rounding is ``round`` (half to even), saturation ``clip``, ``cvtps2dq``'s out-of-range
  result a ``where``;
* a table onnxruntime builds (sigmoid, leaky relu, the inputs of a concat, softmax's
  exponents) is computed here with the reference and read with ``take``.

Ops whose tables need their scales (sigmoid, leaky_relu, softmax, concat, avg_pool2d)
take constant scales and zero points; the others also take computed ones (dynamic
quantization).  Integer products become int32 ``conv2d``/``matmul``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from plait.errors import PlaitError
from plait.ir.builder import BlockBuilder
from plait.ir.expr import Call, Constant, Expr, Op, Tuple, VarBinding
from plait.ir.module import IRModule
from plait.ir.types import TensorType
from plait.ir.visitor import ExprMutator
from plait.ir.walk import calls_any
from plait.op.registry import make_call
from plait.transform.pass_base import function_pass

from . import reference as R

F32, F64 = "float32", "float64"
_INT_MIN = float(-(2**31))


class LegalizeError(PlaitError, ValueError):
    """A qnn call cannot be lowered to core ops (the message names the op and why)."""


class Lowering:
    """Builds the core ops of one qnn call into ``bb`` (helpers for the lowerings)."""

    def __init__(self, bb: BlockBuilder, call: Call) -> None:
        self.bb = bb
        self.call = call
        self.name = call.op.name  # type: ignore[union-attr]

    # ------------------------------------------------------------ building
    def op(self, name: str, *args: Expr, **attrs: Any) -> Expr:
        """A core op call, bound to a variable."""
        return self.bb.emit(make_call(name, *args, **attrs), "qnn")

    def const(self, value: Any, dtype: str) -> Constant:
        return Constant(np.array(value, dtype=dtype, order="C"))

    def cast(self, x: Expr, dtype: str) -> Expr:
        if isinstance(x.ty, TensorType) and x.ty.dtype == dtype:
            return x
        if isinstance(x, Constant):
            return self.const(x.data.astype(dtype), dtype)
        return self.op("cast", x, dtype=dtype)

    def f32(self, name: str, a: Expr, b: Expr) -> Expr:
        """The float32 result of ``a <name> b`` (float32 operands), computed in float64
        and rounded once."""
        return self.cast(self.op(name, self.cast(a, F64), self.cast(b, F64)), F32)

    def fail(self, message: str) -> LegalizeError:
        return LegalizeError(f"{self.name}: {message}")

    def constant(self, i: int, what: str) -> np.ndarray:
        """Argument ``i`` as a numpy value; it must be a constant."""
        a = self.call.args[i]
        if not isinstance(a, Constant):
            raise self.fail(
                f"{what} (argument {i}) must be a constant to lower this op to core ops "
                "(its table is built at compile time); fold it first (FoldConstant) or "
                "run the model on a target with a kernel for it"
            )
        return a.data

    def arg_shape(self, i: int) -> tuple[int, ...]:
        t = self.call.args[i].ty
        if not isinstance(t, TensorType) or t.shape is None or not all(
                isinstance(d, int) for d in t.shape):
            raise self.fail(f"argument {i} needs a static shape, got {t}")
        return tuple(int(d) for d in t.shape)

    def param(self, p: Expr, shape: tuple[Any, ...], axis: int, dtype: str,
              block_size: int = 0) -> Expr:
        """A scale or zero point shaped to broadcast against a tensor of ``shape``
        (:func:`reference.param`), as ``dtype``."""
        if isinstance(p, Constant):
            return self.const(R.param(p.data, shape, axis, block_size), dtype)
        pt = p.ty
        assert isinstance(pt, TensorType) and pt.shape is not None
        p = self.cast(p, dtype)
        rank = len(shape)
        if len(pt.shape) == 0:
            return p
        if len(pt.shape) == 1 and pt.shape[0] == 1 and not block_size:
            return self.op("reshape", p, shape=())
        ax = axis % rank
        if block_size:
            rep = self.op("repeat", p, repeats=block_size, axis=ax)
            return self.op("strided_slice", rep, axes=(ax,), begin=(0,), end=(shape[ax],))
        dims = [1] * rank
        dims[ax] = -1
        return self.op("reshape", p, shape=tuple(dims))

    def saturate_round(self, v: Expr, zp: Expr, dtype: str) -> Expr:
        """``round(v) + zp`` clamped to ``dtype`` (``v`` float32 already clamped to the
        range minus the zero point)."""
        r = self.cast(self.op("round", v), "int32")
        return self.cast(self.op("add", r, self.cast(zp, "int32")), dtype)

    def clamp_ps(self, v: Expr, zp: Expr, dtype: str) -> Expr:
        """``minps(maxps(v, qmin - zp), qmax - zp)``: NaN becomes ``qmin - zp``."""
        lo, hi = R.qrange(dtype)
        if isinstance(zp, Constant):
            z = zp.data.astype(np.int64)
            lo_e: Expr = self.const(lo - z, F32)
            hi_e: Expr = self.const(hi - z, F32)
        else:
            zf = self.cast(zp, F32)
            lo_e = self.op("subtract", self.const(lo, F32), zf)
            hi_e = self.op("subtract", self.const(hi, F32), zf)
        v = self.op("where", self.op("greater", v, lo_e), v, lo_e)
        return self.op("where", self.op("less", v, hi_e), v, hi_e)

    def pack(self, v: Expr, dtype: str) -> Expr:
        """``cvtps2dq`` (NaN and out-of-range values give INT_MIN) and a saturating
        pack to ``dtype``."""
        lo, hi = R.qrange(dtype)
        r = self.op("round", v)
        ok = self.op("less", self.op("abs", v), self.const(2.0**31, F32))
        r = self.op("where", ok, r, self.const(_INT_MIN, F32))
        return self.cast(self.op("clip", r, min=float(lo), max=float(hi)), dtype)

    def lookup(self, x: Expr, table: np.ndarray) -> Expr:
        """``table[x]`` for an 8-bit ``x`` (``table`` indexed by bit pattern)."""
        dtype = np.dtype(x.ty.dtype)  # type: ignore[union-attr]
        lo, _ = R.qrange(dtype)
        by_value = np.asarray(table)[R.table_inputs(dtype).argsort(kind="stable")]
        idx = self.op("subtract", self.cast(x, "int32"), self.const(lo, "int32"))
        return self.op("take", self.const(by_value, by_value.dtype.name), idx, axis=0)


LowerFn = Callable[[Lowering], Expr]
LOWERINGS: dict[str, LowerFn] = {}


def lowering(op: str) -> Callable[[LowerFn], LowerFn]:
    """Register the decorated function as the lowering of ``qnn.<op>``."""

    def deco(fn: LowerFn) -> LowerFn:
        LOWERINGS[f"qnn.{op}"] = fn
        return fn

    return deco


def _dtype(e: Expr) -> str:
    t = e.ty
    assert isinstance(t, TensorType) and t.dtype is not None
    return t.dtype


def _shape(e: Expr) -> tuple[Any, ...]:
    t = e.ty
    assert isinstance(t, TensorType) and t.shape is not None
    return t.shape


# ------------------------------------------------------------ (de)quantization


def quantize_expr(lw: Lowering, x: Expr, scale: Expr, zp: Expr, axis: int = 1,
                  block_size: int = 0) -> Expr:
    """:func:`reference.quantize` as core ops."""
    dtype = _dtype(zp)
    shape = _shape(x)
    s = lw.param(scale, shape, axis, F32, block_size)
    z = lw.param(zp, shape, axis, "int32", block_size)
    v = lw.f32("divide", lw.cast(x, F32), s)
    v = lw.clamp_ps(v, z, dtype)
    return lw.saturate_round(v, z, dtype)


@lowering("quantize")
def _quantize(lw: Lowering) -> Expr:
    x, s, z = lw.call.args
    a = lw.call.attrs
    return quantize_expr(lw, x, s, z, a["axis"], a["block_size"])


def dequantize_expr(lw: Lowering, x: Expr, scale: Expr, zp: Expr, axis: int = 1,
                    block_size: int = 0) -> Expr:
    """:func:`reference.dequantize` as core ops."""
    shape = _shape(x)
    s = lw.param(scale, shape, axis, F32, block_size)
    z = lw.param(zp, shape, axis, "int32", block_size)
    d = lw.cast(lw.op("subtract", lw.cast(x, "int32"), z), F32)
    return lw.f32("multiply", d, s)


@lowering("dequantize")
def _dequantize(lw: Lowering) -> Expr:
    x, s, z = lw.call.args
    a = lw.call.attrs
    return dequantize_expr(lw, x, s, z, a["axis"], a["block_size"])


def requantize_expr(lw: Lowering, x: Expr, si: Expr, zi: Expr | None, so: Expr, zo: Expr,
                    axis: int = -1) -> Expr:
    """:func:`reference.requantize` as core ops (``zi`` None: no input zero point)."""
    dtype = _dtype(zo)
    shape = _shape(x)
    if isinstance(si, Constant) and isinstance(so, Constant):
        m: Expr = lw.const(R.param(si.data, shape, axis).astype(np.float32)
                           / R.param(so.data, shape, axis).astype(np.float32), F32)
    else:
        m = lw.f32("divide", lw.param(si, shape, axis, F32), lw.param(so, shape, axis, F32))
    acc = lw.cast(x, "int32")
    if zi is not None and not (isinstance(zi, Constant) and not zi.data.any()):
        acc = lw.op("subtract", acc, lw.param(zi, shape, axis, "int32"))
    v = lw.f32("multiply", lw.cast(acc, F32), m)
    z = lw.param(zo, shape, axis, "int32")
    v = lw.clamp_ps(v, z, dtype)
    return lw.saturate_round(v, z, dtype)


@lowering("requantize")
def _requantize(lw: Lowering) -> Expr:
    x, si, zi, so, zo = lw.call.args
    return requantize_expr(lw, x, si, zi, so, zo, lw.call.attrs["axis"])


# ------------------------------------------------------------------- products


def _centered(lw: Lowering, x: Expr, zp: Expr, shape_fn: Callable[[Expr], Expr]) -> Expr:
    xi = lw.cast(x, "int32")
    if isinstance(zp, Constant):
        if not zp.data.any():
            return xi
        if isinstance(x, Constant):
            return lw.const(x.data.astype(np.int32) - shape_fn(zp).data, "int32")  # type: ignore[attr-defined]
    return lw.op("subtract", xi, shape_fn(zp))


@lowering("conv2d")
def _conv2d(lw: Lowering) -> Expr:
    x, w, zx, zw = lw.call.args

    def per_output_channel(z: Expr) -> Expr:
        if isinstance(z, Constant):
            d = z.data.astype(np.int32)
            return lw.const(d.reshape(-1, 1, 1, 1) if d.size > 1 else d.reshape(()), "int32")
        zi = lw.cast(z, "int32")
        zt = z.ty
        if isinstance(zt, TensorType) and zt.shape is not None and len(zt.shape) == 1:
            return lw.op("reshape", zi, shape=(-1, 1, 1, 1))
        return zi

    xc = _centered(lw, x, zx, lambda z: lw.cast(z, "int32") if not isinstance(z, Constant)
                   else lw.const(z.data.astype(np.int32).reshape(()), "int32"))
    wc = _centered(lw, w, zw, per_output_channel)
    return make_call("conv2d", xc, wc, **dict(lw.call.attrs))


@lowering("matmul")
def _matmul(lw: Lowering) -> Expr:
    a, b, za, zb = lw.call.args

    def per_row(z: Expr) -> Expr:
        if isinstance(z, Constant):
            d = z.data.astype(np.int32)
            return lw.const(d.reshape(-1, 1) if d.ndim == 1 and d.size > 1 else d, "int32")
        zi = lw.cast(z, "int32")
        zt = z.ty
        if isinstance(zt, TensorType) and zt.shape is not None and len(zt.shape) == 1 \
                and zt.shape[0] != 1:
            return lw.op("reshape", zi, shape=(-1, 1))
        return zi

    def as_is(z: Expr) -> Expr:
        return lw.cast(z, "int32")

    return make_call("matmul", _centered(lw, a, za, per_row), _centered(lw, b, zb, as_is))


# ---------------------------------------------------------------- elementwise


def _scalars(lw: Lowering, *idx: int) -> list[Any]:
    out = []
    for i in idx:
        out.append(np.asarray(lw.constant(i, "a scale or zero point")).reshape(()))
    return out


@lowering("add")
def _add(lw: Lowering) -> Expr:
    a, _, _, b, _, _, _, _ = lw.call.args
    sa, za, sb, zb, sc, zc = _scalars(lw, 1, 2, 4, 5, 6, 7)
    f = np.float32
    ra, rb = f(f(sa) / f(sc)), f(f(sb) / f(sc))
    fixed = f(f(int(zc)) - R.fma_f32(ra, f(int(za)), f(rb * f(int(zb)))))
    for r in (ra, rb):  # a*r + c exact in float64 (see the module docstring)
        if r != 0 and abs(math.frexp(float(r))[1]) > 60:
            raise lw.fail(f"the scale ratio {r} is out of the range this lowering is exact for")
    af, bf = lw.cast(a, F64), lw.cast(b, F64)

    def fma(x: Expr, r: Any, c: Expr) -> Expr:
        prod = lw.op("multiply", x, lw.const(r, F64))
        return lw.cast(lw.op("add", prod, lw.cast(c, F64)), F32)

    fixed_e = lw.const(fixed, F32)
    case = R.broadcast_case(tuple(_shape(a)), tuple(_shape(b)))
    if case == "a":
        v = fma(bf, rb, fma(af, ra, fixed_e))
    else:
        v = fma(af, ra, fma(bf, rb, fixed_e))
    return lw.pack(v, _dtype(a))


@lowering("mul")
def _mul(lw: Lowering) -> Expr:
    a, _, _, b, _, _, _, _ = lw.call.args
    sa, za, sb, zb, sc, zc = _scalars(lw, 1, 2, 4, 5, 6, 7)
    f = np.float32
    ratio = f(f(f(sa) * f(sb)) / f(sc))
    pa = lw.op("subtract", lw.cast(a, "int32"), lw.const(int(za), "int32"))
    pb = lw.op("subtract", lw.cast(b, "int32"), lw.const(int(zb), "int32"))
    prod = lw.cast(lw.op("multiply", pa, pb), F32)
    v = lw.f32("multiply", prod, lw.const(ratio, F32))
    v = lw.f32("add", v, lw.const(f(int(zc)), F32))
    return lw.pack(v, _dtype(a))


def _table_op(build: Callable[..., np.ndarray]) -> LowerFn:
    def lower(lw: Lowering) -> Expr:
        x = lw.call.args[0]
        xs, xz, ys, yz = _scalars(lw, 1, 2, 3, 4)
        table = build(np.dtype(_dtype(x)), xs, xz, ys, yz, **dict(lw.call.attrs))
        return lw.lookup(x, table)

    return lower


lowering("sigmoid")(_table_op(R.sigmoid_table))
lowering("leaky_relu")(_table_op(R.leaky_relu_table))


@lowering("concat")
def _concat(lw: Lowering) -> Expr:
    xs, ss, zs, _, _ = lw.call.args
    ys, yz = _scalars(lw, 3, 4)
    if not all(isinstance(t, Tuple) for t in (xs, ss, zs)):
        raise lw.fail("its inputs, scales and zero points must be tuples written out")
    parts = []
    for x, s, z in zip(xs.fields, ss.fields, zs.fields):  # type: ignore[union-attr]
        if not isinstance(s, Constant) or not isinstance(z, Constant):
            raise lw.fail("every input's scale and zero point must be a constant")
        same = (np.float32(s.data.reshape(())) == np.float32(ys)
                and int(z.data.reshape(())) == int(yz))
        if same:
            parts.append(x)
        else:
            parts.append(lw.lookup(x, R.cast_table(np.dtype(_dtype(x)), s.data, z.data, ys, yz)))
    return make_call("concat", Tuple(tuple(parts)), axis=lw.call.attrs["axis"])


@lowering("softmax")
def _softmax(lw: Lowering) -> Expr:
    x = lw.call.args[0]
    xs, _, ys, yz = _scalars(lw, 1, 2, 3, 4)
    shape = lw.arg_shape(0)
    axis = lw.call.attrs["axis"] % len(shape)
    d = shape[axis]
    table = R.softmax_exp_table(xs, d, signed=False)  # entry 255 - k: exp(-k * xs) shifted
    by_distance = np.ascontiguousarray(table[::-1])
    f = np.float32
    yscale = f(math.floor(f(1.0) / f(ys)))
    xi = lw.cast(x, "int32")
    mx = lw.op("max", xi, axis=axis, keepdims=True)
    k = lw.op("subtract", mx, xi)
    vt = lw.op("take", lw.const(by_distance, F32), k, axis=0)
    run = lw.op("cumsum", vt, axis=axis)  # a sequential float32 sum
    vsum = lw.op("strided_slice", run, axes=(axis,), begin=(d - 1,), end=(d,))
    num = lw.f32("multiply", vt, lw.const(yscale, F32))
    v = lw.f32("divide", num, vsum)
    q = lw.op("add", lw.cast(lw.op("round", v), "int32"), lw.const(int(yz), "int32"))
    lo, hi = R.qrange(_dtype(x))
    return lw.cast(lw.op("clip", q, min=float(lo), max=float(hi)), _dtype(x))


@lowering("layer_norm")
def _layer_norm(lw: Lowering) -> Expr:
    x, xs, xz, g, b, ys, yz = lw.call.args
    xf = dequantize_expr(lw, x, xs, xz)
    a = lw.call.attrs
    yf = lw.op("layer_norm", xf, g, b, axes=a["axes"], epsilon=a["epsilon"])
    return quantize_expr(lw, yf, ys, yz)


# -------------------------------------------------------------------- pooling


def _global_avg(lw: Lowering, x: Expr) -> Expr:
    xs, xz, ys, yz = _scalars(lw, 1, 2, 3, 4)
    shape = lw.arg_shape(0)
    size = shape[2] * shape[3]
    f = np.float32
    scale = f(f(xs) / f(f(ys) * f(size)))
    acc = lw.op("sum", lw.cast(x, "int32"), axis=(2, 3), keepdims=True)
    if int(xz):
        acc = lw.op("subtract", acc, lw.const(int(xz) * size, "int32"))
    return requantize_expr(lw, acc, lw.const(scale, F32), None, lw.const(1.0, F32),
                           lw.const(yz, _dtype(x)))


@lowering("global_avg_pool2d")
def _global_avg_pool2d(lw: Lowering) -> Expr:
    return _global_avg(lw, lw.call.args[0])


def live_taps(size: int, kernel: int, stride: int, pad_before: int, out: int) -> list[int]:
    """The taps of a pooling window along one axis that read the input for at least one
    of the ``out`` windows (tap ``r`` of window ``o`` reads ``o * stride + r -
    pad_before``).  The others read only padding or beyond it: they add ``0.0`` to
    every window's float sum (exact), so the lowering leaves them out.  A ``ceil_mode``
    window may be far wider than the input (EfficientNet's pooler, 1280 x 1280 over a
    7 x 7 map): its live taps are bounded by the input, not by the kernel."""
    live = []
    for r in range(kernel):
        lo = max(pad_before - r, 0)      # the first input row, as o * stride >= lo
        o = -(-lo // stride)
        if o < out and o * stride <= pad_before - r + size - 1:
            live.append(r)
    return live


@lowering("avg_pool2d")
def _avg_pool2d(lw: Lowering) -> Expr:
    from plait.runtime.numpy_ops import pool_out_size
    from plait.runtime.window import expand_ints, expand_padding

    x = lw.call.args[0]
    a = lw.call.attrs
    n, c, h, w = lw.arg_shape(0)
    kh, kw = expand_ints(a["pool_size"], 2)
    sh, sw = expand_ints(a["strides"], 2)
    pt, pl, pb, pr = expand_padding(a["padding"], 2)
    if (kh, kw) == (h, w) and not any((pt, pl, pb, pr)):
        return _global_avg(lw, x)
    xs, xz, ys, yz = _scalars(lw, 1, 2, 3, 4)
    oh = pool_out_size(h, kh, sh, pt, pb, 1, a["ceil_mode"])
    ow = pool_out_size(w, kw, sw, pl, pr, 1, a["ceil_mode"])
    rows = live_taps(h, kh, sh, pt, oh)
    cols = live_taps(w, kw, sw, pl, ow)
    if not rows or not cols:
        raise lw.fail(f"no window of {kh} x {kw} (strides {sh}, {sw}, padding {pt}, {pl}) "
                      f"reads the {h} x {w} input: check the pooling's attributes")
    xf = dequantize_expr(lw, x, lw.const(xs, F32), lw.const(xz, _dtype(x)))
    # zeros around the input, as far as the live taps read: a window's taps outside the
    # input add 0.0 (exact)
    after_h = max((oh - 1) * sh + rows[-1] + 1 - h - pt, 0)
    after_w = max((ow - 1) * sw + cols[-1] + 1 - w - pl, 0)
    xp = lw.op("pad", xf, pad_width=(0, 0, 0, 0, pt, after_h, pl, after_w))
    acc: Expr | None = None
    for r in rows:
        for q in cols:
            tap = lw.op("strided_slice", xp, axes=(2, 3), begin=(r, q),
                        end=(r + (oh - 1) * sh + 1, q + (ow - 1) * sw + 1), strides=(sh, sw))
            acc = tap if acc is None else lw.op("add", acc, tap)
    counts = np.empty((oh, ow), np.float32)
    for i in range(oh):
        hs = i * sh - pt
        he, hs = min(hs + kh, h), max(hs, 0)
        for j in range(ow):
            ws = j * sw - pl
            we, ws = min(ws + kw, w), max(ws, 0)
            counts[i, j] = kh * kw if a["count_include_pad"] else (he - hs) * (we - ws)
    assert acc is not None
    avg = lw.f32("divide", acc, lw.const(counts, F32))
    v = lw.f32("add", lw.f32("divide", avg, lw.const(np.float32(ys), F32)),
               lw.const(np.float32(int(yz)), F32))
    return lw.pack(v, _dtype(x))


@lowering("max_pool2d")
def _max_pool2d(lw: Lowering) -> Expr:
    return make_call("max_pool2d", lw.call.args[0], **dict(lw.call.attrs))


@lowering("dynamic_quantize")
def _dynamic_quantize(lw: Lowering) -> Expr:
    x = lw.call.args[0]
    zero = lw.const(0.0, F32)
    mn = lw.op("minimum", lw.op("min", x), zero)
    mx = lw.op("maximum", lw.op("max", x), zero)
    span = lw.f32("subtract", mx, mn)
    scale = lw.op("where", lw.op("equal", mx, mn), lw.const(1.0, F32),
                  lw.f32("divide", span, lw.const(255.0, F32)))
    init = lw.f32("subtract", zero, lw.f32("divide", mn, scale))
    zp = lw.cast(lw.op("round", lw.op("clip", init, min=0.0, max=255.0)), "uint8")
    y = quantize_expr(lw, x, scale, zp)
    return Tuple((y, scale, zp))


# ------------------------------------------------------------------------ pass


class _Lower(ExprMutator):
    def rewrite_call(self, call: Call) -> Expr:
        op = call.op
        if not isinstance(op, Op):
            return call
        fn = LOWERINGS.get(op.name)
        if fn is None:
            return call
        bb = self.builder
        typed = bb.normalize(call)
        bb.begin_scope(bb.in_dataflow)
        result = fn(Lowering(bb, typed))  # type: ignore[arg-type]
        bindings = bb.end_scope()
        if bindings and isinstance(bindings[-1], VarBinding) and bindings[-1].var is result:
            result = bindings.pop().value  # the call's own binding holds the last op
        for b in bindings:
            bb.emit_binding(b)
        return result


def legalize_function(func: Any, mod: IRModule | None = None) -> Any:
    """``func`` with every qnn call lowered to core ops (``func`` itself when it calls
    none: the usual float model is not walked and rebuilt)."""
    if not calls_any(func, LOWERINGS):
        return func
    return _Lower(mod).visit_function(func)


@function_pass(name="qnn.Legalize", phases=("optimization",))
class Legalize:
    """Lower every qnn op to core integer and float ops, bit for bit.

    For targets without int8 kernels, and for the qnn calls a target's dispatch left."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return legalize_function(func, mod)
