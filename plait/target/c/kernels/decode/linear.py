"""The call interface of ``plait_dlinear``: the C wrapper of one ``linear`` of given
shapes, ``y = x @ w.T (+ bias) (+ res)`` with ``w`` of ``(N, K)`` as stored (few rows
run ``plait_gemv``, more ``plait_gemm``: the entry chooses per call)."""

from __future__ import annotations

from collections.abc import Sequence

from plait.ir.symbolic import Dim

from ...dims import Prod
from ..wrapper import DESC, NULL, Buffer, NativeCall, Ref, emit_call
from .call import DecodeCall

GEMV_MAX_ROWS = 4
"""The most rows ``plait_gemv`` takes (``PLAIT_GEMV_MAX_ROWS``); a call with more rows
is a matrix product (``plait_gemm``)."""

def linear_call(x_shape: Sequence[Dim], n: int, k: int, *, bias: bool = False,
                res_shape: Sequence[Dim] | None = None,
                out_shape: Sequence[Dim] | None = None) -> DecodeCall:
    """The wrapper of ``plait_dlinear`` (parameters: x, w[, bias][, res], out, then the
    size arguments) of ``out = x @ w.T (+ bias) (+ res)``: ``x`` of ``x_shape`` (its last
    axis ``k``, the rows the product of the others, possibly symbolic), ``w`` ``(n, k)``
    row-major, ``bias`` ``(n,)``, ``res`` holding the output's elements in its order
    (``res_shape``), ``out`` of ``out_shape`` (default: ``x_shape`` with ``n`` last).
    :class:`~plait.codegen.c.sizes.UnboundSize` when a size is not bound by a parameter."""
    x_shape = tuple(x_shape)
    out_shape = tuple(out_shape) if out_shape is not None else x_shape[:-1] + (n,)
    buffers = [Buffer("x", x_shape), Buffer("w", (n, k))]
    if bias:
        buffers.append(Buffer("bias", (n,)))
    if res_shape is not None:
        buffers.append(Buffer("res", tuple(res_shape)))
    buffers.append(Buffer("out", out_shape, out=True))
    desc = (("M", Prod.of(*x_shape[:-1])), ("N", n), ("K", k), ("x", Ref("x")),
            ("w", Ref("w")), ("bias", Ref("bias") if bias else NULL),
            ("res", Ref("res") if res_shape is not None else NULL), ("out", Ref("out")))
    symbol, code, fn = emit_call(NativeCall("dlinear", "plait_dlinear", tuple(buffers),
                                            (DESC,), "plait_dlinear_desc", desc))
    return DecodeCall(symbol, code, fn)


__all__ = ["GEMV_MAX_ROWS", "linear_call"]
