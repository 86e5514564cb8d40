"""``c.Conv1dAsConv2d``: float32 ``conv1d`` as a ``conv2d`` of height 1, so that
:class:`~plait.target.c.dispatch.gemm.DispatchGemm` runs it on plait's convolution (an implicit
im2col product) instead of the generated loop nest.

Whisper's encoder starts with two 3-wide 1-D convolutions over 3000 and 1500 frames;
as generated loop nests they took 63% of its time.  The rewrite is
``squeeze(conv2d(expand_dims(x, 2), w'), 2)`` with ``w'`` the constant weight of
height 1; the views cost no copy (DispatchGemm reads through the input's and writes
through the output's).  Only a constant weight (what DispatchGemm takes) and the layouts
``NCW``/``OIW`` are rewritten, with static or symbolic batch and length (a dynamic frame
count kept the generated loop nest, 2.8x the static build's time on Whisper's encoder);
anything else stays ``conv1d``.
"""

from __future__ import annotations

from typing import Any

from plait.ir.builder import BlockBuilder
from plait.ir.expr import Call, Constant, Expr
from plait.ir.module import IRModule
from plait.ir.types import TensorType
from plait.op.registry import make_call
from plait.runtime.window import expand_ints, expand_padding
from plait.transform.pass_base import module_pass

from .library import rewrite_ops


def _float32_of_rank3(e: Expr) -> bool:
    """A float32 tensor of rank 3, its sizes static or symbolic (the native convolution
    takes run-time sizes: a dynamic batch or frame count stays on it)."""
    ty = e.ty
    return (isinstance(ty, TensorType) and ty.dtype == "float32" and ty.shape is not None
            and len(ty.shape) == 3)


def conv1d_as_conv2d(bb: BlockBuilder, call: Call, target: Any) -> Expr | None:
    """The rewrite of one ``conv1d`` call (None: left alone)."""
    a = call.attrs
    if (a.get("data_layout", "NCW") != "NCW" or a.get("kernel_layout", "OIW") != "OIW"
            or len(call.args) != 2 or not all(_float32_of_rank3(e) for e in (*call.args, call))):
        return None
    x, w = call.args
    if not isinstance(w, Constant):
        return None   # DispatchGemm takes constant weights only: conv1d's own kernel stays
    (s,) = expand_ints(a.get("strides", 1), 1)
    (d,) = expand_ints(a.get("dilation", 1), 1)
    pads = expand_padding(a.get("padding", 0), 1)
    x4 = bb.emit(make_call("expand_dims", x, axis=2))
    data = w.data
    w4 = Constant(data.reshape(data.shape[0], data.shape[1], 1, data.shape[2]))
    y = bb.emit(make_call("conv2d", x4, w4, strides=(1, s), padding=(0, pads[0], 0, pads[1]),
                          dilation=(1, d), groups=a.get("groups", 1)))
    return make_call("squeeze", y, axis=(2,), span=call.span)


@module_pass(name="c.Conv1dAsConv2d", phases=("optimization",))
class Conv1dAsConv2d:
    """Rewrite float32 NCW ``conv1d`` of a constant weight into ``conv2d`` of height 1.

    Static and symbolic batch and length alike (the native convolution takes run-time
    sizes)."""

    def transform_module(self, mod: IRModule, ctx: Any) -> IRModule:
        return rewrite_ops(mod, {"conv1d": conv1d_as_conv2d})
