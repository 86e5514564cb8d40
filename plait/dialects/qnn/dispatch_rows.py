"""The row rules of ``qnn.DispatchInt8``: softmax and layer norm between 8-bit tensors on
the ``c`` target's ``qrows`` kernels (:mod:`plait.target.c.kernels.int8.rows`).

* ``qnn.softmax`` (QLinearSoftmax) along the last axis, constant per-tensor
  parameters: ``plait_qsoftmax`` with the reference's
  exponent table, the same bits as :func:`.reference.softmax`;
* ``qnn.layer_norm``, and the float island a QDQ graph leaves when canonicalization
  could not fold it (``qnn.quantize(layer_norm(qnn.dequantize(x)))``, its gamma and
  beta constants only after constant folding), normalizing the last axis with
  constant per-tensor parameters: ``plait_qlayer_norm`` (the statistics in double:
  the float result is the float32 rounding of the exact normalization, which may
  differ from the reference's float32 arithmetic in the last bit, so an output may
  differ by one step where it lies on a rounding boundary).

Anything else stays for ``qnn.Legalize``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from plait.codegen.c import CFunction
from plait.ir.expr import Call, Constant, Expr, ExternFunc, Tuple
from plait.ir.types import TensorType
from plait.op.registry import make_call
from plait.transform.pattern import Match, is_const, is_op, wildcard
from plait.transform.pattern_rewrite import Rule

from . import reference as R
from .exprs import static_shape

F32 = np.float32


def _scalar(e: Expr) -> Any:
    """A constant's single value, else None."""
    if isinstance(e, Constant) and e.data.size == 1:
        return e.data.reshape(())
    return None


def _eight_bit(e: Expr) -> str | None:
    t = e.ty
    return t.dtype if isinstance(t, TensorType) and t.dtype in ("uint8", "int8") else None


def _last_axis(axis: int, shape: tuple[int, ...]) -> bool:
    """Whether ``axis`` is the last axis of ``shape``."""
    return axis % len(shape) == len(shape) - 1


def _plan_softmax(call: Call) -> Any:
    from plait.target.c.kernels.int8.rows import YS_MAX, QSoftmaxCall

    x, xs, _, ys, yz = call.args
    shape = static_shape(x)
    if shape is None or not shape or 0 in shape or _eight_bit(x) is None:
        return None
    if not _last_axis(int(call.attrs["axis"]), shape):
        return None
    pxs, pys, pyz = _scalar(xs), _scalar(ys), _scalar(yz)
    if pxs is None or pys is None or pyz is None:
        return None
    d = shape[-1]
    with np.errstate(all="ignore"):
        inv = F32(F32(1.0) / F32(pys))
    if not np.isfinite(inv) or not np.isfinite(F32(pxs)) or F32(pxs) <= 0:
        return None
    ysf = math.floor(float(inv))
    if not 0 <= ysf <= YS_MAX:
        return None
    table = R.softmax_exp_table(pxs, d, signed=_eight_bit(x) == "int8")
    with np.errstate(all="ignore"):
        top = F32(table.max()) * F32(ysf)
    if not np.all(np.isfinite(table)) or not np.isfinite(top):
        return None   # (rows of 1 or 2: the reference's quotient overflows)
    return QSoftmaxCall(x, table, float(F32(ysf)), int(pyz))


def _plan_layer_norm(x: Expr, xs: Expr, xz: Expr, g: Expr, b: Expr, ys: Expr, yz: Expr,
                     axes: Any, epsilon: Any, out_dtype: str | None) -> Any:
    from plait.target.c.kernels.int8.rows import QLayerNormCall

    shape = static_shape(x)
    if shape is None or not shape or 0 in shape or _eight_bit(x) is None:
        return None
    if out_dtype not in ("uint8", "int8"):
        return None
    ax = tuple(int(a) % len(shape) for a in axes)
    if len(ax) != 1 or not _last_axis(ax[0], shape):
        return None
    d = shape[-1]
    p = [_scalar(e) for e in (xs, xz, ys, yz)]
    if any(v is None for v in p) or not isinstance(g, Constant) or not isinstance(b, Constant):
        return None
    if g.data.dtype != F32 or b.data.dtype != F32 or g.data.size != d or b.data.size != d:
        return None
    pxs, pxz, pys, pyz = p
    if xz.ty.dtype != _eight_bit(x) or yz.ty.dtype != out_dtype:  # type: ignore[union-attr]
        return None
    if not (np.isfinite(F32(pxs)) and np.isfinite(F32(pys)) and F32(pys) != 0):
        return None
    gc = Constant(np.ascontiguousarray(g.data.reshape(d)))
    bc = Constant(np.ascontiguousarray(b.data.reshape(d)))
    return QLayerNormCall(x, float(F32(pxs)), int(pxz), gc, bc, float(epsilon), float(F32(pys)),
                          int(pyz), out_dtype)


def row_rules(wrappers: dict[str, tuple[str, CFunction]]) -> list[Rule]:
    """The rules of :class:`~.dispatch.DispatchInt8` for softmax and layer norm between
    8-bit tensors (records the call wrappers in ``wrappers``)."""

    def emit(plan: Any, root: Call) -> Expr | None:
        if plan is None:
            return None
        name, code, cfn, args = plan.wrapper()
        wrappers.setdefault(name, (code, cfn))
        return make_call("call_extern", ExternFunc(name), Tuple(args), out=root.ty,
                         span=root.span)

    w = wildcard
    softmax = is_op("qnn.softmax")(w(), w(), w(), w(), w())
    qln = is_op("qnn.layer_norm")(w(), w(), w(), w(), w(), w(), w())
    dq = is_op("qnn.dequantize")(w(), is_const(), is_const())
    ln = is_op("layer_norm")(dq, is_const(), is_const()).single_use()
    island = is_op("qnn.quantize")(ln, is_const(), is_const())

    def rewrite_softmax(m: Match) -> Expr | None:
        call = m.call(softmax)
        return emit(_plan_softmax(call), call)

    def rewrite_qln(m: Match) -> Expr | None:
        call = m.call(qln)
        return emit(_plan_layer_norm(*call.args, call.attrs["axes"], call.attrs["epsilon"],
                                     _eight_bit(call)), call)

    def rewrite_island(m: Match) -> Expr | None:
        cq, cl, cd = m.call(island), m.call(ln), m.call(dq)
        for c in (cq, cd):
            if int(c.attrs["block_size"]) or _scalar(c.args[1]) is None:
                return None
        return emit(_plan_layer_norm(cd.args[0], cd.args[1], cd.args[2], cl.args[1],
                                     cl.args[2], cq.args[1], cq.args[2], cl.attrs["axes"],
                                     cl.attrs["epsilon"], _eight_bit(cq)), cq)

    return [Rule("qnn.int8_softmax", softmax, rewrite_softmax),
            Rule("qnn.int8_layer_norm", qln, rewrite_qln),
            Rule("qnn.int8_layer_norm_island", island, rewrite_island)]


__all__ = ["row_rules"]
