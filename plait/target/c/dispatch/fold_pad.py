"""``c.FoldPadIntoConv``: a zero ``pad`` of a convolution's spatial axes becomes the
convolution's own padding.

Exporters write TensorFlow-style "same" padding as an explicit ``Pad`` before the
convolution (transformers' MobileNetV2 and EfficientNet before every strided depthwise
convolution): on ``c`` that was a kernel of its own, one more pass over the largest
activations of the network, and it kept the activation before it (ReLU6, SiLU) out of
the preceding product's epilogue.  ``conv2d(pad(x, constant 0 on H and W only), w,
padding=p)`` is ``conv2d(x, w, padding=p + pad)`` (asymmetric paddings are fine);
the convolution's kernel pads as it reads.  Only a pad that nothing else reads, of
non-negative widths, in ``NCHW`` layout, is folded.
"""

from __future__ import annotations

from plait.ir.expr import Call, Expr
from plait.op.registry import make_call
from plait.runtime.window import expand_padding
from plait.transform.pattern import Match, is_op, wildcard
from plait.transform.pattern_rewrite import Rule, rewrite_pass

_X = wildcard()
_PAD = is_op("pad")(_X).single_use()
_CONV = is_op("conv2d")(_PAD, wildcard())


def _fold(m: Match) -> Expr | None:
    conv: Call = m.call(_CONV)
    pad: Call = m.call(_PAD)
    pa, ca = pad.attrs, conv.attrs
    if pa.get("pad_mode", "constant") != "constant" or float(pa.get("pad_value", 0.0)) != 0.0:
        return None
    if ca.get("data_layout", "NCHW") != "NCHW":
        return None
    pw = [int(v) for v in pa["pad_width"]]
    if len(pw) != 8 or any(pw[:4]) or min(pw) < 0:
        return None
    top, bottom, left, right = pw[4:]
    pt, pl, pb, pr = expand_padding(ca.get("padding", 0), 2)
    attrs = dict(ca)
    attrs["padding"] = (pt + top, pl + left, pb + bottom, pr + right)
    return make_call("conv2d", m[_X], *conv.args[1:], span=conv.span, **attrs)


FOLD_PAD_RULE = Rule("c.fold_pad_into_conv", _CONV, _fold)

FoldPadIntoConv = rewrite_pass(
    "c.FoldPadIntoConv", [FOLD_PAD_RULE],
    doc="Fold a zero pad of the spatial axes (read only by a conv2d) into the "
        "convolution's padding.")

__all__ = ["FOLD_PAD_RULE", "FoldPadIntoConv"]
