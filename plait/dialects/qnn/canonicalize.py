"""qnn.Canonicalize: QDQ graphs (float ops between ``dequantize`` and ``quantize``) as qnn ops.

Written as rules of the pattern language (:mod:`plait.transform.pattern`).  Each rule
folds the shape onnxruntime's QDQ transformer fuses (``QDQSelectorActionTransformer``),
into the qnn op with onnxruntime's fused kernel's arithmetic, so a QDQ model computes
what onnxruntime computes for it:

* ``quantize(conv2d(dq(x), dq(w)) [+ reshape(dq(int32 bias))])`` -> ``qnn.conv2d``, the
  int32 bias, ``qnn.requantize`` (QLinearConv);
* ``quantize(matmul(dq(a), dq(b)))`` -> ``qnn.matmul``, ``qnn.requantize``
  (QLinearMatMul); without the quantize, ``qnn.matmul`` dequantized
  (MatMulIntegerToFloat);
* ``quantize(linear(dq(a), dq(w), dq(int32 bias)))`` and without the quantize (QGemm);
* ``quantize(add|multiply(dq(a), dq(b)))`` -> ``qnn.add``/``qnn.mul``;
* ``quantize(sigmoid|leaky_relu|softmax|avg_pool2d|global_avg_pool2d(dq(x)))`` ->
  the qnn op; ``quantize(concat((dq(x), ...)))`` -> ``qnn.concat``;
* ``quantize(layer_norm(dq(x), gamma, beta))`` -> ``qnn.layer_norm`` (onnxruntime runs
  this float island unfused; the qnn op has the same arithmetic and gives a target one
  op to implement);
* ``quantize(op(dq(x, s, z)), s, z)`` for ops that only move values (reshape,
  permute_dims, squeeze, expand_dims, flatten, strided_slice, take, broadcast_to) ->
  ``op(x)``; for ``max_pool2d`` (a positive scale) -> ``qnn.max_pool2d(x)``;
* ``quantize(relu(y), s, z)`` with ``z`` the type's minimum, and ``quantize(clip(y))``
  whose bounds hold the representable range, drop the activation (the saturation does
  it, bit for bit);
* ``quantize(dequantize(x, s, z), s, z)`` -> ``x``: a pair that cancels exactly.

Quantization parameters must be constants (the QDQ models the tools write have them).
A ``quantize -> dequantize`` pair is not dropped: it rounds, and onnxruntime keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from plait.ir.expr import Call, Constant, Expr, Op, Tuple, Var
from plait.ir.types import TensorType
from plait.op.registry import make_call
from plait.transform.pass_base import function_pass
from plait.transform.pattern import Match, Pattern, is_const, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, rewrite_function

from .reference import EIGHT_BIT, qrange, quantize

F32 = np.float32


def dq() -> Pattern:
    """A ``qnn.dequantize`` with constant parameters."""
    return is_op("qnn.dequantize")(wildcard(), is_const(), is_const())


def _q(inner: Pattern) -> Pattern:
    return is_op("qnn.quantize")(inner, is_const(), is_const())


def _dtype(e: Expr) -> str | None:
    t = e.ty
    return t.dtype if isinstance(t, TensorType) else None


def _const(value: Any, dtype: str) -> Constant:
    return Constant(np.array(value, dtype=dtype, order="C"))


def _params(c: Call) -> tuple[Expr, np.ndarray, np.ndarray]:
    """(quantized input, scale, zero point) of a ``qnn.dequantize`` (or the (float
    input, scale, zero point) of a ``qnn.quantize``)."""
    x, s, z = c.args
    assert isinstance(s, Constant) and isinstance(z, Constant)
    return x, s.data, z.data


def _per_tensor(*arrays: np.ndarray) -> bool:
    return all(a.size == 1 for a in arrays)


def _scalar(a: np.ndarray) -> np.ndarray:
    return np.array(a.reshape(()), order="C")


def _eight_bit(*exprs: Expr) -> bool:
    return all(_dtype(e) in EIGHT_BIT for e in exprs)


def _same_params(s1: np.ndarray, z1: np.ndarray, s2: np.ndarray, z2: np.ndarray) -> bool:
    return (s1.shape == s2.shape and z1.shape == z2.shape and z1.dtype == z2.dtype
            and np.array_equal(s1.astype(F32), s2.astype(F32)) and np.array_equal(z1, z2))


def _requantize(acc: Expr, in_scale: np.ndarray, q: Call, axis: int) -> Expr | None:
    """``qnn.requantize(acc, in_scale, 0, s, z)`` for the quantize call ``q`` (which must
    be per tensor)."""
    _, s, z = _params(q)
    if not _per_tensor(s, z):
        return None
    return make_call("qnn.requantize", acc, _const(in_scale, "float32"), _const(0, "int32"),
                     Constant(_scalar(s.astype(F32))), Constant(_scalar(z)), axis=axis)


# ---------------------------------------------------------------- products


def _conv_rule() -> Rule:
    x, w = dq(), dq()
    conv = is_op("conv2d", data_layout="NCHW", kernel_layout="OIHW")(x, w)
    bias = dq()
    chain = conv.optional(lambda y: is_op("add")(y, is_op("reshape")(bias)))
    root = _q(chain)

    def rewrite(m: Match) -> Expr | None:
        xq, sx, zx = _params(m.call(x))
        wq, sw, zw = _params(m.call(w))
        if not (_eight_bit(xq, wq) and _per_tensor(sx, zx) and isinstance(wq, Constant)):
            return None
        a = m.call(conv).attrs
        acc: Expr = make_call("qnn.conv2d", xq, wq, Constant(_scalar(zx)),
                              Constant(zw if zw.size > 1 else _scalar(zw)),
                              strides=a["strides"], padding=a["padding"],
                              dilation=a["dilation"], groups=a["groups"])
        if m.get(bias) is not None:
            bq, _, zb = _params(m.call(bias))
            if _dtype(bq) != "int32" or zb.any() or not isinstance(bq, Constant):
                return None
            acc = make_call("add", acc, Constant(bq.data.reshape(-1, 1, 1)))
        in_scale = (_scalar(sx).astype(F32) * sw.astype(F32).reshape(-1)).astype(F32)
        return _requantize(acc, in_scale if sw.size > 1 else _scalar(in_scale), m.call(root), 1)

    return Rule("qnn.fold_conv2d", root, rewrite)


def _matmul_parts(m: Match, a: Pattern, b: Pattern) -> tuple[Expr, np.ndarray] | None:
    """The ``qnn.matmul`` of two dequantized operands and its input scale (b per column
    or per tensor)."""
    aq, sa, za = _params(m.call(a))
    bq, sb, zb = _params(m.call(b))
    if not (_eight_bit(aq, bq) and _per_tensor(sa, za)):
        return None
    bt = bq.ty
    if sb.size > 1:
        axis = m.call(b).attrs["axis"]
        if not isinstance(bt, TensorType) or bt.shape is None or axis % len(bt.shape) != len(
                bt.shape) - 1:
            return None
    acc = make_call("qnn.matmul", aq, bq, Constant(_scalar(za)),
                    Constant(zb.reshape(-1) if zb.size > 1 else _scalar(zb)))
    scale = (_scalar(sa).astype(F32) * sb.astype(F32).reshape(-1)).astype(F32)
    return acc, (scale if sb.size > 1 else _scalar(scale))


def _float_output(acc: Expr, scale: np.ndarray) -> Expr:
    return make_call("qnn.dequantize", acc, _const(scale, "float32"), _const(0, "int32"),
                     axis=-1)


def _matmul_rules() -> list[Rule]:
    a, b = dq(), dq()
    mm = is_op("matmul")(a, b)
    root = _q(mm)

    def quantized(m: Match) -> Expr | None:
        parts = _matmul_parts(m, a, b)
        return None if parts is None else _requantize(parts[0], parts[1], m.call(root), -1)

    def to_float(m: Match) -> Expr | None:
        parts = _matmul_parts(m, a, b)
        return None if parts is None else _float_output(*parts)

    return [Rule("qnn.fold_matmul", root, quantized),
            Rule("qnn.fold_matmul_to_float", mm, to_float)]


def _linear_rules() -> list[Rule]:
    """Gemm (``linear``, weight (N, K)) with an int32 bias: QGemm."""
    a, w, bias = dq(), dq(), dq()
    lin = is_op("linear")(a, w, bias) | is_op("linear")(a, w)
    root = _q(lin)

    def parts(m: Match) -> tuple[Expr, np.ndarray] | None:
        aq, sa, za = _params(m.call(a))
        wq, sw, zw = _params(m.call(w))
        if not (_eight_bit(aq, wq) and _per_tensor(sa, za)):
            return None
        if sw.size > 1 and m.call(w).attrs["axis"] != 0:
            return None
        acc: Expr = make_call("qnn.matmul", aq, make_call("permute_dims", wq, axes=(1, 0)),
                              Constant(_scalar(za)),
                              Constant(zw.reshape(-1) if zw.size > 1 else _scalar(zw)))
        if m.get(bias) is not None:
            bq, _, zb = _params(m.call(bias))
            if _dtype(bq) != "int32" or zb.any():
                return None
            acc = make_call("add", acc, bq)
        scale = (_scalar(sa).astype(F32) * sw.astype(F32).reshape(-1)).astype(F32)
        return acc, (scale if sw.size > 1 else _scalar(scale))

    def quantized(m: Match) -> Expr | None:
        p = parts(m)
        return None if p is None else _requantize(p[0], p[1], m.call(root), -1)

    def to_float(m: Match) -> Expr | None:
        p = parts(m)
        return None if p is None else _float_output(*p)

    return [Rule("qnn.fold_linear", root, quantized),
            Rule("qnn.fold_linear_to_float", lin, to_float)]


# ------------------------------------------------------------- elementwise


def _io_args(c: Call) -> list[Constant]:
    _, s, z = _params(c)
    return [Constant(_scalar(s.astype(F32))), Constant(_scalar(z))]


def _binary_rule(core: str, qnn: str) -> Rule:
    a, b = dq(), dq()
    root = _q(is_op(core)(a, b))

    def rewrite(m: Match) -> Expr | None:
        ca, cb, cq = m.call(a), m.call(b), m.call(root)
        xa, xb = ca.args[0], cb.args[0]
        dtypes = {_dtype(xa), _dtype(xb), _dtype(cq.args[2])}
        if len(dtypes) != 1 or not _eight_bit(xa) or not all(
                _per_tensor(*_params(c)[1:]) for c in (ca, cb, cq)):
            return None
        return make_call(qnn, xa, *_io_args(ca), xb, *_io_args(cb), *_io_args(cq))

    return Rule(f"qnn.fold_{core}", root, rewrite)


def _unary_rule(core: str, qnn: str, attrs: Callable[[Call], dict[str, Any] | None]) -> Rule:
    x = dq()
    op = is_op(core)(x)
    root = _q(op)

    def rewrite(m: Match) -> Expr | None:
        cx, cq = m.call(x), m.call(root)
        if _dtype(cx.args[0]) != _dtype(cq.args[2]) or not _eight_bit(cx.args[0]):
            return None
        if not all(_per_tensor(*_params(c)[1:]) for c in (cx, cq)):
            return None
        extra = attrs(m.call(op))
        if extra is None:
            return None
        return make_call(qnn, cx.args[0], *_io_args(cx), *_io_args(cq), **extra)

    return Rule(f"qnn.fold_{core}", root, rewrite)


def _avg_pool_attrs(c: Call) -> dict[str, Any] | None:
    a = c.attrs
    if a["layout"] != "NCHW" or a["dilation"] not in (1, (1,), (1, 1)):
        return None
    return {k: a[k] for k in ("pool_size", "strides", "padding", "ceil_mode",
                              "count_include_pad")}


def _global_attrs(c: Call) -> dict[str, Any] | None:
    return {} if c.attrs["layout"] == "NCHW" else None


def _concat_rule() -> Rule:
    cat = is_op("concat")(wildcard())
    root = _q(cat)

    def rewrite(m: Match) -> Expr | None:
        tup = m.call(cat).args[0]
        if isinstance(tup, Var):
            tup = m.definition(tup)
        if not isinstance(tup, Tuple):
            return None
        cq = m.call(root)
        xs, ss, zs = [], [], []
        for f in tup.fields:
            d = m.definition(f) if isinstance(f, Var) else f
            if not (isinstance(d, Call) and isinstance(d.op, Op)
                    and d.op.name == "qnn.dequantize"
                    and all(isinstance(p, Constant) for p in d.args[1:])):
                return None
            x, s, z = _params(d)
            if _dtype(x) != _dtype(cq.args[2]) or not _eight_bit(x) or not _per_tensor(s, z):
                return None
            xs.append(x)
            ss.append(Constant(_scalar(s.astype(F32))))
            zs.append(Constant(_scalar(z)))
        if not _per_tensor(*_params(cq)[1:]):
            return None
        return make_call("qnn.concat", Tuple(tuple(xs)), Tuple(tuple(ss)), Tuple(tuple(zs)),
                         *_io_args(cq), axis=m.call(cat).attrs["axis"])

    return Rule("qnn.fold_concat", root, rewrite)


# ----------------------------------------------------- data movement, pairs

MOVE_OPS = ("reshape", "permute_dims", "squeeze", "expand_dims", "flatten", "strided_slice",
            "broadcast_to")


def _move_rules() -> list[Rule]:
    rules = []
    for ops, name in ((MOVE_OPS, "move"), (("take",), "take"), (("max_pool2d",), "max_pool2d")):
        x = dq()
        op = is_op(*ops)(x) if name != "take" else is_op("take")(x, wildcard())
        root = _q(op)

        def rewrite(m: Match, x: Pattern = x, op: Pattern = op, root: Pattern = root,
                    name: str = name) -> Expr | None:
            cx, cop, cq = m.call(x), m.call(op), m.call(root)
            xq, s, z = _params(cx)
            _, s2, z2 = _params(cq)
            if not _same_params(s, z, s2, z2) or not _per_tensor(s, z):
                return None
            if name == "max_pool2d":
                a = cop.attrs
                if float(s.reshape(())) <= 0 or a["layout"] != "NCHW" or not _eight_bit(xq):
                    return None
                return make_call("qnn.max_pool2d", xq, **{k: a[k] for k in (
                    "pool_size", "strides", "padding", "dilation", "ceil_mode")})
            return Call(cop.op, (xq, *cop.args[1:]), cop.attrs, span=cop.span)

        rules.append(Rule(f"qnn.drop_qdq_{name}", root, rewrite))
    return rules


def _activation_rule() -> Rule:
    act = is_op("relu", "clip")(wildcard())
    root = _q(act)

    def rewrite(m: Match) -> Expr | None:
        cq, ca = m.call(root), m.call(act)
        _, s, z = _params(cq)
        if not _per_tensor(s, z):
            return None
        lo, hi = qrange(z.dtype)
        zz, ss = int(z.reshape(())), float(s.reshape(()))
        if ca.op.name == "relu":  # type: ignore[union-attr]
            if zz != lo:
                return None
        else:
            cmin, cmax = ca.attrs["min"], ca.attrs["max"]
            if (cmin is not None and cmin > (lo - zz) * ss) or (
                    cmax is not None and cmax < (hi - zz) * ss):
                return None
        return Call(cq.op, (ca.args[0], *cq.args[1:]), cq.attrs, span=cq.span)

    return Rule("qnn.drop_activation_before_quantize", root, rewrite)


def _cancel_rule() -> Rule:
    x = dq()
    root = _q(x)

    def rewrite(m: Match) -> Expr | None:
        xq, s, z = _params(m.call(x))
        _, s2, z2 = _params(m.call(root))
        if not _same_params(s, z, s2, z2) or _dtype(xq) != z2.dtype.name:
            return None
        if m.call(x).attrs != m.call(root).attrs and not _per_tensor(s, z):
            return None
        return xq

    return Rule("qnn.cancel_dequantize_quantize", root, rewrite)


def _layer_norm_rule() -> Rule:
    """``quantize(layer_norm(dq(x), gamma, beta))`` -> ``qnn.layer_norm`` (the same
    arithmetic: onnxruntime has no quantized layer norm and runs this float island);
    gamma and beta are constants, or constants dequantized (evaluated here)."""
    x = dq()
    gamma, beta = is_const() | dq(), is_const() | dq()
    ln = is_op("layer_norm")(x, gamma, beta)
    root = _q(ln)

    def value(e: Expr, m: Match) -> Constant | None:
        if isinstance(e, Constant):
            return e
        d = m.definition(e) if isinstance(e, Var) else e
        if isinstance(d, Call) and isinstance(d.args[0], Constant):
            from .reference import dequantize

            arr = dequantize(d.args[0].data, d.args[1].data, d.args[2].data,  # type: ignore
                             **dict(d.attrs))
            return Constant(np.array(arr, F32, order="C"))
        return None

    def rewrite(m: Match) -> Expr | None:
        cx, cq, cl = m.call(x), m.call(root), m.call(ln)
        if _dtype(cx.args[0]) != _dtype(cq.args[2]) or not _eight_bit(cx.args[0]):
            return None
        if not all(_per_tensor(*_params(c)[1:]) for c in (cx, cq)):
            return None
        g, b = value(cl.args[1], m), value(cl.args[2], m)
        if g is None or b is None or _dtype(g) != "float32" or _dtype(b) != "float32":
            return None
        return make_call("qnn.layer_norm", cx.args[0], *_io_args(cx), g, b, *_io_args(cq),
                         axes=cl.attrs["axes"], epsilon=cl.attrs["epsilon"])

    return Rule("qnn.fold_layer_norm", root, rewrite)


def _fill_value(e: Expr, m: Match) -> float | None:
    """A pad's fill: a scalar constant, or a constant dequantized (through a cast), as
    a float; else None."""
    from .reference import dequantize

    d = m.definition(e) if isinstance(e, Var) else e
    if isinstance(d, Call) and isinstance(d.op, Op) and d.op.name == "cast":
        return _fill_value(d.args[0], m)
    if isinstance(d, Constant):
        return float(d.data.reshape(-1)[0]) if d.data.size == 1 else None
    if (isinstance(d, Call) and isinstance(d.op, Op) and d.op.name == "qnn.dequantize"
            and all(isinstance(a, Constant) for a in d.args)):
        arr = dequantize(*(a.data for a in d.args), **dict(d.attrs))  # type: ignore[union-attr]
        return float(np.asarray(arr).reshape(-1)[0]) if np.asarray(arr).size == 1 else None
    return None


def _pad_rules() -> list[Rule]:
    """``quantize(pad(dq(x, s, z)), s, z)`` -> ``pad(x)`` with the fill quantized: inside
    the image a dequantize-quantize pair with the same parameters cancels, outside it the
    fill is a constant (exact).  Both forms the ONNX importer gives a Pad: a constant
    fill, or ``where(pad(ones_like(x)), pad(x), cast(fill))`` when the fill is an input
    (a QDQ model's MobileNetV2 dequantizes it); then a constant fill equal to a
    ``qnn.conv2d``'s input zero point on the spatial axes is the convolution's padding
    (its padding holds the zero point: exact)."""
    x = dq()
    plain = is_op("pad")(x)
    root_plain = _q(plain)

    def quantized_pad(xq: Expr, pad: Call, fill: float, cq: Call) -> Expr | None:
        _, s, z = _params(cq)
        a = pad.attrs
        value = 0.0
        if a["pad_mode"] == "constant":
            value = float(quantize(np.asarray(F32(fill)), s, z, out_dtype=z.dtype.name)
                          .reshape(()))
        return make_call("pad", xq, pad_width=a["pad_width"], pad_mode=a["pad_mode"],
                         pad_value=value)

    def same(cx: Call, cq: Call) -> Expr | None:
        xq, s, z = _params(cx)
        _, s2, z2 = _params(cq)
        if not _same_params(s, z, s2, z2) or not _per_tensor(s, z) or not _eight_bit(xq):
            return None
        return xq

    def rewrite_plain(m: Match) -> Expr | None:
        cx, cp, cq = m.call(x), m.call(plain), m.call(root_plain)
        xq = same(cx, cq)
        return None if xq is None else quantized_pad(xq, cp, float(cp.attrs["pad_value"]), cq)

    x2 = dq()
    inside = is_op("pad")(is_op("ones_like")(wildcard()))
    padded = is_op("pad")(x2)
    root_where = _q(is_op("where")(inside, padded, wildcard()))

    def rewrite_where(m: Match) -> Expr | None:
        cx, cq, cw = m.call(x2), m.call(root_where), m.call(root_where).args[0]
        ci, cp = m.call(inside), m.call(padded)
        w = m.definition(cw) if isinstance(cw, Var) else cw
        ones = m.definition(ci.args[0]) if isinstance(ci.args[0], Var) else ci.args[0]
        if not isinstance(w, Call) or not isinstance(ones, Call):
            return None
        src = m.definition(ones.args[0]) if isinstance(ones.args[0], Var) else ones.args[0]
        if src is not cx or ci.attrs["pad_width"] != cp.attrs["pad_width"]:
            return None
        if cp.attrs["pad_mode"] != "constant" or ci.attrs["pad_mode"] != "constant":
            return None
        fill = _fill_value(w.args[2], m)
        xq = same(cx, cq)
        if fill is None or xq is None:
            return None
        return quantized_pad(xq, cp, fill, cq)

    pad = is_op("pad")(wildcard())
    conv = is_op("qnn.conv2d")(pad, wildcard(), is_const(), wildcard())

    def rewrite_conv(m: Match) -> Expr | None:
        from plait.runtime.window import expand_padding

        cc, cp = m.call(conv), m.call(pad)
        a = cp.attrs
        width = tuple(int(v) for v in a["pad_width"])
        zx = cc.args[2]
        assert isinstance(zx, Constant)
        if a["pad_mode"] != "constant" or len(width) != 8 or any(width[:4]) or min(width) < 0:
            return None
        if zx.data.size != 1 or float(a["pad_value"]) != float(zx.data.reshape(())):
            return None
        pt, pl, pb, pr = expand_padding(cc.attrs["padding"], 2)
        padding = (pt + width[4], pl + width[6], pb + width[5], pr + width[7])
        attrs = {**dict(cc.attrs), "padding": padding}
        return make_call("qnn.conv2d", cp.args[0], *cc.args[1:], **attrs)

    return [Rule("qnn.quantized_pad", root_plain, rewrite_plain),
            Rule("qnn.quantized_pad_where", root_where, rewrite_where),
            Rule("qnn.pad_into_conv", conv, rewrite_conv)]


def _leaky_attrs(c: Call) -> dict[str, Any]:
    return {"alpha": c.attrs["alpha"]}


RULES: list[Rule] = [
    _activation_rule(),
    _cancel_rule(),
    _conv_rule(),
    *_linear_rules()[:1],
    *_matmul_rules()[:1],
    _binary_rule("add", "qnn.add"),
    _binary_rule("multiply", "qnn.mul"),
    _unary_rule("sigmoid", "qnn.sigmoid", lambda c: {}),
    _unary_rule("leaky_relu", "qnn.leaky_relu", _leaky_attrs),
    _unary_rule("softmax", "qnn.softmax", lambda c: {"axis": c.attrs["axis"]}),
    _unary_rule("avg_pool2d", "qnn.avg_pool2d", _avg_pool_attrs),
    _unary_rule("global_avg_pool2d", "qnn.global_avg_pool2d", _global_attrs),
    _concat_rule(),
    _layer_norm_rule(),
    *_pad_rules(),
    *_move_rules(),
    *_linear_rules()[1:],
    *_matmul_rules()[1:],
]
"""The rules of :data:`Canonicalize`, in the order they are tried at each root."""



@function_pass(name="qnn.Canonicalize", phases=("ingestion", "optimization"))
class Canonicalize:
    """Fold dequantize -> op -> quantize into qnn ops; drop pairs that cancel.

    The folds are onnxruntime's QDQ fusions, with their kernels' arithmetic (see the
    module docstring)."""

    def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
        return rewrite_function(func, RULES, mod, max_rounds=4)
