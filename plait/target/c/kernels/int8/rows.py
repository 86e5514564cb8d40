"""Call records of the ``qrows`` family (``plait_qrows.c``): row kernels between 8-bit
tensors, the rows ``d`` contiguous elements (the op's axis the last).

* :class:`QSoftmaxCall`: ``plait_qsoftmax`` (QLinearSoftmax with a given exponent
  table: row sums in float32 in order, ``round(entry * ys / sum) + yz``);
* :class:`QLayerNormCall`: ``plait_qlayer_norm`` (dequantize, normalize with double
  statistics, quantize).

Like the rest of the package it names no op: a dispatch pass decides what a call
computes and describes it with these records (the family is registered with the
package's others).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plait.ir.expr import Constant, Expr

from ..wrapper import DESC, Buffer, NativeCall, Ref, emit_call

Wrapper = tuple[str, str, object, list[Expr]]
"""A call's wrapper: (symbol, C code, CFunction, the call's arguments in order)."""

YS_MAX = float(1 << 24)
"""The largest ``ys`` (``floor(1 / y_scale)``) :class:`QSoftmaxCall` takes: the
quotients stay exact integers' neighbours well inside float32's range."""


def _shape(e: Expr) -> tuple[int, ...]:
    return tuple(int(d) for d in e.ty.shape)  # type: ignore[union-attr]


def _dtype(e: Expr) -> str:
    return str(e.ty.dtype)  # type: ignore[union-attr]


def _rows(shape: tuple[int, ...]) -> tuple[int, int]:
    d = int(shape[-1]) if shape else 1
    return int(np.prod(shape[:-1])) if len(shape) > 1 else 1, d


@dataclass
class QSoftmaxCall:
    """``plait_qsoftmax`` on the 8-bit ``x`` (rows along its last axis) with the 256
    float32 entries of ``table`` (entry 255 the row's maximum code; an int8 code's
    entry stored at its bit pattern plus 128), ``ys = floor(1 / y_scale)`` and the
    output zero point ``yz``."""

    x: Expr
    table: np.ndarray
    ys: float
    yz: int

    def wrapper(self) -> Wrapper:
        """(symbol, C code, CFunction, the call's arguments in order)."""
        shape, dt = _shape(self.x), _dtype(self.x)
        rows, d = _rows(shape)
        table = Constant(np.ascontiguousarray(self.table, np.float32))
        call = NativeCall("qsoftmax", "plait_qsoftmax",
                          (Buffer("table", (256,)), Buffer("x", shape, dt),
                           Buffer("out", shape, dt, out=True)),
                          (DESC, Ref("table"), Ref("x"), Ref("out")), "plait_qsoftmax_desc",
                          (("rows", rows), ("d", d), ("is_signed", int(dt == "int8")),
                           ("ys", float(self.ys)), ("yz", int(self.yz))), guard=False)
        name, code, fn = emit_call(call)
        return name, code, fn, [table, self.x]


@dataclass
class QLayerNormCall:
    """``plait_qlayer_norm`` on the 8-bit ``x`` (rows along its last axis): its scale
    ``xs`` and zero point ``xz``, the float32 ``gamma`` and ``beta`` of the last axis,
    ``epsilon``, and the output's dtype, scale ``ys`` and zero point ``yz``."""

    x: Expr
    xs: float
    xz: int
    gamma: Expr
    beta: Expr
    epsilon: float
    ys: float
    yz: int
    out_dtype: str

    def wrapper(self) -> Wrapper:
        """(symbol, C code, CFunction, the call's arguments in order)."""
        shape, dt = _shape(self.x), _dtype(self.x)
        rows, d = _rows(shape)
        call = NativeCall("qlayer_norm", "plait_qlayer_norm",
                          (Buffer("x", shape, dt), Buffer("gamma", (d,)), Buffer("beta", (d,)),
                           Buffer("out", shape, self.out_dtype, out=True)),
                          (DESC, Ref("x"), Ref("gamma"), Ref("beta"), Ref("out")),
                          "plait_qlayer_norm_desc",
                          (("rows", rows), ("d", d), ("x_signed", int(dt == "int8")),
                           ("y_signed", int(self.out_dtype == "int8")),
                           ("xs", float(self.xs)), ("ys", float(self.ys)),
                           ("eps", float(np.float32(self.epsilon))), ("xz", int(self.xz)),
                           ("yz", int(self.yz))), guard=False)
        name, code, fn = emit_call(call)
        return name, code, fn, [self.x, self.gamma, self.beta]


__all__ = ["YS_MAX", "QLayerNormCall", "QSoftmaxCall"]
