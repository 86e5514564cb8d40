"""qnn.DispatchInt8: the dialect's products on the ``c`` target's int8 kernels.

The dialect registers this pass at the ``dispatch`` extension point for targets of kind
``c`` (with ``gemm`` on); other targets get none and ``qnn.Legalize`` lowers every qnn
op to core ops.  It rewrites a ``qnn.matmul`` or ``qnn.conv2d`` together with the
output stage that follows it into one call of ``plait_qgemm.c``
(:mod:`plait.target.c.kernels.int8`), weights packed at compile time when code
generation reads them (:mod:`plait.ir.deferred`: each original goes once packed):

* ``qnn.matmul``/``qnn.conv2d`` ``[-> add(int32 bias)]`` then one of
  - ``qnn.requantize`` (uint8/int8 out: QLinearMatMul, QLinearConv, QGemm, the QDQ
    forms canonicalized into them);
  - ``cast(float32) -> multiply(scale) [-> add(float bias)] [-> relu]`` (dynamic
    quantization: ``MatMulInteger``/``ConvInteger`` and their float output; the scale
    may be computed at run time);
  - ``qnn.dequantize`` (zero point 0) ``[-> add(float bias)] [-> relu]``
    (MatMulIntegerToFloat, QGemm without y_scale, QAttention's projection);
  - nothing (int32 out).
* ``qnn.matmul`` with a constant B packs it (with its column sums for the zero-point
  correction); a computed B (the attention products of a QDQ encoder: Q K^T and
  P V, both 8-bit activations) is packed by the call.  QAttention reaches the kernels
  through its projection: its softmax and score products are float ops of the
  importer (onnxruntime computes them in float too).
* ``qnn.conv2d``: as the transposed product (``plait_qconv2d``: weights broadcast, the
  padded image rewritten once per call in 4-byte groups of channels, split by the
  strides' phases, which the register tile reads in place), a grouped one group by
  group in the same call; depthwise (one input channel per group) on its own kernel.
* after a requantized product, a ``qnn.add`` of a constant per column (QOperator's
  bias add) or a float bias between a ``qnn.dequantize`` and a ``qnn.quantize``, then a
  ``qnn.add`` of an 8-bit tensor of the output's shape (a residual), in the output
  stage (MLAS's QLinearAdd arithmetic on the 8-bit result; the float bias rounded
  step by step as the kernels round it).
* then, one op each, on elementwise kernels of the same family: ``qnn.add`` and
  ``qnn.mul`` (QLinearAdd/QLinearMul: per-tensor constant parameters, operands of the
  output's shape, a scalar or its trailing dimensions, for ``qnn.mul`` also one value
  per channel of NCHW; ``plait_qadd``/``plait_qmul``),
  ``qnn.quantize`` and
  ``qnn.dequantize`` (8-bit, the scale and zero point one value each, constant or
  computed, or constants per channel; ``plait_quantize``/``plait_dequantize``),
  ``qnn.dynamic_quantize`` (``plait_dynamic_quantize``: the tuple of three).
  Anything else (other broadcasts, blocked parameters) stays for ``qnn.Legalize``.
* with the products (the first rewrite): ``qnn.softmax`` and ``qnn.layer_norm`` on the
  row kernels (:mod:`.dispatch_rows`), and chains of 8-bit elementwise steps as one
  256-entry table (:mod:`.dispatch_tables`).

Every rewrite computes exactly what :mod:`.reference` computes (the kernels' sums are
exact modulo 2^32, their float output stage rounds once per operation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.ir.expr import Call, Constant, Expr, ExternFunc, Function, Op, Tuple
from plait.ir.module import IRModule
from plait.op.registry import make_call
from plait.transform.pass_base import module_pass
from plait.transform.pattern import Match, Pattern, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, rewrite_function

from .exprs import dtype_of, static_shape

F32 = np.float32


def _data(e: Expr) -> np.ndarray | None:
    return e.data if isinstance(e, Constant) else None


def _is(value: Expr, *names: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in names


def _scalar_like(shape: tuple[int, ...] | None) -> bool:
    return shape is not None and int(np.prod(shape)) == 1 and len(shape) <= 1


class _Plan:
    """A product being planned: its call (:class:`QGemmCall` or :class:`QDepthwiseCall`
    once the anchor is taken) and the state of its output stage."""

    def __init__(self, call: Any, n: int, col_axis: int, rank: int) -> None:
        from plait.target.c.kernels.int8 import QOut

        self.call = call
        self.n = n                    # columns (output channels of a convolution)
        self.col_axis = col_axis      # their axis in the output
        self.rank = rank
        self.out = QOut()
        self.state = "acc"            # acc -> (q | cast -> f) ; f: float out
        self.bias32 = np.zeros(n, np.int64)
        self.has_bias32 = False

    def column_vector(self, data: np.ndarray) -> np.ndarray | None:
        """A constant broadcasting along the column axis only, as N values; else None."""
        shape = data.shape
        if len(shape) > self.rank:
            return None
        full = (1,) * (self.rank - len(shape)) + tuple(shape)
        if any(d != 1 for i, d in enumerate(full) if i != self.col_axis):
            return None
        if full[self.col_axis] not in (1, self.n):
            return None
        return np.broadcast_to(data.reshape(-1), (self.n,))

    def bias_of(self, value: Call, src: Expr, dtype: Any) -> np.ndarray | None:
        """The constant that the add ``value`` adds to ``src``, as N values of a bias
        of ``dtype``; None when it is not one."""
        other = value.args[1] if value.args[0] is src else value.args[0]
        d = _data(other)
        return self.column_vector(d) if d is not None and d.dtype == dtype else None

    def per_column(self, e: Expr, axis: int) -> tuple[np.ndarray, bool] | None:
        """A constant requantization parameter: (values, per column) or None."""
        d = _data(e)
        if d is None:
            return None
        if d.size == 1:
            return d.reshape(()), False
        if d.ndim != 1 or d.shape[0] != self.n or axis % self.rank != self.col_axis:
            return None
        return d, True

    def extend(self, value: Call, src: Expr) -> bool:
        """Fold the output-stage step ``value`` (reading the running result ``src``);
        False when the kernel cannot do it here."""
        o = self.out
        if self.state == "acc" and _is(value, "add") and value.ty == src.ty:
            vec = None if self.has_bias32 else self.bias_of(value, src, np.int32)
            if vec is None:
                return False
            self.bias32 = self.bias32 + vec.astype(np.int64)
            self.has_bias32 = True
            return True
        if self.state == "acc" and _is(value, "qnn.requantize"):
            _, si, zi, so, zo = value.args
            axis = int(value.attrs["axis"])
            zid, zod = _data(zi), _data(zo)
            psi, pso = self.per_column(si, axis), self.per_column(so, axis)
            if zid is None or zod is None or psi is None or pso is None or zod.size != 1:
                return False
            if dtype_of(value) not in ("uint8", "int8") or zid.size != 1:
                return False
            mult = (psi[0].astype(F32) / pso[0].astype(F32)).astype(F32)
            o.dtype = str(dtype_of(value))
            o.scale = Constant(np.ascontiguousarray(np.broadcast_to(mult, (self.n,))
                                                    if psi[1] or pso[1] else
                                                    mult.reshape(1), F32))
            o.scale_cols = bool(psi[1] or pso[1])
            o.zo = int(zod.reshape(()))
            self.bias32 = self.bias32 - int(zid.reshape(()))
            self.has_bias32 = True
            self.state = "q"
            return True
        if self.state == "q" and _is(value, "qnn.add") and value.ty == src.ty:
            return self.fold_add(value, src)
        if self.state in ("q", "qd", "qdb") and not o.add_kind and not o.add2_kind:
            return self.fold_float_bias(value, src)
        if self.state == "acc" and _is(value, "cast") and dtype_of(value) == "float32":
            o.dtype = "float32"
            o.scale = Constant(np.ones(1, F32))
            self.state = "cast"
            return True
        if self.state == "acc" and _is(value, "qnn.dequantize"):
            _, s, z = value.args
            zd = _data(z)
            ps = self.per_column(s, int(value.attrs["axis"]))
            if zd is None or np.any(zd != 0) or ps is None:
                return False
            o.dtype = "float32"
            o.scale = Constant(np.ascontiguousarray(ps[0].reshape(-1), F32))
            o.scale_cols = ps[1]
            self.state = "f"
            return True
        if self.state == "cast" and _is(value, "multiply") and value.ty == src.ty:
            other = value.args[1] if value.args[0] is src else value.args[0]
            if dtype_of(other) != "float32":
                return False
            shape = static_shape(other)
            if isinstance(other, Constant):
                vec = self.column_vector(other.data)
                if vec is None:
                    return False
                if _scalar_like(other.data.shape):
                    o.scale = Constant(np.ascontiguousarray(other.data.reshape(1), F32))
                else:
                    o.scale = Constant(np.ascontiguousarray(vec, F32))
                    o.scale_cols = True
            elif _scalar_like(shape):
                o.scale = other
            elif shape == (self.n,) and self.col_axis == self.rank - 1:
                o.scale, o.scale_cols = other, True
            else:
                return False
            self.state = "f"
            return True
        if self.state == "f" and _is(value, "add") and value.ty == src.ty and not o.relu:
            vec = None if o.fbias is not None else self.bias_of(value, src, F32)
            if vec is None:
                return False
            o.fbias = Constant(np.ascontiguousarray(vec, F32))
            return True
        if self.state == "f" and _is(value, "relu") and not o.relu:
            o.relu = True
            return True
        return False

    def fold_float_bias(self, value: Call, src: Expr) -> bool:
        """``qnn.dequantize -> add(float constant per column) -> qnn.quantize`` after the
        8-bit result (a QDQ model whose bias the quantizer left in float), one step at a
        time (states ``qd``, ``qdb``, back to ``q``): the output stage's ``add_kind`` 3;
        False for anything else."""
        o = self.out
        if self.state == "q" and _is(value, "qnn.dequantize"):
            p = self.scalar_params(value, o.dtype)
            if p is None:
                return False
            o.fs1, o.fz1 = p
            self.state = "qd"
            return True
        if self.state == "qd" and _is(value, "add") and value.ty == src.ty:
            vec = self.bias_of(value, src, F32)
            if vec is None:
                return False
            c = np.ascontiguousarray(vec, F32)
            o.add_cols = bool(np.any(c != c[0]))
            o.add_c = Constant(c if o.add_cols else c[:1].copy())
            self.state = "qdb"
            return True
        if self.state == "qdb" and _is(value, "qnn.quantize"):
            p = self.scalar_params(value, o.dtype)
            if p is None or dtype_of(value) != o.dtype:
                return False
            o.fs2, o.fz2 = p
            o.add_kind = 3
            self.state = "q"
            return True
        return False

    @staticmethod
    def scalar_params(call: Call, dtype: str) -> tuple[float, int] | None:
        """A (de)quantization's constant per-tensor scale and zero point (of ``dtype``)."""
        _, s, z = call.args
        sd, zd = _data(s), _data(z)
        if sd is None or zd is None or sd.size != 1 or zd.size != 1 or dtype_of(z) != dtype:
            return None
        if int(call.attrs["block_size"]) or sd.dtype != F32 or not np.isfinite(sd).all():
            return None
        return float(sd.reshape(())), int(zd.reshape(()))

    def fold_add(self, value: Call, src: Expr) -> bool:
        """A QLinearAdd of the 8-bit result and a constant per column, then one of an
        8-bit tensor of the output's shape (a residual), into the output stage (the
        reference's arithmetic, :func:`.reference.add`); False when it is neither."""
        from . import reference as R

        o = self.out
        a, sa, za, b, sb, zb, sc, zc = value.args
        mine_a = a is src
        other = b if mine_a else a
        if (b is src) == mine_a or dtype_of(other) != o.dtype or dtype_of(value) != o.dtype:
            return False
        params = [_data(e) for e in (sa, za, sb, zb, sc, zc)]
        if any(p is None or p.size != 1 for p in params):
            return False
        d = _data(other)
        tensor = d is None and other.ty == src.ty and not o.add2_kind
        if d is None and not tensor:
            return False
        if d is not None and (o.add_kind or o.add2_kind):
            return False
        vec = None if d is None else self.column_vector(d)
        sha, shb = static_shape(a), static_shape(b)
        if (vec is None and not tensor) or sha is None or shb is None:
            return False
        psa, pza, psb, pzb, psc, pzc = (p.reshape(()) for p in params)  # type: ignore[union-attr]
        with np.errstate(all="ignore"):
            ra, rb = F32(F32(psa) / F32(psc)), F32(F32(psb) / F32(psc))
            fixed = F32(F32(int(pzc)) - R.fma_f32(ra, F32(int(pza)), F32(rb * F32(int(pzb)))))
        if not all(np.isfinite(v) for v in (ra, rb, fixed)):
            return False
        a_inner = R.broadcast_case(sha, shb) == "a"    # the operand folded first
        r_mine, r_other = (ra, rb) if mine_a else (rb, ra)
        if tensor:   # a residual: the other operand read at the output's elements
            o.add2_kind = 2 if mine_a == a_inner else 1
            o.add2_t, o.add2_r, o.add2_rt = other, float(r_mine), float(r_other)
            o.add2_fixed = float(fixed)
            return True
        assert vec is not None
        cf = vec.astype(F32)
        if mine_a == a_inner:      # the result folded first: fma(c, r2, fma(q, r, fixed))
            o.add_kind, c, o.add_r2, o.add_fixed = 2, cf, float(r_other), float(fixed)
        else:                      # the constant folded first: fma(q, r, fma(c, r2, fixed))
            with np.errstate(all="ignore"):
                c = R.fma_f32(cf, r_other, fixed).astype(F32)
            if not np.all(np.isfinite(c)):
                return False
            o.add_kind = 1
        o.add_r = float(r_mine)
        o.add_cols = not _scalar_like(d.shape) and bool(np.any(c != c.reshape(-1)[0]))
        o.add_c = Constant(np.ascontiguousarray(c if o.add_cols else c.reshape(-1)[:1], F32))
        return True

    def finish(self, out_shape: tuple[int, ...]) -> Any:
        if self.state == "cast":
            self.state = "f"
        if self.has_bias32 and np.any(self.bias32 != 0):
            wrapped = (self.bias32 % (1 << 32)).astype(np.uint32).view(np.int32)
            self.out.bias = Constant(np.ascontiguousarray(wrapped))
        self.call.out = self.out
        self.call.out_shape = out_shape
        return self.call


def _param_vector(e: Expr, n: int) -> bool:
    s = static_shape(e)
    return s is not None and (_scalar_like(s) or s == (n,))


def _plan_matmul(call: Call) -> _Plan | None:
    from plait.target.c.kernels.int8 import QGemmCall, QOut, packed_b_constants

    a, b, za, zb = call.args
    as_, bs, os_ = static_shape(a), static_shape(b), static_shape(call)
    if as_ is None or bs is None or os_ is None or len(as_) < 2 or len(bs) < 2:
        return None
    if 0 in as_ or 0 in bs or 0 in os_:
        return None
    k, n = bs[-2:]
    if as_[-1] != k or not _param_vector(zb, n):
        return None
    zas = static_shape(za)
    if zas is None:
        return None
    za_rows = not _scalar_like(zas)
    bd = _data(b)
    if len(bs) == 2:
        m, batch = int(np.prod(as_[:-1])), 1
        if za_rows and (len(as_) != 2 or zas != (as_[0],)):
            return None
    else:
        if as_[:-2] != bs[:-2] or za_rows:
            return None
        m, batch = as_[-2], int(np.prod(bs[:-2]))
    q = QGemmCall(m, n, k, batch, a, za, QOut(), os_, za_rows=za_rows)
    zbd = _data(zb)
    if bd is not None and len(bs) == 2 and zbd is not None:
        q.packed = packed_b_constants(bd, zbd)   # the panels computed when read
    else:
        q.b, q.zb = b, zb
        q.zb_cols = not _scalar_like(static_shape(zb))
        q.b_batched = len(bs) > 2
    return _Plan(q, n, len(os_) - 1, len(os_))


def _plan_conv2d(call: Call) -> _Plan | None:
    from plait.runtime.window import expand_ints, expand_padding
    from plait.target.c.kernels.int8 import (
        QConvCall,
        QDepthwiseCall,
        QOut,
        centered_depthwise_constant,
        packed_conv_constants,
    )

    x, w, zx, zw = call.args
    xs, ws, os_ = static_shape(x), static_shape(w), static_shape(call)
    wd, zwd = _data(w), _data(zw)
    if xs is None or ws is None or os_ is None or wd is None or zwd is None:
        return None
    if len(xs) != 4 or 0 in xs or 0 in os_ or not _scalar_like(static_shape(zx)):
        return None
    a = call.attrs
    strides, dilation = expand_ints(a["strides"], 2), expand_ints(a["dilation"], 2)
    padding = expand_padding(a["padding"], 2)
    o, cg, kh, kw = ws
    groups = int(a["groups"])
    depthwise = groups == xs[1] == o and cg == 1
    if not depthwise and cg * groups == xs[1] and o % groups == 0:
        desc = (xs[0], xs[1], xs[2], xs[3], o, kh, kw, strides[0], strides[1], dilation[0],
                dilation[1], padding[0], padding[1], os_[2], os_[3], cg * kh * kw, groups)
        c = QConvCall(x, zx, packed_conv_constants(wd, zwd, groups), desc, QOut(), os_)
        return _Plan(c, o, 1, 4)
    if depthwise:
        desc = (xs[0], xs[1], xs[2], xs[3], kh, kw, strides[0], strides[1], dilation[0],
                dilation[1], padding[0], padding[1], os_[2], os_[3])
        d = QDepthwiseCall(x, zx, centered_depthwise_constant(wd, zwd), desc, QOut(), os_)
        return _Plan(d, o, 1, 4)
    return None


def _step(y: Pattern) -> Pattern:
    """One step of the output stage on the running result ``y`` (read by nothing else)."""
    y = y.single_use()
    w = wildcard
    return (is_op("add")(y, wildcard()).commutative()
            | is_op("qnn.add")(y, w(), w(), w(), w(), w(), w(), w())
            | is_op("qnn.add")(w(), w(), w(), y, w(), w(), w(), w())
            | is_op("qnn.requantize")(y, wildcard(), wildcard(), wildcard(), wildcard())
            | is_op("cast")(y) | is_op("multiply")(y, wildcard()).commutative()
            | is_op("qnn.dequantize")(y, wildcard(), wildcard()) | is_op("relu")(y)
            | is_op("qnn.quantize")(y, wildcard(), wildcard()))


PRODUCT = is_op("qnn.matmul", "qnn.conv2d").repeat(_step)
"""The shape :class:`DispatchInt8` takes: a product and any number of output-stage
steps; which of them one kernel call can do is the plan's business (:meth:`_Plan.extend`)."""


def int8_rule(wrappers: dict[str, tuple[str, CFunction]]) -> Rule:
    """The rule of :class:`DispatchInt8` (records the call wrappers in ``wrappers``)."""

    def rewrite(m: Match) -> Expr | None:
        g = m.graph
        members = sorted(m.bindings)
        anchor = g.bindings[members[0]]
        call = anchor.value
        assert isinstance(call, Call)
        plan = _plan_matmul(call) if _is(call, "qnn.matmul") else _plan_conv2d(call)
        if plan is None:
            return None
        src = anchor.var
        for i in members[1:]:
            b = g.bindings[i]
            if not plan.extend(b.value, src):  # type: ignore[arg-type]
                return None
            src = b.var
        root = g.bindings[members[-1]]
        shape = static_shape(root.var)
        if shape is None or plan.state in ("qd", "qdb"):
            return None   # (a float bias chain cut short: a shorter chain is tried)
        name, code, cfn, args = plan.finish(shape).wrapper()
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(args), out=root.var.ty,
                         span=root.value.span)

    return Rule("qnn.int8", PRODUCT, rewrite)


def _suffix_of(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """``shape`` repeats along the output ``out`` with period its size: a single value,
    or the output's trailing dimensions (leading ones dropped)."""
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    k = 0
    while k < len(full) and full[k] == 1:
        k += 1
    return full[k:] == out[k:] or int(np.prod(full)) == 1


def _channel_inner(as_: tuple[int, ...], bs: tuple[int, ...], out: tuple[int, ...]) -> int:
    """For a product of an operand of the output's shape and one that broadcasts along
    the output's trailing dimensions after its own (a per-channel ``(1, C, 1, 1)`` of
    NCHW): the output elements each of the latter's values covers; else 0."""
    if as_ == out:
        other = bs
    elif bs == out:
        other = as_
    else:
        return 0
    full = (1,) * (len(out) - len(other)) + tuple(other)
    last = max((i for i, d in enumerate(full) if d != 1), default=-1)
    if last < 0 or last == len(out) - 1 or not _suffix_of(full[:last + 1], out[:last + 1]):
        return 0
    return int(np.prod(out[last + 1:]))


def _plan_add(call: Call) -> Any:
    """``qnn.add`` (QLinearAdd) on ``plait_qadd`` and ``qnn.mul`` (QLinearMul) on
    ``plait_qmul``: per-tensor constant parameters, the operands the output's shape, a
    scalar or its trailing dimensions."""
    from plait.target.c.kernels.int8 import QAddCall, QMulCall

    from . import reference as R

    a, sa, za, b, sb, zb, sc, zc = call.args
    as_, bs, os_ = static_shape(a), static_shape(b), static_shape(call)
    if as_ is None or bs is None or os_ is None or 0 in os_:
        return None
    if dtype_of(a) != dtype_of(b) or dtype_of(a) not in ("uint8", "int8"):
        return None
    params = [_data(e) for e in (sa, za, sb, zb, sc, zc)]
    if any(p is None or p.size != 1 for p in params):
        return None
    inner = 1
    if not (_suffix_of(as_, os_) and _suffix_of(bs, os_)):
        inner = _channel_inner(as_, bs, os_) if _is(call, "qnn.mul") else 0
        if not inner:
            return None
    f = np.float32
    psa, pza, psb, pzb, psc, pzc = (p.reshape(()) for p in params)  # type: ignore[union-attr]
    if _is(call, "qnn.mul"):
        with np.errstate(all="ignore"):
            ratio = f(f(f(psa) * f(psb)) / f(psc))
        if not np.isfinite(ratio):
            return None
        return QMulCall(a, b, int(pza), int(pzb), int(pzc), float(ratio), os_, inner)
    with np.errstate(all="ignore"):
        ra, rb = f(f(psa) / f(psc)), f(f(psb) / f(psc))
        fixed = f(f(int(pzc)) - R.fma_f32(ra, f(int(pza)), f(rb * f(int(pzb)))))
    if not all(np.isfinite(v) for v in (ra, rb, fixed)):
        return None
    case = R.broadcast_case(as_, bs)
    return QAddCall(a, b, float(ra), float(rb), float(fixed), case == "a", os_)


def _plan_param(call: Call) -> Any:
    """``qnn.quantize`` (float32 in) / ``qnn.dequantize`` (8-bit in) on
    ``plait_quantize`` / ``plait_dequantize``: the scale and zero point one value each
    (constant or computed), or constants per channel of ``axis`` (not blocked)."""
    from plait.target.c.kernels.int8 import QParamCall

    x, sc, zp = call.args
    xs, ss, zs, os_ = static_shape(x), static_shape(sc), static_shape(zp), static_shape(call)
    quantize = _is(call, "qnn.quantize")
    if xs is None or ss is None or zs is None or os_ is None or 0 in os_:
        return None
    if int(call.attrs["block_size"]) or dtype_of(sc) != "float32":
        return None
    if dtype_of(x) != ("float32" if quantize else dtype_of(zp)):
        return None
    if dtype_of(zp) not in ("uint8", "int8"):
        return None
    if _scalar_like(ss) and _scalar_like(zs):
        return QParamCall(quantize, x, sc, zp, None, os_)
    sd, zd = _data(sc), _data(zp)
    if sd is None or zd is None or not os_:
        return None
    axis = int(call.attrs["axis"]) % len(os_)
    ch = os_[axis]
    if sd.size not in (1, ch) or zd.size not in (1, ch):
        return None
    s_vec = Constant(np.ascontiguousarray(np.broadcast_to(sd.reshape(-1), (ch,)), F32))
    z_vec = Constant(np.ascontiguousarray(np.broadcast_to(zd.reshape(-1), (ch,))))
    return QParamCall(quantize, x, s_vec, z_vec, axis, os_)


def _plan_dynamic_quantize(call: Call) -> Any:
    """``qnn.dynamic_quantize`` (float32 in, static shape) on ``plait_dynamic_quantize``."""
    from plait.target.c.kernels.int8 import QDynamicQuantizeCall

    x = call.args[0]
    xs = static_shape(x)
    if xs is None or 0 in xs or dtype_of(x) != "float32":
        return None
    return QDynamicQuantizeCall(x, xs)


def elementwise_rules(wrappers: dict[str, tuple[str, CFunction]]) -> list[Rule]:
    """The rules of :class:`DispatchInt8` for single elementwise qnn ops (``qnn.add``,
    ``qnn.mul``, ``qnn.quantize``, ``qnn.dequantize``, ``qnn.dynamic_quantize``) on
    native kernels; run after the products took the output stages that follow them."""

    def rewrite(m: Match) -> Expr | None:
        b = m.graph.bindings[min(m.bindings)]
        call = b.value
        assert isinstance(call, Call)
        if _is(call, "qnn.dynamic_quantize"):
            plan = _plan_dynamic_quantize(call)
        else:
            plan = _plan_add(call) if _is(call, "qnn.add", "qnn.mul") else _plan_param(call)
        if plan is None:
            return None
        name, code, cfn, args = plan.wrapper()
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(args), out=b.var.ty,
                         span=call.span)

    w = wildcard
    return [Rule("qnn.int8_add",
                 is_op("qnn.add", "qnn.mul")(w(), w(), w(), w(), w(), w(), w(), w()), rewrite),
            Rule("qnn.int8_quantize",
                 is_op("qnn.quantize", "qnn.dequantize")(w(), w(), w()), rewrite),
            Rule("qnn.int8_dynamic_quantize", is_op("qnn.dynamic_quantize")(w()), rewrite)]


def dispatch_int8(mod: IRModule, skip: Any = None) -> IRModule:
    """``mod`` with its qnn products (and their output stages) rewritten into calls of
    the ``c`` target's int8 kernels; functions for which ``skip`` is true (default:
    those of external codegens) are left alone."""
    from plait.target.c.kernels import record_calls
    from plait.transform.pattern_rewrite import functions_to_rewrite

    from .dispatch_rows import row_rules
    from .dispatch_tables import concat_rule, table_rule

    wrappers: dict[str, tuple[str, CFunction]] = {}
    first = [int8_rule(wrappers), *row_rules(wrappers), table_rule(wrappers),
             concat_rule(wrappers)]
    elementwise = elementwise_rules(wrappers)
    funcs: dict[str, Function] = {}
    for name, f in functions_to_rewrite(mod, skip):
        nf = rewrite_function(f, first, mod, name=name)
        nf = rewrite_function(nf, elementwise, mod, name=name)
        if nf is not f:
            funcs[name] = nf
    return record_calls(mod, wrappers, "plait_qgemm_calls", funcs)


@module_pass(name="qnn.DispatchInt8", phases=("optimization",))
class DispatchInt8:
    """Send qnn products, softmax, layer norm and 8-bit chains to the c int8 kernels.

    Products take their bias, requantization or float output (weights packed at
    compile time); see the module docstring, :mod:`.dispatch_rows` and
    :mod:`.dispatch_tables`."""

    def __init__(self, *, codegens: Sequence[str] | None = None) -> None:
        super().__init__(codegens=codegens)  # type: ignore[call-arg]

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        from plait.transform.external import skips_external

        return dispatch_int8(mod, skip=skips_external(self, ctx))  # type: ignore[arg-type]


def dispatch_hook(target: Any) -> list[Any]:
    """The dialect's ``dispatch`` hook: :class:`DispatchInt8` for targets of kind ``c``
    whose ``gemm`` attribute is on (plait's own kernels), nothing elsewhere."""
    is_a = getattr(target, "is_a", None)
    if is_a is None or not is_a("c") or not target.attrs.get("gemm", True):
        return []
    return [DispatchInt8()]


__all__ = ["PRODUCT", "DispatchInt8", "dispatch_hook", "dispatch_int8", "elementwise_rules",
           "int8_rule"]
