"""The grouped and depthwise convolution family ``dwconv`` (``plait_dwconv.c``): its call
interface.

``plait_dwconv2d`` (a ``plait_dwconv2d_desc``, ``plait_dwconv.h``) computes grouped
convolutions with few channels per group, depthwise ones included, in one of three
layouts chosen per call (a depthwise one also with its channels last in memory), with
the product's epilogue (bias, residual, relu, an activation); ``plait_se_scale`` (a
``plait_se_desc``) a squeeze-and-excite gate (the spatial mean, two small products with
their activations, the scaling) in one call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.ir.symbolic import Dim

from ...dims import Prod
from ..gemm import Epilogue
from ..registry import KernelFamily, register_family
from ..wrapper import DESC, NULL, Buffer, NativeCall, Ref

DWCONV2D_FIELDS = ("N", "C", "H", "W", "O", "G", "KH", "KW", "SH", "SW", "DH", "DW",
                   "PT", "PL", "OH", "OW")
"""The shape fields of ``plait_dwconv2d_desc``, in order."""

SE_SILU, SE_RELU = 2, 3
"""The gate's first activation (``plait_se_desc.act``: ``PLAIT_DW_ACT_SILU``,
``PLAIT_DW_SE_RELU``)."""


def dwconv2d_call(x: tuple[Dim, ...], w: tuple[Dim, ...], out: tuple[Dim, ...],
                  desc: Mapping[str, Any], epilogue: Epilogue, layout: int = 0,
                  max_threads: int = 0, nhwc: bool = False) -> NativeCall:
    """The call of ``plait_dwconv2d`` on ``x`` with weights of shape ``w`` (as the
    convolution has them), ``desc`` holding the :data:`DWCONV2D_FIELDS`; the bias per
    output channel, the activation a clip, SiLU or GELU (either form).  ``layout``
    (``PLAIT_DW_LAYOUT_*``: 0 the kernel's rule) and ``max_threads`` (0: the pool's
    count) are a tuned point's (:mod:`plait.target.c.tuning`).  ``nhwc``: a depthwise
    convolution with its channels last, ``x`` holding ``N x H x W x C`` elements and
    ``out`` (and the residual) ``N x OH x OW x C`` in that order (whatever their shapes),
    the weights ``KH x KW x C``."""
    ep = epilogue
    fields = (*((k, desc[k]) for k in DWCONV2D_FIELDS), ("act", ep.act),
              ("act_lo", float(ep.act_lo)), ("act_hi", float(ep.act_hi)),
              *((("layout", int(layout)),) if layout else ()),
              *((("max_threads", int(max_threads)),) if max_threads else ()),
              *((("nhwc", 1),) if nhwc else ()))
    buffers = (Buffer("x", x), Buffer("w", w), *ep.buffers(), Buffer("out", out, out=True))
    args = (DESC, Ref("x"), Ref("w"), ep.bias_ref(), ep.res_ref(), int(ep.relu), Ref("out"))
    return NativeCall("dwconv2d", "plait_dwconv2d", buffers, args, "plait_dwconv2d_desc",
                      fields)


def se_scale_call(shape: tuple[Dim, Dim, int, Dim], reduced: int, act: int, b1: bool,
                  b2: bool) -> NativeCall:
    """The call of ``plait_se_scale`` on an ``N x C x H x W`` image ``x`` (``shape``; the
    batch and the image may be symbolic, sizes passed at run time, the channels are
    not): the weights ``w1`` (``reduced x C``), ``w2`` (``C x reduced``), the biases
    ``b1``, ``b2`` when there are, the first activation ``act`` (:data:`SE_SILU`,
    :data:`SE_RELU`).  With symbolic sizes the wrapper returns at once on an empty
    image."""
    n, c, h, w = shape
    buffers = [Buffer("x", shape), Buffer("w1", (reduced, c)), Buffer("w2", (c, reduced))]
    if b1:
        buffers.append(Buffer("b1", (reduced,)))
    if b2:
        buffers.append(Buffer("b2", (c,)))
    buffers.append(Buffer("out", shape, out=True))
    args = (DESC, Ref("x"), Ref("w1"), Ref("b1") if b1 else NULL, Ref("w2"),
            Ref("b2") if b2 else NULL, Ref("out"))
    fields = (("N", n), ("C", c), ("HW", Prod.of(h, w)), ("CR", reduced), ("act", act))
    static = all(type(d) is int for d in shape)
    return NativeCall("se_scale", "plait_se_scale", tuple(buffers), args, "plait_se_desc",
                      fields, guard=not static)


register_family(KernelFamily("dwconv", "plait_dwconv.c", ("plait_dwconv2d", "plait_se_scale"),
                             package=__name__, header="plait_dwconv.h"))

__all__ = ["DWCONV2D_FIELDS", "SE_RELU", "SE_SILU", "dwconv2d_call", "se_scale_call"]
